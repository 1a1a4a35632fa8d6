//! The HTTP face of the simulated API server: discovery, list (with paging), watch (with
//! bookmarks and in-stream 410 Gone), get, create, replace, patch and delete, answering
//! as kube-apiserver does so that kube-rs and kubectl work against it unchanged.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, watch};

use crate::kinds::Kind;
use crate::store::{name_of, ApiError, Change, PatchType, Store};

/// How the simulated API server behaves.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Changes kept for watches; older versions get 410 Gone.
    pub history_window: usize,
    /// How often watches with bookmarks get one.
    pub bookmark_interval: Duration,
    /// The first resourceVersion is this plus one.
    pub starting_rv: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            history_window: 100_000,
            bookmark_interval: Duration::from_secs(1),
            starting_rv: 1_000,
        }
    }
}

pub(crate) struct Shared {
    pub(crate) store: Mutex<Store>,
    /// While true, watch requests are refused with 503 (the API server is unavailable).
    pub(crate) watches_paused: std::sync::atomic::AtomicBool,
    pub(crate) cut: watch::Sender<u64>,
    pub(crate) config: SimConfig,
    lists: Mutex<HashMap<String, (Vec<Value>, u64)>>,
}

impl Shared {
    pub(crate) fn new(config: SimConfig) -> Self {
        let (cut, _) = watch::channel(0);
        Shared {
            store: Mutex::new(Store::new(config.history_window, config.starting_rv)),
            watches_paused: std::sync::atomic::AtomicBool::new(false),
            cut,
            config,
            lists: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn store(&self) -> MutexGuard<'_, Store> {
        // A panic while holding the lock is a bug in a test; the data is still usable.
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }
}

type Sim = Arc<Shared>;

/// The routes.
pub(crate) fn router(shared: Sim) -> Router {
    Router::new()
        .route("/version", get(version))
        .route("/api", get(api_versions))
        .route("/api/v1", get(core_resources))
        .route("/apis", get(api_groups))
        .route("/apis/kubeovn.io", get(kubeovn_group))
        .route("/apis/kubeovn.io/v1", get(kubeovn_resources))
        .route("/api/v1/pods", get(all_pods))
        .route(
            "/api/v1/namespaces/{ns}/pods",
            get(ns_pods).post(create_pod),
        )
        .route(
            "/api/v1/namespaces/{ns}/pods/{name}",
            get(get_pod)
                .put(put_pod)
                .patch(patch_pod)
                .delete(delete_pod),
        )
        .route(
            "/apis/kubeovn.io/v1/{plural}",
            get(crd_collection).post(create_crd),
        )
        .route(
            "/apis/kubeovn.io/v1/{plural}/{name}",
            get(get_crd)
                .put(put_crd)
                .patch(patch_crd)
                .delete(delete_crd),
        )
        .fallback(not_found)
        .with_state(shared)
}

async fn not_found(method: Method, uri: axum::http::Uri) -> Response {
    error(ApiError {
        code: 404,
        reason: "NotFound",
        message: format!("the server could not find the requested resource ({method} {uri})"),
    })
}

fn error(e: ApiError) -> Response {
    let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, Json(e.status())).into_response()
}

fn respond(result: Result<Value, ApiError>, created: bool) -> Response {
    match result {
        Ok(v) if created => (StatusCode::CREATED, Json(v)).into_response(),
        Ok(v) => Json(v).into_response(),
        Err(e) => error(e),
    }
}

async fn version() -> Json<Value> {
    Json(
        json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-ipaudit-sim", "platform": "linux/amd64"}),
    )
}

async fn api_versions() -> Json<Value> {
    Json(json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}))
}

fn resource(kind: Kind, short: &[&str]) -> Value {
    json!({"name": kind.plural(), "singularName": kind.singular(), "namespaced": kind.namespaced(),
        "kind": kind.name(), "shortNames": short,
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]})
}

async fn core_resources() -> Json<Value> {
    Json(json!({"kind": "APIResourceList", "groupVersion": "v1",
        "resources": [resource(Kind::Pod, &["po"])]}))
}

fn kubeovn_group_value() -> Value {
    json!({"name": "kubeovn.io", "versions": [{"groupVersion": "kubeovn.io/v1", "version": "v1"}],
        "preferredVersion": {"groupVersion": "kubeovn.io/v1", "version": "v1"}})
}

async fn api_groups() -> Json<Value> {
    Json(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [kubeovn_group_value()]}))
}

async fn kubeovn_group() -> Json<Value> {
    let mut group = kubeovn_group_value();
    group["kind"] = json!("APIGroup");
    group["apiVersion"] = json!("v1");
    Json(group)
}

async fn kubeovn_resources() -> Json<Value> {
    Json(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "kubeovn.io/v1",
        "resources": [resource(Kind::Ip, &["ip"]), resource(Kind::Subnet, &["subnet"])]}),
    )
}

/// The query parameters of list and watch requests.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    watch: Option<String>,
    resource_version: Option<String>,
    allow_watch_bookmarks: Option<String>,
    timeout_seconds: Option<u64>,
    limit: Option<usize>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

fn truthy(v: &Option<String>) -> bool {
    matches!(v.as_deref(), Some("true" | "1"))
}

fn crd_kind(plural: &str) -> Result<Kind, ApiError> {
    Kind::from_plural(plural)
        .filter(|k| !k.namespaced())
        .ok_or_else(|| ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("the server could not find the requested resource ({plural})"),
        })
}

async fn all_pods(State(sim): State<Sim>, Query(q): Query<ListQuery>) -> Response {
    list_or_watch(sim, Kind::Pod, None, q)
}

async fn ns_pods(
    State(sim): State<Sim>,
    Path(ns): Path<String>,
    Query(q): Query<ListQuery>,
) -> Response {
    list_or_watch(sim, Kind::Pod, Some(ns), q)
}

async fn crd_collection(
    State(sim): State<Sim>,
    Path(plural): Path<String>,
    Query(q): Query<ListQuery>,
) -> Response {
    match crd_kind(&plural) {
        Ok(kind) => list_or_watch(sim, kind, None, q),
        Err(e) => error(e),
    }
}

fn list_or_watch(sim: Sim, kind: Kind, namespace: Option<String>, q: ListQuery) -> Response {
    // Subscribe to cuts before looking at the pause flag: `pause` sets the flag, then cuts,
    // so a watch either sees the flag or is cut.
    let cut = sim.cut.subscribe();
    if sim.watches_paused.load(std::sync::atomic::Ordering::SeqCst) {
        return error(ApiError {
            code: 503,
            reason: "ServiceUnavailable",
            message: "the server is currently unable to handle the request".into(),
        });
    }
    if truthy(&q.watch) {
        return watch_response(sim, kind, namespace, q, cut);
    }
    if let Some(token) = &q.continue_token {
        let page = sim
            .lists
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(token);
        return match page {
            Some((items, rv)) => list_page(&sim, kind, items, rv, q.limit),
            None => error(ApiError {
                code: 410,
                reason: "Expired",
                message: "the provided continue parameter is too old".into(),
            }),
        };
    }
    let (mut items, rv) = sim.store().list(kind, namespace.as_deref());
    if kind.namespaced() {
        // kube-apiserver leaves kind and apiVersion off the items of built-in lists.
        for item in &mut items {
            if let Some(map) = item.as_object_mut() {
                map.remove("kind");
                map.remove("apiVersion");
            }
        }
    }
    list_page(&sim, kind, items, rv, q.limit)
}

fn list_page(
    sim: &Sim,
    kind: Kind,
    mut items: Vec<Value>,
    rv: u64,
    limit: Option<usize>,
) -> Response {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(limit) = limit.filter(|l| *l > 0 && items.len() > *l) {
        let rest = items.split_off(limit);
        let token = format!("{rv}-{}-{}", kind.plural(), rest.len());
        metadata["continue"] = json!(token);
        metadata["remainingItemCount"] = json!(rest.len());
        sim.lists
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(token, (rest, rv));
    }
    Json(json!({"kind": kind.list_kind(), "apiVersion": kind.api_version(), "metadata": metadata, "items": items}))
        .into_response()
}

fn line(event_type: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": event_type, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

fn watch_response(
    sim: Sim,
    kind: Kind,
    namespace: Option<String>,
    q: ListQuery,
    cut: watch::Receiver<u64>,
) -> Response {
    let bookmarks = truthy(&q.allow_watch_bookmarks);
    let from = q.resource_version.as_deref().unwrap_or("");
    let (tx, rx) = mpsc::channel::<Bytes>(1_024);
    let start = {
        let store = sim.store();
        match from {
            "" | "0" => {
                let (items, rv) = store.list(kind, namespace.as_deref());
                let initial: Vec<Bytes> = items.iter().map(|o| line("ADDED", o)).collect();
                Ok((initial, store.subscribe(), rv))
            }
            text => match text.parse::<u64>() {
                Err(_) => {
                    return error(ApiError::bad_request(format!(
                        "invalid resourceVersion {text:?}"
                    )))
                }
                Ok(rv) => match store.watch_from(kind, namespace.as_deref(), rv) {
                    Some((backlog, rx)) => Ok((
                        backlog
                            .iter()
                            .map(|c| line(c.event_type, &c.object))
                            .collect(),
                        rx,
                        rv,
                    )),
                    None => Err(rv),
                },
            },
        }
    };
    let interval = sim.config.bookmark_interval;
    let timeout = q.timeout_seconds.map(Duration::from_secs);
    tokio::spawn(async move {
        match start {
            Ok((initial, changes, rv)) => {
                let stream = WatchStream {
                    kind,
                    namespace,
                    bookmarks,
                    interval,
                    timeout,
                };
                stream.run(tx, initial, changes, rv, cut).await;
            }
            Err(rv) => {
                let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": format!("too old resource version: {rv}"), "reason": "Expired", "code": 410});
                let _ = tx.send(line("ERROR", &status)).await;
            }
        }
    });
    let body = Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|bytes| (Ok::<_, Infallible>(bytes), rx))
    }));
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

struct WatchStream {
    kind: Kind,
    namespace: Option<String>,
    bookmarks: bool,
    interval: Duration,
    timeout: Option<Duration>,
}

impl WatchStream {
    async fn run(
        self,
        tx: mpsc::Sender<Bytes>,
        initial: Vec<Bytes>,
        mut changes: broadcast::Receiver<Arc<Change>>,
        mut rv: u64,
        mut cut: watch::Receiver<u64>,
    ) {
        for bytes in initial {
            if tx.send(bytes).await.is_err() {
                return;
            }
        }
        let deadline = self.timeout.map(|t| tokio::time::Instant::now() + t);
        let mut ticker = tokio::time::interval(self.interval);
        ticker.tick().await;
        loop {
            let timeout = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // A cut wins over changes made after it.
                biased;
                _ = cut.changed() => return,
                change = changes.recv() => match change {
                    Ok(change) => {
                        if change.rv <= rv || change.kind != self.kind
                            || self.namespace.as_deref().is_some_and(|n| n != change.namespace) {
                            continue;
                        }
                        rv = change.rv;
                        if tx.send(line(change.event_type, &change.object)).await.is_err() {
                            return;
                        }
                    }
                    // A watcher too slow to keep up is closed, as kube-apiserver does.
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = ticker.tick(), if self.bookmarks => {
                    let bookmark = json!({"kind": self.kind.name(), "apiVersion": self.kind.api_version(),
                        "metadata": {"resourceVersion": rv.to_string()}});
                    if tx.send(line("BOOKMARK", &bookmark)).await.is_err() {
                        return;
                    }
                }
                _ = timeout => return,
                _ = tx.closed() => return,
            }
        }
    }
}

async fn create_pod(
    State(sim): State<Sim>,
    Path(ns): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    respond(sim.store().create(Kind::Pod, &ns, body), true)
}

async fn create_crd(
    State(sim): State<Sim>,
    Path(plural): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    match crd_kind(&plural) {
        Ok(kind) => respond(sim.store().create(kind, "", body), true),
        Err(e) => error(e),
    }
}

async fn get_pod(State(sim): State<Sim>, Path((ns, name)): Path<(String, String)>) -> Response {
    respond(sim.store().get(Kind::Pod, &ns, &name), false)
}

async fn get_crd(State(sim): State<Sim>, Path((plural, name)): Path<(String, String)>) -> Response {
    match crd_kind(&plural) {
        Ok(kind) => respond(sim.store().get(kind, "", &name), false),
        Err(e) => error(e),
    }
}

async fn put_pod(
    State(sim): State<Sim>,
    Path((ns, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Response {
    respond(replace(&sim, Kind::Pod, &ns, &name, body), false)
}

async fn put_crd(
    State(sim): State<Sim>,
    Path((plural, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Response {
    match crd_kind(&plural) {
        Ok(kind) => respond(replace(&sim, kind, "", &name, body), false),
        Err(e) => error(e),
    }
}

fn replace(sim: &Sim, kind: Kind, ns: &str, name: &str, body: Value) -> Result<Value, ApiError> {
    if name_of(&body).is_some_and(|n| n != name) {
        return Err(ApiError::bad_request(
            "the name in the body does not match the URL",
        ));
    }
    sim.store().replace(kind, ns, name, body)
}

fn patch_type(headers: &HeaderMap) -> Result<PatchType, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    match content_type.split(';').next().unwrap_or("").trim() {
        "application/json-patch+json" => Ok(PatchType::Json),
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => Ok(PatchType::Merge),
        other => Err(ApiError {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json (got {other:?})"),
        }),
    }
}

fn patch(
    sim: &Sim,
    kind: Kind,
    ns: &str,
    name: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Value, ApiError> {
    let patch_type = patch_type(headers)?;
    let body: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid patch body: {e}")))?;
    sim.store().patch(kind, ns, name, patch_type, &body)
}

async fn patch_pod(
    State(sim): State<Sim>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond(patch(&sim, Kind::Pod, &ns, &name, &headers, &body), false)
}

async fn patch_crd(
    State(sim): State<Sim>,
    Path((plural, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match crd_kind(&plural) {
        Ok(kind) => respond(patch(&sim, kind, "", &name, &headers, &body), false),
        Err(e) => error(e),
    }
}

async fn delete_pod(State(sim): State<Sim>, Path((ns, name)): Path<(String, String)>) -> Response {
    respond(sim.store().delete(Kind::Pod, &ns, &name), false)
}

async fn delete_crd(
    State(sim): State<Sim>,
    Path((plural, name)): Path<(String, String)>,
) -> Response {
    match crd_kind(&plural) {
        Ok(kind) => respond(sim.store().delete(kind, "", &name), false),
        Err(e) => error(e),
    }
}

/// Binds the server on `addr` and serves until the returned sender is dropped or fired.
pub(crate) async fn serve(
    shared: Sim,
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, tokio::sync::oneshot::Sender<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let app = router(shared);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await;
    });
    Ok((local, stop))
}
