//! Where observed events are made durable, one batch per transaction: the SQLite outbox
//! (live collection) or an Avro container file (`collector record`). A dedicated thread
//! owns the writer, so SQLite's single-writer lock never blocks the watchers' runtime.

use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::{mpsc, Notify};

use crate::admission::guard::SharedIndex;
use crate::observed::Observed;
use crate::ship::outbox::{Outbox, OutboxError};
use crate::telemetry::OutboxFull;
use ipaudit_runtime::telemetry::InternalEvent;

/// Most events stored in one transaction.
pub const MAX_BATCH: usize = 2_048;

/// Why a writer failed; the collector stops rather than lose events.
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    /// The SQLite outbox failed.
    #[error(transparent)]
    Outbox(#[from] OutboxError),
    /// The recording file failed.
    #[error("cannot write the recording")]
    File(#[from] ipaudit_schemas::ContainerError),
    /// The recording file could not be created or flushed.
    #[error("cannot write the recording")]
    Io(#[from] std::io::Error),
}

/// Durable storage for observed events.
pub trait EventWriter: Send {
    /// Stores a batch; when this returns, the events count as seen.
    fn store(&mut self, batch: &[Observed]) -> Result<(), WriterError>;
    /// Flushes and closes.
    fn finish(self: Box<Self>) -> Result<(), WriterError>;
}

// The outbox's writer impl lives here, not in `outbox`, so that the arrow runs one way:
// the writer knows its stores, the stores do not know the writer.
impl EventWriter for Outbox {
    /// Appends the batch, and reports the outbox's size to the health and metrics it was
    /// given ([`Outbox::observed_by`]): a full outbox pauses the watches.
    fn store(&mut self, batch: &[Observed]) -> Result<(), WriterError> {
        // Debug level: one span per transaction, naming the cluster and how many rows.
        let _span = tracing::debug_span!(
            "outbox_append",
            cluster = batch.first().map(|o| o.event.cluster_id.as_str()),
            rows = batch.len()
        )
        .entered();
        let _busy = self.observer().map(|(h, _)| h.busy("writer"));
        self.append(batch)?;
        if let Some((health, metrics)) = self.observer() {
            let size = self.size()?;
            metrics.outbox_size(size);
            if health.outbox_size(size) {
                OutboxFull { size }.emit(metrics);
            }
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<(), WriterError> {
        Ok(())
    }
}

/// A writer that feeds the index with every event before storing it, so the guard sees
/// exactly what the collector records, in the order it records it.
pub struct IndexingWriter {
    inner: Box<dyn EventWriter>,
    index: SharedIndex,
}

impl IndexingWriter {
    /// Wraps `inner`.
    pub fn new(inner: Box<dyn EventWriter>, index: SharedIndex) -> IndexingWriter {
        IndexingWriter { inner, index }
    }
}

impl EventWriter for IndexingWriter {
    fn store(&mut self, batch: &[Observed]) -> Result<(), WriterError> {
        {
            // A poisoned lock means a reader panicked mid-read; the index itself is
            // consistent (readers do not write), so go on with it.
            let mut index = self.index.write().unwrap_or_else(|e| e.into_inner());
            for observed in batch {
                index.apply(&observed.event);
            }
        }
        self.inner.store(batch)
    }

    fn finish(self: Box<Self>) -> Result<(), WriterError> {
        self.inner.finish()
    }
}

/// Runs `writer` on its own thread until every sender of `events` is gone; `stored` is
/// notified after each batch. Returns the number of events stored.
pub fn spawn(
    mut writer: Box<dyn EventWriter>,
    mut events: mpsc::Receiver<Observed>,
    stored: Arc<Notify>,
) -> JoinHandle<Result<u64, WriterError>> {
    std::thread::Builder::new()
        .name("ipaudit-writer".into())
        .spawn(move || {
            let mut batch = Vec::with_capacity(MAX_BATCH);
            let mut total = 0u64;
            while let Some(first) = events.blocking_recv() {
                batch.push(first);
                while batch.len() < MAX_BATCH {
                    match events.try_recv() {
                        Ok(more) => batch.push(more),
                        Err(_) => break,
                    }
                }
                writer.store(&batch)?;
                total += batch.len() as u64;
                batch.clear();
                stored.notify_one();
            }
            writer.finish()?;
            stored.notify_one();
            Ok(total)
        })
        .expect("the OS can start a thread")
}
