//! The operator's window into a running program: `/metrics` (OpenMetrics text),
//! `/healthz` (liveness) and `/readyz` (readiness), served the same way by both programs.
//! Each program keeps its own idea of health ([`Window`]); this module binds, routes,
//! answers and stops with the program.
//!
//! `/healthz` and `/readyz` answer 200 with one line (`ok`, `ready`) when there is no
//! problem, else 503 with one line per problem, so that `kubectl describe` shows why.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The Kafka topics a program found missing, for its `/readyz` (a missing topic makes a
/// program unready, naming it): shared by what looks them up and the readiness endpoint,
/// a cheap clone of one set.
#[derive(Debug, Clone, Default)]
pub struct MissingTopics(Arc<Mutex<BTreeSet<String>>>);

impl MissingTopics {
    fn set(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        // A panic while holding the lock leaves a set that is still usable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `topic` does not exist (and the program may not create it).
    pub fn missing(&self, topic: &str) {
        self.set().insert(topic.to_owned());
    }

    /// `topic` exists (again).
    pub fn present(&self, topic: &str) {
        self.set().remove(topic);
    }

    /// Whether any topic is missing.
    pub fn any(&self) -> bool {
        !self.set().is_empty()
    }

    /// One readiness problem per missing topic, naming it.
    pub fn readiness_problems(&self) -> Vec<String> {
        self.set()
            .iter()
            .map(|topic| format!("topic {topic} does not exist: create it, or pass --create-topic"))
            .collect()
    }
}

/// What a program shows through its window.
pub trait Window: Clone + Send + Sync + 'static {
    /// The program's metrics in the OpenMetrics text format.
    fn metrics_text(&self) -> String;
    /// Why the process should be restarted (a task ended or hangs); empty when live.
    fn liveness_problems(&self) -> Vec<String>;
    /// Why the process should get no traffic or count as not working yet; empty when
    /// ready.
    fn readiness_problems(&self) -> Vec<String>;
}

/// The server task: it must not end before shutdown (its result says why it did).
pub type ServerTask = JoinHandle<std::io::Result<()>>;

/// Binds `addr` and serves `window` until `shutdown` turns true. Returns the bound address
/// (port 0 picks a free one) and the server's task.
pub async fn serve<W: Window>(
    addr: SocketAddr,
    window: W,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, ServerTask)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(metrics::<W>))
        .route("/healthz", get(healthz::<W>))
        .route("/readyz", get(readyz::<W>))
        .with_state(window);
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = shutdown.wait_for(|stop| *stop).await;
            })
            .await
    });
    Ok((local, task))
}

async fn metrics<W: Window>(State(window): State<W>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        window.metrics_text(),
    )
}

fn answer(problems: Vec<String>, ok: &'static str) -> (StatusCode, String) {
    if problems.is_empty() {
        (StatusCode::OK, format!("{ok}\n"))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            problems.iter().map(|p| format!("{p}\n")).collect(),
        )
    }
}

async fn healthz<W: Window>(State(window): State<W>) -> impl IntoResponse {
    answer(window.liveness_problems(), "ok")
}

async fn readyz<W: Window>(State(window): State<W>) -> impl IntoResponse {
    answer(window.readiness_problems(), "ready")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn each_missing_topic_is_a_readiness_problem_until_it_is_present() {
        let missing = MissingTopics::default();
        let seen_by_readyz = missing.clone();
        missing.missing("ipaudit.commands");
        missing.missing("ipaudit.alerts");
        assert!(seen_by_readyz.any());
        assert_eq!(
            seen_by_readyz.readiness_problems(),
            [
                "topic ipaudit.alerts does not exist: create it, or pass --create-topic",
                "topic ipaudit.commands does not exist: create it, or pass --create-topic",
            ]
        );
        missing.present("ipaudit.alerts");
        missing.present("ipaudit.commands");
        assert!(seen_by_readyz.readiness_problems().is_empty());
    }

    #[derive(Clone, Default)]
    struct Fake {
        unready: Arc<Mutex<Vec<String>>>,
    }

    impl Window for Fake {
        fn metrics_text(&self) -> String {
            "# TYPE ipaudit_test_things counter\nipaudit_test_things_total 3\n# EOF\n".into()
        }
        fn liveness_problems(&self) -> Vec<String> {
            Vec::new()
        }
        fn readiness_problems(&self) -> Vec<String> {
            self.unready.lock().unwrap().clone()
        }
    }

    /// One HTTP/1.0 GET over a real socket (a blocking one, off the runtime's threads):
    /// status line and body.
    async fn get(addr: SocketAddr, path: &str) -> (String, String) {
        let request = format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n");
        let text = tokio::task::spawn_blocking(move || {
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            stream.write_all(request.as_bytes()).unwrap();
            let mut text = String::new();
            stream.read_to_string(&mut text).unwrap();
            text
        })
        .await
        .unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_owned(), body.to_owned())
    }

    #[tokio::test]
    async fn the_window_serves_metrics_health_and_readiness_and_stops_on_shutdown() {
        let fake = Fake::default();
        let (stop, shutdown) = watch::channel(false);
        let (addr, task) = serve("127.0.0.1:0".parse().unwrap(), fake.clone(), shutdown)
            .await
            .unwrap();
        let (status, body) = get(addr, "/metrics").await;
        assert!(status.contains("200"), "{status}");
        assert!(body.contains("ipaudit_test_things_total 3"), "{body}");
        assert_eq!(get(addr, "/healthz").await.1, "ok\n");
        assert_eq!(get(addr, "/readyz").await.1, "ready\n");
        *fake.unready.lock().unwrap() = vec!["no partition yet".into(), "topic missing".into()];
        let (status, body) = get(addr, "/readyz").await;
        assert!(status.contains("503"), "{status}");
        assert_eq!(body, "no partition yet\ntopic missing\n");
        stop.send(true).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), task)
            .await
            .expect("the server did not stop")
            .unwrap()
            .unwrap();
    }
}
