//! The analyzer's window (served by [`ipaudit_runtime::http`]): `/metrics`, `/healthz`
//! (the process serves) and `/readyz` (the instance has joined its consumer group, one
//! given no partition being a ready standby, and every topic it writes exists).

use std::net::SocketAddr;

use ipaudit_runtime::http::Window;
use tokio::sync::watch;

use crate::live::metrics::Metrics;

#[derive(Clone)]
struct Endpoints(Metrics);

impl Window for Endpoints {
    fn metrics_text(&self) -> String {
        self.0.encode()
    }
    fn liveness_problems(&self) -> Vec<String> {
        Vec::new()
    }
    fn readiness_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.0.is_ready() {
            problems.push("not in the consumer group yet".to_owned());
        }
        problems.extend(self.0.missing_topics().readiness_problems());
        problems
    }
}

/// Binds `addr` and serves the endpoints until `shutdown` turns true. Returns the bound
/// address (port 0 picks a free one).
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<SocketAddr> {
    let (bound, _task) = ipaudit_runtime::http::serve(addr, Endpoints(metrics), shutdown).await?;
    Ok(bound)
}
