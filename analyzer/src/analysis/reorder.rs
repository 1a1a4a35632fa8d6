//! The reorder buffer: releases events in resourceVersion order across streams.
//!
//! The Pod, IP and Subnet watches arrive on separate connections, so arrival order is not
//! history order. Each (collector, stream) is ordered in itself, so its latest version is a
//! watermark: everything at or below it has arrived. An event is released once every
//! stream's watermark has passed it, or once it has waited `idle_delay_ms` of event time:
//! a quiet stream then counts as caught up, so latency stays bounded, while every stream
//! still gets that long to deliver an earlier version that was in flight. Releasing an
//! event releases every earlier one too, so order holds. BOOKMARKs advance a watermark
//! without an object. A collector's streams are the ones it has shown, and with each the
//! other kinds of the same IPAM and Pods (read from the kind table): those that have not
//! shown up yet hold everything back (for at most the idle delay), so that the first
//! events of one stream are not released ahead of another that is still connecting. Pods
//! shown first wait so for some IPAM's stream (every collector watches one), whichever
//! comes.
//!
//! Events without any time (a kubectl recording of objects without timestamps, before the
//! first timestamp) count as arriving when the first time is seen, so they wait their idle
//! delay like the others instead of until the end of the input. And the buffer holds at most
//! [`MAX_HELD`] events: beyond that the earliest are released (counted as `forced`), so that
//! a stream that never shows up cannot make memory grow with the input.
//!
//! A version going backwards within a stream (an etcd restore) starts a new epoch: what is
//! pending is released, the watermarks start over, and the change is reported. Versions
//! inside a relist (`SYNC_START`..`SYNC_END`) are a snapshot in no order and never count
//! as going backwards.
//!
//! Two kinds of record sit outside a version's plain order. A `DELETED_ON_RELIST` at version
//! V says that its object went at or before V, not at V: released ahead of the events that
//! happened at V (two objects never change at one version, so the deletion was earlier).
//! A `REMEDIATION` record is the collector's account of its own action, carrying the
//! version its target had when it acted: it is handed on at once and moves no clock, so
//! that it is never taken for versions going backwards.

use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use ipaudit_schemas::{EventType, Stream, WatchEvent, KINDS};

/// The most events the buffer holds; beyond, the earliest are released at once.
pub const MAX_HELD: usize = 100_000;

/// Settings of the reorder buffer.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct ReorderConfig {
    /// After this much event time without progress, a stream no longer holds others back.
    pub idle_delay_ms: i64,
}

impl Default for ReorderConfig {
    fn default() -> Self {
        ReorderConfig {
            idle_delay_ms: 1_000,
        }
    }
}

/// Versions went backwards: history restarted (an etcd restore, or another cluster).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochChange {
    /// The new epoch number (the first is 0, so this is at least 1).
    pub epoch: u64,
    /// The collector whose stream went backwards.
    pub collector_id: String,
    /// The stream.
    pub stream: Stream,
    /// The stream's highest version before.
    pub previous_rv: i64,
    /// The version that went below it.
    pub rv: i64,
}

/// What the buffer hands on, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Released {
    /// The next event in resourceVersion order.
    Event(Box<WatchEvent>),
    /// A new epoch starts here.
    NewEpoch(EpochChange),
}

#[derive(Debug, Serialize, Deserialize)]
struct Pending {
    rv: i64,
    seq: u64,
    event: Box<WatchEvent>,
}

/// Where an event goes among those of its version: a relist's deletion, which happened at
/// or before the version, ahead of what happened at it.
fn rank(event: &WatchEvent) -> u8 {
    u8::from(event.event_type != EventType::DeletedOnRelist)
}

impl Pending {
    fn key(&self) -> (i64, u8, u64) {
        (self.rv, rank(&self.event), self.seq)
    }
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct StreamClock {
    watermark: Option<i64>,
    in_relist: bool,
    /// Highest collector sequence number seen: a lower one is a redelivery (an outbox
    /// sent again after a Kafka failure), not history going backwards.
    last_sequence: i64,
}

/// Counters of what the buffer saw.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReorderStats {
    /// Events that arrived after their version had been released (handed on at once).
    pub late: u64,
    /// Events without a numeric resourceVersion (handed on at once).
    pub unversioned: u64,
    /// Epochs started.
    pub epochs: u64,
    /// Events released before every stream passed them, because [`MAX_HELD`] were held.
    #[serde(default)]
    pub forced: u64,
}

/// An event held, as a checkpoint lists it.
#[derive(Serialize)]
struct PendingRef<'a> {
    rv: i64,
    seq: u64,
    event: &'a WatchEvent,
}

/// The held events, released lowest (version, arrival) first. Events nearly always arrive
/// in version order (one collector, or streams that keep pace): those go to the back of a
/// queue, unboxed, at no cost; only one that arrives below the queue's last version goes to
/// a heap. The lowest of the two fronts is next.
#[derive(Debug, Default)]
struct Held {
    in_order: VecDeque<(i64, u64, Box<WatchEvent>)>,
    out_of_order: BinaryHeap<Reverse<Pending>>,
}

impl Held {
    fn len(&self) -> usize {
        self.in_order.len() + self.out_of_order.len()
    }

    fn is_empty(&self) -> bool {
        self.in_order.is_empty() && self.out_of_order.is_empty()
    }

    /// (version, rank, arrival) of the next event to release, and whether it is in the
    /// queue.
    fn peek(&self) -> Option<((i64, u8, u64), bool)> {
        let queued = self
            .in_order
            .front()
            .map(|(rv, seq, event)| ((*rv, rank(event), *seq), true));
        let heaped = self.out_of_order.peek().map(|p| (p.0.key(), false));
        match (queued, heaped) {
            (Some(q), Some(h)) => Some(if h.0 < q.0 { h } else { q }),
            (q, h) => q.or(h),
        }
    }

    fn lowest_rv(&self) -> Option<i64> {
        self.peek().map(|((rv, _, _), _)| rv)
    }

    fn push(&mut self, rv: i64, seq: u64, event: Box<WatchEvent>) {
        let in_order = self
            .in_order
            .back()
            .is_none_or(|(last, _, held)| (rv, rank(&event)) >= (*last, rank(held)));
        if in_order {
            self.in_order.push_back((rv, seq, event));
        } else {
            self.out_of_order.push(Reverse(Pending { rv, seq, event }));
        }
    }

    /// The next event if its version is at most `bound`.
    fn pop_up_to(&mut self, bound: i64) -> Option<(i64, Box<WatchEvent>)> {
        let ((rv, _, _), queued) = self.peek().filter(|((rv, _, _), _)| *rv <= bound)?;
        if queued {
            self.in_order.pop_front().map(|(_, _, event)| (rv, event))
        } else {
            self.out_of_order.pop().map(|p| (rv, p.0.event))
        }
    }
}

/// Saved as one list of held events, the shape the heap of earlier releases had.
impl Serialize for Held {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let queued = self.in_order.iter().map(|(rv, seq, event)| PendingRef {
            rv: *rv,
            seq: *seq,
            event,
        });
        let heaped = self.out_of_order.iter().map(|p| PendingRef {
            rv: p.0.rv,
            seq: p.0.seq,
            event: &p.0.event,
        });
        serializer.collect_seq(queued.chain(heaped))
    }
}

impl<'de> Deserialize<'de> for Held {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut listed = Vec::<Pending>::deserialize(deserializer)?;
        listed.sort();
        let mut held = Held::default();
        for p in listed {
            held.push(p.rv, p.seq, p.event);
        }
        Ok(held)
    }
}

/// Holds events until every stream has passed them.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReorderBuffer {
    config: ReorderConfig,
    pending: Held,
    /// (arrival time, version) of held events, oldest first, to expire them.
    arrivals: VecDeque<(i64, i64)>,
    /// Versions of held events that arrived before any time was known: they arrive at
    /// the first time seen.
    #[serde(default)]
    untimed: VecDeque<i64>,
    /// Every version up to this has waited its idle delay.
    expired_up_to: Option<i64>,
    /// Per collector, one clock per stream it has (or is expected to have). Few collectors
    /// write one cluster's partition and each watches a handful of kinds, so lists beat
    /// maps keyed by allocated strings.
    clocks: Vec<(String, Vec<(Stream, StreamClock)>)>,
    released_up_to: Option<i64>,
    /// The input is merged in version order and has passed this version on every stream
    /// (a replay of kubectl recordings, which have no bookmarks to say so).
    #[serde(default)]
    passed_by_input: Option<i64>,
    now_ms: Option<i64>,
    next_seq: u64,
    epoch: u64,
    stats: ReorderStats,
}

impl ReorderBuffer {
    /// An empty buffer.
    pub fn new(config: ReorderConfig) -> Self {
        ReorderBuffer {
            config,
            pending: Held::default(),
            arrivals: VecDeque::new(),
            untimed: VecDeque::new(),
            expired_up_to: None,
            clocks: Vec::new(),
            released_up_to: None,
            passed_by_input: None,
            now_ms: None,
            next_seq: 0,
            epoch: 0,
            stats: ReorderStats::default(),
        }
    }

    /// Replaces the settings (after a restore).
    pub fn set_config(&mut self, config: ReorderConfig) {
        self.config = config;
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The latest event time seen, or set.
    pub fn now_ms(&self) -> Option<i64> {
        self.now_ms
    }

    /// Events held.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The lowest version held, if any.
    pub fn lowest_held_rv(&self) -> Option<i64> {
        self.pending.lowest_rv()
    }

    /// The highest version history has certainly passed: every stream has passed it, an
    /// event at or above it has waited its idle delay, or it was released.
    pub fn passed_up_to(&self) -> Option<i64> {
        // A stream with no version yet has passed nothing.
        let passed_by_all = self
            .clocks
            .iter()
            .flat_map(|(_, clocks)| clocks.iter())
            .map(|(_, clock)| clock.watermark)
            .try_fold(None, |low: Option<i64>, w| {
                w.map(|w| Some(low.map_or(w, |l| l.min(w))))
            })
            .flatten();
        [
            passed_by_all,
            self.expired_up_to,
            self.released_up_to,
            self.passed_by_input,
        ]
        .into_iter()
        .flatten()
        .max()
    }

    /// What the buffer counted.
    pub fn stats(&self) -> ReorderStats {
        self.stats
    }

    /// Takes one event; returns what can be released now, in order.
    pub fn push(&mut self, event: impl Into<Box<WatchEvent>>, out: &mut Vec<Released>) {
        let event: Box<WatchEvent> = event.into();
        if event.event_type == EventType::Remediation {
            out.push(Released::Event(event));
            return;
        }
        if let Some(t) = event.event_time_ms() {
            self.now_ms = Some(self.now_ms.map_or(t, |now| now.max(t)));
        }
        let Some(rv) = event.resource_version_num else {
            self.stats.unversioned += 1;
            out.push(Released::Event(event));
            return;
        };
        let now = self.now_ms;
        let index = match self
            .clocks
            .iter()
            .position(|(c, _)| *c == event.collector_id)
        {
            Some(index) => index,
            None => {
                self.clocks.push((event.collector_id.clone(), Vec::new()));
                self.clocks.len() - 1
            }
        };
        let streams = &mut self.clocks[index].1;
        let slot = match streams.iter().position(|(s, _)| *s == event.stream) {
            Some(slot) => slot,
            None => expect_streams_with(streams, event.stream),
        };
        let clock = &mut streams[slot].1;
        match event.event_type {
            EventType::SyncStart => clock.in_relist = true,
            EventType::SyncEnd => clock.in_relist = false,
            _ => {}
        }
        let in_relist = clock.in_relist || event.event_type == EventType::SyncEnd;
        let redelivered = event.sequence > 0 && event.sequence <= clock.last_sequence;
        clock.last_sequence = clock.last_sequence.max(event.sequence);
        if let Some(previous) = clock
            .watermark
            .filter(|w| rv < *w && !in_relist && !redelivered)
        {
            self.start_epoch(&event, previous, rv, out);
        }
        let clock = &mut self.clocks[index].1[slot].1;
        if clock.watermark.is_none_or(|w| rv > w) {
            clock.watermark = Some(rv);
        }
        if event.event_type == EventType::Bookmark {
            self.release_ready(out);
            return;
        }
        if self.released_up_to.is_some_and(|f| rv <= f) {
            if !in_relist {
                self.stats.late += 1;
            }
            out.push(Released::Event(event));
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        match now {
            Some(now) => {
                // Whatever waited for a first time arrived now.
                while let Some(rv) = self.untimed.pop_back() {
                    self.arrivals.push_front((now, rv));
                }
                self.arrivals.push_back((now, rv));
            }
            None => self.untimed.push_back(rv),
        }
        self.pending.push(rv, seq, event);
        self.release_ready(out);
        if self.pending.len() > MAX_HELD {
            let bound = self.pending.lowest_rv().unwrap_or(i64::MIN);
            let before = out.len();
            self.release_up_to(bound, out);
            self.stats.forced += (out.len() - before) as u64;
        }
        self.forget_released_arrivals();
    }

    /// Arrival notes of events released already (by their watermarks) serve nothing: they
    /// are dropped once they outnumber the events held, so that they stay bounded.
    fn forget_released_arrivals(&mut self) {
        let limit = self.pending.len() * 2 + 1_024;
        if self.arrivals.len() + self.untimed.len() <= limit {
            return;
        }
        let Some(released) = self.released_up_to else {
            return;
        };
        self.arrivals.retain(|(_, rv)| *rv > released);
        self.untimed.retain(|rv| *rv > released);
    }

    /// Nothing at or below `rv` is still to come, on any stream: the input is merged in
    /// version order (a replay of kubectl recordings, whose quiet streams have no bookmarks
    /// to say that they passed). Releases what is held up to it, at once.
    pub fn pass(&mut self, rv: i64, out: &mut Vec<Released>) {
        if self.passed_by_input.is_some_and(|p| p >= rv) {
            return;
        }
        self.passed_by_input = Some(rv);
        self.release_up_to(rv, out);
    }

    /// The input is no longer merged in version order (it went backwards): what
    /// [`ReorderBuffer::pass`] said no longer bounds what may come, so it stops counting.
    pub fn input_unordered(&mut self) {
        self.passed_by_input = None;
    }

    /// A live clock tick, while every message of the partition has been read: releases
    /// what has waited its idle delay by `wall_ms`.
    ///
    /// The wall clock only releases; it never becomes the arrival time of events taken in
    /// later, which stays event time. So what a restarted analyzer reads again (at a
    /// later wall time, with no tick in between while it catches up) is held and released
    /// exactly as it was the first time.
    pub fn advance_time(&mut self, wall_ms: i64, out: &mut Vec<Released>) {
        while let Some(rv) = self.untimed.pop_back() {
            self.arrivals.push_front((wall_ms, rv));
        }
        let now = self.now_ms.map_or(wall_ms, |now| now.max(wall_ms));
        let bound = self.safe_bound_at(Some(now));
        self.release_up_to(bound, out);
    }

    /// Releases everything held, in order (end of input).
    pub fn flush(&mut self, out: &mut Vec<Released>) {
        self.release_up_to(i64::MAX, out);
    }

    fn start_epoch(
        &mut self,
        event: &WatchEvent,
        previous_rv: i64,
        rv: i64,
        out: &mut Vec<Released>,
    ) {
        self.flush(out);
        self.epoch += 1;
        self.stats.epochs += 1;
        for (_, clock) in self.clocks.iter_mut().flat_map(|(_, c)| c.iter_mut()) {
            clock.watermark = None;
        }
        self.arrivals.clear();
        self.untimed.clear();
        self.expired_up_to = None;
        self.released_up_to = None;
        self.passed_by_input = None;
        out.push(Released::NewEpoch(EpochChange {
            epoch: self.epoch,
            collector_id: event.collector_id.clone(),
            stream: event.stream,
            previous_rv,
            rv,
        }));
    }

    /// The highest version that may be released: every stream has passed it, or an event
    /// at or above it has waited long enough. A stream with no version yet holds
    /// everything back until then.
    fn safe_bound(&mut self) -> i64 {
        self.safe_bound_at(self.now_ms)
    }

    /// [`ReorderBuffer::safe_bound`] with the idle delays measured up to `now`.
    fn safe_bound_at(&mut self, now: Option<i64>) -> i64 {
        if let Some(now) = now {
            let delay = self.config.idle_delay_ms;
            while let Some(&(arrived, rv)) = self.arrivals.front() {
                if now.saturating_sub(arrived) <= delay {
                    break;
                }
                self.arrivals.pop_front();
                self.expired_up_to = Some(self.expired_up_to.map_or(rv, |e| e.max(rv)));
            }
        }
        let passed_by_all = self
            .clocks
            .iter()
            .flat_map(|(_, clocks)| clocks.iter())
            .map(|(_, clock)| clock.watermark.unwrap_or(i64::MIN))
            .min()
            .unwrap_or(i64::MAX);
        passed_by_all
            .max(self.expired_up_to.unwrap_or(i64::MIN))
            .max(self.passed_by_input.unwrap_or(i64::MIN))
    }

    fn release_ready(&mut self, out: &mut Vec<Released>) {
        let bound = self.safe_bound();
        self.release_up_to(bound, out);
    }

    fn release_up_to(&mut self, bound: i64, out: &mut Vec<Released>) {
        while let Some((rv, event)) = self.pending.pop_up_to(bound) {
            self.released_up_to = Some(self.released_up_to.map_or(rv, |f| f.max(rv)));
            out.push(Released::Event(event));
        }
    }
}

/// The clock of an IPAM stream expected but not yet shown, when a collector's Pods come
/// first (no event of this kind ever reaches the buffer: the analysis skips them before).
const AN_IPAM_STREAM: Stream = Stream::Unknown;

/// A collector showed `stream` for the first time: adds its clock, and clocks for the
/// streams expected with it (the other kinds of its IPAM in its API group, Pods, which
/// every IPAM reads, and Nodes for the IPAMs that read them; for Pods and Nodes, some
/// IPAM's stream); returns the index of `stream`'s clock.
fn expect_streams_with(streams: &mut Vec<(Stream, StreamClock)>, stream: Stream) -> usize {
    let ipam = stream.spec().and_then(|k| k.ipam);
    if ipam.is_some() {
        // The IPAM stream the Pods were waiting for: its own kinds are expected now.
        streams.retain(|(s, _)| *s != AN_IPAM_STREAM);
    }
    // Pods shown first: every collector also watches some IPAM's kinds, not yet shown
    // (a placeholder clock until one is), so the Pods' versions, a relist's above all,
    // are not released ahead of an IPAM stream still connecting.
    let an_ipam_stream = (ipam.is_none()
        && !streams
            .iter()
            .any(|(s, _)| s.spec().and_then(|k| k.ipam).is_some()))
    .then_some(AN_IPAM_STREAM);
    // An IPAM's kinds of the same API group (a Calico cluster serves one of its two),
    // Pods, and the kinds read by that IPAM (Nodes, for Calico and Cilium).
    let group = stream.spec().map_or("", |k| k.group);
    let expected = KINDS
        .iter()
        .filter(|k| {
            let Some(ipam) = ipam else {
                return false;
            };
            (k.ipam == Some(ipam) && k.group == group)
                || (k.ipam.is_none() && (k.read_by.is_empty() || k.read_by.contains(&ipam)))
        })
        .map(|k| k.stream)
        .chain(std::iter::once(stream))
        .chain(an_ipam_stream);
    for expected in expected {
        if !streams.iter().any(|(s, _)| *s == expected) {
            streams.push((expected, StreamClock::default()));
        }
    }
    streams
        .iter()
        .position(|(s, _)| *s == stream)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_schemas::builders::EventBuilder;
    use proptest::prelude::*;

    fn versions(released: &[Released]) -> Vec<i64> {
        released
            .iter()
            .filter_map(|r| match r {
                Released::Event(e) => e.resource_version_num,
                Released::NewEpoch(_) => None,
            })
            .collect()
    }

    fn ip(rv: i64) -> WatchEvent {
        EventBuilder::ip(&format!("ip-{rv}"), "s").rv(rv).added()
    }

    fn subnet(rv: i64) -> WatchEvent {
        EventBuilder::subnet(&format!("s-{rv}")).rv(rv).added()
    }

    fn pods_bookmark(rv: i64) -> WatchEvent {
        EventBuilder::bookmark(Stream::Pod, rv)
    }

    #[test]
    fn an_event_waits_until_every_stream_has_passed_it() {
        let mut buffer = ReorderBuffer::new(ReorderConfig::default());
        let mut out = Vec::new();
        buffer.push(pods_bookmark(1_000), &mut out);
        buffer.push(ip(10), &mut out);
        assert!(out.is_empty(), "the subnet stream has not shown up yet");
        buffer.push(subnet(12), &mut out);
        assert_eq!(versions(&out), [10]);
        buffer.push(ip(14), &mut out);
        assert_eq!(
            versions(&out),
            [10, 12],
            "14 waits for the subnet stream to pass it"
        );
        buffer.push(subnet(13), &mut out);
        assert_eq!(versions(&out), [10, 12, 13]);
        buffer.push(EventBuilder::bookmark(Stream::Subnet, 20), &mut out);
        assert_eq!(versions(&out), [10, 12, 13, 14], "a bookmark passes it");
    }

    #[test]
    fn pods_shown_first_wait_for_an_ipam_stream_even_through_a_pod_relist() {
        let mut buffer = ReorderBuffer::new(ReorderConfig::default());
        let mut out = Vec::new();
        buffer.push(EventBuilder::pod("ns", "p").rv(2).at(0).added(), &mut out);
        buffer.push(
            EventBuilder::marker(Stream::Pod, EventType::SyncStart, 8),
            &mut out,
        );
        buffer.push(
            EventBuilder::marker(Stream::Pod, EventType::SyncEnd, 8),
            &mut out,
        );
        assert!(out.is_empty(), "no IPAM stream has shown up yet: {out:?}");
        buffer.push(subnet(1), &mut out);
        buffer.push(subnet(8), &mut out);
        assert!(
            out.is_empty(),
            "the IP stream has not shown up yet: {out:?}"
        );
        buffer.push(ip(3), &mut out);
        assert_eq!(versions(&out), [1, 2, 3], "8 waits for the IP stream");
        buffer.push(EventBuilder::bookmark(Stream::Ip, 9), &mut out);
        assert_eq!(versions(&out), [1, 2, 3, 8, 8, 8]);
    }

    #[test]
    fn input_in_version_order_releases_without_waiting_for_quiet_streams() {
        let mut buffer = ReorderBuffer::new(ReorderConfig::default());
        let mut out = Vec::new();
        buffer.push(subnet(1), &mut out);
        for rv in [2, 3, 5] {
            buffer.push(ip(rv), &mut out);
        }
        assert!(out.is_empty(), "the pod stream has not shown up");
        buffer.pass(3, &mut out);
        assert_eq!(versions(&out), [1, 2, 3], "5 may still have a peer at 4");
        buffer.pass(2, &mut out);
        assert_eq!(versions(&out), [1, 2, 3], "passing goes one way");
        assert_eq!(buffer.passed_up_to(), Some(3));
        buffer.pass(5, &mut out);
        assert_eq!(versions(&out), [1, 2, 3, 5]);
        assert!(buffer.is_empty());
        // History restarts: what was passed before counts no more.
        buffer.push(subnet(7), &mut out);
        buffer.push(subnet(4), &mut out);
        buffer.push(ip(6), &mut out);
        assert_eq!(buffer.stats().epochs, 1);
        assert_eq!(buffer.len(), 2, "4 and 6 wait for the pods again: {out:?}");
    }

    #[test]
    fn arrival_order_does_not_matter_only_versions_do() {
        let mut buffer = ReorderBuffer::new(ReorderConfig::default());
        let mut out = Vec::new();
        buffer.push(ip(1), &mut out);
        buffer.push(subnet(2), &mut out);
        buffer.push(pods_bookmark(1_000), &mut out);
        for e in [ip(5), ip(7), subnet(3), subnet(6), subnet(9), ip(8)] {
            buffer.push(e, &mut out);
        }
        buffer.flush(&mut out);
        assert_eq!(versions(&out), [1, 2, 3, 5, 6, 7, 8, 9]);
    }

    #[test]
    fn an_event_waits_at_most_the_idle_delay_for_a_quiet_stream() {
        let mut buffer = ReorderBuffer::new(ReorderConfig {
            idle_delay_ms: 1_000,
        });
        let mut out = Vec::new();
        buffer.push(EventBuilder::subnet("s").rv(1).at(0).added(), &mut out);
        assert!(out.is_empty(), "the other streams have not shown up yet");
        buffer.advance_time(1_000, &mut out);
        assert!(out.is_empty(), "not yet: waited exactly the delay");
        buffer.advance_time(1_001, &mut out);
        assert_eq!(versions(&out), [1]);
        buffer.push(EventBuilder::ip("a", "s").rv(3).at(5_000).added(), &mut out);
        buffer.push(
            EventBuilder::subnet("s").rv(4).at(5_001).modified(),
            &mut out,
        );
        assert_eq!(versions(&out), [1], "the pod stream is quiet: 3 waits");
        // An earlier version in flight on the quiet stream still makes it in time.
        buffer.push(
            EventBuilder::pod("ns", "p").rv(2).at(5_500).added(),
            &mut out,
        );
        assert_eq!(versions(&out), [1, 2]);
        buffer.advance_time(6_002, &mut out);
        assert_eq!(versions(&out), [1, 2, 3, 4]);
    }

    #[test]
    fn after_a_wall_clock_tick_an_event_still_waits_its_idle_delay_in_event_time() {
        let mut buffer = ReorderBuffer::new(ReorderConfig {
            idle_delay_ms: 1_000,
        });
        let mut out = Vec::new();
        buffer.push(EventBuilder::subnet("s").rv(1).at(0).added(), &mut out);
        // A tick far ahead of history (the analyzer's clock, not the collector's).
        buffer.advance_time(50_000, &mut out);
        assert_eq!(versions(&out), [1]);
        buffer.push(EventBuilder::ip("a", "s").rv(3).at(1_000).added(), &mut out);
        assert_eq!(versions(&out), [1], "the pod stream is quiet: 3 waits");
        // 1.5 s of history later, 3 has waited its delay: it goes, as it would have in a
        // catch-up with no tick at all (which is how a restarted analyzer reads it again).
        buffer.push(
            EventBuilder::subnet("s").rv(5).at(2_500).modified(),
            &mut out,
        );
        assert_eq!(versions(&out), [1, 3]);
    }

    #[test]
    fn a_long_quiet_stream_does_not_make_a_burst_skip_the_delay() {
        let mut buffer = ReorderBuffer::new(ReorderConfig {
            idle_delay_ms: 1_000,
        });
        let mut out = Vec::new();
        for stream in [Stream::Pod, Stream::Ip, Stream::Subnet] {
            let mut b = EventBuilder::bookmark(stream, 10);
            b.observed_at_ms = Some(0);
            buffer.push(b, &mut out);
        }
        // Minutes of silence, then a burst whose subnet event arrives last.
        buffer.push(
            EventBuilder::ip("a", "s").rv(12).at(600_000).deleted(),
            &mut out,
        );
        buffer.push(
            EventBuilder::pod("ns", "p").rv(13).at(600_001).deleted(),
            &mut out,
        );
        buffer.push(
            EventBuilder::subnet("s").rv(11).at(600_020).deleted(),
            &mut out,
        );
        buffer.flush(&mut out);
        assert_eq!(versions(&out), [11, 12, 13]);
    }

    #[test]
    fn versions_going_backwards_start_a_new_epoch() {
        let mut buffer = ReorderBuffer::new(ReorderConfig::default());
        let mut out = Vec::new();
        buffer.push(ip(100), &mut out);
        buffer.push(ip(101), &mut out);
        buffer.push(ip(7), &mut out);
        buffer.flush(&mut out);
        assert_eq!(buffer.epoch(), 1);
        assert!(out.iter().any(|r| matches!(
            r,
            Released::NewEpoch(EpochChange {
                epoch: 1,
                previous_rv: 101,
                rv: 7,
                ..
            })
        )));
        assert_eq!(versions(&out), [100, 101, 7]);
    }

    #[test]
    fn a_relist_snapshot_in_any_order_is_not_a_new_epoch() {
        let mut buffer = ReorderBuffer::new(ReorderConfig::default());
        let mut out = Vec::new();
        buffer.push(pods_bookmark(1_000), &mut out);
        buffer.push(EventBuilder::bookmark(Stream::Subnet, 1_000), &mut out);
        buffer.push(ip(50), &mut out);
        buffer.push(
            EventBuilder::marker(Stream::Ip, EventType::SyncStart, 50),
            &mut out,
        );
        buffer.push(ip(40), &mut out);
        buffer.push(ip(60), &mut out);
        buffer.push(ip(30), &mut out);
        buffer.push(
            EventBuilder::marker(Stream::Ip, EventType::SyncEnd, 70),
            &mut out,
        );
        assert_eq!(buffer.epoch(), 0);
        assert_eq!(buffer.stats().late, 0);
    }

    #[test]
    fn a_remediation_record_at_an_older_version_passes_at_once_and_is_not_a_new_epoch() {
        let mut buffer = ReorderBuffer::new(ReorderConfig::default());
        let mut out = Vec::new();
        buffer.push(pods_bookmark(1_000), &mut out);
        buffer.push(EventBuilder::bookmark(Stream::Subnet, 1_000), &mut out);
        let mut modified = ip(230);
        modified.sequence = 1;
        let mut deleted = EventBuilder::ip("ip-230", "s").rv(231).deleted();
        deleted.sequence = 2;
        buffer.push(modified, &mut out);
        buffer.push(deleted, &mut out);
        assert_eq!(versions(&out), [230, 231]);
        // The collector's record of the cleanup it applied: the version read before its
        // patch, outside the IP watch's sequence.
        let record = EventBuilder::marker(Stream::Ip, EventType::Remediation, 230);
        buffer.push(record, &mut out);
        assert_eq!(versions(&out), [230, 231, 230], "handed on at once");
        buffer.push(EventBuilder::ip("ip-232", "s").rv(232).added(), &mut out);
        buffer.flush(&mut out);
        assert_eq!(buffer.epoch(), 0);
        assert_eq!(buffer.stats(), ReorderStats::default());
        assert!(!out.iter().any(|r| matches!(r, Released::NewEpoch(_))));
    }

    #[test]
    fn a_relist_deletion_goes_ahead_of_a_real_event_at_its_version() {
        let mut buffer = ReorderBuffer::new(ReorderConfig::default());
        let mut out = Vec::new();
        buffer.push(pods_bookmark(1_000), &mut out);
        // The subnet's real deletion at 1524 comes first; the IP stream's relist, listed
        // at 1524, finds the IP gone: it went at or before 1524, so before the subnet.
        buffer.push(EventBuilder::subnet("s").rv(1_524).deleted(), &mut out);
        buffer.push(
            EventBuilder::marker(Stream::Ip, EventType::SyncStart, 1_500),
            &mut out,
        );
        buffer.push(
            EventBuilder::ip("gone", "s")
                .rv(1_524)
                .build(EventType::DeletedOnRelist),
            &mut out,
        );
        buffer.push(
            EventBuilder::marker(Stream::Ip, EventType::SyncEnd, 1_524),
            &mut out,
        );
        buffer.flush(&mut out);
        let order: Vec<(Stream, EventType)> = out
            .iter()
            .filter_map(|r| match r {
                Released::Event(e) => Some((e.stream, e.event_type)),
                Released::NewEpoch(_) => None,
            })
            .collect();
        assert_eq!(
            order,
            [
                (Stream::Ip, EventType::SyncStart),
                (Stream::Ip, EventType::DeletedOnRelist),
                (Stream::Subnet, EventType::Deleted),
                (Stream::Ip, EventType::SyncEnd),
            ]
        );
    }

    #[test]
    fn an_event_sent_again_after_later_ones_is_late_not_a_new_epoch() {
        let mut buffer = ReorderBuffer::new(ReorderConfig::default());
        let mut out = Vec::new();
        let with_seq = |rv: i64, seq: i64| {
            let mut e = ip(rv);
            e.sequence = seq;
            e
        };
        buffer.push(with_seq(10, 1), &mut out);
        buffer.push(with_seq(12, 3), &mut out);
        buffer.push(with_seq(11, 2), &mut out);
        buffer.flush(&mut out);
        assert_eq!(buffer.epoch(), 0);
        assert_eq!(versions(&out), [10, 11, 12], "held and put back in order");
        buffer.push(with_seq(5, 4), &mut out);
        assert_eq!(buffer.epoch(), 1, "a new sequence going back is a restore");
    }

    #[test]
    fn two_collectors_interleaving_one_stream_are_not_an_epoch() {
        let mut buffer = ReorderBuffer::new(ReorderConfig::default());
        let mut out = Vec::new();
        buffer.push(
            EventBuilder::ip("a", "s").rv(10).collector("c1").added(),
            &mut out,
        );
        buffer.push(
            EventBuilder::ip("b", "s").rv(5).collector("c2").added(),
            &mut out,
        );
        assert_eq!(buffer.epoch(), 0);
    }

    #[test]
    fn events_without_time_wait_the_idle_delay_from_the_first_time_seen() {
        let mut buffer = ReorderBuffer::new(ReorderConfig {
            idle_delay_ms: 1_000,
        });
        let mut out = Vec::new();
        // No time anywhere, and the pod and subnet streams never show up.
        for rv in 1..=3 {
            buffer.push(ip(rv), &mut out);
        }
        assert!(out.is_empty());
        buffer.push(
            EventBuilder::ip("t", "s").rv(4).at(10_000).added(),
            &mut out,
        );
        assert!(out.is_empty(), "they arrived at the first time seen");
        buffer.push(
            EventBuilder::ip("u", "s").rv(5).at(11_001).added(),
            &mut out,
        );
        assert_eq!(versions(&out), [1, 2, 3, 4], "released by the idle delay");
    }

    #[test]
    fn a_stream_that_never_shows_up_holds_at_most_max_held_events() {
        let mut buffer = ReorderBuffer::new(ReorderConfig::default());
        let mut out = Vec::new();
        let n = MAX_HELD as i64 + 10;
        for rv in 1..=n {
            buffer.push(ip(rv), &mut out);
            out.clear();
        }
        assert_eq!(buffer.len(), MAX_HELD);
        assert_eq!(buffer.stats().forced, 10);
        assert!(buffer.arrivals.len() + buffer.untimed.len() <= 2 * MAX_HELD + 1_024);
    }

    /// Per-stream ordered histories, interleaved in any way.
    fn interleavings() -> impl Strategy<Value = Vec<WatchEvent>> {
        (
            proptest::collection::vec(any::<bool>(), 1..120),
            any::<u64>(),
        )
            .prop_map(|(streams, seed)| {
                let mut ips = Vec::new();
                let mut subnets = Vec::new();
                for (i, is_ip) in streams.iter().enumerate() {
                    let rv = i as i64 + 1;
                    if *is_ip {
                        ips.push(ip(rv))
                    } else {
                        subnets.push(subnet(rv))
                    }
                }
                let mut merged = Vec::new();
                let (mut a, mut b) = (ips.into_iter().peekable(), subnets.into_iter().peekable());
                let mut bits = seed;
                while a.peek().is_some() || b.peek().is_some() {
                    let take_a = b.peek().is_none() || (a.peek().is_some() && bits & 1 == 1);
                    bits = bits.rotate_right(1) ^ 0x9E37_79B9_7F4A_7C15;
                    merged.push(if take_a { a.next() } else { b.next() }.expect("peeked"));
                }
                merged
            })
    }

    #[test]
    fn held_events_in_and_out_of_order_leave_lowest_first_and_survive_a_checkpoint() {
        let mut held = Held::default();
        for (seq, rv) in [5, 9, 7, 12, 6, 12, 3].into_iter().enumerate() {
            held.push(rv, seq as u64, Box::new(ip(rv)));
        }
        assert_eq!(held.in_order.len(), 4, "5, 9, 12, 12 came in order");
        let json = serde_json::to_value(&held).unwrap();
        assert_eq!(json.as_array().map(Vec::len), Some(7));
        let mut back: Held = serde_json::from_value(json).unwrap();
        let drain = |held: &mut Held| {
            std::iter::from_fn(|| held.pop_up_to(i64::MAX).map(|(rv, _)| rv)).collect::<Vec<_>>()
        };
        assert_eq!(held.pop_up_to(4).map(|(rv, _)| rv), Some(3));
        assert!(held.pop_up_to(4).is_none());
        assert_eq!(drain(&mut held), [5, 6, 7, 9, 12, 12]);
        assert_eq!(drain(&mut back), [3, 5, 6, 7, 9, 12, 12]);
        assert!(back.is_empty());
    }

    proptest! {
        #[test]
        fn every_release_is_in_version_order_and_nothing_is_lost(events in interleavings()) {
            let mut buffer = ReorderBuffer::new(ReorderConfig { idle_delay_ms: i64::MAX });
            let mut out = Vec::new();
            let n = events.len();
            for e in events {
                buffer.push(e, &mut out);
            }
            buffer.flush(&mut out);
            let released = versions(&out);
            prop_assert_eq!(released.len(), n);
            prop_assert!(released.windows(2).all(|w| w[0] < w[1]), "{:?}", released);
            prop_assert_eq!(buffer.stats().late, 0);
        }
    }
}
