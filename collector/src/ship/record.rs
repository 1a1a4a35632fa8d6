//! `collector record`: the same events into an Avro container file instead of Kafka, for
//! offline replay (`analyzer replay FILE`). Each batch is flushed as a complete block, so a
//! recording cut short by a crash still holds every event stored before it.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use ipaudit_schemas::{ContainerWriter, WatchEvent};

use crate::observed::Observed;
use crate::ship::writer::{EventWriter, WriterError};

/// An Avro container file being written.
pub struct FileWriter {
    writer: ContainerWriter<WatchEvent, BufWriter<File>>,
}

impl FileWriter {
    /// Creates (truncates) the file.
    pub fn create(path: &Path) -> Result<Self, WriterError> {
        let file = File::create(path)?;
        Ok(FileWriter {
            writer: ContainerWriter::new(BufWriter::new(file))?,
        })
    }
}

impl EventWriter for FileWriter {
    fn store(&mut self, batch: &[Observed]) -> Result<(), WriterError> {
        for observed in batch {
            self.writer.append(&observed.event)?;
        }
        self.writer.flush()?;
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<(), WriterError> {
        let mut out = self.writer.finish()?;
        std::io::Write::flush(&mut out)?;
        out.get_ref().sync_all()?;
        Ok(())
    }
}
