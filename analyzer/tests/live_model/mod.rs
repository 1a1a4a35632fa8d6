//! The live loop modelled for the consistency tests (`crash_consistency.rs`,
//! `relist_consistency.rs`), with the histories and partitions they feed it.
//!
//! The live loop (`live/consume.rs`) is modelled the way it drives the core: messages of
//! one partition become available at their delivery time, are consumed one by one (each
//! costs a little wall time, so a catch-up takes a while), the wall clock ticks every
//! 200 ms (the first tick at once, as tokio's interval does) and is handed to the analysis
//! only while the partition is caught up. Each test crate uses part of it.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use ipaudit_analyzer::analysis::alerts::transition_id;
use ipaudit_analyzer::analysis::engine::{Analyzer, AnalyzerConfig, Output};
use ipaudit_analyzer::offline::source::{Source, SourceItem};
use ipaudit_schemas::builders::EventBuilder;
use ipaudit_schemas::{EventType, Stream, WatchEvent};
use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, TestRng};

/// Wall time the loop spends on one message (a catch-up of 400 messages spans two ticks).
pub const CONSUME_MS: i64 = 1;
/// The loop's tick interval (`consume.rs`).
pub const TICK_MS: i64 = 200;
/// After this long without a message, ticks release nothing more (the idle delay is 1 s).
pub const QUIET_MS: i64 = 5_000;

/// Collectors bookmark every stream this often (the API server's watch bookmarks), and
/// keep doing so after the history, long enough for every grace period to pass.
pub const BOOKMARK_EVERY_MS: i64 = 20_000;
pub const TAIL_MS: i64 = 11 * 60 * 1_000;

/// One message of the partition: when it can be consumed, and what it holds.
#[derive(Clone)]
pub struct Message {
    pub available_at_ms: i64,
    pub event: WatchEvent,
}

/// The transition ids each stretch of the run handed to the store, in order, and what
/// each says (for a failure's message).
#[derive(Debug, Default)]
pub struct Delivered {
    pub ids: Vec<String>,
    pub said: std::collections::BTreeMap<String, String>,
}

impl Delivered {
    pub fn take(&mut self, out: &mut Vec<Output>) {
        for output in out.drain(..) {
            if let Output::Alert(alert) = output {
                let id = transition_id(&alert);
                self.said.entry(id.clone()).or_insert_with(|| {
                    format!(
                        "{} {} {}/{}: {}",
                        alert.rule,
                        alert.status.as_str(),
                        alert.subject_kind,
                        alert.subject_name,
                        alert.summary
                    )
                });
                self.ids.push(id);
            }
        }
    }

    pub fn set(&self) -> BTreeSet<String> {
        self.ids.iter().cloned().collect()
    }
}

/// The member's process: its analysis, where it is in the partition, and its clock.
pub struct Process {
    pub analyzer: Analyzer,
    pub next: usize,
    pub wall_ms: i64,
    pub next_tick_ms: i64,
    pub last_message_ms: i64,
}

/// A checkpoint in the store: the analysis, and the offset of the next message.
pub type Checkpoint = Rc<(Vec<u8>, usize)>;

impl Process {
    /// The first start: nothing analysed, at the first message.
    pub fn first(log: &[Message]) -> Process {
        let start_ms = log.first().map_or(0, |m| m.available_at_ms);
        Process::start(Analyzer::new(config()), 0, start_ms)
    }

    pub fn start(analyzer: Analyzer, next: usize, wall_ms: i64) -> Process {
        Process {
            analyzer,
            next,
            wall_ms,
            next_tick_ms: wall_ms,
            last_message_ms: wall_ms,
        }
    }

    /// The process started again at `wall_ms` after dying: from the last checkpoint, or
    /// from the start when there is none.
    pub fn restarted(checkpoint: Option<&Checkpoint>, wall_ms: i64) -> Process {
        match checkpoint {
            Some(saved) => Process::start(
                Analyzer::from_checkpoint(&saved.0, config()).expect("own checkpoint"),
                saved.1,
                wall_ms,
            ),
            None => Process::start(Analyzer::new(config()), 0, wall_ms),
        }
    }

    /// Runs the loop to the end of `log` and some seconds past it; `after_message` sees
    /// the process after each message (and may replace it: a crash and restart).
    pub fn run(
        mut self,
        log: &[Message],
        delivered: &mut Delivered,
        mut after_message: impl FnMut(&mut Process, &Delivered),
    ) {
        let end_ms = log.last().map_or(0, |m| m.available_at_ms) + 5_000;
        let mut out = Vec::new();
        loop {
            let caught_up = log
                .get(self.next)
                .is_none_or(|m| m.available_at_ms > self.wall_ms);
            if self.wall_ms >= self.next_tick_ms {
                if caught_up {
                    self.analyzer.tick(self.wall_ms, &mut out);
                    delivered.take(&mut out);
                }
                self.next_tick_ms += TICK_MS;
                continue;
            }
            if !caught_up {
                self.analyzer.step(log[self.next].event.clone(), &mut out);
                delivered.take(&mut out);
                self.next += 1;
                self.wall_ms += CONSUME_MS;
                self.last_message_ms = self.wall_ms;
                after_message(&mut self, delivered);
                continue;
            }
            let next_message_ms = log.get(self.next).map(|m| m.available_at_ms);
            if next_message_ms.is_none() && self.wall_ms > end_ms {
                return;
            }
            if let Some(at) = next_message_ms {
                // Seconds after the last message, every tick has released what it can
                // and the next ones change nothing: a long quiet spell (a recording's
                // hours) is passed over to the tick before the next message.
                if self.wall_ms > self.last_message_ms + QUIET_MS {
                    let ticks = (at - self.next_tick_ms) / TICK_MS;
                    self.next_tick_ms += ticks.max(0) * TICK_MS;
                }
            }
            self.wall_ms =
                next_message_ms.map_or(self.next_tick_ms, |at| at.min(self.next_tick_ms));
        }
    }
}

/// Runs the live loop over `log` with no crash; returns every transition the store got.
pub fn run_uninterrupted(log: &[Message]) -> Delivered {
    let mut delivered = Delivered::default();
    Process::first(log).run(log, &mut delivered, |_, _| {});
    delivered
}

pub fn config() -> AnalyzerConfig {
    AnalyzerConfig {
        default_cluster_id: "c1".into(),
        ..AnalyzerConfig::default()
    }
}

pub fn seed_bytes(seed: u64) -> [u8; 32] {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes
}

/// How a history's events reach the partition.
#[derive(Clone, Copy, Debug)]
pub struct Delivery {
    /// Each stream's events arrive up to this late (within the reorder window).
    pub jitter_ms: i64,
    /// Each stream is behind by a fixed delay of up to this, drawn once per stream (a
    /// watch connection slower than the others).
    pub stream_delay_ms: i64,
    /// A second collector delivers every event again (HA collectors, or a resent outbox).
    pub second_collector: bool,
    pub seed: u64,
}

/// The partition a collector (or two) would write for `history`, given in true version
/// order with observation times: per (collector, stream) in order, streams interleaved by
/// delivery time, bookmarks on every stream until well after the end.
pub fn partition_of(history: &[WatchEvent], delivery: Delivery) -> Vec<Message> {
    let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(delivery.seed));
    let streams: BTreeSet<Stream> = history.iter().map(|e| e.stream).collect();
    let last_rv = history
        .iter()
        .filter_map(|e| e.resource_version_num)
        .max()
        .unwrap_or(0);
    let last_ms = history
        .iter()
        .filter_map(|e| e.observed_at_ms)
        .max()
        .unwrap_or(0);
    let mut timeline = history.to_vec();
    let mut t = last_ms;
    let mut rv = last_rv;
    while t < last_ms + TAIL_MS {
        t += BOOKMARK_EVERY_MS;
        rv += 1;
        for stream in &streams {
            let mut bookmark = EventBuilder::bookmark(*stream, rv);
            bookmark.observed_at_ms = Some(t);
            timeline.push(bookmark);
        }
    }
    let collectors: &[&str] = if delivery.second_collector {
        &["collector-a", "collector-b"]
    } else {
        &["collector-a"]
    };
    let stream_delays: Vec<(Stream, i64)> = if delivery.stream_delay_ms > 0 {
        streams
            .iter()
            .map(|s| (*s, rng.random_range(0..=delivery.stream_delay_ms)))
            .collect()
    } else {
        Vec::new()
    };
    let delay_of = |stream: Stream| {
        stream_delays
            .iter()
            .find(|(s, _)| *s == stream)
            .map_or(0, |(_, d)| *d)
    };
    let mut log = Vec::new();
    for collector in collectors {
        let mut last_of_stream: Vec<(Stream, i64, i64)> = Vec::new();
        for event in &timeline {
            let observed = event.observed_at_ms.unwrap_or(0);
            let slot = match last_of_stream
                .iter()
                .position(|(s, _, _)| *s == event.stream)
            {
                Some(slot) => slot,
                None => {
                    last_of_stream.push((event.stream, i64::MIN, 0));
                    last_of_stream.len() - 1
                }
            };
            let (_, last_at, sequence) = &mut last_of_stream[slot];
            // A stream's events stay in order: one watch connection each.
            let delay = delay_of(event.stream) + rng.random_range(0..=delivery.jitter_ms);
            let at = (observed + delay).max(*last_at);
            *last_at = at;
            *sequence += 1;
            let mut event = event.clone();
            event.cluster_id = "c1".into();
            event.collector_id = (*collector).into();
            event.sequence = *sequence;
            log.push(Message {
                available_at_ms: at,
                event,
            });
        }
    }
    // Kafka keeps one partition in the order the messages came (ties: as produced).
    log.sort_by_key(|m| m.available_at_ms);
    log
}

/// A recorded incident (one kubectl recording per kind), merged in version order and
/// given observation times: each event at the time its object shows, never before the
/// event ahead of it.
pub fn recorded_history(dir: &Path) -> Vec<WatchEvent> {
    let mut events = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("incident folder")
        .map(|e| e.expect("folder entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    for file in files {
        for item in Source::open(&file).expect("recording") {
            if let SourceItem::Event(event) = item {
                events.push(*event);
            }
        }
    }
    events.sort_by_key(|e| e.resource_version_num);
    let mut t = 1_750_000_000_000i64;
    for event in &mut events {
        t = (t + 50).max(event.event_time_ms().unwrap_or(i64::MIN));
        event.observed_at_ms = Some(t);
    }
    events
}

pub fn incidents() -> Vec<(String, Vec<WatchEvent>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/incidents");
    let mut found: Vec<(String, Vec<WatchEvent>)> = std::fs::read_dir(&root)
        .expect("tests/fixtures/incidents")
        .map(|e| e.expect("folder entry").path())
        .filter(|p| p.is_dir())
        .map(|p| {
            let name = p
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            (name, recorded_history(&p))
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// What happens to one pod's IP and its subnet in a generated kube-ovn history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Teardown {
    /// Pod, IP, then subnet: nothing leaks.
    InOrder,
    /// The subnet goes first: the IP is stuck on its finalizer (the seed incident).
    SubnetFirst,
    /// The pod and IP go while the collector's IP watch is down: a relist finds the IP
    /// gone (`DELETED_ON_RELIST`) after the subnet's deletion.
    IpGoneInWatchGap,
    /// Nothing is torn down.
    Kept,
}

/// Writes a history: each write one version and `step_ms` after the one before.
pub struct Writer {
    pub events: Vec<WatchEvent>,
    pub rv: i64,
    pub t: i64,
    pub step_ms: i64,
}

impl Writer {
    /// Writes `event` at the next version and time; returns that time.
    pub fn write(&mut self, mut event: WatchEvent) -> i64 {
        self.rv += 1;
        self.t += self.step_ms;
        event.resource_version = self.rv.to_string();
        event.resource_version_num = Some(self.rv);
        event.observed_at_ms = Some(self.t);
        self.events.push(event);
        self.t
    }

    /// Writes nobody watching sees (a watch gap): versions and time pass.
    pub fn unseen(&mut self, writes: i64) {
        self.rv += writes;
        self.t += writes * self.step_ms;
    }

    /// Writes a relist of `stream` at the current version and time: `SYNC_START`, `items`,
    /// `SYNC_END`, each at the list's version, as a collector writes a relist after 410.
    pub fn relist(&mut self, stream: Stream, items: Vec<WatchEvent>) {
        let (list_rv, t) = (self.rv, self.t);
        let at_list = |mut event: WatchEvent| {
            event.resource_version = list_rv.to_string();
            event.resource_version_num = Some(list_rv);
            event.observed_at_ms = Some(t);
            event
        };
        self.events.push(at_list(EventBuilder::marker(
            stream,
            EventType::SyncStart,
            list_rv,
        )));
        self.events.extend(items.into_iter().map(at_list));
        self.events.push(at_list(EventBuilder::marker(
            stream,
            EventType::SyncEnd,
            list_rv,
        )));
    }

    /// The time of the next write.
    pub fn next_ms(&self) -> i64 {
        self.t + self.step_ms
    }
}

/// A kube-ovn history: one subnet per pod, each pod with its IP, then each torn down as
/// `teardowns` says, the writes `step_ms` apart.
pub fn kube_ovn_history(teardowns: &[Teardown], step_ms: i64) -> Vec<WatchEvent> {
    let mut w = Writer {
        events: Vec::new(),
        rv: 100,
        t: 1_750_000_000_000,
        step_ms,
    };
    let pod = |i: usize| EventBuilder::pod("ns", &format!("p{i}")).uid(&format!("pod-{i}"));
    let subnet = |i: usize| EventBuilder::subnet(&format!("s{i}")).uid(&format!("subnet-{i}"));
    let ip = |i: usize| {
        EventBuilder::ip(&format!("p{i}.ns"), &format!("s{i}"))
            .uid(&format!("ip-{i}"))
            .ip_of("ns", &format!("p{i}"), &format!("10.{i}.0.2"), "")
    };
    for i in 0..teardowns.len() {
        w.write(subnet(i).added());
        w.write(pod(i).added());
        w.write(ip(i).added());
    }
    let mut relisted = false;
    for (i, teardown) in teardowns.iter().enumerate() {
        match teardown {
            Teardown::InOrder => {
                w.write(pod(i).deleted());
                let at = w.write(ip(i).deleting(w.next_ms()).modified());
                w.write(ip(i).deleting(at).finalizers(&[]).deleted());
                let at = w.write(subnet(i).deleting(w.next_ms()).modified());
                w.write(subnet(i).deleting(at).finalizers(&[]).deleted());
            }
            Teardown::SubnetFirst => {
                let at = w.write(subnet(i).deleting(w.next_ms()).modified());
                w.write(subnet(i).deleting(at).finalizers(&[]).deleted());
                w.write(pod(i).deleted());
                w.write(ip(i).deleting(w.next_ms()).modified());
            }
            Teardown::IpGoneInWatchGap => {
                // The IP watch saw none of this: only the pod and subnet streams did.
                w.write(pod(i).deleted());
                w.unseen(2);
                let at = w.write(subnet(i).deleting(w.next_ms()).modified());
                w.write(subnet(i).deleting(at).finalizers(&[]).deleted());
                relisted = true;
            }
            Teardown::Kept => {}
        }
    }
    if relisted {
        // The IP watch comes back with 410 Gone: a relist at the current version, in
        // which the IPs deleted meanwhile are missing.
        w.unseen(1);
        let t = w.t;
        let listed = teardowns
            .iter()
            .enumerate()
            .filter_map(|(i, teardown)| match teardown {
                Teardown::IpGoneInWatchGap => {
                    Some(ip(i).finalizers(&[]).build(EventType::DeletedOnRelist))
                }
                Teardown::SubnetFirst => Some(ip(i).deleting(t).added()),
                Teardown::Kept => Some(ip(i).added()),
                Teardown::InOrder => None,
            })
            .collect();
        w.relist(Stream::Ip, listed);
    }
    w.events
}

pub fn teardown() -> impl Strategy<Value = Teardown> {
    prop_oneof![
        Just(Teardown::InOrder),
        Just(Teardown::SubnetFirst),
        Just(Teardown::IpGoneInWatchGap),
        Just(Teardown::Kept),
    ]
}
