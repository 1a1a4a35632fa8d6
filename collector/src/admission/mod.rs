//! The validating admission webhook (`--admission-listen`): HTTPS with the certificate and
//! key of `--admission-cert`/`--admission-key`, `POST /validate` answering
//! `AdmissionReview` (admission.k8s.io/v1) for the DELETE of kube-ovn Subnets, whereabouts
//! IPPools and spiderpool SpiderIPPools with the verdict of [`crate::admission::guard`].
//!
//! It never blocks a cluster on its own fault: a request it cannot read is allowed (with
//! the request's uid when it has one), and so is every deletion while the view is not
//! synced. The certificate files are read again when they change (cert-manager renews
//! them in place), checked every [`RELOAD_EVERY`]; a renewal that cannot be read keeps the
//! previous certificate and says so in the log.

pub mod guard;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use ipaudit_runtime::telemetry::InternalEvent as _;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::DynamicObject;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_rustls::rustls::crypto::{ring, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, info_span};

use crate::admission::guard::{decide, GuardMode, Guarded, SharedIndex, StreamHealth, Verdict};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::telemetry::{AdmissionReviewUnreadable, AdmissionReviewed};
use crate::telemetry::{Failed, Failure};

/// How often the certificate files are checked for a renewal.
pub const RELOAD_EVERY: Duration = Duration::from_secs(60);

/// A TLS handshake that takes longer than this is dropped (a stuck client holds nothing).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest AdmissionReview read: a DELETE carries the whole old object, and a pool
/// with every address of a /16 allocated is several megabytes.
const MAX_REVIEW_BYTES: usize = 16 << 20;

/// The webhook's settings.
#[derive(Debug, Clone)]
pub struct AdmissionConfig {
    /// Where it listens (HTTPS).
    pub listen: SocketAddr,
    /// PEM certificate chain (the server certificate first).
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// Warn or deny.
    pub mode: GuardMode,
}

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// A certificate or key file could not be read or used; fix the file (not retryable).
    #[error("cannot use the admission certificate {cert} with key {key}: {reason}")]
    Certificate {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The address could not be bound (in use, or not permitted; retrying may help when
    /// another process is about to free it).
    #[error("cannot listen on {addr} for admission reviews")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// What the handler needs: the live view and how to judge with it. [`Guard::answer`] is
/// the handling of one request body, public for the fuzz target (`fuzz/`).
#[derive(Clone)]
pub struct Guard {
    index: SharedIndex,
    health: Health,
    metrics: Metrics,
    mode: GuardMode,
    cluster: String,
}

/// Loads the certificate, binds `config.listen` and serves reviews until `shutdown` turns
/// true. Returns the bound address and the server's task (supervised by the caller).
pub async fn serve(
    config: &AdmissionConfig,
    cluster: String,
    index: SharedIndex,
    health: Health,
    metrics: Metrics,
    shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, JoinHandle<std::io::Result<()>>), AdmissionError> {
    let provider = Arc::new(ring::default_provider());
    let certs = Arc::new(Certificates::load(&config.cert, &config.key, &provider)?);
    let mut tls = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| certificate_error(config, e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(certs.clone());
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpListener::bind(config.listen)
        .await
        .map_err(|source| AdmissionError::Bind {
            addr: config.listen,
            source,
        })?;
    let local = tcp.local_addr().map_err(|source| AdmissionError::Bind {
        addr: config.listen,
        source,
    })?;
    let guard = Guard::new(cluster, index, health, metrics.clone(), config.mode);
    let app = Router::new()
        .route("/validate", post(review))
        .layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .with_state(guard);
    let (accepted_tx, accepted) = mpsc::channel(64);
    let acceptor = tokio::spawn(accept_tls(
        tcp,
        TlsAcceptor::from(Arc::new(tls)),
        accepted_tx,
        metrics.clone(),
        shutdown.clone(),
    ));
    let reloader = tokio::spawn(reload(certs, provider, metrics, shutdown.clone()));
    let mut stop = shutdown;
    let task = tokio::spawn(async move {
        let served = axum::serve(TlsListener { accepted, local }, app)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|stop| *stop).await;
            })
            .await;
        acceptor.abort();
        reloader.abort();
        served
    });
    Ok((local, task))
}

fn certificate_error(config: &AdmissionConfig, reason: String) -> AdmissionError {
    AdmissionError::Certificate {
        cert: config.cert.clone(),
        key: config.key.clone(),
        reason,
    }
}

/// Accepts TCP connections and completes each TLS handshake on its own task, so that a
/// slow or broken client delays no one; finished streams go to the HTTP server.
async fn accept_tls(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    accepted: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    metrics: Metrics,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let conn = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            conn = tcp.accept() => conn,
        };
        let (stream, peer) = match conn {
            Ok(conn) => conn,
            Err(error) => {
                // Out of file descriptors and the like: wait instead of spinning.
                Failed::new(Failure::AdmissionConnection, &error).emit(&metrics);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, accepted) = (acceptor.clone(), accepted.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = accepted.send((tls, peer)).await;
                }
                Ok(Err(error)) => debug!(%error, %peer, "admission TLS handshake failed"),
                Err(_) => debug!(%peer, "admission TLS handshake timed out"),
            }
        });
    }
}

/// Hands the HTTP server the connections whose handshake completed.
struct TlsListener {
    accepted: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(conn) => conn,
            // The acceptor stopped (shutdown): nothing more comes.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// The served certificate, replaced when its files change.
#[derive(Debug)]
struct Certificates {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<(Option<SystemTime>, Arc<CertifiedKey>)>,
}

impl Certificates {
    fn load(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<Self, AdmissionError> {
        let loaded = read_certified_key(cert, key, provider).map_err(|reason| {
            AdmissionError::Certificate {
                cert: cert.to_owned(),
                key: key.to_owned(),
                reason,
            }
        })?;
        Ok(Certificates {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: RwLock::new((modified(cert, key), Arc::new(loaded))),
        })
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        Some(Arc::clone(&current.1))
    }
}

/// The later modification time of the two files.
fn modified(cert: &Path, key: &Path) -> Option<SystemTime> {
    let time = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    time(cert).max(time(key))
}

fn read_certified_key(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, String> {
    let cert_pem = std::fs::read(cert).map_err(|e| format!("{}: {e}", cert.display()))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no PEM certificate in it", cert.display()));
    }
    let key_pem = std::fs::read(key).map_err(|e| format!("{}: {e}", key.display()))?;
    // The key's content never goes into a message: only its path and the error kind.
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("{}: no usable PEM private key ({e})", key.display()))?;
    let certified = CertifiedKey::from_der(chain, key_der, provider).map_err(|e| e.to_string())?;
    Ok(certified)
}

/// Re-reads the files every [`RELOAD_EVERY`] when their modification time changed.
async fn reload(
    certs: Arc<Certificates>,
    provider: Arc<CryptoProvider>,
    metrics: Metrics,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            _ = tokio::time::sleep(RELOAD_EVERY) => {}
        }
        let now = modified(&certs.cert, &certs.key);
        let seen = certs.current.read().unwrap_or_else(|e| e.into_inner()).0;
        if now == seen {
            continue;
        }
        match read_certified_key(&certs.cert, &certs.key, &provider) {
            Ok(key) => {
                *certs.current.write().unwrap_or_else(|e| e.into_inner()) = (now, Arc::new(key));
                info!(cert = %certs.cert.display(), "admission certificate reloaded");
            }
            Err(error) => Failed::new(Failure::AdmissionCertificate, &error)
                .about(&certs.cert.display())
                .emit(&metrics),
        }
    }
}

async fn review(State(guard): State<Guard>, body: Bytes) -> Response {
    let (answer, ..) = guard.answer(&body);
    match answer {
        Some(review) => Json(review).into_response(),
        None => (
            StatusCode::BAD_REQUEST,
            "not an AdmissionReview (admission.k8s.io/v1) with a request uid\n",
        )
            .into_response(),
    }
}

impl Guard {
    /// A guard of `cluster` judging with `index` (trusted while `health` says its streams
    /// are watched) in `mode`, counting its reviews in `metrics`.
    pub fn new(
        cluster: String,
        index: SharedIndex,
        health: Health,
        metrics: Metrics,
        mode: GuardMode,
    ) -> Guard {
        Guard {
            index,
            health,
            metrics,
            mode,
            cluster,
        }
    }

    /// The answer to one request body: the review to send back (`None`: the body names no
    /// request at all), the kind label and the verdict. A body it cannot read is allowed
    /// ([`Verdict::unreadable`]).
    pub fn answer(
        &self,
        body: &[u8],
    ) -> (
        Option<AdmissionReview<DynamicObject>>,
        &'static str,
        Verdict,
    ) {
        let request: Result<AdmissionRequest<DynamicObject>, String> =
            serde_json::from_slice::<AdmissionReview<DynamicObject>>(body)
                .map_err(|e| e.to_string())
                .and_then(|review| review.try_into().map_err(|e| format!("{e}")));
        let request = match request {
            Ok(request) => request,
            Err(why) => {
                let verdict = Verdict::unreadable(&why);
                AdmissionReviewUnreadable { error: &why }.emit(&self.metrics);
                let uid = serde_json::from_slice::<serde_json::Value>(body)
                    .ok()
                    .and_then(|v| v.pointer("/request/uid")?.as_str().map(str::to_owned));
                let answer = uid.map(|uid| {
                    let mut response = AdmissionResponse::invalid(&why);
                    response.uid = uid;
                    response.allowed = true;
                    response.result = Default::default();
                    response.warnings = Some(verdict.warnings.clone());
                    response.into_review()
                });
                return (answer, "unknown", verdict);
            }
        };
        let guarded = Guarded::of_resource(&request.resource.group, &request.resource.resource);
        let (kind, verdict) = match guarded {
            Some(guarded) if request.operation == Operation::Delete => {
                (guarded.label(), self.judge(guarded, &request))
            }
            Some(guarded) => (guarded.label(), self.pass(guarded.label(), &request)),
            None => ("other", self.pass("other", &request)),
        };
        let mut response = AdmissionResponse::from(&request);
        if !verdict.warnings.is_empty() {
            response.warnings = Some(verdict.warnings.clone());
        }
        if !verdict.allowed {
            response = response.deny(verdict.message.clone().unwrap_or_default());
            response.result.code = 403;
            response.result.reason = "Forbidden".into();
        }
        (Some(response.into_review()), kind, verdict)
    }

    fn judge(&self, guarded: Guarded, request: &AdmissionRequest<DynamicObject>) -> Verdict {
        let namespace = request.namespace.as_deref().filter(|n| !n.is_empty());
        let object = match namespace {
            Some(ns) => format!("{ns}/{}", request.name),
            None => request.name.clone(),
        };
        let resource_version = request
            .old_object
            .as_ref()
            .and_then(|o| o.metadata.resource_version.clone())
            .unwrap_or_default();
        let span = info_span!("admission", cluster = %self.cluster, stream = guarded.label(),
            object = %object, resource_version = %resource_version, uid = %request.uid);
        let _entered = span.enter();
        let stream = guarded.holders_stream();
        let health = StreamHealth {
            failing: self.health.stream_failing(stream),
            paused: *self.health.outbox_full().borrow(),
        };
        let view = self
            .index
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .holders(guarded, namespace, &request.name, health);
        let verdict = decide(self.mode, guarded, &object, view);
        AdmissionReviewed {
            kind: guarded.label(),
            verdict: &verdict,
            user: request.user_info.username.as_deref(),
            dry_run: request.dry_run,
        }
        .emit(&self.metrics);
        verdict
    }

    /// Allows a request the guard does not judge (not a deletion, or not a guarded kind).
    fn pass(&self, kind: &'static str, request: &AdmissionRequest<DynamicObject>) -> Verdict {
        let verdict = Verdict::allow();
        AdmissionReviewed {
            kind,
            verdict: &verdict,
            user: request.user_info.username.as_deref(),
            dry_run: request.dry_run,
        }
        .emit(&self.metrics);
        verdict
    }
}
