//! The analyzer core, pure and deterministic: dedupe -> reorder -> state -> rules -> alert
//! transitions. Live analysis and offline replay drive the same `Analyzer`, so they give
//! the same answer.

use ipaudit_schemas::{Alert, WatchEvent};
use serde::{Deserialize, Serialize};

use crate::alerts::{AlertBook, Moment};
use crate::dedupe::Dedupe;
use crate::reorder::{EpochChange, Released, ReorderBuffer, ReorderConfig, ReorderStats};
use crate::rules::{self, Context, RuleConfig, SubnetTimers};
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
    /// What the reorder buffer counted.
    pub reorder: ReorderStats,
}

/// One cluster's analysis. It serializes whole (see [`Analyzer::snapshot`]), so that a
/// live analyzer can checkpoint it with its consumed offsets.
#[derive(Serialize, Deserialize)]
pub struct Analyzer {
    #[serde(skip)]
    config: AnalyzerConfig,
    dedupe: Dedupe,
    reorder: ReorderBuffer,
    state: ClusterState,
    book: AlertBook,
    timers: SubnetTimers,
    cluster_id: String,
    last_rv: String,
    /// Event time of history as released so far: timers run on this clock, so that a
    /// grace period never expires ahead of events still held in the reorder buffer.
    history_now_ms: Option<i64>,
    stats: AnalyzerStats,
    #[serde(skip)]
    released: Vec<Released>,
    #[serde(skip)]
    alerts: Vec<Alert>,
}

/// Why a checkpoint could not be read back.
#[derive(Debug, thiserror::Error)]
#[error("unreadable analyzer checkpoint")]
pub struct CheckpointError(#[from] serde_json::Error);

impl Analyzer {
    /// A fresh analyzer with nothing seen.
    pub fn new(config: AnalyzerConfig) -> Self {
        Analyzer {
            dedupe: Dedupe::new(config.dedupe_capacity),
            reorder: ReorderBuffer::new(config.reorder),
            state: ClusterState::new(),
            book: AlertBook::new(),
            timers: SubnetTimers::new(),
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
        // Every field is plain data; serializing it cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// An analysis restored from [`Analyzer::snapshot`], running with `config`.
    pub fn restore(bytes: &[u8], config: AnalyzerConfig) -> Result<Self, CheckpointError> {
        let mut analyzer: Analyzer = serde_json::from_slice(bytes)?;
        analyzer.reorder.set_config(config.reorder);
        analyzer.config = config;
        Ok(analyzer)
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
                Released::NewEpoch(change) => out.push(Output::NewEpoch(change)),
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
        let applied = self.state.apply(event);
        if applied.stale {
            self.stats.stale += 1;
            return;
        }
        self.with_rules(event_ref.time_ms, out, |ctx, timers, config| {
            rules::on_applied(ctx, timers, config, &event_ref, &applied);
        });
        self.run_timers(out);
    }

    fn run_timers(&mut self, out: &mut Vec<Output>) {
        let Some(now) = self.history_now_ms else {
            return;
        };
        self.with_rules(Some(now), out, |ctx, timers, config| {
            timers.on_time(ctx, config, now);
        });
    }

    /// Runs rules at `time_ms` and hands on the alert transitions they made.
    fn with_rules(
        &mut self,
        time_ms: Option<i64>,
        out: &mut Vec<Output>,
        run: impl FnOnce(&mut Context<'_>, &mut SubnetTimers, &RuleConfig),
    ) {
        let at = self.moment(time_ms);
        let mut ctx = Context {
            state: &self.state,
            book: &mut self.book,
            cluster_id: &self.cluster_id,
            at,
            out: &mut self.alerts,
        };
        run(&mut ctx, &mut self.timers, &self.config.rules);
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
