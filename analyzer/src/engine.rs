//! The analyzer core, pure and deterministic: dedupe -> reorder -> state -> rules -> alert
//! transitions. Live analysis and offline replay drive the same `Analyzer`, so they give
//! the same answer.

use ipaudit_schemas::{Alert, Stream, WatchEvent};
use serde::{Deserialize, Serialize};

use crate::alerts::{AlertBook, Moment};
use crate::dedupe::Dedupe;
use crate::reorder::{EpochChange, Released, ReorderBuffer, ReorderConfig, ReorderStats};
use crate::rules::{self, Change, Context, Rule, RuleConfig};
use crate::state::{ClusterState, EventRef};

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

/// One cluster's analysis. It serializes whole (see [`Analyzer::snapshot`]), so that a
/// live analyzer can checkpoint it with its consumed offsets.
pub struct Analyzer {
    config: AnalyzerConfig,
    dedupe: Dedupe,
    reorder: ReorderBuffer,
    state: ClusterState,
    book: AlertBook,
    rules: Vec<Box<dyn Rule>>,
    cluster_id: String,
    last_rv: String,
    /// Event time of history as released so far: timers run on this clock, so that a
    /// grace period never expires ahead of events still held in the reorder buffer.
    history_now_ms: Option<i64>,
    stats: AnalyzerStats,
    released: Vec<Released>,
    alerts: Vec<Alert>,
}

/// The analysis as a checkpoint writes it; each rule's state under its name.
#[derive(Serialize)]
struct CheckpointRef<'a> {
    dedupe: &'a Dedupe,
    reorder: &'a ReorderBuffer,
    state: &'a ClusterState,
    book: &'a AlertBook,
    rules: Vec<(&'static str, serde_json::Value)>,
    cluster_id: &'a str,
    last_rv: &'a str,
    history_now_ms: Option<i64>,
    stats: AnalyzerStats,
}

/// The analysis as a checkpoint reads it back.
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
    stats: AnalyzerStats,
}

/// Why a checkpoint could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The bytes are not a checkpoint of this analyzer.
    #[error("unreadable analyzer checkpoint")]
    Unreadable(#[from] serde_json::Error),
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
            last_rv: String::new(),
            history_now_ms: None,
            stats: AnalyzerStats::default(),
            released: Vec::new(),
            alerts: Vec::new(),
            config,
        }
    }

    /// The whole analysis as bytes, to store with the offsets it corresponds to.
    pub fn snapshot(&self) -> Vec<u8> {
        let checkpoint = CheckpointRef {
            dedupe: &self.dedupe,
            reorder: &self.reorder,
            state: &self.state,
            book: &self.book,
            rules: self.rules.iter().map(|r| (r.name(), r.save())).collect(),
            cluster_id: &self.cluster_id,
            last_rv: &self.last_rv,
            history_now_ms: self.history_now_ms,
            stats: self.stats,
        };
        // Every field is plain data; serializing it cannot fail.
        serde_json::to_vec(&checkpoint).unwrap_or_default()
    }

    /// An analysis restored from [`Analyzer::snapshot`], running with `config`. A rule
    /// the checkpoint does not know starts fresh.
    pub fn restore(bytes: &[u8], config: AnalyzerConfig) -> Result<Self, CheckpointError> {
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
            last_rv: checkpoint.last_rv,
            history_now_ms: checkpoint.history_now_ms,
            stats: checkpoint.stats,
            released: Vec::new(),
            alerts: Vec::new(),
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

    /// The event time history has been analysed up to.
    pub fn now_ms(&self) -> Option<i64> {
        self.history_now_ms
    }

    /// Takes one event; appends what it caused.
    pub fn step(&mut self, event: WatchEvent, out: &mut Vec<Output>) {
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
        let mut released = std::mem::take(&mut self.released);
        self.reorder.push(event, &mut released);
        self.process(&mut released, out);
        self.released = released;
    }

    /// Moves event time forward (a clock tick): releases idle streams, runs timers.
    pub fn advance_time(&mut self, now_ms: i64, out: &mut Vec<Output>) {
        let mut released = std::mem::take(&mut self.released);
        self.reorder.advance_time(now_ms, &mut released);
        self.process(&mut released, out);
        self.released = released;
        if self.reorder.is_empty() {
            self.history_now_ms = Some(self.history_now_ms.map_or(now_ms, |t| t.max(now_ms)));
        }
        self.run_timers(out);
    }

    /// End of input: releases everything held and runs timers up to `now_ms` (or the latest
    /// event time seen).
    pub fn finish(&mut self, now_ms: Option<i64>, out: &mut Vec<Output>) {
        let mut released = std::mem::take(&mut self.released);
        self.reorder.flush(&mut released);
        self.process(&mut released, out);
        self.released = released;
        if let Some(now) = now_ms.or(self.reorder.now_ms()) {
            self.advance_time(now, out);
        }
    }

    fn process(&mut self, released: &mut Vec<Released>, out: &mut Vec<Output>) {
        for item in released.drain(..) {
            match item {
                Released::NewEpoch(change) => {
                    self.state.start_epoch();
                    out.push(Output::NewEpoch(change));
                }
                Released::Event(event) => self.apply(event, out),
            }
        }
    }

    fn apply(&mut self, event: WatchEvent, out: &mut Vec<Output>) {
        let event_ref = EventRef::of(&event);
        self.last_rv.clone_from(&event.resource_version);
        if let Some(t) = event_ref.time_ms {
            self.history_now_ms = Some(self.history_now_ms.map_or(t, |now| now.max(t)));
        }
        let applied = self.state.apply_at(event, event_ref.clone());
        if applied.stale {
            self.stats.stale += 1;
            return;
        }
        let at = self.moment(event_ref.time_ms);
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
                after: ctx.state.get(event_ref.stream, &event_ref.name),
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

    #[test]
    fn a_restored_snapshot_continues_exactly_like_the_original() {
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
                Analyzer::restore(&first.snapshot(), AnalyzerConfig::default()).unwrap();
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
