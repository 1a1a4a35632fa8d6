//! Crash consistency of the live analysis: a restart never changes the alerts.
//!
//! The live loop (`live/consume.rs`) is modelled here the way it drives the core: messages
//! of one partition become available at their delivery time, are consumed one by one
//! (each costs a little wall time, so a catch-up takes a while), the wall clock ticks every
//! 200 ms (the first tick at once, as tokio's interval does) and is handed to the analysis
//! only while the partition is caught up, and a checkpoint saves the analysis together
//! with the offset of the next message. The process may die after any message; it then
//! restarts a little later from its last checkpoint (or from the start of the partition
//! when it never checkpointed) and consumes from there, catching up on what was delivered
//! meanwhile.
//!
//! For each history (the seed incidents of `tests/fixtures/incidents/`; generated kube-ovn
//! histories: healthy teardowns in both orders, watch gaps ended by a relist with
//! `DELETED_ON_RELIST`, two collectors, streams delivered out of order within the reorder
//! window; and random ones of those, as a property) and every message boundary as a kill
//! point, with checkpoints taken at random moments, the transitions seen before the kill
//! and after the restart, by id, are exactly those of the uninterrupted run.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use ipaudit_analyzer::analysis::alerts::transition_id;
use ipaudit_analyzer::analysis::engine::{Analyzer, AnalyzerConfig, Output};
use ipaudit_analyzer::offline::source::{Source, SourceItem};
use ipaudit_schemas::builders::EventBuilder;
use ipaudit_schemas::{EventType, Stream, WatchEvent};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// Wall time the loop spends on one message (a catch-up of 400 messages spans two ticks).
const CONSUME_MS: i64 = 1;
/// The loop's tick interval (`consume.rs`).
const TICK_MS: i64 = 200;
/// After this long without a message, ticks release nothing more (the idle delay is 1 s).
const QUIET_MS: i64 = 5_000;
/// Each history's kill points are tried under this many random checkpoint schedules.
const CHECKPOINT_SCHEDULES: usize = 3;
/// How long a killed analyzer stays down before it runs again.
const DOWN_MS: i64 = 3_000;
/// Collectors bookmark every stream this often (the API server's watch bookmarks), and
/// keep doing so after the history, long enough for every grace period to pass.
const BOOKMARK_EVERY_MS: i64 = 20_000;
const TAIL_MS: i64 = 11 * 60 * 1_000;

/// One message of the partition: when it can be consumed, and what it holds.
#[derive(Clone)]
struct Message {
    available_at_ms: i64,
    event: WatchEvent,
}

/// The transition ids each stretch of the run handed to the store, in order.
#[derive(Debug, Default)]
struct Delivered {
    ids: Vec<String>,
}

impl Delivered {
    fn take(&mut self, out: &mut Vec<Output>) {
        for output in out.drain(..) {
            if let Output::Alert(alert) = output {
                self.ids.push(transition_id(&alert));
            }
        }
    }

    fn set(&self) -> BTreeSet<String> {
        self.ids.iter().cloned().collect()
    }
}

/// The member's process: its analysis, where it is in the partition, and its clock.
struct Process {
    analyzer: Analyzer,
    next: usize,
    wall_ms: i64,
    next_tick_ms: i64,
    last_message_ms: i64,
}

/// A checkpoint in the store: the analysis, and the offset of the next message.
type Checkpoint = Rc<(Vec<u8>, usize)>;

impl Process {
    /// The first start: nothing analysed, at the first message.
    fn first(log: &[Message]) -> Process {
        let start_ms = log.first().map_or(0, |m| m.available_at_ms);
        Process::start(Analyzer::new(config()), 0, start_ms)
    }

    fn start(analyzer: Analyzer, next: usize, wall_ms: i64) -> Process {
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
    fn restarted(checkpoint: Option<&Checkpoint>, wall_ms: i64) -> Process {
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
    fn run(
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
fn run_uninterrupted(log: &[Message]) -> Delivered {
    let mut delivered = Delivered::default();
    Process::first(log).run(log, &mut delivered, |_, _| {});
    delivered
}

/// What the uninterrupted run had done when it consumed a message, for a kill there.
struct Boundary {
    /// Transitions stored so far.
    delivered: usize,
    wall_ms: i64,
    /// The last checkpoint written.
    checkpoint: Option<Checkpoint>,
}

/// Every message boundary of `log` as a kill point, with checkpoints after the messages
/// `checkpoint_after` names: panics at the first kill point whose transitions (before the
/// kill, and after the restart from the last checkpoint) differ from the uninterrupted
/// run's. A killed run is the uninterrupted one up to its kill, so that prefix is run once.
fn assert_no_kill_point_changes_the_alerts(
    name: &str,
    log: &[Message],
    checkpoint_after: &BTreeSet<usize>,
) {
    let mut uninterrupted = Delivered::default();
    let mut boundaries = Vec::with_capacity(log.len());
    let mut checkpoint: Option<Checkpoint> = None;
    Process::first(log).run(log, &mut uninterrupted, |process, delivered| {
        if checkpoint_after.contains(&process.next) {
            checkpoint = Some(Rc::new((process.analyzer.checkpoint(), process.next)));
        }
        boundaries.push(Boundary {
            delivered: delivered.ids.len(),
            wall_ms: process.wall_ms,
            checkpoint: checkpoint.clone(),
        });
    });
    let expected = uninterrupted.set();
    for (index, boundary) in boundaries.iter().enumerate() {
        let mut delivered = Delivered {
            ids: uninterrupted.ids[..boundary.delivered].to_vec(),
        };
        let restart_ms = boundary.wall_ms + DOWN_MS;
        Process::restarted(boundary.checkpoint.as_ref(), restart_ms).run(
            log,
            &mut delivered,
            |_, _| {},
        );
        let event = &log[index].event;
        assert_eq!(
            delivered.set(),
            expected,
            "{name}: killed after message {} of {} ({:?} at version {}), last checkpoint before message {:?}",
            index + 1,
            log.len(),
            event.event_type,
            event.resource_version,
            boundary.checkpoint.as_ref().map(|c| c.1),
        );
    }
}

/// Checkpoints after about one message in `every`, at random.
fn random_checkpoints(len: usize, every: u32, rng: &mut TestRng) -> BTreeSet<usize> {
    (1..=len)
        .filter(|_| rng.random_range(0..every) == 0)
        .collect()
}

/// The alert transitions of `history` replayed offline (everything at once, then the end).
fn replayed(history: &[WatchEvent]) -> Vec<String> {
    let mut analyzer = Analyzer::new(config());
    let mut out = Vec::new();
    for event in history {
        analyzer.step(event.clone(), &mut out);
    }
    analyzer.finish(None, &mut out);
    let mut delivered = Delivered::default();
    delivered.take(&mut out);
    delivered.ids
}

fn config() -> AnalyzerConfig {
    AnalyzerConfig {
        default_cluster_id: "c1".into(),
        ..AnalyzerConfig::default()
    }
}

fn seed_bytes(seed: u64) -> [u8; 32] {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes
}

/// How a history's events reach the partition.
#[derive(Clone, Copy, Debug)]
struct Delivery {
    /// Each stream's events arrive up to this late (within the reorder window).
    jitter_ms: i64,
    /// A second collector delivers every event again (HA collectors, or a resent outbox).
    second_collector: bool,
    seed: u64,
}

/// The partition a collector (or two) would write for `history`, given in true version
/// order with observation times: per (collector, stream) in order, streams interleaved by
/// delivery time, bookmarks on every stream until well after the end.
fn partition_of(history: &[WatchEvent], delivery: Delivery) -> Vec<Message> {
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
            let at = (observed + rng.random_range(0..=delivery.jitter_ms)).max(*last_at);
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
fn recorded_history(dir: &Path) -> Vec<WatchEvent> {
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

fn incidents() -> Vec<(String, Vec<WatchEvent>)> {
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

#[test]
fn every_seed_incident_gives_the_same_transitions_whenever_the_analyzer_dies() {
    let incidents = incidents();
    assert!(incidents.len() >= 10, "{} incidents found", incidents.len());
    let mut kill_points = 0;
    for (index, (name, history)) in incidents.iter().enumerate() {
        let delivery = Delivery {
            jitter_ms: 300,
            second_collector: index % 3 == 0,
            seed: index as u64,
        };
        let log = partition_of(history, delivery);
        assert_eq!(
            run_uninterrupted(&log).ids.is_empty(),
            replayed(history).is_empty(),
            "{name}: the uninterrupted live run finds what a replay finds"
        );
        let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(index as u64));
        for _ in 0..CHECKPOINT_SCHEDULES {
            let checkpoints = random_checkpoints(log.len(), 8, &mut rng);
            assert_no_kill_point_changes_the_alerts(name, &log, &checkpoints);
        }
        kill_points += log.len();
    }
    assert!(kill_points > 1_000, "{kill_points} kill points");
}

/// What happens to one pod's IP and its subnet in a generated kube-ovn history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Teardown {
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
struct Writer {
    events: Vec<WatchEvent>,
    rv: i64,
    t: i64,
    step_ms: i64,
}

impl Writer {
    /// Writes `event` at the next version and time; returns that time.
    fn write(&mut self, mut event: WatchEvent) -> i64 {
        self.rv += 1;
        self.t += self.step_ms;
        event.resource_version = self.rv.to_string();
        event.resource_version_num = Some(self.rv);
        event.observed_at_ms = Some(self.t);
        self.events.push(event);
        self.t
    }

    /// Writes nobody watching sees (a watch gap): versions and time pass.
    fn unseen(&mut self, writes: i64) {
        self.rv += writes;
        self.t += writes * self.step_ms;
    }

    /// The time of the next write.
    fn next_ms(&self) -> i64 {
        self.t + self.step_ms
    }
}

/// A kube-ovn history: one subnet per pod, each pod with its IP, then each torn down as
/// `teardowns` says, the writes `step_ms` apart.
fn kube_ovn_history(teardowns: &[Teardown], step_ms: i64) -> Vec<WatchEvent> {
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
        let (list_rv, t) = (w.rv, w.t);
        let at_list = |mut event: WatchEvent| {
            event.resource_version = list_rv.to_string();
            event.resource_version_num = Some(list_rv);
            event.observed_at_ms = Some(t);
            event
        };
        w.events.push(at_list(EventBuilder::marker(
            Stream::Ip,
            EventType::SyncStart,
            list_rv,
        )));
        for (i, teardown) in teardowns.iter().enumerate() {
            let listed = match teardown {
                Teardown::IpGoneInWatchGap => {
                    ip(i).finalizers(&[]).build(EventType::DeletedOnRelist)
                }
                Teardown::SubnetFirst => ip(i).deleting(t).added(),
                Teardown::Kept => ip(i).added(),
                Teardown::InOrder => continue,
            };
            w.events.push(at_list(listed));
        }
        w.events.push(at_list(EventBuilder::marker(
            Stream::Ip,
            EventType::SyncEnd,
            list_rv,
        )));
    }
    w.events
}

#[test]
fn healthy_teardowns_in_either_order_give_the_same_transitions_whenever_the_analyzer_dies() {
    use Teardown::*;
    let cases: [(&str, Vec<Teardown>); 4] = [
        ("healthy teardown", vec![InOrder]),
        ("subnet deleted first", vec![SubnetFirst]),
        (
            "healthy teardown then the seed incident",
            vec![InOrder, SubnetFirst, Kept],
        ),
        (
            "an IP gone in a watch gap",
            vec![InOrder, IpGoneInWatchGap, SubnetFirst],
        ),
    ];
    for (index, (name, teardowns)) in cases.iter().enumerate() {
        // Writes 150 ms apart, as the API server saw them in the field report.
        let history = kube_ovn_history(teardowns, 150);
        for second_collector in [false, true] {
            let delivery = Delivery {
                jitter_ms: 900,
                second_collector,
                seed: index as u64,
            };
            let log = partition_of(&history, delivery);
            let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(index as u64));
            for _ in 0..CHECKPOINT_SCHEDULES {
                let checkpoints = random_checkpoints(log.len(), 5, &mut rng);
                assert_no_kill_point_changes_the_alerts(name, &log, &checkpoints);
            }
        }
    }
}

fn teardown() -> impl Strategy<Value = Teardown> {
    prop_oneof![
        Just(Teardown::InOrder),
        Just(Teardown::SubnetFirst),
        Just(Teardown::IpGoneInWatchGap),
        Just(Teardown::Kept),
    ]
}

#[test]
fn random_histories_give_the_same_transitions_whenever_the_analyzer_dies() {
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    let strategy = (
        prop::collection::vec(teardown(), 1..6),
        10i64..400,
        0i64..900,
        any::<bool>(),
        any::<u64>(),
        2u32..8,
    );
    runner
        .run(
            &strategy,
            |(teardowns, step_ms, jitter_ms, second_collector, seed, every)| {
                let history = kube_ovn_history(&teardowns, step_ms);
                let log = partition_of(
                    &history,
                    Delivery {
                        jitter_ms,
                        second_collector,
                        seed,
                    },
                );
                let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(seed));
                let checkpoints = random_checkpoints(log.len(), every, &mut rng);
                assert_no_kill_point_changes_the_alerts("a random history", &log, &checkpoints);
                Ok(())
            },
        )
        .expect("no history whose alerts change with a restart");
}
