//! The analyzer core, pure and deterministic: dedupe -> reorder -> state -> rules -> alert
//! transitions. Live analysis and offline replay drive the same `Analyzer`, so they give
//! the same answer.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicUsize, Ordering};

use ipaudit_schemas::{Alert, EventType, Stream, WatchEvent};
use serde::{Deserialize, Serialize};

use crate::analysis::alerts::{AlertBook, Moment};
use crate::analysis::dedupe::Dedupe;
use crate::analysis::reorder::{EpochChange, Released, ReorderBuffer, ReorderConfig, ReorderStats};
use crate::analysis::rules::{self, Change, Context, Rule, RuleConfig};
use crate::analysis::state::{ClusterState, ResourceVersion};

/// Settings of the analyzer core.
#[derive(Debug, Clone)]
pub struct AnalyzerConfig {
    /// Cluster id for events that carry none (kubectl recordings).
    pub default_cluster_id: String,
    /// Reorder buffer settings.
    pub reorder: ReorderConfig,
    /// Rule settings.
    pub rules: RuleConfig,
    /// Event keys remembered for dedupe.
    pub dedupe_capacity: usize,
}

impl Default for AnalyzerConfig {
    fn default() -> Self {
        AnalyzerConfig {
            default_cluster_id: "default".into(),
            reorder: ReorderConfig::default(),
            rules: RuleConfig::default(),
            dedupe_capacity: 262_144,
        }
    }
}

/// What the analyzer reports, in history order.
#[derive(Debug, Clone, PartialEq)]
#[allow(
    clippy::large_enum_variant,
    reason = "alerts are the common case; boxing would allocate per alert"
)]
pub enum Output {
    /// An alert fired or resolved.
    Alert(Alert),
    /// resourceVersions went backwards; history restarts.
    NewEpoch(EpochChange),
}

/// Counters of one analyzer.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnalyzerStats {
    /// Events taken in.
    pub events_in: u64,
    /// Dropped as duplicates.
    pub duplicates: u64,
    /// Older than the state and ignored.
    pub stale: u64,
    /// Of a kind this build does not know (written by a newer collector): skipped.
    #[serde(default)]
    pub unknown_kinds: u64,
    /// What the reorder buffer counted.
    pub reorder: ReorderStats,
}

/// One cluster's analysis. It serializes whole (see [`Analyzer::checkpoint`]), so that a
/// live analyzer can checkpoint it with its consumed offsets.
pub struct Analyzer {
    config: AnalyzerConfig,
    dedupe: Dedupe,
    reorder: ReorderBuffer,
    state: ClusterState,
    book: AlertBook,
    rules: Vec<Box<dyn Rule>>,
    cluster_id: String,
    last_rv: ResourceVersion,
    /// Event time of history as released so far: timers run on this clock, so that a
    /// grace period never expires ahead of events still held in the reorder buffer. It
    /// moves only with event time (event timestamps, observation times, bookmarks), never
    /// with the analyzer's wall clock, so that the same input gives the same transitions
    /// however the clock ticks.
    history_now_ms: Option<i64>,
    /// Bookmarks' observation times, each waiting until every held event at or below its
    /// version has been released: then history has reached that time.
    clock_marks: ClockMarks,
    /// The latest event time taken in (where [`Analyzer::finish`] ends history by default).
    latest_event_ms: Option<i64>,
    stats: AnalyzerStats,
    /// The size of the last checkpoint: the next is written into a buffer that large, not
    /// one grown by doubling, which copied a large state's bytes again at each step (a
    /// catch-up with checkpoints every second ran 1–3 % faster without it). Atomic only so
    /// that `checkpoint` takes `&self` and the analyzer stays `Sync`.
    checkpoint_size: AtomicUsize,
    released: Vec<Released>,
    alerts: Vec<Alert>,
    /// Events analysed, for the caller to read the next ones into
    /// ([`Analyzer::take_spare`]). The reorder buffer releases events in runs (each time a
    /// stream's watermark or the idle delay passes a few dozen to a few thousand) while
    /// one is read per step, so a whole run is kept instead of freed and allocated again.
    #[allow(
        clippy::vec_box,
        reason = "the boxes are handed to sources and back, the events never moved"
    )]
    spares: Vec<Box<WatchEvent>>,
}

/// Analysed events kept for reading into; beyond, they are freed. A run of the 1M-event
/// benchmark history is at most a few thousand (with 64 kept, 63 % were still freed); kept,
/// they cost 1-3 MiB of the replay's peak.
const SPARES: usize = 4_096;

/// Bookmarks' (version, observation time), lowest version first.
type ClockMarks = BinaryHeap<Reverse<(i64, i64)>>;

/// Bookmarks waiting at most (about three days of a collector's bookmarks every minute).
const CLOCK_MARKS: usize = 4_096;

/// The checkpoint format this build writes. It reads this format and the unversioned
/// checkpoints of the release before formats existed (the same shape without the fields
/// added since, which default).
///
/// Keeping checkpoints readable across releases: a field added to anything a checkpoint
/// holds gets `#[serde(default)]` and the format stays; any other change of shape bumps
/// this number and keeps a reader of the previous format beside the new one. The fixture
/// `analyzer/tests/fixtures/checkpoint-v1.json`, written by the release that introduced
/// format 1, must keep restoring (its test is `a_checkpoint_of_format_1_restores_and_continues`).
///
/// Format 2 saves the state's indexes as their bindings alone (the rest is rebuilt from
/// the records, which is how format 1's are read too): a build of format 1 would not find
/// the indexes it expects, and refuses it as newer.
pub const CHECKPOINT_FORMAT: u32 = 2;

/// The analysis as a checkpoint writes it; each rule's state under its name.
#[derive(Serialize)]
struct CheckpointRef<'a> {
    format: u32,
    dedupe: &'a Dedupe,
    reorder: &'a ReorderBuffer,
    state: &'a ClusterState,
    book: &'a AlertBook,
    rules: Vec<(&'static str, serde_json::Value)>,
    cluster_id: &'a str,
    last_rv: String,
    history_now_ms: Option<i64>,
    clock_marks: &'a ClockMarks,
    latest_event_ms: Option<i64>,
    stats: AnalyzerStats,
}

/// The first thing read of a checkpoint: which format it is in (none before format 1).
#[derive(Deserialize)]
struct Format {
    #[serde(default)]
    format: u32,
}

/// The analysis as a checkpoint of format 2, 1 (or the unversioned one before it) reads back.
#[derive(Deserialize)]
struct Checkpoint {
    dedupe: Dedupe,
    reorder: ReorderBuffer,
    state: ClusterState,
    book: AlertBook,
    #[serde(default)]
    rules: Vec<(String, serde_json::Value)>,
    cluster_id: String,
    last_rv: String,
    history_now_ms: Option<i64>,
    #[serde(default)]
    clock_marks: ClockMarks,
    #[serde(default)]
    latest_event_ms: Option<i64>,
    stats: AnalyzerStats,
}

/// Why a checkpoint could not be read back. None is worth retrying: the caller sets the
/// checkpoint aside and rebuilds the analysis from the topic.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The bytes are not a checkpoint of this analyzer.
    #[error("unreadable analyzer checkpoint")]
    Unreadable(#[from] serde_json::Error),
    /// A newer analyzer wrote it, in a format this build does not know.
    #[error("analyzer checkpoint of format {format}, newer than this build's {CHECKPOINT_FORMAT}")]
    Newer {
        /// The checkpoint's format.
        format: u32,
    },
    /// A rule's saved state does not fit the rule.
    #[error("unreadable state of rule {rule} in the analyzer checkpoint")]
    Rule {
        /// The rule.
        rule: String,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
}

impl std::fmt::Debug for Analyzer {
    /// A summary: the state is far too large to print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analyzer")
            .field("cluster_id", &self.cluster_id)
            .field("last_rv", &self.last_rv)
            .field("history_now_ms", &self.history_now_ms)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Analyzer {
    /// A fresh analyzer with nothing seen.
    pub fn new(config: AnalyzerConfig) -> Self {
        Analyzer {
            dedupe: Dedupe::new(config.dedupe_capacity),
            reorder: ReorderBuffer::new(config.reorder),
            state: ClusterState::new(),
            book: AlertBook::new(),
            rules: rules::all(),
            cluster_id: config.default_cluster_id.clone(),
            last_rv: ResourceVersion::default(),
            history_now_ms: None,
            clock_marks: ClockMarks::new(),
            latest_event_ms: None,
            stats: AnalyzerStats::default(),
            checkpoint_size: AtomicUsize::new(0),
            released: Vec::new(),
            alerts: Vec::new(),
            spares: Vec::new(),
            config,
        }
    }

    /// The whole analysis as bytes, to store with the offsets it corresponds to.
    pub fn checkpoint(&self) -> Vec<u8> {
        let checkpoint = CheckpointRef {
            format: CHECKPOINT_FORMAT,
            dedupe: &self.dedupe,
            reorder: &self.reorder,
            state: &self.state,
            book: &self.book,
            rules: self.rules.iter().map(|r| (r.name(), r.save())).collect(),
            cluster_id: &self.cluster_id,
            last_rv: self.last_rv.to_string(),
            history_now_ms: self.history_now_ms,
            clock_marks: &self.clock_marks,
            latest_event_ms: self.latest_event_ms,
            stats: self.stats,
        };
        // A little over the last size: a state that grew a bit still fits.
        let last = self.checkpoint_size.load(Ordering::Relaxed);
        let mut bytes = Vec::with_capacity(last + last / 16);
        // Every field is plain data; serializing it cannot fail.
        if serde_json::to_writer(&mut bytes, &checkpoint).is_err() {
            bytes.clear();
        }
        self.checkpoint_size.store(bytes.len(), Ordering::Relaxed);
        bytes
    }

    /// An analysis restored from [`Analyzer::checkpoint`] (of this format or an older one it
    /// reads, see [`CHECKPOINT_FORMAT`]), running with `config`. A rule the checkpoint
    /// does not know starts fresh.
    pub fn from_checkpoint(bytes: &[u8], config: AnalyzerConfig) -> Result<Self, CheckpointError> {
        let Format { format } = serde_json::from_slice(bytes)?;
        if format > CHECKPOINT_FORMAT {
            return Err(CheckpointError::Newer { format });
        }
        // Format 1 is the unversioned shape with fields added (each defaults).
        let checkpoint: Checkpoint = serde_json::from_slice(bytes)?;
        let mut rules = rules::all();
        for (name, saved) in checkpoint.rules {
            if let Some(rule) = rules.iter_mut().find(|r| r.name() == name) {
                rule.restore(saved)
                    .map_err(|source| CheckpointError::Rule { rule: name, source })?;
            }
        }
        let mut reorder = checkpoint.reorder;
        reorder.set_config(config.reorder);
        Ok(Analyzer {
            dedupe: checkpoint.dedupe,
            reorder,
            state: checkpoint.state,
            book: checkpoint.book,
            rules,
            cluster_id: checkpoint.cluster_id,
            last_rv: checkpoint.last_rv.as_str().into(),
            history_now_ms: checkpoint.history_now_ms,
            clock_marks: checkpoint.clock_marks,
            latest_event_ms: checkpoint.latest_event_ms,
            stats: checkpoint.stats,
            checkpoint_size: AtomicUsize::new(bytes.len()),
            released: Vec::new(),
            alerts: Vec::new(),
            spares: Vec::new(),
            config,
        })
    }

    /// The cluster state as of the last released event.
    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    /// The active alerts.
    pub fn active_alerts(&self) -> &AlertBook {
        &self.book
    }

    /// What was counted so far.
    pub fn stats(&self) -> AnalyzerStats {
        AnalyzerStats {
            duplicates: self.dedupe.dropped(),
            reorder: self.reorder.stats(),
            ..self.stats
        }
    }

    /// The lowest resourceVersion the reorder buffer holds back, if it holds any: what is
    /// consumed next may release it, and what it causes then rests on a message consumed
    /// before.
    pub fn lowest_held_rv(&self) -> Option<i64> {
        self.reorder.lowest_held_rv()
    }

    /// The event time history has been analysed up to.
    pub fn now_ms(&self) -> Option<i64> {
        self.history_now_ms
    }

    /// Takes one event; appends what it caused. A boxed event goes through the reorder
    /// buffer to the state as a pointer (an event is some 400 bytes, moved at each stage).
    pub fn step(&mut self, event: impl Into<Box<WatchEvent>>, out: &mut Vec<Output>) {
        let event: Box<WatchEvent> = event.into();
        self.stats.events_in += 1;
        if event.stream == Stream::Unknown {
            self.stats.unknown_kinds += 1;
            return;
        }
        if !event.cluster_id.is_empty() && event.cluster_id != self.cluster_id {
            self.cluster_id.clone_from(&event.cluster_id);
        }
        if !self.dedupe.is_new(&event) {
            return;
        }
        let time = event.event_time_ms();
        if let Some(t) = time {
            self.latest_event_ms = Some(self.latest_event_ms.map_or(t, |l| l.max(t)));
        }
        if event.event_type == EventType::Bookmark {
            // A bookmark is not applied to the state, but its time is history's once the
            // events before it are.
            if let (Some(rv), Some(t)) = (event.resource_version_num, time) {
                self.clock_marks.push(Reverse((rv, t)));
                if self.clock_marks.len() > CLOCK_MARKS {
                    // A stream that never passes them (it never showed up) must not let
                    // them pile up: the lowest two become one at the higher version, which
                    // only ever moves history later, never early.
                    if let (Some(Reverse((_, t1))), Some(Reverse((rv2, t2)))) =
                        (self.clock_marks.pop(), self.clock_marks.pop())
                    {
                        self.clock_marks.push(Reverse((rv2, t1.max(t2))));
                    }
                }
            }
        }
        let mut released = std::mem::take(&mut self.released);
        self.reorder.push(event, &mut released);
        self.process(&mut released, out);
        self.released = released;
    }

    /// An event the analysis is done with (the latest one applied; what the state keeps
    /// of it was copied or moved out), for a source to read its next event into so that
    /// reading allocates next to nothing (see [`crate::offline::source::Source::recycle`]).
    pub fn take_spare(&mut self) -> Option<Box<WatchEvent>> {
        self.spares.pop()
    }

    /// Nothing at or below `rv` is still to come: the input is merged in version order
    /// (see [`ReorderBuffer::pass`]). What is held up to it is analysed now instead of
    /// waiting for quiet streams.
    pub fn input_passed(&mut self, rv: i64, out: &mut Vec<Output>) {
        let mut released = std::mem::take(&mut self.released);
        self.reorder.pass(rv, &mut released);
        self.process(&mut released, out);
        self.released = released;
    }

    /// The input stopped being in version order: [`Analyzer::input_passed`] no longer
    /// bounds what may come (see [`ReorderBuffer::input_unordered`]).
    pub fn input_unordered(&mut self) {
        self.reorder.input_unordered();
    }

    /// A wall-clock tick (live analysis): releases held events whose idle delay has passed
    /// and nothing else. History's clock, hence every grace period, moves only with the
    /// events released, so the same input gives the same transitions at any tick rate.
    ///
    /// Tick only while every message of the cluster's partition has been read: a tick
    /// in a catch-up (after a restart, or a lag) would release what is held ahead of
    /// events already in the log, which then arrive late and are applied out of order.
    /// With that, a restored checkpoint continues as the process that wrote it did
    /// (`analyzer/tests/crash_consistency.rs`).
    pub fn tick(&mut self, wall_ms: i64, out: &mut Vec<Output>) {
        let mut released = std::mem::take(&mut self.released);
        self.reorder.advance_time(wall_ms, &mut released);
        self.process(&mut released, out);
        self.released = released;
    }

    /// End of input: releases everything held and runs timers up to `now_ms` (or the latest
    /// event time seen).
    pub fn finish(&mut self, now_ms: Option<i64>, out: &mut Vec<Output>) {
        let mut released = std::mem::take(&mut self.released);
        self.reorder.flush(&mut released);
        self.process(&mut released, out);
        self.released = released;
        self.pass_clock_marks(i64::MAX, out);
        if let Some(now) = now_ms.or(self.latest_event_ms) {
            self.advance_history(now, out);
        }
    }

    fn process(&mut self, released: &mut Vec<Released>, out: &mut Vec<Output>) {
        for item in released.drain(..) {
            match item {
                Released::NewEpoch(change) => {
                    // Everything before the restore was released: its bookmarks too.
                    self.pass_clock_marks(i64::MAX, out);
                    self.state.start_epoch();
                    out.push(Output::NewEpoch(change));
                }
                Released::Event(mut event) => {
                    if let Some(rv) = event.resource_version_num {
                        self.pass_clock_marks(rv, out);
                    }
                    self.apply(&mut event, out);
                    if self.spares.len() < SPARES {
                        self.spares.push(event);
                    }
                }
            }
        }
        // Bookmarks that every stream has passed, below every event still held, have been
        // passed by history. Most events come with no bookmark waiting below what is held:
        // then the streams' watermarks need not be looked at.
        let Some(Reverse((lowest_mark, _))) = self.clock_marks.peek().copied() else {
            return;
        };
        let held = self.reorder.lowest_held_rv().unwrap_or(i64::MAX);
        if lowest_mark >= held {
            return;
        }
        let passed = self
            .reorder
            .passed_up_to()
            .map_or(i64::MIN, |p| p.saturating_add(1));
        self.pass_clock_marks(passed.min(held), out);
    }

    /// History has reached every bookmark below version `below`: its clock takes their
    /// times, and timers that expired fire there.
    fn pass_clock_marks(&mut self, below: i64, out: &mut Vec<Output>) {
        while let Some(Reverse((rv, t))) = self.clock_marks.peek().copied() {
            if rv >= below {
                break;
            }
            self.clock_marks.pop();
            self.advance_history(t, out);
        }
    }

    /// Moves history's clock to `now_ms` (never back) and runs the timers that expired.
    fn advance_history(&mut self, now_ms: i64, out: &mut Vec<Output>) {
        if self.history_now_ms.is_some_and(|t| t >= now_ms) {
            return;
        }
        self.history_now_ms = Some(now_ms);
        self.run_timers(out);
    }

    fn apply(&mut self, event: &mut WatchEvent, out: &mut Vec<Output>) {
        let located = self.state.locate(event);
        let event_ref = located.at.clone();
        self.last_rv = event_ref.version();
        if let Some(t) = event_ref.time_ms() {
            self.history_now_ms = Some(self.history_now_ms.map_or(t, |now| now.max(t)));
        }
        let applied = self
            .state
            .apply_located(event, located, self.history_now_ms);
        if applied.stale {
            self.stats.stale += 1;
            return;
        }
        let at = self.moment(event_ref.time_ms());
        // Rules run on history's clock, which only moves forward: an event's own time can
        // lie in the past (a kubectl recording without managedFields stamps a change with
        // the object's creation time).
        let now_ms = self.history_now_ms.unwrap_or(at.time_ms).max(at.time_ms);
        {
            let mut ctx = Context {
                state: &self.state,
                config: &self.config.rules,
                cluster_id: &self.cluster_id,
                now_ms,
                book: &mut self.book,
                at,
                out: &mut self.alerts,
            };
            let change = Change {
                event: &event_ref,
                record: applied.key.as_ref(),
                before: applied.before.as_ref(),
                after: ctx.state.applied_record(&applied),
                released: &applied.released,
                reindexed: applied.reindexed,
                held_before: Default::default(),
                held_after: Default::default(),
            };
            for rule in &mut self.rules {
                rule.on_change(&mut ctx, &change);
            }
        }
        out.extend(self.alerts.drain(..).map(Output::Alert));
        self.run_timers(out);
    }

    /// Lets every rule whose timer expired act, on history's clock.
    fn run_timers(&mut self, out: &mut Vec<Output>) {
        let Some(now) = self.history_now_ms else {
            return;
        };
        if !self.rules.iter().any(|r| r.has_due(now)) {
            return;
        }
        let at = self.moment(Some(now));
        let mut ctx = Context {
            state: &self.state,
            config: &self.config.rules,
            cluster_id: &self.cluster_id,
            now_ms: now,
            book: &mut self.book,
            at,
            out: &mut self.alerts,
        };
        for rule in &mut self.rules {
            if rule.has_due(now) {
                rule.on_time(&mut ctx, now);
            }
        }
        out.extend(self.alerts.drain(..).map(Output::Alert));
    }

    fn moment(&self, time_ms: Option<i64>) -> Moment {
        Moment {
            resource_version: self.last_rv.clone(),
            time_ms: time_ms.or(self.history_now_ms).unwrap_or(0),
            epoch: self.reorder.epoch(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_schemas::builders::EventBuilder;
    use ipaudit_schemas::Stream;

    fn seed() -> Vec<WatchEvent> {
        let mut events = vec![
            EventBuilder::subnet("s").rv(1).at(1_000).added(),
            EventBuilder::ip("a", "s").rv(2).at(1_001).added(),
            EventBuilder::subnet("s").rv(3).at(1_002).deleted(),
            EventBuilder::ip("a", "s")
                .rv(4)
                .at(1_003)
                .deleting(1_003)
                .modified(),
            EventBuilder::ip("a", "s")
                .rv(5)
                .at(9_000)
                .deleting(1_003)
                .finalizers(&[])
                .deleted(),
        ];
        let mut pods = EventBuilder::bookmark(Stream::Pod, 10);
        pods.observed_at_ms = Some(1_000);
        events.insert(0, pods);
        events
    }

    fn run(analyzer: &mut Analyzer, events: &[WatchEvent], out: &mut Vec<Output>) {
        for e in events {
            analyzer.step(e.clone(), out);
        }
    }

    /// An event as a kubectl recording without managedFields gives it: no observation
    /// time, only the times the object shows.
    fn as_recorded(mut event: WatchEvent, created_ms: i64) -> WatchEvent {
        if let Some(meta) = event.metadata.as_mut() {
            meta.creation_timestamp_ms = Some(created_ms);
        }
        event
    }

    /// IP `p.ns` of pod `ns/p` on subnet `s`.
    fn ip_of_p() -> EventBuilder {
        EventBuilder::ip("p.ns", "s")
            .uid("ip-1")
            .ip_of("ns", "p", "10.0.0.2", "")
    }

    /// What a fresh analyzer gives for `events`, finished at their latest time.
    fn replayed(events: &[WatchEvent]) -> Vec<Output> {
        let mut analyzer = Analyzer::new(AnalyzerConfig::default());
        let mut out = Vec::new();
        run(&mut analyzer, events, &mut out);
        analyzer.finish(None, &mut out);
        out
    }

    /// The alerts among `out`: rule, subject and when it fired.
    fn fired(out: &[Output]) -> Vec<(String, String, i64)> {
        out.iter()
            .filter_map(|o| match o {
                Output::Alert(a) => Some((a.rule.clone(), a.subject_name.clone(), a.fired_at_ms)),
                Output::NewEpoch(_) => None,
            })
            .collect()
    }

    #[test]
    fn a_pod_deleted_without_a_deletion_timestamp_went_no_earlier_than_history_had_reached() {
        // Minutes into a recording a pod goes, its DELETED event showing only its creation
        // time, and kube-ovn deletes its IP a second later: no address outlived its pod
        // by the grace period.
        let minute = 60_000;
        let events = vec![
            as_recorded(EventBuilder::subnet("s").rv(1).added(), 0),
            as_recorded(EventBuilder::pod("ns", "p").uid("p-1").rv(2).added(), 1_000),
            as_recorded(ip_of_p().rv(3).added(), 1_000),
            as_recorded(
                EventBuilder::pod("ns", "q").uid("q-1").rv(4).added(),
                30 * minute,
            ),
            as_recorded(
                EventBuilder::pod("ns", "p").uid("p-1").rv(5).deleted(),
                1_000,
            ),
            as_recorded(
                ip_of_p().rv(6).deleting(30 * minute + 1_000).modified(),
                1_000,
            ),
            as_recorded(
                ip_of_p()
                    .rv(7)
                    .deleting(30 * minute + 1_000)
                    .finalizers(&[])
                    .deleted(),
                1_000,
            ),
        ];
        let fired = fired(&replayed(&events));
        assert!(fired.is_empty(), "{fired:?}");
    }

    /// A pod and its IP with no time at all, the pod deleted, then the IP terminating at
    /// `deleting_ms` (the first time history learns), then an IP of another pod created
    /// at `later_ms`: the recording of a cluster whose objects show no creation times.
    fn undated_until_the_ip_terminates(deleting_ms: i64, later_ms: i64) -> Vec<Output> {
        replayed(&[
            EventBuilder::subnet("s").rv(1).added(),
            EventBuilder::pod("ns", "p").uid("p-1").rv(2).added(),
            ip_of_p().rv(3).added(),
            EventBuilder::pod("ns", "p").uid("p-1").rv(4).deleted(),
            ip_of_p().rv(5).deleting(deleting_ms).modified(),
            as_recorded(
                EventBuilder::ip("q.ns", "s")
                    .uid("ip-2")
                    .ip_of("ns", "q", "10.0.0.3", "")
                    .rv(6)
                    .added(),
                later_ms,
            ),
        ])
    }

    #[test]
    fn a_pod_gone_before_history_had_any_time_is_dated_at_the_first_time_it_learns() {
        let t = 1_750_000_000_000;
        // Its IP terminating a second later is no address outliving its pod: not since
        // the epoch, as an undated deletion read before.
        assert_eq!(
            fired(&undated_until_the_ip_terminates(t, t + 1_000)),
            vec![]
        );
        // Held past the grace period from then, it is.
        let grace = RuleConfig::default().owner_grace_ms;
        assert_eq!(
            fired(&undated_until_the_ip_terminates(t, t + grace + 1_000)),
            vec![("ip-without-pod".to_owned(), "p.ns".to_owned(), t + grace)]
        );
    }

    #[test]
    fn every_event_of_a_run_released_at_once_is_handed_back_for_reading_into() {
        let mut analyzer = Analyzer::new(AnalyzerConfig::default());
        let mut out = Vec::new();
        // IPs held back for the subnet and pod streams that have not shown up: the end of
        // the input releases them in one run.
        for rv in 1..=100 {
            analyzer.step(
                EventBuilder::ip(&format!("ip-{rv}"), "s").rv(rv).added(),
                &mut out,
            );
            assert!(analyzer.take_spare().is_none(), "ip-{rv} was not held");
        }
        analyzer.finish(None, &mut out);
        let mut handed_back = Vec::new();
        while let Some(event) = analyzer.take_spare() {
            handed_back.push(event.resource_version_num);
        }
        assert_eq!(handed_back.len(), 100, "{handed_back:?}");
    }

    #[test]
    fn a_restored_checkpoint_continues_exactly_like_the_original() {
        let events = seed();
        let mut whole = Analyzer::new(AnalyzerConfig::default());
        let mut expected = Vec::new();
        run(&mut whole, &events, &mut expected);
        whole.finish(None, &mut expected);
        assert_eq!(
            expected.len(),
            4,
            "rules 1 and 2 fire and resolve: {expected:?}"
        );
        for split in 0..=events.len() {
            let mut first = Analyzer::new(AnalyzerConfig::default());
            let mut got = Vec::new();
            run(&mut first, &events[..split], &mut got);
            let mut second =
                Analyzer::from_checkpoint(&first.checkpoint(), AnalyzerConfig::default()).unwrap();
            run(&mut second, &events[split..], &mut got);
            second.finish(None, &mut got);
            assert_eq!(got, expected, "split at {split}");
        }
    }
}

#[cfg(test)]
mod snapshot_order_tests {
    use super::*;
    use ipaudit_schemas::builders::EventBuilder;
    use ipaudit_schemas::{EventType, Stream};

    #[test]
    fn a_stuck_ip_is_found_from_lists_in_either_order() {
        let ip = || {
            EventBuilder::ip("a", "gone")
                .rv(5)
                .at(1_000)
                .deleting(900)
                .added()
        };
        let frame = |stream, rv| {
            let mut start = EventBuilder::marker(stream, EventType::SyncStart, rv);
            start.observed_at_ms = Some(1_000);
            let mut end = EventBuilder::marker(stream, EventType::SyncEnd, rv);
            end.observed_at_ms = Some(1_000);
            (start, end)
        };
        for ip_list_first in [true, false] {
            let mut analyzer = Analyzer::new(AnalyzerConfig::default());
            let mut out = Vec::new();
            let (ip_start, ip_end) = frame(Stream::Ip, 10);
            let (subnet_start, subnet_end) = frame(Stream::Subnet, 10);
            let (pod_start, pod_end) = frame(Stream::Pod, 10);
            let ips = vec![ip_start, ip(), ip_end];
            let subnets = vec![subnet_start, subnet_end];
            let (first, second) = if ip_list_first {
                (ips, subnets)
            } else {
                (subnets, ips)
            };
            for e in first.into_iter().chain(second).chain([pod_start, pod_end]) {
                analyzer.step(e, &mut out);
            }
            analyzer.finish(None, &mut out);
            let rules: Vec<&str> = out
                .iter()
                .filter_map(|o| match o {
                    Output::Alert(a) => Some(a.rule.as_str()),
                    Output::NewEpoch(_) => None,
                })
                .collect();
            assert_eq!(
                rules,
                ["ip-stuck-terminating"],
                "IP list first: {ip_list_first}"
            );
        }
    }
}

#[cfg(test)]
mod unknown_kind_tests {
    use super::*;
    use ipaudit_schemas::builders::EventBuilder;

    #[test]
    fn an_event_of_a_kind_this_build_does_not_know_is_counted_and_skipped() {
        let mut analyzer = Analyzer::new(AnalyzerConfig::default());
        let mut out = Vec::new();
        let mut newer = EventBuilder::subnet("s").rv(2).at(2).deleted();
        newer.stream = Stream::Unknown;
        newer.part = None;
        analyzer.step(EventBuilder::subnet("s").rv(1).at(1).added(), &mut out);
        analyzer.step(newer, &mut out);
        analyzer.finish(None, &mut out);
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(analyzer.stats().unknown_kinds, 1);
        assert_eq!(analyzer.stats().events_in, 2);
        assert!(
            analyzer.state().get(Stream::Subnet, "s").is_some(),
            "the known event was applied"
        );
    }
}

#[cfg(test)]
mod event_time_tests {
    use super::*;
    use crate::analysis::alerts::transition_id;
    use ipaudit_schemas::builders::EventBuilder;

    const MIN: i64 = 60_000;
    /// 2025-06-15: old history, as a catch-up reads it.
    const T0: i64 = 1_750_000_000_000;

    /// Bookmarks of the three kube-ovn streams at `rv`, observed at `t`.
    fn bookmarks(rv: i64, t: i64) -> Vec<WatchEvent> {
        [Stream::Pod, Stream::Ip, Stream::Subnet]
            .into_iter()
            .map(|stream| {
                let mut b = EventBuilder::bookmark(stream, rv);
                b.observed_at_ms = Some(t);
                b
            })
            .collect()
    }

    /// A history in version order over three streams: a subnet deleted under an IP
    /// (rule 1), the IP then stuck (rule 2), a second subnet terminating past its grace
    /// with only bookmarks to show time passing (rule 3), and a third terminating briefly.
    fn history() -> Vec<WatchEvent> {
        let mut events = bookmarks(1, T0);
        let mut rv = 1;
        let mut next = |b: EventBuilder, t: i64, ty: EventType| {
            rv += 1;
            b.rv(rv).at(t).build(ty)
        };
        events.push(next(EventBuilder::subnet("s1"), T0, EventType::Added));
        events.push(next(EventBuilder::subnet("s2"), T0, EventType::Added));
        events.push(next(EventBuilder::subnet("s3"), T0, EventType::Added));
        events.push(next(
            EventBuilder::pod("default", "a"),
            T0 + 1,
            EventType::Added,
        ));
        events.push(next(
            EventBuilder::ip("a.default", "s1").ip_of("default", "a", "10.0.0.5", ""),
            T0 + 2,
            EventType::Added,
        ));
        events.push(next(
            EventBuilder::subnet("s1"),
            T0 + MIN,
            EventType::Deleted,
        ));
        events.push(next(
            EventBuilder::subnet("s2").deleting(T0 + MIN),
            T0 + MIN,
            EventType::Modified,
        ));
        events.push(next(
            EventBuilder::subnet("s3").deleting(T0 + MIN),
            T0 + MIN,
            EventType::Modified,
        ));
        events.push(next(
            EventBuilder::ip("a.default", "s1")
                .ip_of("default", "a", "10.0.0.5", "")
                .deleting(T0 + 2 * MIN),
            T0 + 2 * MIN,
            EventType::Modified,
        ));
        events.push(next(
            EventBuilder::subnet("s3")
                .deleting(T0 + MIN)
                .finalizers(&[]),
            T0 + 3 * MIN,
            EventType::Deleted,
        ));
        let last = rv;
        for minute in 4..=15 {
            events.extend(bookmarks(last + minute, T0 + minute * MIN));
        }
        events
    }

    /// Runs `events`, with a wall-clock tick before event `i` wherever `tick_at(i)` gives a
    /// wall time; returns every transition id and the alerts, without calling `finish`.
    fn run(
        events: &[WatchEvent],
        tick_at: impl Fn(usize) -> Option<i64>,
    ) -> (Vec<String>, Vec<Alert>) {
        let mut analyzer = Analyzer::new(AnalyzerConfig::default());
        let mut out = Vec::new();
        for (i, event) in events.iter().enumerate() {
            if let Some(wall) = tick_at(i) {
                analyzer.tick(wall, &mut out);
            }
            analyzer.step(event.clone(), &mut out);
        }
        let alerts: Vec<Alert> = out
            .into_iter()
            .filter_map(|o| match o {
                Output::Alert(a) => Some(a),
                Output::NewEpoch(_) => None,
            })
            .collect();
        (alerts.iter().map(transition_id).collect(), alerts)
    }

    #[test]
    fn two_tick_schedules_over_the_same_input_give_identical_transitions_and_ids() {
        let events = history();
        let wall = ipaudit_runtime::clock::now_ms();
        let (ids, alerts) = run(&events, |_| None);
        let rules: Vec<(&str, &str)> = alerts
            .iter()
            .map(|a| (a.rule.as_str(), a.status.as_str()))
            .collect();
        assert_eq!(
            rules,
            [
                ("subnet-deleted-before-ip", "firing"),
                ("ip-stuck-terminating", "firing"),
                ("subnet-stuck-terminating", "firing"),
            ],
            "the grace of s2 passes on the bookmarks' time alone: {alerts:?}"
        );
        // A tick before every event, with the wall clock far ahead of history, and a
        // sparse schedule whose ticks release held events by their idle delay.
        let every = run(&events, |i| Some(wall + i as i64 * 10));
        let sparse = run(&events, |i| (i % 3 == 0).then(|| wall + i as i64 * 5_000));
        for (schedule, (got_ids, got)) in [("every event", every), ("every third", sparse)] {
            assert_eq!(got_ids, ids, "ticks {schedule}");
            assert_eq!(got, alerts, "ticks {schedule}");
        }
    }

    #[test]
    fn a_catch_up_over_old_history_raises_no_alert_for_a_subnet_terminating_briefly() {
        let mut events = bookmarks(1, T0);
        events.push(EventBuilder::subnet("s").rv(2).at(T0).added());
        events.push(
            EventBuilder::subnet("s")
                .deleting(T0 + MIN)
                .rv(3)
                .at(T0 + MIN)
                .modified(),
        );
        events.extend(bookmarks(4, T0 + MIN));
        events.push(
            EventBuilder::subnet("s")
                .deleting(T0 + MIN)
                .finalizers(&[])
                .rv(5)
                .at(T0 + 2 * MIN)
                .deleted(),
        );
        events.extend(bookmarks(6, T0 + 20 * MIN));
        // Live ticks at today's wall clock, years after this history, while the buffer is
        // empty between the deletion request and the deletion.
        let wall = ipaudit_runtime::clock::now_ms();
        let (_, alerts) = run(&events, |_| Some(wall));
        assert!(alerts.is_empty(), "{alerts:?}");
    }

    #[test]
    fn bookmarks_of_a_stream_no_other_stream_passes_stay_bounded_and_move_history_late_not_early() {
        let mut analyzer = Analyzer::new(AnalyzerConfig::default());
        let mut out = Vec::new();
        // IP bookmarks only: the Subnet and Pod streams never show up to pass them.
        let n = CLOCK_MARKS as i64 * 2;
        for i in 1..=n {
            let mut b = EventBuilder::bookmark(Stream::Ip, i);
            b.observed_at_ms = Some(T0 + i * 1_000);
            analyzer.step(b, &mut out);
        }
        assert!(analyzer.clock_marks.len() <= CLOCK_MARKS);
        assert_eq!(analyzer.now_ms(), None, "nothing passed them yet");
        for e in bookmarks(n, T0 + n * 1_000) {
            analyzer.step(e, &mut out);
        }
        assert_eq!(analyzer.now_ms(), Some(T0 + n * 1_000));
        assert!(analyzer.clock_marks.is_empty());
    }

    #[test]
    fn a_bookmark_moves_history_only_once_the_events_before_it_are_released() {
        let mut analyzer = Analyzer::new(AnalyzerConfig::default());
        let mut out = Vec::new();
        for e in bookmarks(1, T0) {
            analyzer.step(e, &mut out);
        }
        analyzer.step(EventBuilder::subnet("s").rv(2).at(T0).added(), &mut out);
        // The IP stream has not passed version 2 yet: the subnet is held, and a pods
        // bookmark far later must not move history past it.
        let mut pods = EventBuilder::bookmark(Stream::Pod, 3);
        pods.observed_at_ms = Some(T0 + 30 * MIN);
        analyzer.step(pods, &mut out);
        assert_eq!(analyzer.now_ms(), Some(T0));
        for e in bookmarks(3, T0 + 30 * MIN) {
            analyzer.step(e, &mut out);
        }
        assert_eq!(analyzer.now_ms(), Some(T0 + 30 * MIN));
    }
}

#[cfg(test)]
mod checkpoint_format_tests {
    use super::*;
    use ipaudit_schemas::builders::EventBuilder;

    include!("../../tests/fixtures/checkpoint_history.rs");

    const T0: i64 = 1_750_000_000_000;
    const MIN: i64 = 60_000;

    /// What follows the fixture's history: time passes on every stream's bookmarks (rule
    /// 3's grace for s2 ends), then the stuck IP goes (rules 1 and 2 resolve).
    fn continuation() -> Vec<WatchEvent> {
        let mut events: Vec<WatchEvent> = [Stream::Pod, Stream::Ip, Stream::Subnet]
            .into_iter()
            .map(|stream| {
                let mut b = EventBuilder::bookmark(stream, 11);
                b.observed_at_ms = Some(T0 + 15 * MIN);
                b
            })
            .collect();
        events.push(
            EventBuilder::ip("a.default", "s1")
                .ip_of("default", "a", "10.0.0.5", "")
                .deleting(T0 + 2 * MIN)
                .finalizers(&[])
                .rv(12)
                .at(T0 + 16 * MIN)
                .deleted(),
        );
        events
    }

    fn run_on(analyzer: &mut Analyzer, events: Vec<WatchEvent>) -> Vec<Output> {
        let mut out = Vec::new();
        for e in events {
            analyzer.step(e, &mut out);
        }
        out
    }

    /// Restores `fixture` and checks that it continues exactly like the history it was
    /// written from, run without a break.
    fn restores_and_continues(fixture: &[u8]) {
        let mut restored = Analyzer::from_checkpoint(fixture, AnalyzerConfig::default()).unwrap();
        let mut got = run_on(&mut restored, continuation());
        restored.finish(None, &mut got);

        let mut whole = Analyzer::new(AnalyzerConfig::default());
        let before = run_on(&mut whole, fixture_history());
        assert_eq!(before.len(), 2, "rules 1 and 2 fire before the checkpoint");
        let mut expected = run_on(&mut whole, continuation());
        whole.finish(None, &mut expected);
        // The alerts these checkpoints hold were fired by a release before Alert v6, without
        // a namespace: they resolve with the labels they fired with.
        let fired_before: Vec<&str> = before
            .iter()
            .filter_map(|o| match o {
                Output::Alert(a) => Some(a.alert_id.as_str()),
                Output::NewEpoch(_) => None,
            })
            .collect();
        for output in &mut expected {
            if let Output::Alert(a) = output {
                if fired_before.contains(&a.alert_id.as_str()) {
                    a.namespace = None;
                }
            }
        }

        let rules: Vec<(&str, &str)> = got
            .iter()
            .filter_map(|o| match o {
                Output::Alert(a) => Some((a.rule.as_str(), a.status.as_str())),
                Output::NewEpoch(_) => None,
            })
            .collect();
        assert_eq!(
            rules,
            [
                ("subnet-stuck-terminating", "firing"),
                ("subnet-deleted-before-ip", "resolved"),
                ("ip-stuck-terminating", "resolved"),
            ]
        );
        assert_eq!(got, expected);
    }

    #[test]
    fn a_checkpoint_of_format_1_restores_and_continues() {
        restores_and_continues(include_bytes!("../../tests/fixtures/checkpoint-v1.json"));
    }

    #[test]
    fn an_unversioned_checkpoint_of_the_release_before_formats_restores_and_continues() {
        restores_and_continues(include_bytes!("../../tests/fixtures/checkpoint-v0.json"));
    }

    #[test]
    fn a_checkpoint_of_a_newer_format_is_refused_as_such() {
        let mut json: serde_json::Value =
            serde_json::from_slice(&Analyzer::new(AnalyzerConfig::default()).checkpoint()).unwrap();
        json["format"] = (CHECKPOINT_FORMAT + 1).into();
        let bytes = serde_json::to_vec(&json).unwrap();
        assert!(matches!(
            Analyzer::from_checkpoint(&bytes, AnalyzerConfig::default()),
            Err(CheckpointError::Newer { format }) if format == CHECKPOINT_FORMAT + 1
        ));
        assert!(matches!(
            Analyzer::from_checkpoint(b"{\"format\": 1, \"dedupe\": 7}", AnalyzerConfig::default()),
            Err(CheckpointError::Unreadable(_))
        ));
    }

    /// Writes `checkpoint-v1.json` (run by hand when a new format is introduced:
    /// `cargo test -p ipaudit-analyzer --lib write_checkpoint_fixture -- --ignored`).
    #[test]
    #[ignore = "writes the fixture of a new checkpoint format"]
    fn write_checkpoint_fixture() {
        let mut analyzer = Analyzer::new(AnalyzerConfig::default());
        run_on(&mut analyzer, fixture_history());
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/checkpoint-v1.json"
        );
        std::fs::write(path, analyzer.checkpoint()).unwrap();
    }
}
