//! A real HTTP server standing in for a webhook receiver and for Alertmanager: it records
//! every request, and can be told to fail (503) to test retries.

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

#[derive(Default)]
struct Shared {
    received: Mutex<Vec<Received>>,
    attempts: std::sync::atomic::AtomicUsize,
    failing: AtomicBool,
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
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        at: Instant::now(),
    };
    shared
        .received
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(received);
    StatusCode::OK
}
