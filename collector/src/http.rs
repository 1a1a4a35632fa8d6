//! The collector's window (served by [`ipaudit_runtime::http`]): `/metrics`, `/healthz`
//! (every supervised task runs and none hangs) and `/readyz` (see [`crate::health`]:
//! watching, delivering, room in the outbox). Both health endpoints answer 503 with one
//! line per reason.

use std::net::SocketAddr;

use ipaudit_runtime::http::{ServerTask, Window};
use tokio::sync::watch;

use crate::health::Health;
use crate::metrics::Metrics;

#[derive(Clone)]
struct Endpoints {
    metrics: Metrics,
    health: Health,
}

impl Window for Endpoints {
    fn metrics_text(&self) -> String {
        self.metrics
            .set_ready(self.health.readiness_problems().is_empty());
        self.metrics.encode()
    }
    fn liveness_problems(&self) -> Vec<String> {
        self.health.liveness_problems()
    }
    fn readiness_problems(&self) -> Vec<String> {
        self.health.readiness_problems()
    }
}

/// Binds `addr` and serves the endpoints until `shutdown` turns true. Returns the bound
/// address and the server's task (supervised: it must not end before shutdown).
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    health: Health,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, ServerTask)> {
    ipaudit_runtime::http::serve(addr, Endpoints { metrics, health }, shutdown).await
}
