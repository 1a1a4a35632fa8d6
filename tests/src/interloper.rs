//! Another writer at the worst moment: a plain-HTTP proxy in front of the real API server
//! that, when a write (PATCH or DELETE) of an object comes through for the first time,
//! first has the object changed through the server (a label, as a controller's update
//! would), then forwards the write. The refusal the client gets is the real server's (409
//! for a DELETE's preconditions, 422 for a JSON patch whose `test` fails), not a scripted
//! one: only the timing is the test's.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::response::Response;

use crate::kube::KubeServer;

/// The label the interloper sets on the objects it changes.
pub const LABEL: &str = "ipaudit-test/interloper";

/// A running interloper; its kubeconfig points a client at it.
pub struct Interloper {
    /// A kubeconfig whose server is the interloper (plain HTTP on 127.0.0.1).
    pub kubeconfig: std::path::PathBuf,
    changed: Arc<Mutex<BTreeSet<String>>>,
    _dir: tempfile::TempDir,
    _runtime: tokio::runtime::Runtime,
}

struct Shared {
    upstream: String,
    token: String,
    client: reqwest::Client,
    changed: Arc<Mutex<BTreeSet<String>>>,
}

impl Interloper {
    /// An interloper in front of `server`, using its admin's token upstream.
    pub fn start(server: &KubeServer) -> Interloper {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let ca = reqwest::Certificate::from_pem(&server.ca_pem()).expect("the server's CA");
        let client = reqwest::Client::builder()
            .add_root_certificate(ca)
            .build()
            .expect("HTTP client");
        let changed = Arc::new(Mutex::new(BTreeSet::new()));
        let shared = Arc::new(Shared {
            upstream: server.url(),
            token: server.admin_token(),
            client,
            changed: changed.clone(),
        });
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let address = listener.local_addr().expect("local address");
        let app = axum::Router::new().fallback(forward).with_state(shared);
        runtime.spawn(async move { axum::serve(listener, app).await });
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: interloper\n  cluster:\n    server: http://{address}\ncontexts:\n- name: interloper\n  context:\n    cluster: interloper\n    user: interloper\ncurrent-context: interloper\nusers:\n- name: interloper\n  user:\n    token: unused\n"
            ),
        )
        .expect("write kubeconfig");
        Interloper {
            kubeconfig,
            changed,
            _dir: dir,
            _runtime: runtime,
        }
    }

    /// The API paths of the objects changed so far, sorted.
    pub fn changed(&self) -> Vec<String> {
        self.changed.lock().expect("lock").iter().cloned().collect()
    }
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    match try_forward(&shared, request).await {
        Ok(response) => response,
        Err(e) => Response::builder()
            .status(StatusCode::BAD_GATEWAY)
            .body(Body::from(format!("interloper: {e}")))
            .expect("response"),
    }
}

async fn try_forward(shared: &Shared, request: Request) -> Result<Response, String> {
    let (parts, body) = request.into_parts();
    let body = to_bytes(body, 64 << 20).await.map_err(|e| e.to_string())?;
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    if parts.method == Method::PATCH || parts.method == Method::DELETE {
        // The object itself, also for a write to its status subresource.
        let object = parts.uri.path().trim_end_matches("/status").to_owned();
        let first = shared.changed.lock().expect("lock").insert(object.clone());
        if first {
            change(shared, &object).await?;
        }
    }
    let mut upstream = shared
        .client
        .request(
            parts.method.clone(),
            format!("{}{path_and_query}", shared.upstream),
        )
        .bearer_auth(&shared.token)
        .body(body);
    for name in [header::CONTENT_TYPE, header::ACCEPT] {
        if let Some(value) = parts.headers.get(&name) {
            upstream = upstream.header(name, value);
        }
    }
    let answer = upstream.send().await.map_err(|e| e.to_string())?;
    let mut response = Response::builder().status(answer.status().as_u16());
    if let Some(value) = answer.headers().get(header::CONTENT_TYPE) {
        response = response.header(header::CONTENT_TYPE, value.as_bytes());
    }
    let bytes = answer.bytes().await.map_err(|e| e.to_string())?;
    response.body(Body::from(bytes)).map_err(|e| e.to_string())
}

/// Labels the object at `path` through the server, as another writer would.
async fn change(shared: &Shared, path: &str) -> Result<(), String> {
    let patch = serde_json::json!({"metadata": {"labels": {LABEL: "changed"}}});
    let answer = shared
        .client
        .patch(format!("{}{path}", shared.upstream))
        .bearer_auth(&shared.token)
        .header(header::CONTENT_TYPE, "application/merge-patch+json")
        .body(patch.to_string())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !answer.status().is_success() {
        return Err(format!(
            "changing {path} failed: {} {}",
            answer.status(),
            answer.text().await.unwrap_or_default()
        ));
    }
    Ok(())
}
