//! `/metrics` (Prometheus text), `/healthz` (every supervised task runs and none hangs) and
//! `/readyz` (see [`crate::health`]: watching, delivering, room in the outbox). Both health
//! endpoints answer 503 with one line per reason.

use std::net::SocketAddr;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::health::Health;
use crate::metrics::Metrics;

#[derive(Clone)]
struct Endpoints {
    metrics: Metrics,
    health: Health,
}

/// Binds `addr` and serves the endpoints until `shutdown` turns true. Returns the bound
/// address and the server's task (supervised: it must not end before shutdown).
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    health: Health,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, JoinHandle<std::io::Result<()>>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Endpoints { metrics, health });
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = shutdown.wait_for(|stop| *stop).await;
            })
            .await
    });
    Ok((local, task))
}

async fn metrics_text(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        endpoints.metrics.encode(),
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

async fn healthz(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    answer(endpoints.health.liveness_problems(), "ok")
}

async fn readyz(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    answer(endpoints.health.readiness_problems(), "ready")
}
