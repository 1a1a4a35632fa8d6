//! The incident pages and their API, served by `analyzer run --ui-listen`: the list of
//! incidents (`/`), one incident (`/incidents/<alert id>`) and the same as JSON
//! (`/api/v1/incidents`, `/api/v1/incidents/<alert id>`), read from the store file.
//!
//! On a listener of its own, apart from `/metrics`: Prometheus must reach the metrics
//! port, while the pages show object names and addresses that only operators should see,
//! so they default to loopback and are exposed on purpose (an ingress, a port-forward).
//! Read-only: every route is a GET, and the store is opened read-only. Pages are
//! server-rendered with no script and no external resource (a Content-Security-Policy
//! forbids both), escaped by `maud` like the replay report, and every link is relative to
//! `--ui-base-path`, so the pages work behind an ingress's path prefix.

mod api;
mod pages;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::watch;

use crate::incidents_api::{IncidentFilter, MAX_PAGE_SIZE};
use crate::live::incidents::{self, IncidentPage, IncidentRecord, IncidentsError};

/// How the incident pages are served.
#[derive(Clone)]
pub struct UiConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The path prefix the pages live under (`""` or `/ipaudit`), as an ingress routes it.
    pub base_path: String,
    /// A token the API asks for (`Authorization: Bearer <token>`); `None`: none. Pages
    /// are for browsers and rely on the network (loopback, NetworkPolicy, the ingress).
    pub api_token: Option<String>,
    /// The other members' pages (their address and path prefix), asked for an incident
    /// this store does not hold, and for their lists.
    pub peers: Vec<String>,
    /// This member's name in the group (its instance id): its answers carry it, so that
    /// a member listed among its own peers does not count its incidents twice.
    pub member: String,
}

impl std::fmt::Debug for UiConfig {
    // The token never reaches a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UiConfig")
            .field("listen", &self.listen)
            .field("base_path", &self.base_path)
            .field("api_token", &self.api_token.as_ref().map(|_| "<redacted>"))
            .field("peers", &self.peers)
            .finish()
    }
}

/// `--ui-base-path` as the routes use it: empty, or `/` and segments without a trailing
/// `/`.
pub fn normalise_base_path(path: &str) -> String {
    let trimmed = path.trim().trim_matches('/');
    if trimmed.is_empty() {
        String::new()
    } else {
        format!("/{trimmed}")
    }
}

#[derive(Clone)]
struct Ui {
    store: Arc<Mutex<Connection>>,
    base: Arc<str>,
    token: Option<Arc<str>>,
    peers: Arc<[String]>,
    member: Arc<str>,
    client: reqwest::Client,
}

/// The header naming the member that answered an API request.
const MEMBER_HEADER: &str = "x-ipaudit-member";

/// Marks a request one member makes of another: it is answered from the store alone,
/// never passed on (members list each other).
const PEER_HEADER: &str = "x-ipaudit-peer";

/// How long a peer may take to answer for one incident.
const PEER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Why the pages cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    /// The store cannot be opened for reading.
    #[error("cannot open the store {path} for the incident pages")]
    Store {
        /// The store file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The address cannot be bound.
    #[error("cannot serve the incident pages on {addr}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Serves the pages from the store at `store_path` until `shutdown` turns true; returns
/// the bound address (port 0 picks a free one). The store's tables must exist (the
/// analyzer opens its store first).
pub async fn serve(
    config: &UiConfig,
    store_path: &Path,
    metrics: crate::live::metrics::Metrics,
    mut shutdown: watch::Receiver<bool>,
) -> Result<SocketAddr, UiError> {
    let store = open_read_only(store_path).map_err(|source| UiError::Store {
        path: store_path.to_owned(),
        source,
    })?;
    let base = normalise_base_path(&config.base_path);
    let ui = Ui {
        store: Arc::new(Mutex::new(store)),
        base: base.clone().into(),
        token: config.api_token.as_deref().map(Arc::from),
        peers: config
            .peers
            .iter()
            .map(|p| p.trim_end_matches('/').to_owned())
            .collect(),
        member: config.member.as_str().into(),
        client: reqwest::Client::builder()
            .timeout(PEER_TIMEOUT)
            .build()
            .unwrap_or_default(),
    };
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| UiError::Listen {
            addr: config.listen,
            source,
        })?;
    let bound = listener.local_addr().map_err(|source| UiError::Listen {
        addr: config.listen,
        source,
    })?;
    let app = router(ui, &base);
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = shutdown.wait_for(|stop| *stop).await;
            })
            .await;
        if let Err(error) = served {
            use ipaudit_runtime::telemetry::InternalEvent as _;
            crate::live::telemetry::Failed::new(
                crate::live::telemetry::Failure::IncidentPages,
                &error,
            )
            .emit(&metrics);
        }
    });
    Ok(bound)
}

fn open_read_only(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(conn)
}

fn router(ui: Ui, base: &str) -> Router {
    let at = |path: &str| format!("{base}{path}");
    let mut routes = Router::new()
        .route(&at("/"), get(list_page))
        .route(&at("/incidents/{id}"), get(incident_page))
        .route(&at("/api/v1/incidents"), get(list_json))
        .route(&at("/api/v1/incidents/{id}"), get(incident_json));
    if !base.is_empty() {
        // `/prefix` itself answers like `/prefix/`.
        routes = routes.route(base, get(list_page));
    }
    routes.with_state(ui)
}

/// Runs a read of the store off the async runtime (SQLite blocks).
async fn read<T: Send + 'static>(
    ui: &Ui,
    call: impl FnOnce(&Connection) -> Result<T, IncidentsError> + Send + 'static,
) -> Result<T, IncidentsError> {
    let store = Arc::clone(&ui.store);
    tokio::task::spawn_blocking(move || call(&store.lock().unwrap_or_else(|e| e.into_inner())))
        .await
        .unwrap_or_else(|_| Err(IncidentsError::Store(rusqlite::Error::InvalidQuery)))
}

/// A page: HTML, with a policy that forbids scripts and every resource from elsewhere.
fn html(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

fn error_status(error: &IncidentsError) -> StatusCode {
    match error {
        IncidentsError::Filter(_) => StatusCode::BAD_REQUEST,
        IncidentsError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

async fn list_page(
    State(ui): State<Ui>,
    query: Result<Query<IncidentFilter>, QueryRejection>,
) -> Response {
    let Ok(Query(filter)) = query else {
        return html(
            StatusCode::BAD_REQUEST,
            pages::problem_page(
                &ui.base,
                "A filter value is not understood (page and per_page are numbers).",
            ),
        );
    };
    match gather(&ui, &filter, false).await {
        Ok((page, unanswered)) => html(
            StatusCode::OK,
            pages::list_page(&ui.base, &filter, &page, &unanswered),
        ),
        Err(error) => html(
            error_status(&error),
            pages::problem_page(&ui.base, &error.to_string()),
        ),
    }
}

/// The incident of `id`: from this store, else (unless a peer asks) from the first other
/// member that holds it, with that member's address. After a takeover the member that
/// recorded an incident keeps it in its store, while the Service in front of the group
/// sends the operator's click to any member: every member answers with the data.
async fn find(
    ui: &Ui,
    id: &str,
    from_peer: bool,
) -> Result<Option<(IncidentRecord, Option<String>)>, IncidentsError> {
    let asked = id.to_owned();
    if let Some(record) = read(ui, move |conn| incidents::get(conn, &asked)).await? {
        return Ok(Some((record, None)));
    }
    if from_peer {
        return Ok(None);
    }
    for peer in ui.peers.iter() {
        let request = ui.peer_request(peer, &format!("incidents/{id}"));
        let answer: Option<serde_json::Value> = match request.send().await {
            Ok(response) if response.status().is_success() => response.json().await.ok(),
            Ok(_) => None,
            Err(error) => {
                tracing::debug!(%peer, %error, "a peer did not answer for an incident");
                None
            }
        };
        if let Some(record) = answer.as_ref().and_then(api::record_from) {
            return Ok(Some((record, Some(peer.clone()))));
        }
    }
    Ok(None)
}

async fn incident_page(
    State(ui): State<Ui>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    match find(&ui, &id, asked_by_peer(&headers)).await {
        Ok(Some((record, peer))) => html(
            StatusCode::OK,
            pages::incident_page(&ui.base, &record, peer.as_deref()),
        ),
        Ok(None) => html(StatusCode::NOT_FOUND, pages::not_found_page(&ui.base, &id)),
        Err(error) => html(
            error_status(&error),
            pages::problem_page(&ui.base, &error.to_string()),
        ),
    }
}

impl Ui {
    /// A request to another member's API (`path` after its address): marked as a peer's,
    /// so that it is answered from that member's store alone, with this one's token.
    fn peer_request(&self, peer: &str, path: &str) -> reqwest::RequestBuilder {
        let request = self
            .client
            .get(format!("{peer}/api/v1/{path}"))
            .header(PEER_HEADER, "1");
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }
}

/// Whether another member asks (see [`PEER_HEADER`]).
fn asked_by_peer(headers: &HeaderMap) -> bool {
    headers.contains_key(PEER_HEADER)
}

/// An API answer, naming the member that gives it.
fn with_member(ui: &Ui, mut response: Response) -> Response {
    if let Ok(member) = HeaderValue::from_str(&ui.member) {
        response.headers_mut().insert(MEMBER_HEADER, member);
    }
    response
}

/// The list `filter` asks for: this store's, merged with the other members' lists (unless
/// a peer asks), so that whichever member the Service sends the operator to answers with
/// the group's list. Each store is asked for its first `page * per_page` incidents; a page
/// deeper than [`MAX_PAGE_SIZE`] incidents is this store's alone. Returns the
/// peers that did not answer (the page says so).
async fn gather(
    ui: &Ui,
    filter: &IncidentFilter,
    from_peer: bool,
) -> Result<(IncidentPage, Vec<String>), IncidentsError> {
    let window = filter.page().saturating_mul(filter.per_page());
    if ui.peers.is_empty() || from_peer || window > MAX_PAGE_SIZE {
        let asked = filter.clone();
        let page = read(ui, move |conn| incidents::list(conn, &asked)).await?;
        return Ok((page, Vec::new()));
    }
    let mut first = filter.clone();
    first.page = Some(1);
    first.per_page = Some(window);
    let asked = first.clone();
    let mut lists = vec![read(ui, move |conn| incidents::list(conn, &asked)).await?];
    let query = serde_urlencoded::to_string(&first).unwrap_or_default();
    let mut unanswered = Vec::new();
    for peer in ui.peers.iter() {
        match ui
            .peer_request(peer, &format!("incidents?{query}"))
            .send()
            .await
        {
            Ok(response) if response.status().is_success() => {
                let member = response
                    .headers()
                    .get(MEMBER_HEADER)
                    .and_then(|m| m.to_str().ok())
                    .map(str::to_owned);
                if !ui.member.is_empty() && member.as_deref() == Some(&*ui.member) {
                    continue;
                }
                match response.json::<IncidentPage>().await {
                    Ok(list) => lists.push(list),
                    Err(_) => unanswered.push(peer.clone()),
                }
            }
            _ => unanswered.push(peer.clone()),
        }
    }
    Ok((
        incidents::merge(lists, filter.page(), filter.per_page()),
        unanswered,
    ))
}

/// `None` when the request may read the API; else the answer to give.
fn refused(ui: &Ui, headers: &HeaderMap) -> Option<Response> {
    let token = ui.token.as_deref()?;
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    // Compared in constant time: the answer's timing must not tell how much matched.
    let matches = given.is_some_and(|g| {
        g.len() == token.len()
            && g.bytes()
                .zip(token.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    });
    if matches {
        return None;
    }
    let mut response = api::problem(StatusCode::UNAUTHORIZED, "a bearer token is required");
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"ipaudit\""),
    );
    Some(response)
}

async fn list_json(
    State(ui): State<Ui>,
    headers: HeaderMap,
    query: Result<Query<IncidentFilter>, QueryRejection>,
) -> Response {
    if let Some(answer) = refused(&ui, &headers) {
        return answer;
    }
    let Ok(Query(filter)) = query else {
        return api::problem(StatusCode::BAD_REQUEST, "page and per_page are numbers");
    };
    match gather(&ui, &filter, asked_by_peer(&headers)).await {
        Ok((page, _)) => with_member(&ui, api::list(&ui.base, &page)),
        Err(error) => api::problem(error_status(&error), &error.to_string()),
    }
}

async fn incident_json(
    State(ui): State<Ui>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(answer) = refused(&ui, &headers) {
        return answer;
    }
    match find(&ui, &id, asked_by_peer(&headers)).await {
        Ok(Some((record, _))) => with_member(&ui, api::one(&ui.base, &record)),
        Ok(None) => api::problem(
            StatusCode::NOT_FOUND,
            "no incident of that id in this analyzer's store",
        ),
        Err(error) => api::problem(error_status(&error), &error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_path_is_normalised_to_a_leading_slash_and_no_trailing_one() {
        assert_eq!(normalise_base_path(""), "");
        assert_eq!(normalise_base_path("/"), "");
        assert_eq!(normalise_base_path("ipaudit/"), "/ipaudit");
        assert_eq!(normalise_base_path("/a/b/"), "/a/b");
    }
}
