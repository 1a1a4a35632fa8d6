//! The HTTP face of the simulated API server: discovery, list (with paging), watch (with
//! bookmarks and in-stream 410 Gone), get, create, replace, patch and delete, answering
//! as kube-apiserver does so that kube-rs and kubectl work against it unchanged.
//!
//! Every path is read from the kinds the server serves (see [`crate::kinds`]), the way
//! kube-apiserver reads a request: `/api/v1` or `/apis/<group>/<version>`, then
//! `[namespaces/<ns>/]<plural>[/<name>[/status]]`. A kind that is not served answers 404
//! everywhere, discovery included, as on a cluster without its CRD.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use ipaudit_schemas::{kinds as table, KindSpec};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, watch};

use crate::kinds::{list_kind, singular, Kind, Served};
use crate::store::{name_of, ApiError, Change, PatchType, Preconditions, Store};

/// How the simulated API server behaves.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Changes kept for watches; older versions get 410 Gone.
    pub history_window: usize,
    /// How often watches with bookmarks get one.
    pub bookmark_interval: Duration,
    /// The first resourceVersion is this plus one.
    pub starting_rv: u64,
    /// The kinds served (discovery, list, watch, writes); the others answer 404, as on a
    /// cluster without their CRDs. Default: every kind of ipaudit's table.
    pub kinds: Vec<Kind>,
    /// The uid of the `kube-system` Namespace (`GET /api/v1/namespaces/kube-system`), which
    /// tools read as the cluster's identity. Default: [`DEFAULT_CLUSTER_UID`].
    pub cluster_uid: String,
}

/// The default uid of the simulated cluster's `kube-system` Namespace.
pub const DEFAULT_CLUSTER_UID: &str = "5e1f0c3a-0000-4000-8000-000000000001";

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            history_window: 100_000,
            bookmark_interval: Duration::from_secs(1),
            starting_rv: 1_000,
            kinds: table::streams().collect(),
            cluster_uid: DEFAULT_CLUSTER_UID.to_owned(),
        }
    }
}

impl SimConfig {
    /// The default configuration, serving only `kinds` (e.g. Pods and whereabouts' kinds).
    pub fn serving(kinds: &[Kind]) -> Self {
        SimConfig {
            kinds: kinds.to_vec(),
            ..SimConfig::default()
        }
    }
}

pub(crate) struct Shared {
    pub(crate) store: Mutex<Store>,
    /// While true, watch requests are refused with 503 (the API server is unavailable).
    pub(crate) watches_paused: std::sync::atomic::AtomicBool,
    /// Kinds whose list and watch requests are refused with 503 (a broken aggregated API
    /// or a CRD's conversion webhook down).
    pub(crate) failing: Mutex<std::collections::HashSet<Kind>>,
    pub(crate) cut: watch::Sender<u64>,
    pub(crate) config: SimConfig,
    pub(crate) served: Served,
    /// Kinds whose requests answer 404 for now, as while their CRD is being reinstalled.
    pub(crate) withdrawn: Mutex<Vec<Kind>>,
    /// Kinds whose watches send each change only this long after it was made (a watch
    /// behind its API server: a busy watch cache, a slow network).
    pub(crate) watch_delays: Mutex<HashMap<Kind, Duration>>,
    lists: Mutex<HashMap<String, (Vec<Value>, u64)>>,
}

impl Shared {
    pub(crate) fn new(config: SimConfig) -> Self {
        let (cut, _) = watch::channel(0);
        Shared {
            store: Mutex::new(Store::new(config.history_window, config.starting_rv)),
            watches_paused: std::sync::atomic::AtomicBool::new(false),
            failing: Mutex::new(std::collections::HashSet::new()),
            cut,
            served: Served::only(&config.kinds),
            withdrawn: Mutex::new(Vec::new()),
            watch_delays: Mutex::new(HashMap::new()),
            config,
            lists: Mutex::new(HashMap::new()),
        }
    }

    /// How long watches of `kind` hold each change back.
    fn watch_delay(&self, kind: Kind) -> Duration {
        self.watch_delays
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&kind)
            .copied()
            .unwrap_or_default()
    }

    pub(crate) fn store(&self) -> MutexGuard<'_, Store> {
        // A panic while holding the lock is a bug in a test; the data is still usable.
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The table entry of a served kind; 404 for a kind not served.
    pub(crate) fn spec(&self, kind: Kind) -> Result<&'static KindSpec, ApiError> {
        self.served.spec(kind).ok_or_else(|| {
            ApiError::not_served(
                &kind
                    .spec()
                    .map_or_else(|| kind.to_string(), |k| k.resource()),
            )
        })
    }
}

type Sim = Arc<Shared>;

/// The routes: `/version`, then everything under `/api` and `/apis` read from the kinds.
pub(crate) fn router(shared: Sim) -> Router {
    Router::new()
        .route("/version", get(version))
        .fallback(dispatch)
        .with_state(shared)
}

/// What a request path addresses.
#[derive(Debug)]
enum Target<'p> {
    /// `/api`.
    CoreVersions,
    /// `/apis`.
    Groups,
    /// `/apis/<group>`.
    Group(&'p str),
    /// `/api/v1/namespaces/<name>`: only `kube-system` exists (the cluster's identity).
    Namespace(&'p str),
    /// `/api/v1`, `/apis/<group>/<version>`.
    Resources { group: &'p str, version: &'p str },
    /// `[namespaces/<ns>/]<plural>`: `namespace` `None` across all namespaces.
    Collection {
        kind: &'static KindSpec,
        namespace: Option<&'p str>,
    },
    /// `[namespaces/<ns>/]<plural>/<name>[/status]`; `namespace` "" for cluster-scoped.
    Object {
        kind: &'static KindSpec,
        namespace: &'p str,
        name: &'p str,
    },
}

/// Reads a path as kube-apiserver's request-info parser does; `None` for anything the
/// server does not serve (a kind not served, a cluster-scoped kind under a namespace...).
fn target<'p>(served: &Served, path: &'p str) -> Option<Target<'p>> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api"] => return Some(Target::CoreVersions),
        ["apis"] => return Some(Target::Groups),
        ["apis", group] => return Some(Target::Group(group)),
        ["api", "v1", "namespaces", name] => return Some(Target::Namespace(name)),
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let kind = |plural: &str| served.at(group, version, plural);
    match rest {
        [] => Some(Target::Resources { group, version }),
        [plural] => Some(Target::Collection {
            kind: kind(plural)?,
            namespace: None,
        }),
        [plural, name] | [plural, name, "status"] => {
            let kind = kind(plural).filter(|k| !k.namespaced)?;
            Some(Target::Object {
                kind,
                namespace: "",
                name,
            })
        }
        ["namespaces", ns, plural] => Some(Target::Collection {
            kind: kind(plural).filter(|k| k.namespaced)?,
            namespace: Some(ns),
        }),
        ["namespaces", ns, plural, name] | ["namespaces", ns, plural, name, "status"] => {
            Some(Target::Object {
                kind: kind(plural).filter(|k| k.namespaced)?,
                namespace: ns,
                name,
            })
        }
        _ => None,
    }
}

async fn dispatch(
    State(sim): State<Sim>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(target) = target(&sim.served, uri.path()) else {
        return not_found(&method, &uri);
    };
    if let Target::Collection { kind, .. } | Target::Object { kind, .. } = &target {
        let withdrawn = sim.withdrawn.lock().unwrap_or_else(|e| e.into_inner());
        if withdrawn.contains(&kind.stream) {
            return not_found(&method, &uri);
        }
    }
    let not_allowed = || {
        error(ApiError {
            details: None,
            code: 405,
            reason: "MethodNotAllowed",
            message: format!(
                "the server does not allow this method on the requested resource ({method} {uri})"
            ),
        })
    };
    match (target, &method) {
        (Target::CoreVersions, &Method::GET) => core_versions(),
        (Target::Groups, &Method::GET) => api_groups(&sim.served),
        (Target::Namespace(name), &Method::GET) => namespace(&sim.config, name),
        (Target::Group(group), &Method::GET) => api_group(&sim.served, group)
            .map_or_else(|| not_found(&method, &uri), |g| Json(g).into_response()),
        (Target::Resources { group, version }, &Method::GET) => {
            resources(&sim.served, group, version)
                .map_or_else(|| not_found(&method, &uri), |r| Json(r).into_response())
        }
        (Target::Collection { kind, namespace }, &Method::GET) => {
            match Query::<ListQuery>::try_from_uri(&uri) {
                Ok(Query(q)) => list_or_watch(sim, kind, namespace.map(str::to_owned), q),
                Err(e) => error(ApiError::bad_request(format!("invalid query: {e}"))),
            }
        }
        (Target::Collection { kind, namespace }, &Method::POST)
            if kind.namespaced == namespace.is_some() =>
        {
            respond(
                json_body(&body)
                    .and_then(|object| sim.store().create(kind, namespace.unwrap_or(""), object)),
                true,
            )
        }
        (
            Target::Object {
                kind,
                namespace,
                name,
            },
            &Method::GET,
        ) => respond(sim.store().get(kind, namespace, name), false),
        (
            Target::Object {
                kind,
                namespace,
                name,
            },
            &Method::PUT,
        ) => respond(
            json_body(&body).and_then(|object| replace(&sim, kind, namespace, name, object)),
            false,
        ),
        (
            Target::Object {
                kind,
                namespace,
                name,
            },
            &Method::PATCH,
        ) => respond(patch(&sim, kind, namespace, name, &headers, &body), false),
        (
            Target::Object {
                kind,
                namespace,
                name,
            },
            &Method::DELETE,
        ) => respond(
            preconditions(&body).and_then(|pre| sim.store().delete_if(kind, namespace, name, &pre)),
            false,
        ),
        _ => not_allowed(),
    }
}

/// The `kube-system` Namespace, with the configured uid; any other namespace is absent.
fn namespace(config: &SimConfig, name: &str) -> Response {
    if name != "kube-system" {
        return error(ApiError {
            details: Some(json!({"name": name, "kind": "namespaces"})),
            code: 404,
            reason: "NotFound",
            message: format!("namespaces \"{name}\" not found"),
        });
    }
    Json(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "uid": config.cluster_uid, "resourceVersion": "1"},
        "status": {"phase": "Active"}}))
    .into_response()
}

/// `preconditions` of a DELETE's `DeleteOptions` body (an empty body has none).
fn preconditions(body: &Bytes) -> Result<Preconditions, ApiError> {
    if body.is_empty() {
        return Ok(Preconditions::default());
    }
    let options = json_body(body)?;
    let field = |name: &str| {
        options
            .pointer(&format!("/preconditions/{name}"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    Ok(Preconditions {
        uid: field("uid"),
        resource_version: field("resourceVersion"),
    })
}

fn not_found(method: &Method, uri: &Uri) -> Response {
    error(ApiError::not_served(&format!("{method} {uri}")))
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

fn json_body(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not a JSON object: {e}")))
}

async fn version() -> Json<Value> {
    Json(
        json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-ipaudit-sim", "platform": "linux/amd64"}),
    )
}

fn core_versions() -> Response {
    Json(json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}))
    .into_response()
}

/// One resource (and its status subresource) of an `APIResourceList`. Every kind gets a
/// `status` subresource here: the simulator does not split spec from status, so writes
/// through it change the object as a whole.
fn resource_entries(kind: &KindSpec) -> [Value; 2] {
    [
        json!({"name": kind.plural, "singularName": singular(kind), "namespaced": kind.namespaced,
            "kind": kind.kind, "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}),
        json!({"name": format!("{}/status", kind.plural), "singularName": "", "namespaced": kind.namespaced,
            "kind": kind.kind, "verbs": ["get", "patch", "update"]}),
    ]
}

/// The `APIResourceList` of a served group/version (`group` "" for `/api/v1`, which is
/// always there, possibly empty); `None` when nothing of it is served.
fn resources(served: &Served, group: &str, version: &str) -> Option<Value> {
    let kinds = served.in_version(group, version);
    if kinds.is_empty() && !(group.is_empty() && version == "v1") {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    let entries: Vec<Value> = kinds.iter().flat_map(|k| resource_entries(k)).collect();
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
        "resources": entries}),
    )
}

fn group_value(group: &str, versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
        "versions": versions})
}

fn api_groups(served: &Served) -> Response {
    let groups: Vec<Value> = served
        .groups()
        .iter()
        .map(|(group, versions)| group_value(group, versions))
        .collect();
    Json(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})).into_response()
}

fn api_group(served: &Served, group: &str) -> Option<Value> {
    let groups = served.groups();
    let versions = groups.get(group)?;
    let mut value = group_value(group, versions);
    value["kind"] = json!("APIGroup");
    value["apiVersion"] = json!("v1");
    Some(value)
}

/// The query parameters of list and watch requests.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    watch: Option<String>,
    resource_version: Option<String>,
    resource_version_match: Option<String>,
    allow_watch_bookmarks: Option<String>,
    timeout_seconds: Option<u64>,
    limit: Option<usize>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

fn truthy(v: &Option<String>) -> bool {
    matches!(v.as_deref(), Some("true" | "1"))
}

fn list_or_watch(
    sim: Sim,
    kind: &'static KindSpec,
    namespace: Option<String>,
    q: ListQuery,
) -> Response {
    // Subscribe to cuts before looking at the pause flag: `pause` sets the flag, then cuts,
    // so a watch either sees the flag or is cut.
    let cut = sim.cut.subscribe();
    let kind_failing = sim
        .failing
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&kind.stream);
    if kind_failing || sim.watches_paused.load(std::sync::atomic::Ordering::SeqCst) {
        return error(ApiError {
            details: None,
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
                details: None,
                code: 410,
                reason: "Expired",
                message: "the provided continue parameter is too old".into(),
            }),
        };
    }
    let listed = match (
        q.resource_version.as_deref(),
        q.resource_version_match.as_deref(),
    ) {
        (Some(text), Some("Exact")) => match text.parse::<u64>() {
            Ok(rv) => sim
                .store()
                .list_at(kind, namespace.as_deref(), rv)
                .map_err(|_| rv),
            Err(_) => {
                return error(ApiError::bad_request(format!(
                    "invalid resourceVersion {text:?}"
                )))
            }
        },
        (None | Some(""), Some(_)) => {
            return error(ApiError::bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ))
        }
        _ => Ok(sim.store().list(kind, namespace.as_deref())),
    };
    let (mut items, rv) = match listed {
        Ok(listed) => listed,
        Err(rv) if rv > sim.store().resource_version() => {
            return error(ApiError {
                details: None,
                code: 504,
                reason: "Timeout",
                message: format!("Too large resource version: {rv}"),
            })
        }
        Err(_) => {
            return error(ApiError {
                details: None,
                code: 410,
                reason: "Expired",
                message: "The resourceVersion for the provided list is too old.".into(),
            })
        }
    };
    if kind.group.is_empty() {
        // kube-apiserver leaves kind and apiVersion off the items of built-in lists (not
        // off those of custom resources).
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
    kind: &KindSpec,
    mut items: Vec<Value>,
    rv: u64,
    limit: Option<usize>,
) -> Response {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(limit) = limit.filter(|l| *l > 0 && items.len() > *l) {
        let rest = items.split_off(limit);
        let token = format!("{rv}-{}-{}", kind.plural, rest.len());
        metadata["continue"] = json!(token);
        metadata["remainingItemCount"] = json!(rest.len());
        sim.lists
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(token, (rest, rv));
    }
    Json(json!({"kind": list_kind(kind), "apiVersion": kind.api_version(), "metadata": metadata, "items": items}))
        .into_response()
}

fn line(event_type: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": event_type, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

fn watch_response(
    sim: Sim,
    kind: &'static KindSpec,
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
                        // Bookmarks never go below an event the watch sent.
                        backlog.last().map_or(rv, |c| c.rv.max(rv)),
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
                    sim,
                    kind,
                    namespace,
                    bookmarks,
                    interval,
                    timeout,
                };
                stream.run(tx, initial, changes, rv, cut).await;
            }
            Err(rv) => {
                // The in-stream form, as kube-apiserver sends it: HTTP 200, then an ERROR event.
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
    sim: Sim,
    kind: &'static KindSpec,
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
                        if change.rv <= rv || change.kind != self.kind.stream
                            || self.namespace.as_deref().is_some_and(|n| n != change.namespace) {
                            continue;
                        }
                        rv = change.rv;
                        let delay = self.sim.watch_delay(self.kind.stream);
                        if !delay.is_zero() {
                            tokio::select! {
                                biased;
                                _ = cut.changed() => return,
                                _ = tokio::time::sleep_until((change.made_at + delay).into()) => {}
                            }
                        }
                        if tx.send(line(change.event_type, &change.object)).await.is_err() {
                            return;
                        }
                    }
                    // A watcher too slow to keep up is closed, as kube-apiserver does.
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = ticker.tick(), if self.bookmarks => {
                    let bookmark = json!({"kind": self.kind.kind, "apiVersion": self.kind.api_version(),
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

fn replace(
    sim: &Sim,
    kind: &'static KindSpec,
    ns: &str,
    name: &str,
    body: Value,
) -> Result<Value, ApiError> {
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
            details: None,
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json (got {other:?})"),
        }),
    }
}

fn patch(
    sim: &Sim,
    kind: &'static KindSpec,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn plural(
        target: Option<Target<'_>>,
    ) -> Option<(&'static str, Option<String>, Option<String>)> {
        match target? {
            Target::Collection { kind, namespace } => {
                Some((kind.plural, namespace.map(str::to_owned), None))
            }
            Target::Object {
                kind,
                namespace,
                name,
            } => Some((
                kind.plural,
                Some(namespace.to_owned()),
                Some(name.to_owned()),
            )),
            _ => None,
        }
    }

    #[test]
    fn paths_are_read_from_the_served_kinds_and_their_scope() {
        let all = Served::all();
        let whereabouts = "/apis/whereabouts.cni.cncf.io/v1alpha1";
        assert_eq!(
            plural(target(
                &all,
                &format!("{whereabouts}/namespaces/kube-system/ippools/10.128.40.0-24")
            )),
            Some((
                "ippools",
                Some("kube-system".into()),
                Some("10.128.40.0-24".into())
            ))
        );
        assert_eq!(
            plural(target(&all, &format!("{whereabouts}/ippools"))),
            Some(("ippools", None, None)),
            "a namespaced kind is listed across namespaces"
        );
        assert_eq!(
            plural(target(
                &all,
                "/apis/spiderpool.spidernet.io/v2beta1/spiderippools/pool-a/status"
            )),
            Some(("spiderippools", Some(String::new()), Some("pool-a".into())))
        );
        assert!(
            target(&all, &format!("{whereabouts}/ippools/10.128.40.0-24")).is_none(),
            "a namespaced object needs its namespace"
        );
        assert!(
            target(&all, "/apis/kubeovn.io/v1/namespaces/x/ips").is_none(),
            "a cluster-scoped kind has no namespaces"
        );
        assert_eq!(
            plural(target(&all, "/api/v1/namespaces/default/pods/web-0")),
            Some(("pods", Some("default".into()), Some("web-0".into())))
        );
        let only_whereabouts = Served::only(&[Kind::Pod, Kind::IpPool]);
        assert!(target(&only_whereabouts, "/apis/kubeovn.io/v1/ips").is_none());
        assert!(resources(&only_whereabouts, "kubeovn.io", "v1").is_none());
        assert!(api_group(&only_whereabouts, "kubeovn.io").is_none());
        let listed =
            resources(&only_whereabouts, "whereabouts.cni.cncf.io", "v1alpha1").expect("served");
        let names: Vec<&str> = listed["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert_eq!(names, ["ippools", "ippools/status"]);
    }
}
