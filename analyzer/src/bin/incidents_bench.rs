//! The incident pages under load: a store of N incidents (10,000 by default, written
//! through the analyzer's own store, as `analyzer run` writes them), served by the pages'
//! own server on loopback, and each page fetched over HTTP many times.
//!
//! ```sh
//! cargo build --profile dist -p ipaudit-analyzer --bin incidents-bench
//! target/dist/incidents-bench --incidents 10000 --rounds 20
//! ```
//!
//! The reference, measured in the same run, is the server's floor: the answer for an
//! incident the store does not hold (a lookup and a small page, the same HTTP path).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use ipaudit_analyzer::live::store::Store;
use ipaudit_analyzer::live::ui::{self, UiConfig};
use ipaudit_schemas::{Alert, AlertStatus, EventType, Evidence, Severity, Stream};

ipaudit_analyzer::global_allocator!();

#[derive(Debug, Parser)]
#[command(about = "Time the analyzer's incident pages over HTTP on a store of many incidents")]
struct Cli {
    /// Incidents in the store.
    #[arg(long, default_value_t = 10_000)]
    incidents: usize,
    /// Times each page is fetched.
    #[arg(long, default_value_t = 20)]
    rounds: usize,
}

const RULES: [&str; 3] = [
    "subnet-deleted-before-ip",
    "ip-stuck-terminating",
    "whereabouts-allocation-orphaned",
];

fn alert(i: usize) -> Alert {
    let cluster = format!("cluster-{}", i % 5);
    let subnet = format!("net-{}", i % 40);
    let ip = format!("pod-{i}.ns-{}.{subnet}.ovn", i % 17);
    let address = format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255);
    let evidence = |stream, event_type, name: &str, rv: usize, what: &str| Evidence {
        stream,
        event_type,
        name: name.to_owned(),
        resource_version: rv.to_string(),
        time_ms: Some(1_790_000_000_000 + rv as i64 * 10),
        what: what.to_owned(),
        actor: None,
    };
    let rv = 1_000 + i * 5;
    Alert {
        alert_id: format!("{i:016x}"),
        cluster_id: cluster,
        rule: RULES[i % RULES.len()].to_owned(),
        severity: Severity::Critical,
        status: AlertStatus::Firing,
        subject_kind: "IP".into(),
        subject_name: ip.clone(),
        subject_uid: format!("uid-{i}"),
        subnet: Some(subnet.clone()),
        summary: format!("Subnet {subnet} was deleted while IP {ip} ({address}) still named it"),
        fix: Some(format!("kubectl delete ip {ip}")),
        epoch: 0,
        fired_at_ms: 1_790_000_000_000 + rv as i64 * 10,
        resolved_at_ms: None,
        fired_resource_version: (rv + 2).to_string(),
        resolved_resource_version: None,
        evidence: vec![
            evidence(Stream::Ip, EventType::Added, &ip, rv, "IP created"),
            evidence(
                Stream::Subnet,
                EventType::Modified,
                &subnet,
                rv + 1,
                "deletion requested",
            ),
            evidence(
                Stream::Subnet,
                EventType::Deleted,
                &subnet,
                rv + 2,
                "Subnet deleted",
            ),
        ],
        cleanup: None,
        url: None,
        namespace: None,
    }
}

/// Fetches `path` `rounds` times: (median, slowest, bytes of the answer).
async fn time_page(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    rounds: usize,
) -> anyhow::Result<(Duration, Duration, usize)> {
    let mut times = Vec::with_capacity(rounds);
    let mut bytes = 0;
    for _ in 0..rounds {
        let started = Instant::now();
        let body = client
            .get(format!("{base}{path}"))
            .send()
            .await
            .with_context(|| format!("GET {path}"))?
            .bytes()
            .await?;
        times.push(started.elapsed());
        bytes = body.len();
    }
    times.sort();
    Ok((times[times.len() / 2], times[times.len() - 1], bytes))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("analyzer.db");
    let mut store = Store::open(&path)?;
    let started = Instant::now();
    let alerts: Vec<Alert> = (0..cli.incidents).map(alert).collect();
    for chunk in alerts.chunks(1_000) {
        store.add_transitions(chunk)?;
    }
    // A third resolved: the list shows firing ones first, then the latest resolved.
    let resolved: Vec<Alert> = alerts
        .iter()
        .step_by(3)
        .map(|a| Alert {
            status: AlertStatus::Resolved,
            resolved_at_ms: Some(a.fired_at_ms + 60_000),
            resolved_resource_version: Some("999999999".into()),
            ..a.clone()
        })
        .collect();
    store.add_transitions(&resolved)?;
    println!(
        "store: {} incidents ({} resolved) written in {:.2?}",
        alerts.len(),
        resolved.len(),
        started.elapsed()
    );
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let (_stop, stop_rx) = tokio::sync::watch::channel(false);
        let config = UiConfig {
            listen: "127.0.0.1:0".parse()?,
            base_path: String::new(),
            api_token: None,
            peers: Vec::new(),
            member: String::new(),
        };
        let bound = ui::serve(
            &config,
            &path,
            ipaudit_analyzer::live::metrics::Metrics::new(),
            stop_rx,
        )
        .await?;
        let base = format!("http://{bound}");
        let client = reqwest::Client::new();
        let middle = format!("{:016x}", cli.incidents / 2);
        let pages = [
            (
                "reference: an unknown incident (404)",
                "/incidents/none".to_owned(),
            ),
            ("list, first page (50)", "/".to_owned()),
            ("list, 500 per page", "/?per_page=500".to_owned()),
            (
                "list, last page (50)",
                format!("/?page={}", cli.incidents.div_ceil(50)),
            ),
            (
                "list, filtered by rule and state",
                "/?rule=ip-stuck-terminating&state=resolved".to_owned(),
            ),
            ("list, text search on an address", "/?q=10.0.19.".to_owned()),
            ("one incident page", format!("/incidents/{middle}")),
            (
                "API list, 500 per page",
                "/api/v1/incidents?per_page=500".to_owned(),
            ),
            ("API one incident", format!("/api/v1/incidents/{middle}")),
        ];
        println!(
            "{:<40} {:>10} {:>10} {:>10}",
            "page", "median", "slowest", "bytes"
        );
        for (name, path) in pages {
            let (median, slowest, bytes) = time_page(&client, &base, &path, cli.rounds).await?;
            println!("{name:<40} {median:>10.2?} {slowest:>10.2?} {bytes:>10}");
        }
        anyhow::Ok(())
    })?;
    Ok(())
}
