//! `kube-sim`: the simulated API server on its own, for trying kubectl or the collector by
//! hand. It serves an empty cluster; create objects with kubectl.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use kube_sim::{KubeSim, SimConfig};

/// A simulated Kubernetes API server (pods, kube-ovn IPs and Subnets) on plain HTTP.
#[derive(Debug, Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8001")]
    listen: SocketAddr,
    /// Changes kept for watches; older versions get 410 Gone.
    #[arg(long, default_value_t = 100_000)]
    history_window: usize,
    /// Interval between watch bookmarks.
    #[arg(long, default_value = "1s", value_parser = humantime_duration)]
    bookmark_interval: Duration,
}

fn humantime_duration(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim_end_matches('s')
        .parse()
        .map_err(|e| format!("{e}: use seconds, e.g. 1s"))?;
    Ok(Duration::from_secs_f64(secs))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = SimConfig {
        history_window: args.history_window,
        bookmark_interval: args.bookmark_interval,
        ..SimConfig::default()
    };
    let sim = KubeSim::start_on(config, args.listen).await?;
    println!(
        "kube-sim serving on {} (kubectl --server {})",
        sim.url(),
        sim.url()
    );
    tokio::signal::ctrl_c().await?;
    sim.stop();
    Ok(())
}
