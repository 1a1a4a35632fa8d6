//! `/metrics` (Prometheus text), `/healthz` (the process serves) and `/readyz` (the
//! instance has joined its consumer group; one given no partition is a ready standby).

use std::net::SocketAddr;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::sync::watch;

use crate::live::metrics::Metrics;

/// Binds `addr` and serves the endpoints until `shutdown` turns true. Returns the bound
/// address (port 0 picks a free one).
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(metrics);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = shutdown.wait_for(|stop| *stop).await;
            })
            .await;
    });
    Ok(local)
}

async fn metrics_text(State(metrics): State<Metrics>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.encode(),
    )
}

async fn ready(State(metrics): State<Metrics>) -> impl IntoResponse {
    if metrics.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not in the consumer group yet\n",
        )
    }
}
