//! Replay throughput benchmark: a synthetic cluster history (by default 1M events over 10k
//! subnets and 200k IPs, a small share of them leaking) written as an Avro container, then
//! replayed by the analyzer core with every rule on. Run the two steps as two processes so
//! that peak memory is the replay's own:
//!
//! ```sh
//! cargo build --release -p ipaudit-analyzer --bin replay-bench
//! target/release/replay-bench generate --out /tmp/ipaudit-history.avro
//! target/release/replay-bench run /tmp/ipaudit-history.avro
//! ```

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use ipaudit_analyzer::replay::{replay, ReplayOptions};
use ipaudit_analyzer::report::Findings;
use ipaudit_schemas::builders::EventBuilder;
use ipaudit_schemas::{ContainerWriter, EventType, Stream, WatchEvent};

ipaudit_analyzer::global_allocator!();

#[derive(Debug, Parser)]
#[command(about = "Replay throughput benchmark of the ipaudit analyzer")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a synthetic cluster history as an Avro container file.
    Generate {
        /// Output file.
        #[arg(long)]
        out: PathBuf,
        /// Subnets.
        #[arg(long, default_value_t = 10_000)]
        subnets: usize,
        /// IPs (one pod each).
        #[arg(long, default_value_t = 200_000)]
        ips: usize,
        /// Approximate number of events.
        #[arg(long, default_value_t = 1_000_000)]
        events: usize,
        /// One subnet in this many is deleted under its live IPs (the leak).
        #[arg(long, default_value_t = 200)]
        leak_one_in: usize,
    },
    /// Replay a file and print events/s and peak memory.
    Run {
        /// The history file.
        file: PathBuf,
    },
    /// Only decode a file (no analysis), to split the cost.
    Decode {
        /// The history file.
        file: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Generate {
            out,
            subnets,
            ips,
            events,
            leak_one_in,
        } => generate(&out, subnets, ips, events, leak_one_in),
        Command::Run { file } => run(&file),
        Command::Decode { file } => decode(&file),
    }
}

/// Builds events in history order with one resourceVersion counter, as etcd would.
struct History {
    rv: i64,
    t_ms: i64,
    writer: ContainerWriter<WatchEvent, std::io::BufWriter<std::fs::File>>,
    written: usize,
}

impl History {
    fn emit(&mut self, builder: EventBuilder, event_type: EventType) -> anyhow::Result<()> {
        self.rv += 1;
        self.t_ms += 1;
        let mut event = builder.rv(self.rv).at(self.t_ms).build(event_type);
        event.cluster_id = "bench".into();
        event.collector_id = "collector-0".into();
        self.writer.append(&event)?;
        self.written += 1;
        Ok(())
    }

    fn bookmark(&mut self, stream: Stream) -> anyhow::Result<()> {
        let mut event = EventBuilder::bookmark(stream, self.rv);
        event.cluster_id = "bench".into();
        event.collector_id = "collector-0".into();
        event.observed_at_ms = Some(self.t_ms);
        self.writer.append(&event)?;
        self.written += 1;
        Ok(())
    }
}

/// IP `i` on `subnet`: a subnet holds IPs `subnet`, `subnet + subnets`, ..., and the
/// `i / subnets`-th of them gets host address `i / subnets + 2`: unique in its /24 for up
/// to 253 IPs per subnet.
fn ip_builder(i: usize, subnet: usize, subnets: usize) -> EventBuilder {
    let name = format!("pod-{i}.ns-{}", subnet % 500);
    let host = (i / subnets.max(1)) % 253 + 2;
    EventBuilder::ip(&name, &format!("subnet-{subnet}"))
        .uid(&format!("ip-uid-{i}"))
        .ip_of(
            &format!("ns-{}", subnet % 500),
            &format!("pod-{i}"),
            &format!("10.{}.{}.{host}", subnet / 256 % 256, subnet % 256),
            "",
        )
}

fn pod_builder(i: usize, subnet: usize) -> EventBuilder {
    EventBuilder::pod(&format!("ns-{}", subnet % 500), &format!("pod-{i}"))
        .uid(&format!("pod-uid-{i}"))
}

fn generate(
    out: &PathBuf,
    subnets: usize,
    ips: usize,
    events: usize,
    leak_one_in: usize,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let file = std::fs::File::create(out).with_context(|| format!("create {}", out.display()))?;
    let mut h = History {
        rv: 1_000,
        t_ms: 1_750_000_000_000,
        writer: ContainerWriter::new(std::io::BufWriter::new(file))?,
        written: 0,
    };
    for s in 0..subnets {
        h.emit(
            EventBuilder::subnet(&format!("subnet-{s}")).uid(&format!("subnet-uid-{s}")),
            EventType::Added,
        )?;
    }
    // Each IP lives on subnet i % subnets: its pod and IP are created, the pod is updated a
    // few times (spread so that the whole history has about `events` events), and a
    // quarter of the subnets are torn down at the end.
    let base = subnets + ips * 3 + (ips / 4) * 3 + subnets / 4 + ips / 64;
    let extra = events.saturating_sub(base);
    for i in 0..ips {
        let s = i % subnets;
        h.emit(pod_builder(i, s), EventType::Added)?;
        h.emit(ip_builder(i, s, subnets), EventType::Added)?;
        let updates = (i + 1) * extra / ips.max(1) - i * extra / ips.max(1);
        for _ in 0..=updates {
            h.emit(pod_builder(i, s), EventType::Modified)?;
        }
        if i % 64 == 0 {
            h.bookmark(Stream::Subnet)?;
        }
    }
    // Teardown of every fourth subnet: healthy order, except one in `leak_one_in`
    // whose subnet goes first and whose IPs then hang on their finalizer.
    for s in (0..subnets).step_by(4) {
        let leaks = s % (leak_one_in * 4) == 0;
        let members: Vec<usize> = (s..ips).step_by(subnets).collect();
        if leaks {
            h.emit(
                EventBuilder::subnet(&format!("subnet-{s}")).uid(&format!("subnet-uid-{s}")),
                EventType::Deleted,
            )?;
        }
        for &i in &members {
            let t = h.t_ms;
            h.emit(pod_builder(i, s), EventType::Deleted)?;
            h.emit(ip_builder(i, s, subnets).deleting(t), EventType::Modified)?;
            if !leaks {
                h.emit(
                    ip_builder(i, s, subnets).deleting(t).finalizers(&[]),
                    EventType::Deleted,
                )?;
            }
        }
        if !leaks {
            h.emit(
                EventBuilder::subnet(&format!("subnet-{s}")).uid(&format!("subnet-uid-{s}")),
                EventType::Deleted,
            )?;
        }
    }
    h.writer.finish()?;
    let size = std::fs::metadata(out)?.len();
    println!(
        "wrote {} events ({} subnets, {} IPs, rv up to {}) to {} ({:.1} MiB) in {:.1?}",
        h.written,
        subnets,
        ips,
        h.rv,
        out.display(),
        size as f64 / 1048576.0,
        started.elapsed()
    );
    Ok(())
}

fn run(file: &PathBuf) -> anyhow::Result<()> {
    let started = Instant::now();
    let outcome = replay(std::slice::from_ref(file), &ReplayOptions::default())?;
    let elapsed = started.elapsed();
    let findings = Findings::from_outputs(&outcome.outputs);
    let events = outcome.stats.events_in;
    let mut by_rule = std::collections::BTreeMap::new();
    for h in &findings.alerts {
        *by_rule.entry(h.fired.rule.clone()).or_insert(0u64) += 1;
    }
    println!(
        "replayed {events} events in {:.2?}: {:.0} events/s; alerts fired: {by_rule:?}; peak RSS {} MiB",
        elapsed,
        events as f64 / elapsed.as_secs_f64(),
        peak_rss_kib().map_or_else(|| "?".into(), |k| (k / 1024).to_string())
    );
    Ok(())
}

fn decode(file: &PathBuf) -> anyhow::Result<()> {
    let started = Instant::now();
    let reader = std::io::BufReader::new(std::fs::File::open(file)?);
    let mut events = 0u64;
    for event in ipaudit_schemas::ContainerReader::<WatchEvent, _>::new(reader)? {
        std::hint::black_box(event?);
        events += 1;
    }
    let elapsed = started.elapsed();
    println!(
        "decoded {events} events in {elapsed:.2?}: {:.0} events/s",
        events as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}

/// Peak resident set size of this process (Linux), in KiB.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
