//! The analysis alone, apart from decoding: how long the analyzer core (dedupe, reorder,
//! state, rules, alerts) takes per event, and how much memory it holds per live object.
//!
//! ```sh
//! cargo build --profile dist -p ipaudit-analyzer --bin replay-bench --bin state-bench
//! target/dist/replay-bench generate --out /tmp/ipaudit-history.avro
//! # Time per event: events are decoded in chunks outside the timed part.
//! target/dist/state-bench analyze /tmp/ipaudit-history.avro
//! # Memory per live object, at 1M live objects (500k pods, 500k IPs, 10k subnets):
//! target/dist/replay-bench generate --out /tmp/ipaudit-1m-live.avro --ips 500000 --events 0
//! target/dist/state-bench memory /tmp/ipaudit-1m-live.avro
//! # Time per kind and event type (pod ADDED, IP DELETED, ...):
//! target/dist/state-bench classes /tmp/ipaudit-history.avro
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use ipaudit_analyzer::analysis::engine::{Analyzer, AnalyzerConfig};
use ipaudit_analyzer::offline::source::{Source, SourceItem};
use ipaudit_analyzer::say;
use ipaudit_schemas::{WatchEvent, KINDS};

ipaudit_analyzer::global_allocator!();

#[derive(Debug, Parser)]
#[command(about = "Time and memory of the ipaudit analysis core, apart from decoding")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode a history in chunks (not timed) and time the analysis of each chunk.
    Analyze {
        /// The history file (Avro container or kubectl recording).
        file: PathBuf,
        /// Events decoded ahead of each timed stretch (small, so that they are still in
        /// cache when analysed, as they are when a replay streams them).
        #[arg(long, default_value_t = 1_024)]
        chunk: usize,
    },
    /// Time the analysis of each event and report it by kind and event type: where an
    /// event's cost comes from (a creation, a deletion, a pod's status churn). The input
    /// is taken to be in version order (as a replay's merged input is), so that each
    /// event is analysed at its own step; a clock read per event (reported) is included.
    Classes {
        /// The history file (Avro container or kubectl recording).
        file: PathBuf,
        /// Events decoded ahead of each timed stretch (as for `analyze`).
        #[arg(long, default_value_t = 1_024)]
        chunk: usize,
    },
    /// Replay a history as `analyzer replay` does and report peak memory per live object.
    Memory {
        /// The history file.
        file: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Analyze { file, chunk } => analyze(&file, chunk.max(1)),
        Command::Classes { file, chunk } => classes(&file, chunk.max(1)),
        Command::Memory { file } => memory(&file),
    }
}

fn open(file: &Path) -> anyhow::Result<Source> {
    Source::open(file).with_context(|| format!("open {}", file.display()))
}

fn events(source: &mut Source) -> impl Iterator<Item = WatchEvent> + '_ {
    source.filter_map(|item| match item {
        SourceItem::Event(event) => Some(*event),
        SourceItem::Problem(_) | SourceItem::Unlisted(_) => None,
    })
}

/// Hands the events of `file` to `analyse` `chunk` at a time, each chunk decoded before
/// (outside whatever `analyse` times).
fn in_chunks(
    file: &Path,
    chunk: usize,
    mut analyse: impl FnMut(std::vec::Drain<'_, WatchEvent>),
) -> anyhow::Result<()> {
    let mut source = open(file)?;
    let mut events = events(&mut source);
    let mut batch: Vec<WatchEvent> = Vec::with_capacity(chunk);
    loop {
        batch.extend(events.by_ref().take(chunk));
        if batch.is_empty() {
            return Ok(());
        }
        analyse(batch.drain(..));
    }
}

fn analyze(file: &Path, chunk: usize) -> anyhow::Result<()> {
    let mut analyzer = Analyzer::new(AnalyzerConfig::default());
    let mut out = Vec::new();
    let mut analysing = Duration::ZERO;
    let mut on_cpu = Duration::ZERO;
    let mut total = 0u64;
    in_chunks(file, chunk, |batch| {
        total += batch.len() as u64;
        let started = Instant::now();
        let cpu = thread_cpu();
        for event in batch {
            analyzer.step(event, &mut out);
        }
        on_cpu += thread_cpu().saturating_sub(cpu);
        analysing += started.elapsed();
    })?;
    let started = Instant::now();
    let cpu = thread_cpu();
    analyzer.finish(None, &mut out);
    on_cpu += thread_cpu().saturating_sub(cpu);
    analysing += started.elapsed();
    let secs = on_cpu.as_secs_f64();
    say!(
        "analysed {total} events in {analysing:.2?} ({on_cpu:.2?} on the CPU): {:.3} us/event on the CPU ({:.0} events/s of analysis alone); {} outputs, {} live objects",
        secs * 1e6 / total.max(1) as f64,
        total as f64 / secs,
        out.len(),
        live_objects(&analyzer),
    )?;
    // The process exits next: freeing the state object by object would only cost time.
    std::mem::forget(analyzer);
    Ok(())
}

/// Events and the time their analysis took, of one kind and event type.
#[derive(Default)]
struct Class {
    events: u64,
    time: Duration,
}

fn classes(file: &Path, chunk: usize) -> anyhow::Result<()> {
    let mut analyzer = Analyzer::new(AnalyzerConfig::default());
    let mut out = Vec::new();
    let mut by_class: BTreeMap<(&'static str, &'static str), Class> = BTreeMap::new();
    in_chunks(file, chunk, |batch| {
        for event in batch {
            let class = (event.stream.kind(), event.event_type.as_str());
            let rv = event.resource_version_num;
            let started = Instant::now();
            analyzer.step(event, &mut out);
            if let Some(rv) = rv {
                // Nothing below comes later: the event is analysed now, not with a run.
                analyzer.input_passed(rv, &mut out);
            }
            let took = started.elapsed();
            let class = by_class.entry(class).or_default();
            class.events += 1;
            class.time += took;
        }
    })?;
    analyzer.finish(None, &mut out);
    let clock = clock_read_ns();
    let total: Duration = by_class.values().map(|c| c.time).sum();
    say!("kind / event type                  events   total ms   ns/event   share")?;
    for ((kind, event_type), class) in &by_class {
        say!(
            "{:<32} {:>9} {:>10.1} {:>10.0} {:>6.1} %",
            format!("{kind} {event_type}"),
            class.events,
            class.time.as_secs_f64() * 1e3,
            class.time.as_nanos() as f64 / class.events.max(1) as f64,
            100.0 * class.time.as_secs_f64() / total.as_secs_f64().max(f64::MIN_POSITIVE),
        )?;
    }
    say!(
        "{} outputs; each event's time includes one clock read (~{clock:.0} ns)",
        out.len()
    )?;
    std::mem::forget(analyzer);
    Ok(())
}

/// What reading the clock around an event adds to its time, measured here.
fn clock_read_ns() -> f64 {
    const READS: u32 = 100_000;
    let started = Instant::now();
    let mut last = started;
    for _ in 0..READS {
        last = std::hint::black_box(Instant::now());
    }
    (last - started).as_nanos() as f64 / f64::from(READS)
}

fn memory(file: &Path) -> anyhow::Result<()> {
    let rss_before = rss_kib("VmRSS:").unwrap_or(0);
    let mut source = open(file)?;
    let mut analyzer = Analyzer::new(AnalyzerConfig::default());
    let mut out = Vec::new();
    let mut peak_live = 0usize;
    let mut total = 0u64;
    for event in events(&mut source) {
        analyzer.step(event, &mut out);
        total += 1;
        if total.is_multiple_of(16_384) {
            peak_live = peak_live.max(live_objects(&analyzer));
        }
    }
    analyzer.finish(None, &mut out);
    peak_live = peak_live.max(live_objects(&analyzer));
    let peak = rss_kib("VmHWM:").unwrap_or(0);
    say!(
        "{total} events; peak {peak_live} live objects; peak RSS {} MiB (at start {} MiB): {:.0} bytes per live object ({:.0} above the start)",
        peak / 1024,
        rss_before / 1024,
        peak as f64 * 1024.0 / peak_live.max(1) as f64,
        peak.saturating_sub(rss_before) as f64 * 1024.0 / peak_live.max(1) as f64,
    )?;
    std::mem::forget(analyzer);
    Ok(())
}

/// Live objects of every kind the analyzer holds.
fn live_objects(analyzer: &Analyzer) -> usize {
    KINDS
        .iter()
        .map(|k| analyzer.state().records(k.stream).count())
        .sum()
}

/// Time this thread has run on a CPU (Linux `schedstat`): on a shared machine wall time
/// also counts the time other processes had the core.
fn thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}

/// A line of /proc/self/status (Linux), in KiB.
fn rss_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
