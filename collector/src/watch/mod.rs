//! One watcher per stream: list, then watch from the list's version with bookmarks, and
//! keep exactly what the API server said (ADDED, MODIFIED, DELETED, BOOKMARK). A resumed
//! watch starts from the stored version; when that has expired (410 Gone, in the stream
//! or as the HTTP status) the watcher relists and diffs against the objects it knew,
//! emitting `DELETED_ON_RELIST` for what vanished meanwhile, framed by `SYNC_START` and
//! `SYNC_END`. The driving is modelled on kube-runtime's watcher, without folding events.
//!
//! The periodic snapshot (`--snapshot-interval`) is taken beside the running watch: the
//! collection is listed exactly at the version the watch has delivered up to, and framed
//! at that version between the watch's events, which then go on. A snapshot never costs the
//! watch an event it had yet to deliver (a list taken past them would show those objects
//! changed or gone, and the watch, dropped for a new one from the list's version, would never
//! say how). Only when the API server no longer has that version does it fall back to a
//! full relist.
//!
//! While the outbox is full the watchers pause: each drops its watch and, once there is
//! room again, watches on from the last version it recorded (exactly the events missed,
//! while the API server still has them) or relists when that has expired (410), whose
//! diff against the live set loses no deletion. An event larger than `--max-event-bytes`
//! is recorded without its raw JSON, with a field problem saying so.

#[cfg(feature = "service")]
pub mod access;
pub mod discovery;
pub mod event;

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;
use ipaudit_runtime::backoff::Backoff;
use ipaudit_runtime::kube::PagedList;
use ipaudit_runtime::telemetry::InternalEvent as _;
use ipaudit_schemas::{encode, EventType, KindSpec, Stream, WatchEvent};
use kube::api::WatchParams;
use kube::core::{Request, WatchEvent as KubeEvent};
use kube::Client;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, debug_span, info, Instrument as _};

use crate::health::Health;
use crate::metrics::Metrics;
use crate::observed::{LiveChange, Observed, StreamState};
use crate::telemetry::{
    EventRecorded, ListFailed, MalformedObjectRecorded, ObjectUnreadable, RawObjectOmitted,
    RelistStarted, WatchErrorEvent, WatchEventUndecodable, WatchFailed, WatchPaused,
    WatchStreamFailed,
};
use crate::telemetry::{Failed, Failure};
use crate::watch::event::{LiveObject, Stamp};

/// Settings of the watchers.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Server-side timeout of one watch request.
    pub watch_timeout: Duration,
    /// Relist this often even without 410, so analyzers can rebuild from a snapshot.
    pub snapshot_interval: Option<Duration>,
    /// Objects per list page.
    pub page_size: u32,
    /// Longest pause between retries.
    pub max_backoff: Duration,
    /// An event whose encoding is larger than this is recorded without its raw JSON.
    pub max_event_bytes: usize,
}

/// Default of `--max-event-bytes`: below the 1,000,000 bytes of librdkafka's and a
/// topic's default `message.max.bytes`, with room for the record's key and headers.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 900 * 1024;

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            watch_timeout: Duration::from_secs(290),
            snapshot_interval: None,
            page_size: 500,
            max_backoff: Duration::from_secs(10),
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
        }
    }
}

/// Why a watcher stopped.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The recorder behind the channel is gone; nothing more can be stored.
    #[error("{0} watcher stopped: the event recorder has shut down")]
    RecorderGone(Stream),
}

enum Next {
    Rewatch,
    Pause,
    Relist(&'static str),
    Backoff,
    Stop,
}

/// How a framed list ended.
enum Listed {
    /// Framed completely, `SYNC_END` emitted.
    Framed,
    /// A page could not be read.
    Failed,
    /// Shutdown.
    Stop,
}

/// Where a watcher reports: the events to store, its counters, its health (which also
/// says when the outbox is full).
pub struct WatchOutputs {
    /// To the writer.
    pub events: mpsc::Sender<Observed>,
    /// Counters.
    pub metrics: Metrics,
    /// Readiness, and the outbox's fullness.
    pub health: Health,
}

/// Watches one stream until shutdown.
pub struct Watcher {
    client: Client,
    stream: Stream,
    /// The collection across all namespaces, from the kind's table entry.
    path: String,
    stamp: Stamp,
    config: WatchConfig,
    state: StreamState,
    out: mpsc::Sender<Observed>,
    metrics: Metrics,
    health: Health,
    /// True while the outbox is full.
    full: watch::Receiver<bool>,
    /// When the next periodic snapshot is due (`--snapshot-interval`); it outlives the
    /// watch requests, which end every `--watch-timeout`.
    next_snapshot: Option<Instant>,
}

impl Watcher {
    /// A watcher of one kind of the table that resumes from `state`.
    pub fn new(
        client: Client,
        kind: &'static KindSpec,
        stamp: Stamp,
        config: WatchConfig,
        state: StreamState,
        outputs: WatchOutputs,
    ) -> Self {
        Watcher {
            client,
            stream: kind.stream,
            path: kind.collection_path(),
            stamp,
            state,
            out: outputs.events,
            metrics: outputs.metrics,
            full: outputs.health.outbox_full(),
            health: outputs.health,
            next_snapshot: config.snapshot_interval.map(|every| Instant::now() + every),
            config,
        }
    }

    /// The next periodic snapshot is due one interval from now.
    fn schedule_snapshot(&mut self) {
        self.next_snapshot = self
            .config
            .snapshot_interval
            .map(|every| Instant::now() + every);
    }

    /// Runs until `shutdown` turns true.
    #[tracing::instrument(name = "watch", skip_all, fields(cluster = %self.stamp.cluster_id, stream = %self.stream))]
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Result<(), WatchError> {
        // After a failed list or watch: 100 ms doubling to --max-backoff, jittered so that
        // the streams (and collectors) that failed together do not retry together.
        let mut backoff = Backoff::new(Duration::from_millis(100), self.config.max_backoff);
        let mut relist_reason = if self.state.resume_from.is_none() {
            Some("initial")
        } else {
            None
        };
        if !self.state.live.is_empty() || self.state.resume_from.is_some() {
            info!(resume_from = ?self.state.resume_from, live = self.state.live.len(), "resuming");
        }
        loop {
            if *shutdown.borrow() {
                return Ok(());
            }
            let next = match relist_reason.take() {
                Some(reason) => self.relist(reason, &mut shutdown).await?,
                None => {
                    let rv = self.state.resume_from.clone().unwrap_or_else(|| "0".into());
                    self.watch_from(&rv, &mut shutdown).await?
                }
            };
            match next {
                Next::Rewatch => backoff.reset(),
                Next::Relist(reason) => relist_reason = Some(reason),
                Next::Stop => return Ok(()),
                Next::Pause => {
                    WatchPaused {
                        stream: self.stream,
                        resume_from: self.state.resume_from.as_deref(),
                    }
                    .emit(&self.metrics);
                    let mut full = self.full.clone();
                    tokio::select! {
                        _ = full.wait_for(|full| !*full) => {}
                        _ = shutdown.changed() => return Ok(()),
                    }
                    info!(resume_from = ?self.state.resume_from, "outbox has room again: watch resumes");
                    if self.state.resume_from.is_none() {
                        relist_reason = Some("outbox_full");
                    }
                }
                Next::Backoff => {
                    self.health.watch_failed(self.stream);
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.next_delay()) => {}
                        _ = shutdown.changed() => return Ok(()),
                    }
                    if self.state.resume_from.is_none() {
                        relist_reason = Some("retry");
                    }
                }
            }
        }
    }

    async fn emit(
        &mut self,
        mut event: WatchEvent,
        live: LiveChange,
        resume_from: Option<String>,
    ) -> Result<(), WatchError> {
        self.state.sequence += 1;
        event.sequence = self.state.sequence;
        EventRecorded {
            stream: self.stream,
            event_type: event.event_type,
        }
        .emit(&self.metrics);
        match &live {
            LiveChange::Upsert(o) => {
                self.state.live.insert(o.uid.clone(), o.clone());
            }
            LiveChange::Remove(uid) => {
                self.state.live.remove(uid);
            }
            LiveChange::None => {}
        }
        if resume_from.is_some() {
            self.state.resume_from.clone_from(&resume_from);
        }
        self.out
            .send(Observed {
                event,
                live,
                resume_from,
            })
            .await
            .map_err(|_| WatchError::RecorderGone(self.stream))
    }

    /// Converts and emits one object; unusable objects are counted and logged.
    async fn emit_object(
        &mut self,
        event_type: EventType,
        object: &Value,
        from_watch: bool,
    ) -> Result<Option<String>, WatchError> {
        match self.stamp.object_event(self.stream, event_type, object, 0) {
            Ok((mut event, problems)) => {
                // Debug level: the span costs nothing unless asked for (its fields are not
                // even computed), and lines logged inside it carry the object.
                let span = debug_span!("object", object = %event.object_key(), resource_version = %event.resource_version);
                span.in_scope(|| {
                    if self.fit(&mut event) {
                        RawObjectOmitted {
                            stream: self.stream,
                            object: &event.object_key(),
                            resource_version: &event.resource_version,
                            max_event_bytes: self.config.max_event_bytes,
                        }
                        .emit(&self.metrics);
                    }
                    if !problems.is_empty() {
                        MalformedObjectRecorded {
                            stream: self.stream,
                            object: &event.object_key(),
                            resource_version: &event.resource_version,
                            fields: problems.iter().map(|p| p.path.as_str()).collect(),
                        }
                        .emit(&self.metrics);
                    }
                });
                let uid = event.uid().to_owned();
                let live = match (event_type.is_deletion(), LiveObject::of(&event)) {
                    (true, _) => LiveChange::Remove(uid.clone()),
                    (false, Some(o)) => LiveChange::Upsert(o),
                    (false, None) => LiveChange::None,
                };
                let rv =
                    (!event.resource_version.is_empty()).then(|| event.resource_version.clone());
                self.emit(event, live, if from_watch { rv } else { None })
                    .instrument(span)
                    .await?;
                Ok(Some(uid))
            }
            Err(error) => {
                ObjectUnreadable {
                    stream: self.stream,
                    error: &error,
                    object,
                }
                .emit(&self.metrics);
                Ok(None)
            }
        }
    }

    /// Drops the raw JSON of an event whose encoding exceeds `--max-event-bytes`, so that
    /// it is not refused by Kafka; returns whether it did.
    fn fit(&self, event: &mut WatchEvent) -> bool {
        let Some(raw) = event.raw_object.as_ref() else {
            return false;
        };
        // Cheap first: an event is its raw JSON plus a much smaller rest; encode only when
        // the raw JSON alone comes near the limit.
        if raw.len() < self.config.max_event_bytes / 2 {
            return false;
        }
        let size = encode(event).map_or(usize::MAX, |bytes| bytes.len());
        if size <= self.config.max_event_bytes {
            return false;
        }
        event.raw_object = None;
        true
    }

    async fn relist(
        &mut self,
        reason: &'static str,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Next, WatchError> {
        RelistStarted {
            stream: self.stream,
            reason,
        }
        .emit(&self.metrics);
        let previous = self.state.resume_from.clone().unwrap_or_else(|| "0".into());
        let list = PagedList::new(self.client.clone(), &self.path, self.config.page_size);
        match self.list_framed(list, &previous, shutdown).await? {
            Listed::Framed => {}
            Listed::Failed => return Ok(Next::Backoff),
            Listed::Stop => return Ok(Next::Stop),
        }
        self.metrics.set_watching(self.stream, true);
        self.health.watching(self.stream);
        Ok(Next::Rewatch)
    }

    /// The periodic snapshot, beside the running watch: the collection as it was at the
    /// version the watch has delivered up to, framed there. `None` when that version cannot
    /// be listed (the API server no longer has it): the caller relists in full.
    async fn snapshot_beside_watch(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Option<Listed>, WatchError> {
        let Some(at) = self
            .state
            .resume_from
            .clone()
            .filter(|rv| rv.parse::<u64>().is_ok_and(|rv| rv > 0))
        else {
            return Ok(None);
        };
        RelistStarted {
            stream: self.stream,
            reason: "snapshot",
        }
        .emit(&self.metrics);
        let list =
            PagedList::exactly_at(self.client.clone(), &self.path, self.config.page_size, &at);
        match self.list_framed(list, &at, shutdown).await? {
            Listed::Failed => Ok(None),
            listed => Ok(Some(listed)),
        }
    }

    /// Reads `list` page by page as one relist frame: `SYNC_START` at `start_rv` once its
    /// first page is in (a list refused at once leaves no open frame), every object as
    /// ADDED, a `DELETED_ON_RELIST` at the list's version for each known object the list
    /// lacks, and `SYNC_END` at the list's version, where the watch goes on.
    async fn list_framed(
        &mut self,
        mut list: PagedList,
        start_rv: &str,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Listed, WatchError> {
        let mut seen = HashSet::new();
        let mut opened = false;
        loop {
            let page = tokio::select! {
                page = list.next_page() => page,
                _ = shutdown.changed() => return Ok(Listed::Stop),
            };
            let items = match page {
                None => break,
                Some(Ok(items)) => items,
                Some(Err(error)) => {
                    ListFailed {
                        stream: self.stream,
                        error: &error,
                    }
                    .emit(&self.metrics);
                    return Ok(Listed::Failed);
                }
            };
            if !opened {
                opened = true;
                let start = self
                    .stamp
                    .marker(self.stream, EventType::SyncStart, start_rv, 0);
                self.emit(start, LiveChange::None, None).await?;
            }
            for item in &items {
                if let Some(uid) = self.emit_object(EventType::Added, item, false).await? {
                    seen.insert(uid);
                }
            }
        }
        let list_rv = list.resource_version().unwrap_or("0").to_owned();
        let vanished: Vec<LiveObject> = self
            .state
            .live
            .values()
            .filter(|o| !seen.contains(&o.uid))
            .cloned()
            .collect();
        if !vanished.is_empty() {
            info!(count = vanished.len(), list_rv = %list_rv, "objects deleted while not watching");
        }
        for object in vanished {
            let event = self
                .stamp
                .deleted_on_relist(self.stream, &object, &list_rv, 0);
            self.emit(event, LiveChange::Remove(object.uid.clone()), None)
                .await?;
        }
        let end = self
            .stamp
            .marker(self.stream, EventType::SyncEnd, &list_rv, 0);
        self.emit(end, LiveChange::None, Some(list_rv)).await?;
        self.schedule_snapshot();
        Ok(Listed::Framed)
    }

    async fn watch_from(
        &mut self,
        rv: &str,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Next, WatchError> {
        let timeout = u32::try_from(self.config.watch_timeout.as_secs())
            .unwrap_or(290)
            .max(1);
        let params = WatchParams::default().timeout(timeout);
        let request = match Request::new(&self.path).watch(&params, rv) {
            Ok(r) => r,
            Err(error) => {
                Failed::new(Failure::WatchRequest, &error).emit(&self.metrics);
                return Ok(Next::Backoff);
            }
        };
        let events = tokio::select! {
            events = self.client.request_events::<Value>(request) => events,
            _ = shutdown.changed() => return Ok(Next::Stop),
        };
        let events = match events {
            Ok(events) => events,
            Err(kube::Error::Api(status)) if status.code == 410 => {
                return Ok(Next::Relist("expired"))
            }
            Err(error) => {
                WatchFailed {
                    stream: self.stream,
                    error: &error,
                    resource_version: rv,
                }
                .emit(&self.metrics);
                return Ok(Next::Backoff);
            }
        };
        self.metrics.set_watching(self.stream, true);
        self.health.watching(self.stream);
        let mut events = std::pin::pin!(events);
        let mut full = self.full.clone();
        // Any deadline when no snapshot is due: the branch below is off then.
        let far = Instant::now() + Duration::from_secs(86_400);
        let mut snapshot =
            std::pin::pin!(tokio::time::sleep_until(self.next_snapshot.unwrap_or(far)));
        loop {
            // Biased: a full outbox or a shutdown stops the watch before the next event,
            // however fast events come.
            let item = tokio::select! {
                biased;
                _ = shutdown.changed() => return Ok(Next::Stop),
                _ = full.wait_for(|full| *full) => return Ok(Next::Pause),
                _ = &mut snapshot, if self.next_snapshot.is_some() => None,
                item = events.next() => Some(item),
            };
            let Some(item) = item else {
                match self.snapshot_beside_watch(shutdown).await? {
                    Some(Listed::Stop) => return Ok(Next::Stop),
                    Some(_) => {}
                    None => return Ok(Next::Relist("snapshot_fallback")),
                }
                snapshot.as_mut().reset(self.next_snapshot.unwrap_or(far));
                continue;
            };
            match item {
                None => return Ok(Next::Rewatch),
                Some(Ok(KubeEvent::Added(o))) => {
                    self.emit_object(EventType::Added, &o, true).await?;
                }
                Some(Ok(KubeEvent::Modified(o))) => {
                    self.emit_object(EventType::Modified, &o, true).await?;
                }
                Some(Ok(KubeEvent::Deleted(o))) => {
                    self.emit_object(EventType::Deleted, &o, true).await?;
                }
                Some(Ok(KubeEvent::Bookmark(b))) => {
                    let rv = b.metadata.resource_version;
                    debug!(resource_version = %rv, "bookmark");
                    let event = self.stamp.marker(self.stream, EventType::Bookmark, &rv, 0);
                    self.emit(event, LiveChange::None, Some(rv)).await?;
                }
                Some(Ok(KubeEvent::Error(status))) if status.code == 410 => {
                    return Ok(Next::Relist("expired"))
                }
                Some(Ok(KubeEvent::Error(status))) => {
                    WatchErrorEvent {
                        stream: self.stream,
                        code: status.code,
                        message: &status.message,
                    }
                    .emit(&self.metrics);
                    return Ok(Next::Backoff);
                }
                Some(Err(kube::Error::SerdeError(error))) => {
                    // A line that is no watch event: an event may be lost, so relist.
                    WatchEventUndecodable {
                        stream: self.stream,
                        error: &error,
                    }
                    .emit(&self.metrics);
                    return Ok(Next::Relist("undecodable_event"));
                }
                Some(Err(error)) => {
                    WatchStreamFailed {
                        stream: self.stream,
                        error: &error,
                    }
                    .emit(&self.metrics);
                    return Ok(Next::Backoff);
                }
            }
        }
    }
}
