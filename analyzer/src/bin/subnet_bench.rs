//! Rule cost against a subnet's size: every phase of one big kube-ovn subnet's life, fed
//! through the analyzer core (dedupe, reorder, state, all eight rules) on one thread, and
//! timed phase by phase. Each phase's cost must grow with what it changes, not with the
//! size of the subnet times the number of changes.
//!
//! ```sh
//! cargo build --profile dist -p ipaudit-analyzer --bin subnet-bench
//! target/dist/subnet-bench --ips 2000,8000,50000
//! ```
//!
//! Phases, for a subnet of N IPs (each with its pod):
//! - `create`: the subnet, then N pods and their IPs appear;
//! - `churn`: N status updates of the subnet (`v4usingIPs`), as kube-ovn writes them;
//! - `delete`: the subnet is deleted under its N live IPs (N `subnet-deleted-before-ip`
//!   alerts fire);
//! - `cleanup`: every pod goes, its IP turns terminating (`ip-stuck-terminating` fires) and
//!   is then deleted (every alert resolves);
//! - `teardown`: a second subnet of N IPs torn down the healthy way: each IP goes and the
//!   subnet's status follows, then the subnet goes.
//!
//! Each phase prints its wall time and its CPU time (this thread's, in 10 ms ticks): on a
//! shared machine the CPU time is the cost on one core.

use std::time::{Duration, Instant};

use clap::Parser;
use ipaudit_analyzer::analysis::engine::{Analyzer, AnalyzerConfig, Output};
use ipaudit_analyzer::say;
use ipaudit_schemas::builders::EventBuilder;
use ipaudit_schemas::{EventType, Stream, WatchEvent};

ipaudit_analyzer::global_allocator!();

#[derive(Debug, Parser)]
#[command(about = "Rule cost against a kube-ovn subnet's size")]
struct Cli {
    /// Subnet sizes (IPs) to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [2_000usize, 8_000, 50_000])]
    ips: Vec<usize>,
}

/// Events in history order, one resourceVersion counter, 1 ms apart.
struct History {
    rv: i64,
    t_ms: i64,
}

impl History {
    fn event(&mut self, builder: EventBuilder, event_type: EventType) -> WatchEvent {
        self.rv += 1;
        self.t_ms += 1;
        let mut event = builder.rv(self.rv).at(self.t_ms).build(event_type);
        event.cluster_id = "bench".into();
        event
    }

    /// Bookmarks of every stream at the latest version: each phase ends with them, so that
    /// the reorder buffer releases the phase's events within the phase.
    fn bookmarks(&self) -> Vec<WatchEvent> {
        [Stream::Pod, Stream::Ip, Stream::Subnet]
            .into_iter()
            .map(|stream| {
                let mut event = EventBuilder::bookmark(stream, self.rv);
                event.cluster_id = "bench".into();
                event.observed_at_ms = Some(self.t_ms);
                event
            })
            .collect()
    }
}

fn subnet(name: &str) -> EventBuilder {
    EventBuilder::subnet(name).uid(&format!("uid-{name}"))
}

fn ip(subnet: &str, i: usize) -> EventBuilder {
    let (a, b) = (i / 65_536 % 256, i / 256 % 256);
    EventBuilder::ip(&format!("pod-{i}.{subnet}"), subnet)
        .uid(&format!("ip-{subnet}-{i}"))
        .ip_of(
            subnet,
            &format!("pod-{i}"),
            &format!("10.{a}.{b}.{}", i % 256),
            "",
        )
}

fn pod(subnet: &str, i: usize) -> EventBuilder {
    EventBuilder::pod(subnet, &format!("pod-{i}")).uid(&format!("pod-{subnet}-{i}"))
}

/// The phases of the history, each as the events that make it.
fn phases(n: usize) -> Vec<(&'static str, Vec<WatchEvent>)> {
    let mut h = History {
        rv: 100,
        t_ms: 1_750_000_000_000,
    };
    let mut create = h.bookmarks();
    for name in ["leaky", "healthy"] {
        create.push(h.event(subnet(name), EventType::Added));
        for i in 0..n {
            create.push(h.event(pod(name, i), EventType::Added));
            create.push(h.event(ip(name, i), EventType::Added));
        }
    }
    create.extend(h.bookmarks());
    let mut churn: Vec<WatchEvent> = (0..n)
        .map(|i| {
            h.event(
                subnet("leaky").using_ips((n - i % 7) as u64),
                EventType::Modified,
            )
        })
        .collect();
    churn.extend(h.bookmarks());
    let mut delete = vec![h.event(subnet("leaky").using_ips(n as u64), EventType::Deleted)];
    delete.extend(h.bookmarks());
    let mut cleanup = Vec::with_capacity(3 * n);
    for i in 0..n {
        let t = h.t_ms;
        cleanup.push(h.event(pod("leaky", i), EventType::Deleted));
        cleanup.push(h.event(ip("leaky", i).deleting(t), EventType::Modified));
        cleanup.push(h.event(
            ip("leaky", i).deleting(t).finalizers(&[]),
            EventType::Deleted,
        ));
    }
    cleanup.extend(h.bookmarks());
    let mut teardown = Vec::with_capacity(4 * n + 1);
    for i in 0..n {
        let t = h.t_ms;
        teardown.push(h.event(pod("healthy", i), EventType::Deleted));
        teardown.push(h.event(
            ip("healthy", i).deleting(t).finalizers(&[]),
            EventType::Deleted,
        ));
        teardown.push(h.event(
            subnet("healthy").using_ips((n - i - 1) as u64),
            EventType::Modified,
        ));
    }
    teardown.push(h.event(subnet("healthy"), EventType::Deleted));
    vec![
        ("create", create),
        ("churn", churn),
        ("delete", delete),
        ("cleanup", cleanup),
        ("teardown", teardown),
    ]
}

fn main() -> std::io::Result<()> {
    let cli = Cli::parse();
    for n in cli.ips {
        let mut analyzer = Analyzer::new(AnalyzerConfig::default());
        let mut out = Vec::new();
        let mut line = format!("ips={n:>6}");
        let mut total = Duration::ZERO;
        let (mut transitions, mut fired) = (0, 0);
        for (phase, events) in phases(n) {
            let count = events.len();
            let cpu_before = thread_cpu();
            let started = Instant::now();
            for event in events {
                analyzer.step(event, &mut out);
                // Live analysis hands each message's transitions on at once.
                transitions += out.len();
                fired += out
                    .drain(..)
                    .filter(|o| matches!(o, Output::Alert(a) if a.status.as_str() == "firing"))
                    .count();
            }
            if phase == "teardown" {
                analyzer.finish(None, &mut out);
                transitions += out.len();
            }
            let took = started.elapsed();
            let cpu = thread_cpu().saturating_sub(cpu_before);
            total += took;
            line.push_str(&format!(
                "  {phase}={:.3}s cpu={:.2}s ({count} ev)",
                took.as_secs_f64(),
                cpu.as_secs_f64()
            ));
        }
        say!(
            "{line}  total={:.3}s  transitions={transitions} firing={fired}",
            total.as_secs_f64(),
        )?;
    }
    Ok(())
}

/// CPU time (user + system) this thread has used, from `/proc/thread-self/stat` (Linux,
/// in clock ticks of 10 ms): on a shared machine the wall time of a phase includes the
/// time other processes took the core, its CPU time does not.
fn thread_cpu() -> Duration {
    let ticks = std::fs::read_to_string("/proc/thread-self/stat")
        .ok()
        .and_then(|stat| {
            // Fields after the command name (which is in parentheses): utime is the 12th
            // of them, stime the 13th.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let user: u64 = fields.get(11)?.parse().ok()?;
            let system: u64 = fields.get(12)?.parse().ok()?;
            Some(user + system)
        })
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}
