//! What `/healthz` and `/readyz` answer, kept by the tasks themselves.
//!
//! Liveness (`/healthz`): every supervised task still runs and no SQLite step has been
//! stuck for [`STUCK_AFTER`]. A task that ends stops the process anyway (see `app`), so a
//! failing `/healthz` is mostly seen in that moment or when a step hangs.
//!
//! Readiness (`/readyz`): every watched stream has been listed (or resumed) once, no stream
//! has been failing for longer than `--unready-after`, rows have not waited that long with
//! nothing delivered, the outbox is not full, the events topic exists, and no task that
//! should run (remediation when it is on) has stopped. The answer names every reason.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ipaudit_runtime::http::MissingTopics;
use ipaudit_schemas::Stream;
use tokio::sync::watch;

/// Rows waiting for Kafka and their payload bytes. Defined here, beside the limit that
/// judges it, so that the outbox reports to health and metrics without either importing it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutboxSize {
    /// Rows not yet acknowledged.
    pub rows: i64,
    /// Sum of their payload sizes.
    pub bytes: i64,
}

/// A SQLite step (one transaction of the writer or the producer) running longer than this
/// means the file or the disk hangs: `/healthz` fails so that Kubernetes restarts the pod.
pub const STUCK_AFTER: Duration = Duration::from_secs(120);

/// Shared health of one collector process; cheap to clone.
#[derive(Clone)]
pub struct Health(Arc<Inner>);

struct Inner {
    unready_after: Duration,
    /// One entry per watched stream, fixed at start.
    streams: HashMap<Stream, Mutex<StreamHealth>>,
    delivery: Mutex<Delivery>,
    outbox: Mutex<Bound>,
    full: watch::Sender<bool>,
    /// Topics found missing (and not to be created), until found again.
    topics_missing: MissingTopics,
    tasks: Mutex<BTreeMap<&'static str, TaskState>>,
    busy: Mutex<BTreeMap<&'static str, Instant>>,
}

#[derive(Default)]
struct StreamHealth {
    watching: bool,
    failing_since: Option<Instant>,
}

#[derive(Default)]
struct Delivery {
    /// Rows were waiting and nothing has been delivered since.
    stalled_since: Option<Instant>,
    waiting_rows: i64,
}

struct Bound {
    max_bytes: Option<u64>,
    size: OutboxSize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum TaskState {
    Running,
    Ended(String),
}

/// The outbox resumes taking events below this share of `--outbox-max-bytes`, so that
/// watches do not pause and resume on every batch near the bound.
const RESUME_BELOW: f64 = 0.9;

impl Health {
    /// Health of a collector watching `streams`, unready after failures longer than
    /// `unready_after`, with an outbox bounded to `outbox_max_bytes` (none: unbounded).
    pub fn new(streams: &[Stream], unready_after: Duration, outbox_max_bytes: Option<u64>) -> Self {
        let (full, _) = watch::channel(false);
        Health(Arc::new(Inner {
            unready_after,
            streams: streams
                .iter()
                .map(|s| (*s, Mutex::new(StreamHealth::default())))
                .collect(),
            delivery: Mutex::new(Delivery::default()),
            outbox: Mutex::new(Bound {
                max_bytes: outbox_max_bytes,
                size: OutboxSize::default(),
            }),
            full,
            topics_missing: MissingTopics::default(),
            tasks: Mutex::new(BTreeMap::new()),
            busy: Mutex::new(BTreeMap::new()),
        }))
    }

    /// The stream is listed (or resumed) and watching: it has not failed since.
    pub fn watching(&self, stream: Stream) {
        if let Some(s) = self.0.streams.get(&stream) {
            let mut s = lock(s);
            s.watching = true;
            s.failing_since = None;
        }
    }

    /// A list or watch of the stream failed; the first failure of a run starts the clock.
    pub fn watch_failed(&self, stream: Stream) {
        if let Some(s) = self.0.streams.get(&stream) {
            lock(s).failing_since.get_or_insert_with(Instant::now);
        }
    }

    /// Whether the stream's list or watch has failed and not recovered since (for the
    /// admission guard, which does not trust a view that may be missing events).
    pub fn stream_failing(&self, stream: Stream) -> bool {
        self.0
            .streams
            .get(&stream)
            .is_some_and(|s| lock(s).failing_since.is_some())
    }

    /// The producer saw `rows` waiting in the outbox (before sending them).
    pub fn rows_waiting(&self, rows: i64) {
        let mut d = lock(&self.0.delivery);
        d.waiting_rows = rows;
        if rows == 0 {
            d.stalled_since = None;
        } else {
            d.stalled_since.get_or_insert_with(Instant::now);
        }
    }

    /// Kafka acknowledged rows (or refused them for good): the producer is delivering.
    pub fn delivered(&self) {
        lock(&self.0.delivery).stalled_since = None;
    }

    /// A topic the collector needs does not exist (and it may not create it).
    pub fn topic_missing(&self, topic: &str) {
        self.0.topics_missing.missing(topic);
    }

    /// The topic exists (again).
    pub fn topic_present(&self, topic: &str) {
        self.0.topics_missing.present(topic);
    }

    /// Whether some topic the collector needs was found missing.
    pub fn any_topic_missing(&self) -> bool {
        self.0.topics_missing.any()
    }

    /// The outbox's size after a change; returns true when it has just become full.
    pub fn outbox_size(&self, size: OutboxSize) -> bool {
        let mut bound = lock(&self.0.outbox);
        bound.size = size;
        let Some(max) = bound.max_bytes else {
            return false;
        };
        let bytes = u64::try_from(size.bytes).unwrap_or(0);
        let was_full = *self.0.full.borrow();
        let full = if was_full {
            (bytes as f64) >= max as f64 * RESUME_BELOW
        } else {
            bytes >= max
        };
        if full != was_full {
            self.0.full.send_replace(full);
        }
        full && !was_full
    }

    /// Whether the outbox is full; changes as it fills and drains.
    pub fn outbox_full(&self) -> watch::Receiver<bool> {
        self.0.full.subscribe()
    }

    /// A supervised task started.
    pub fn task_started(&self, name: &'static str) {
        lock(&self.0.tasks).insert(name, TaskState::Running);
    }

    /// A supervised task ended (for whatever reason).
    pub fn task_ended(&self, name: &'static str, why: String) {
        lock(&self.0.tasks).insert(name, TaskState::Ended(why));
    }

    /// Marks a step of `name` that must not hang (a SQLite transaction) until the guard
    /// is dropped.
    pub fn busy(&self, name: &'static str) -> BusyGuard {
        lock(&self.0.busy).insert(name, Instant::now());
        BusyGuard {
            health: self.clone(),
            name,
        }
    }

    /// Why the process is not alive; empty when it is.
    pub fn liveness_problems(&self) -> Vec<String> {
        let mut problems: Vec<String> = lock(&self.0.tasks)
            .iter()
            .filter_map(|(name, state)| match state {
                TaskState::Running => None,
                TaskState::Ended(why) => Some(format!("{name} stopped: {why}")),
            })
            .collect();
        for (name, since) in lock(&self.0.busy).iter() {
            if since.elapsed() > STUCK_AFTER {
                problems.push(format!(
                    "{name} has been stuck in one step for {}s",
                    since.elapsed().as_secs()
                ));
            }
        }
        problems
    }

    /// Why the collector is not ready; empty when it is. A collector that watches
    /// nothing is not ready.
    pub fn readiness_problems(&self) -> Vec<String> {
        let limit = self.0.unready_after;
        let mut problems = self.liveness_problems();
        if self.0.streams.is_empty() {
            problems.push("no stream is watched".into());
        }
        let mut streams: Vec<_> = self.0.streams.iter().collect();
        streams.sort_by_key(|(s, _)| s.as_str());
        for (stream, health) in streams {
            let h = lock(health);
            if !h.watching {
                problems.push(format!("stream {stream} is not watching yet"));
            }
            if let Some(since) = h.failing_since.filter(|t| t.elapsed() > limit) {
                problems.push(format!(
                    "stream {stream} has been failing for {}s",
                    since.elapsed().as_secs()
                ));
            }
        }
        {
            let d = lock(&self.0.delivery);
            if let Some(since) = d.stalled_since.filter(|t| t.elapsed() > limit) {
                problems.push(format!(
                    "{} rows have waited {}s with nothing delivered to Kafka",
                    d.waiting_rows,
                    since.elapsed().as_secs()
                ));
            }
        }
        problems.extend(self.0.topics_missing.readiness_problems());
        if *self.0.full.borrow() {
            let bound = lock(&self.0.outbox);
            problems.push(format!(
                "the outbox is full ({} bytes in {} rows, --outbox-max-bytes {}): watches are paused",
                bound.size.bytes,
                bound.size.rows,
                bound.max_bytes.unwrap_or_default()
            ));
        }
        problems
    }
}

/// Clears a [`Health::busy`] mark when dropped.
pub struct BusyGuard {
    health: Health,
    name: &'static str,
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        lock(&self.health.0.busy).remove(self.name);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data stays meaningful after a panic elsewhere (flags and instants).
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_every_watched_stream_and_only_those_is_watching() {
        let health = Health::new(
            &[Stream::Pod, Stream::IpPool],
            Duration::from_secs(60),
            None,
        );
        assert_eq!(health.readiness_problems().len(), 2);
        health.watching(Stream::Pod);
        health.watching(Stream::Ip);
        assert_eq!(
            health.readiness_problems(),
            ["stream ippool is not watching yet"],
            "ip is not watched: it does not stand in for ippool"
        );
        health.watching(Stream::IpPool);
        assert!(health.readiness_problems().is_empty());
    }

    #[test]
    fn a_collector_watching_nothing_is_not_ready() {
        assert!(!Health::new(&[], Duration::from_secs(60), None)
            .readiness_problems()
            .is_empty());
    }

    #[test]
    fn a_stream_failing_longer_than_the_limit_is_unready_until_it_watches_again() {
        let health = Health::new(&[Stream::Ip], Duration::from_millis(30), None);
        health.watching(Stream::Ip);
        health.watch_failed(Stream::Ip);
        assert!(health.readiness_problems().is_empty(), "not for long yet");
        std::thread::sleep(Duration::from_millis(40));
        health.watch_failed(Stream::Ip);
        assert!(health.readiness_problems()[0].contains("stream ip has been failing"));
        health.watching(Stream::Ip);
        assert!(health.readiness_problems().is_empty());
    }

    #[test]
    fn rows_waiting_without_delivery_longer_than_the_limit_are_unready() {
        let health = Health::new(&[Stream::Ip], Duration::from_millis(30), None);
        health.watching(Stream::Ip);
        health.rows_waiting(5);
        std::thread::sleep(Duration::from_millis(40));
        health.rows_waiting(7);
        assert!(health.readiness_problems()[0].contains("7 rows have waited"));
        health.delivered();
        health.rows_waiting(7);
        assert!(health.readiness_problems().is_empty());
    }

    #[test]
    fn a_full_outbox_pauses_until_it_drains_below_nine_tenths() {
        let health = Health::new(&[Stream::Ip], Duration::from_secs(60), Some(1000));
        health.watching(Stream::Ip);
        let full = health.outbox_full();
        let size = |bytes| OutboxSize { rows: 1, bytes };
        assert!(!health.outbox_size(size(999)));
        assert!(health.outbox_size(size(1000)), "just became full");
        assert!(*full.borrow());
        assert!(health.readiness_problems()[0].contains("the outbox is full"));
        assert!(!health.outbox_size(size(950)));
        assert!(*full.borrow(), "still above nine tenths");
        health.outbox_size(size(899));
        assert!(!*full.borrow());
        assert!(health.readiness_problems().is_empty());
    }

    #[test]
    fn an_ended_task_fails_liveness_and_readiness() {
        let health = Health::new(&[Stream::Ip], Duration::from_secs(60), None);
        health.watching(Stream::Ip);
        health.task_started("remediator");
        assert!(health.liveness_problems().is_empty());
        health.task_ended("remediator", "commands consumer".into());
        assert_eq!(
            health.liveness_problems(),
            ["remediator stopped: commands consumer"]
        );
        assert_eq!(health.readiness_problems().len(), 1);
    }
}
