//! A real HTTP server standing in for a webhook receiver and for Alertmanager: it records
//! every request, and can be told to fail (503) to test retries, or to refuse some
//! requests for good (e.g. 413) to test dead letters.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::Router;
use serde_json::Value;

/// One request received.
#[derive(Debug, Clone)]
pub struct Received {
    /// The path.
    pub path: String,
    /// Lower-case header names and their values.
    pub headers: BTreeMap<String, String>,
    /// The body, as JSON.
    pub body: Value,
    /// When it came.
    pub at: Instant,
}

/// Decides a status for a request body; `None`: accept it.
type Refusal = Box<dyn Fn(&Value) -> Option<StatusCode> + Send + Sync>;

#[derive(Default)]
struct Shared {
    received: Mutex<Vec<Received>>,
    refused: Mutex<Vec<(StatusCode, Value)>>,
    attempts: std::sync::atomic::AtomicUsize,
    failing: AtomicBool,
    refusal: Mutex<Option<Refusal>>,
}

/// The receiver.
pub struct Receiver {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    shared: Arc<Shared>,
}

impl Receiver {
    /// Starts on a free port, on `runtime`.
    pub fn start(runtime: &tokio::runtime::Runtime) -> Receiver {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .fallback(record)
            .with_state(Arc::clone(&shared));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(SocketAddr::from((
                [127, 0, 0, 1],
                0,
            ))))
            .expect("bind receiver");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { url, shared }
    }

    /// Answer 503 to everything (true) or 200 (false).
    pub fn set_failing(&self, failing: bool) {
        self.shared.failing.store(failing, Ordering::SeqCst);
    }

    /// Answer `refuse(body)` when it is `Some(status)` (e.g. 413 for one subnet's alerts);
    /// `None` clears it.
    pub fn set_refusing(
        &self,
        refuse: Option<impl Fn(&Value) -> Option<StatusCode> + Send + Sync + 'static>,
    ) {
        *self
            .shared
            .refusal
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = refuse.map(|f| Box::new(f) as Refusal);
    }

    /// Bodies refused so far, with the status they got.
    pub fn refused(&self) -> Vec<(StatusCode, Value)> {
        self.shared
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Requests of any outcome so far.
    pub fn attempts(&self) -> usize {
        self.shared.attempts.load(Ordering::SeqCst)
    }

    /// Requests accepted (answered 200) so far on `path`.
    pub fn received(&self, path: &str) -> Vec<Received> {
        self.shared
            .received
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }
}

async fn record(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    shared.attempts.fetch_add(1, Ordering::SeqCst);
    if shared.failing.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let refusal = shared
        .refusal
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|refuse| refuse(&json));
    if let Some(status) = refusal {
        shared
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((status, json));
        return status;
    }
    let received = Received {
        path: uri.path().to_owned(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    v.to_str().unwrap_or_default().to_owned(),
                )
            })
            .collect(),
        body: json,
        at: Instant::now(),
    };
    shared
        .received
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(received);
    StatusCode::OK
}
