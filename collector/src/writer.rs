//! Where observed events are made durable, one batch per transaction: the SQLite outbox
//! (live collection) or an Avro container file (`collector record`). A dedicated thread
//! owns the writer, so SQLite's single-writer lock never blocks the watchers' runtime.

use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::{mpsc, Notify};

use crate::observed::Observed;
use crate::outbox::{Outbox, OutboxError};

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
    fn store(&mut self, batch: &[Observed]) -> Result<(), WriterError> {
        Ok(self.store_observed(batch)?)
    }

    fn finish(self: Box<Self>) -> Result<(), WriterError> {
        Ok(())
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
