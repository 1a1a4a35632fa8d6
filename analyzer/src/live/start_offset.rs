//! Where an analyzer without local state for a partition starts: at a complete snapshot in
//! the topic. Collectors frame every relist with `SYNC_START`..`SYNC_END` (on start, on 410
//! and every `--snapshot-interval`); starting where the frames of every stream of every
//! collector begin gives the whole cluster state without reading the topic from the start.
//!
//! Which snapshot: when the group consumed the partition before (its committed offset, the
//! one of the last checkpoint of whichever member owned it), the latest snapshot that
//! begins at or before that offset, so that nothing after it is skipped (what is read
//! twice makes the same transitions, dropped by id), or at or before the rebuild point
//! committed with it, when alerts of the partition still fire, so that they fire again
//! under their ids (see [`crate::live::rebuild_points`]); only a group that never consumed
//! the partition starts at its latest snapshot. The partition is scanned backwards from
//! that bound in growing windows.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ipaudit_schemas::{decode, EventType, Stream, WatchEvent};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

/// Where an assigned partition starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At the offset checkpointed with this instance's state for it.
    Checkpoint(i64),
    /// At the offset of its previous owner's handover, whose analysis it resumes
    /// ([`crate::live::handover`]).
    Handover(i64),
    /// At its latest snapshot: no state here.
    Snapshot(i64),
    /// At its beginning: no state here and no snapshot wanted (or found).
    Beginning,
}

/// Who wrote an event: its cluster and its collector. Collector ids are unique within a
/// cluster only (a pod name, a fixed `--collector-id`), and a partition holds several
/// clusters.
type Writer = (String, String);

fn writer_of(event: &WatchEvent) -> Writer {
    (event.cluster_id.clone(), event.collector_id.clone())
}

/// Offsets of the relist frames seen in a window, per (writer, stream).
#[derive(Debug, Default)]
struct Frames {
    /// Offset of the last SYNC_START that has its SYNC_END after it.
    complete: HashMap<(Writer, Stream), i64>,
    /// Offset of the first such SYNC_START.
    first_complete: HashMap<(Writer, Stream), i64>,
    open: HashMap<(Writer, Stream), i64>,
    /// The streams each writer announced with a frame: the kinds it watches.
    announced: HashMap<Writer, Vec<Stream>>,
}

impl Frames {
    /// Takes the event at `offset`; a frame that begins after `bound` is not a candidate.
    fn see_bounded(&mut self, offset: i64, event: &WatchEvent, bound: i64) {
        if event.event_type == EventType::SyncStart && offset > bound {
            return;
        }
        self.see(offset, event);
    }

    fn see(&mut self, offset: i64, event: &WatchEvent) {
        if matches!(event.event_type, EventType::SyncStart | EventType::SyncEnd) {
            let streams = self.announced.entry(writer_of(event)).or_default();
            if !streams.contains(&event.stream) {
                streams.push(event.stream);
            }
        }
        let key = (writer_of(event), event.stream);
        match event.event_type {
            EventType::SyncStart => {
                self.open.insert(key, offset);
            }
            EventType::SyncEnd => {
                if let Some(start) = self.open.remove(&key) {
                    self.first_complete.entry(key.clone()).or_insert(start);
                    self.complete.insert(key, start);
                }
            }
            _ => {}
        }
    }

    /// Where the latest snapshot of every collector begins, if every stream each
    /// collector seen announced has a complete frame.
    fn start(&self, collectors: &[Writer]) -> Option<i64> {
        Self::earliest_of(&self.complete, &self.announced, collectors)
    }

    /// Where the first snapshot of every collector begins, on the same condition.
    fn first_start(&self, collectors: &[Writer]) -> Option<i64> {
        Self::earliest_of(&self.first_complete, &self.announced, collectors)
    }

    /// The earliest of one frame per announced stream of each collector, if each has one.
    fn earliest_of(
        frames: &HashMap<(Writer, Stream), i64>,
        announced: &HashMap<Writer, Vec<Stream>>,
        collectors: &[Writer],
    ) -> Option<i64> {
        let mut start = i64::MAX;
        for collector in collectors {
            for stream in announced.get(collector)? {
                start = start.min(*frames.get(&(collector.clone(), *stream))?);
            }
        }
        (start != i64::MAX).then_some(start)
    }
}

/// What the group committed for a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committed {
    /// The next offset to consume.
    pub next: i64,
    /// Where a new owner rebuilds from so that the alerts still firing fire again, when
    /// some did (see [`crate::live::rebuild_points`]).
    pub rebuild_from: Option<i64>,
}

impl Committed {
    /// The rebuild point that bounds a rebuild's snapshot: one before the committed offset
    /// that the log still holds (else what the point rests on is gone, and the committed
    /// offset is as good as any).
    pub fn bounding_point(&self, log_start: i64) -> Option<i64> {
        self.rebuild_from
            .filter(|point| (log_start..self.next).contains(point))
    }

    /// The offset a rebuild's snapshot must begin at or before: the bounding rebuild
    /// point, else the committed offset.
    pub fn snapshot_bound(&self, log_start: i64) -> i64 {
        self.bounding_point(log_start).unwrap_or(self.next)
    }
}

/// What `group` committed for `partition` of `topic`, or `None` when the group never
/// committed anything: it never consumed the partition.
pub fn committed_offset(
    connection: &ipaudit_runtime::kafka::Connection,
    topic: &str,
    group: &str,
    partition: i32,
) -> Result<Option<Committed>, KafkaError> {
    // A consumer of the group that never subscribes: it reads the group's offsets without
    // joining it (and so without a rebalance).
    let consumer: BaseConsumer = connection.reader(crate::live::CLIENT_ID, group).create()?;
    let mut list = TopicPartitionList::new();
    list.add_partition(topic, partition);
    let committed = consumer.committed_offsets(list, Duration::from_secs(10))?;
    Ok(committed
        .find_partition(topic, partition)
        .and_then(|p| match p.offset() {
            Offset::Offset(next) if next >= 0 => Some(Committed {
                next,
                rebuild_from: crate::live::rebuild_points::from_metadata(p.metadata()),
            }),
            _ => None,
        }))
}

/// The offset to start partition `partition` of `topic` at: the beginning of the latest
/// complete snapshot that begins at or before what the group committed
/// ([`Committed::snapshot_bound`]; any, when it committed nothing), or the start of the
/// partition when there is none; and the rebuild point that bounded it, if one did.
pub fn snapshot_offset_at_or_before(
    connection: &ipaudit_runtime::kafka::Connection,
    topic: &str,
    partition: i32,
    committed: Option<Committed>,
) -> Result<(i64, Option<i64>), KafkaError> {
    let (consumer, low, high) = scan_reader(connection, topic, partition)?;
    let point = committed.and_then(|c| c.bounding_point(low));
    let bound = committed.map_or(high, |c| c.snapshot_bound(low).clamp(low, high));
    let mut window = 10_000i64;
    loop {
        let from = (bound - window).max(low);
        let (frames, collectors) = read_frames(&consumer, topic, partition, from..high, bound)?;
        if let Some(start) = frames.start(&collectors) {
            return Ok((start, point));
        }
        if from == low {
            return Ok((low, point));
        }
        window *= 4;
    }
}

/// The offset to start partition `partition` of `topic` at after what a checkpoint
/// pointed to was deleted (retention, `DeleteRecords`): the beginning of the first complete
/// snapshot after the log's new start, so that as little as possible is skipped; the log's
/// start when there is none.
pub fn first_snapshot_offset(
    connection: &ipaudit_runtime::kafka::Connection,
    topic: &str,
    partition: i32,
) -> Result<i64, KafkaError> {
    let (consumer, low, high) = scan_reader(connection, topic, partition)?;
    let mut window = 10_000i64;
    loop {
        let to = low.saturating_add(window).min(high);
        let (frames, collectors) = read_frames(&consumer, topic, partition, low..to, high)?;
        if let Some(start) = frames.first_start(&collectors) {
            return Ok(start);
        }
        if to == high {
            return Ok(low);
        }
        window *= 4;
    }
}

/// A reader for scanning `partition` of `topic`, and the partition's first and next offsets.
fn scan_reader(
    connection: &ipaudit_runtime::kafka::Connection,
    topic: &str,
    partition: i32,
) -> Result<(BaseConsumer, i64, i64), KafkaError> {
    let consumer: BaseConsumer = connection
        .reader(crate::live::CLIENT_ID, "ipaudit-snapshot-scan")
        .create()?;
    let (low, high) = consumer.fetch_watermarks(topic, partition, Duration::from_secs(10))?;
    Ok((consumer, low, high))
}

/// The relist frames of `offsets` of the partition (those that begin after `bound` left
/// out), and the collectors that wrote up to `bound`. Stops early once past `bound` with
/// every frame that began in time ended.
fn read_frames(
    consumer: &BaseConsumer,
    topic: &str,
    partition: i32,
    offsets: std::ops::Range<i64>,
    bound: i64,
) -> Result<(Frames, Vec<Writer>), KafkaError> {
    let mut frames = Frames::default();
    let mut collectors: Vec<Writer> = Vec::new();
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, partition, Offset::Offset(offsets.start))?;
    consumer.assign(&list)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut next = offsets.start;
    while next < offsets.end && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(message)) => {
                next = message.offset() + 1;
                if let Some(Ok(event)) = message.payload().map(decode::<WatchEvent>) {
                    let writer = writer_of(&event);
                    if !collectors.contains(&writer)
                        && event.event_type != EventType::Remediation
                        && message.offset() <= bound
                    {
                        collectors.push(writer);
                    }
                    frames.see_bounded(message.offset(), &event, bound);
                }
                if next > bound && frames.open.is_empty() {
                    // Every frame that begins in time has ended.
                    break;
                }
            }
            Some(Err(e)) => return Err(e),
            None => {}
        }
    }
    Ok((frames, collectors))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_schemas::builders::EventBuilder;

    fn marker(collector: &str, stream: Stream, event_type: EventType) -> WatchEvent {
        let mut e = EventBuilder::marker(stream, event_type, 1);
        e.cluster_id = "lab".into();
        e.collector_id = collector.into();
        e
    }

    fn writer(collector: &str) -> Writer {
        ("lab".into(), collector.into())
    }

    #[test]
    fn the_snapshot_starts_where_the_latest_complete_frames_of_every_stream_begin() {
        let mut frames = Frames::default();
        let c = writer("c1");
        let mut offset = 0;
        let mut see = |frames: &mut Frames, stream, t| {
            frames.see(offset, &marker("c1", stream, t));
            offset += 1;
        };
        for stream in [Stream::Pod, Stream::Ip, Stream::Subnet] {
            see(&mut frames, stream, EventType::SyncStart);
            see(&mut frames, stream, EventType::SyncEnd);
        }
        assert_eq!(frames.start(std::slice::from_ref(&c)), Some(0));
        // A later relist of the pods and IPs, and an unfinished one of the subnets.
        see(&mut frames, Stream::Pod, EventType::SyncStart); // 6
        see(&mut frames, Stream::Pod, EventType::SyncEnd);
        see(&mut frames, Stream::Ip, EventType::SyncStart); // 8
        see(&mut frames, Stream::Ip, EventType::SyncEnd);
        see(&mut frames, Stream::Subnet, EventType::SyncStart); // 10, never ends
        assert_eq!(
            frames.start(std::slice::from_ref(&c)),
            Some(4),
            "the subnets' last complete frame began at 4"
        );
        assert_eq!(
            frames.start(&[c, writer("c2")]),
            None,
            "c2 has no snapshot in the window"
        );
    }

    #[test]
    fn a_snapshot_bounded_by_the_committed_offset_is_the_latest_that_begins_at_or_before_it() {
        let c = writer("c1");
        let mut events = Vec::new();
        for _ in 0..2 {
            for stream in [Stream::Pod, Stream::Ip] {
                events.push(marker("c1", stream, EventType::SyncStart));
                events.push(marker("c1", stream, EventType::SyncEnd));
            }
        }
        // Frames begin at 0 and 2, then at 4 and 6.
        let start_with = |bound: i64| {
            let mut frames = Frames::default();
            for (offset, event) in events.iter().enumerate() {
                frames.see_bounded(offset as i64, event, bound);
            }
            frames.start(std::slice::from_ref(&c))
        };
        assert_eq!(start_with(i64::MAX), Some(4), "unbounded: the latest");
        assert_eq!(start_with(6), Some(4), "the later one began in time");
        assert_eq!(
            start_with(5),
            Some(2),
            "the pods' later frame began before 5 but the IPs' after: their earlier one"
        );
        assert_eq!(start_with(3), Some(0));
        assert_eq!(start_with(1), None, "no frame of the IPs began in time");
    }

    #[test]
    fn a_rebuild_point_still_in_the_log_bounds_the_snapshot_and_one_deleted_does_not() {
        let plain = Committed {
            next: 500,
            rebuild_from: None,
        };
        assert_eq!(plain.snapshot_bound(0), 500);
        let firing = Committed {
            next: 500,
            rebuild_from: Some(120),
        };
        assert_eq!(firing.snapshot_bound(0), 120);
        assert_eq!(
            firing.bounding_point(0),
            Some(120),
            "what the log line names"
        );
        assert_eq!(
            firing.snapshot_bound(200),
            500,
            "retention deleted what the alert rests on"
        );
        let ahead = Committed {
            next: 500,
            rebuild_from: Some(900),
        };
        assert_eq!(
            ahead.snapshot_bound(0),
            500,
            "never after the committed offset"
        );
        assert_eq!(ahead.bounding_point(0), None);
        assert_eq!(firing.bounding_point(200), None);
    }

    #[test]
    fn after_a_gap_the_first_complete_snapshot_is_where_the_rebuild_starts() {
        let c = writer("c1");
        let mut frames = Frames::default();
        let mut offset = 0;
        let mut see = |frames: &mut Frames, stream, t| {
            frames.see(offset, &marker("c1", stream, t));
            offset += 1;
        };
        // The pods' frame cut by the gap (its start deleted), then two full snapshots.
        see(&mut frames, Stream::Pod, EventType::SyncEnd); // 0
        for _ in 0..2 {
            for stream in [Stream::Pod, Stream::Ip] {
                see(&mut frames, stream, EventType::SyncStart); // 1, 3; 5, 7
                see(&mut frames, stream, EventType::SyncEnd);
            }
        }
        assert_eq!(frames.first_start(std::slice::from_ref(&c)), Some(1));
        assert_eq!(frames.start(std::slice::from_ref(&c)), Some(5));
    }

    #[test]
    fn two_clusters_whose_collectors_share_an_id_are_two_writers() {
        // Both clusters run `ipaudit-collector-0` (a fixed --collector-id); cluster b's
        // snapshot is still open when cluster a's completes.
        let event = |cluster: &str, stream, t| {
            let mut e = marker("ipaudit-collector-0", stream, t);
            e.cluster_id = cluster.into();
            e
        };
        let mut frames = Frames::default();
        frames.see(0, &event("a", Stream::Pod, EventType::SyncStart));
        frames.see(1, &event("b", Stream::Pod, EventType::SyncStart));
        frames.see(2, &event("a", Stream::Pod, EventType::SyncEnd));
        let a = ("a".to_owned(), "ipaudit-collector-0".to_owned());
        let b = ("b".to_owned(), "ipaudit-collector-0".to_owned());
        assert_eq!(frames.start(std::slice::from_ref(&a)), Some(0));
        assert_eq!(
            frames.start(&[a.clone(), b.clone()]),
            None,
            "b's frame is not complete: no snapshot of the partition yet"
        );
        frames.see(3, &event("b", Stream::Pod, EventType::SyncEnd));
        assert_eq!(frames.start(&[a, b]), Some(0));
    }
}
