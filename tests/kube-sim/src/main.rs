//! `kube-sim`: the simulated API server on its own, for trying kubectl or the collector by
//! hand. It serves an empty cluster; create objects with kubectl.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use kube_sim::{Kind, KubeSim, SimConfig};

/// A simulated Kubernetes API server (Pods and the IPAM kinds ipaudit watches) on plain HTTP.
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
    /// Serve only these kinds, comma-separated (plural, plural.group, Kind or label), e.g.
    /// `pods,ippools,overlappingrangeipreservations` for a cluster with only whereabouts.
    /// Default: every kind ipaudit knows.
    #[arg(long, value_delimiter = ',', value_parser = kind_name)]
    kinds: Vec<Kind>,
}

fn kind_name(name: &str) -> Result<Kind, String> {
    kube_sim::kinds::named(name).ok_or_else(|| {
        let valid: Vec<String> = ipaudit_schemas::KINDS
            .iter()
            .map(|k| k.resource())
            .collect();
        format!("unknown kind {name:?}; valid: {}", valid.join(", "))
    })
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
    let mut config = SimConfig {
        history_window: args.history_window,
        bookmark_interval: args.bookmark_interval,
        ..SimConfig::default()
    };
    if !args.kinds.is_empty() {
        config.kinds = args.kinds;
    }
    let sim = KubeSim::start_on(config, args.listen).await?;
    let served: Vec<String> = sim.served().kinds().iter().map(|k| k.resource()).collect();
    println!(
        "kube-sim serving {} on {} (kubectl --server {})",
        served.join(", "),
        sim.url(),
        sim.url()
    );
    tokio::signal::ctrl_c().await?;
    sim.stop();
    Ok(())
}
