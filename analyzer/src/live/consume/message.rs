//! A message of the events topic: decoded (with a schema learnt from the schemas topic
//! when it names a newer one) and handed to its cluster's analysis, or kept as a dead
//! letter; and the end of a partition.

use std::time::Instant;

use ipaudit_runtime::telemetry::InternalEvent as _;
use ipaudit_schemas::{decode_into_with, fingerprint_of, DecodeError, WatchEvent, WriterSchemas};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Message};
use tracing::info;

use super::{ConsumeLoop, LiveError, Next};
use crate::analysis::engine::Analyzer;
use crate::analysis::ANALYSIS_FIELDS;
use crate::live::group::GroupContext;
use crate::live::metrics::Metrics;
use crate::live::telemetry::{EventConsumed, MessageUndecodable, WriterSchemaLookedUp};
use crate::live::writer_schemas::SchemaTopic;

impl ConsumeLoop {
    /// Decodes `message` and steps its cluster's analysis with it; an undecodable one is
    /// counted and kept as a dead letter, and never stops the loop.
    pub(super) async fn on_message(
        &mut self,
        message: &BorrowedMessage<'_>,
    ) -> Result<(), LiveError> {
        let (partition, offset) = (message.partition(), message.offset());
        let mut event = self
            .spare
            .take()
            .unwrap_or_else(|| Box::new(WatchEvent::blank()));
        let mut decoded = message
            .payload()
            .map(|payload| decode_into_with(payload, &ANALYSIS_FIELDS, &mut *event, &self.learnt));
        if let Some(Err(DecodeError::UnknownFingerprint { fingerprint, .. })) = decoded {
            let payload = message.payload().unwrap_or_default();
            if learn_writer_schema(
                &mut self.schema_topic,
                payload,
                &mut self.learnt,
                &self.metrics,
            )
            .await
            {
                tracing::debug!(fingerprint, "decoding again with the learnt schema");
                decoded = Some(decode_into_with(
                    payload,
                    &ANALYSIS_FIELDS,
                    &mut *event,
                    &self.learnt,
                ));
            }
        }
        match decoded {
            Some(Ok(())) => self.analyse(event, partition, offset)?,
            Some(Err(error)) => {
                self.spare = Some(event);
                self.set_aside(message, &error)?;
            }
            None => {
                self.spare = Some(event);
                self.set_aside(message, &"empty message")?;
            }
        }
        self.shared.set_next(partition, offset + 1);
        self.at_end.remove(&partition);
        self.consumed += 1;
        Ok(())
    }

    /// Counts and logs a message that is no watch event (`error` says why), and keeps it as
    /// a dead letter.
    fn set_aside(
        &mut self,
        message: &BorrowedMessage<'_>,
        error: &dyn std::fmt::Display,
    ) -> Result<(), LiveError> {
        let (partition, offset) = (message.partition(), message.offset());
        let fingerprint = message
            .payload()
            .and_then(fingerprint_of)
            .map(u64::from_le_bytes);
        MessageUndecodable {
            partition,
            offset,
            error,
            line: self
                .undecodable
                .see((partition, fingerprint), offset, Instant::now()),
        }
        .emit(&self.metrics);
        self.store.dead_letter(
            &self.config.topic,
            partition,
            offset,
            &error.to_string(),
            message.payload(),
        )?;
        Ok(())
    }

    /// Steps the analysis of `event`'s cluster (a new one for a cluster first seen).
    fn analyse(
        &mut self,
        event: Box<WatchEvent>,
        partition: i32,
        offset: i64,
    ) -> Result<(), LiveError> {
        let span = tracing::debug_span!(
            "consume",
            partition,
            offset,
            cluster = %event.cluster_id,
            stream = event.stream.as_str(),
            object = %event.object_key(),
            resource_version = %event.resource_version,
        );
        let _entered = span.enter();
        EventConsumed {
            stream: event.stream,
            event_type: event.event_type,
        }
        .emit(&self.metrics);
        if let Some(remediation) = event.remediation.as_deref() {
            self.store.record_cleanup(remediation)?;
        }
        let cluster = event.cluster_id.clone();
        if !self.analyzers.contains_key(&cluster) {
            self.partitions.seen(&cluster, partition)?;
            self.analyzers
                .insert(cluster.clone(), Analyzer::new(self.config.analyzer.clone()));
        }
        if let Some(analyzer) = self.analyzers.get_mut(&cluster) {
            let before = self.outputs.len();
            let version = event.resource_version_num;
            analyzer.step(event, &mut self.outputs);
            self.spare = analyzer.take_spare();
            self.points.turned(
                &cluster,
                (partition, offset),
                version,
                analyzer.lowest_held_rv(),
                &self.outputs[before..],
            );
        }
        Ok(())
    }

    /// `partition` is read to its end: its lag is 0, and the wall clock may release what
    /// its analyses hold. With `--exit-at-end`, the loop stops once every owned partition
    /// is, after each analysis has finished what it holds.
    pub(super) fn on_partition_end(
        &mut self,
        consumer: &StreamConsumer<GroupContext>,
        partition: i32,
    ) -> Next {
        self.at_end.insert(partition);
        self.metrics.lag(partition, 0);
        let assigned = consumer
            .assignment()
            .map(|a| a.count())
            .unwrap_or(usize::MAX);
        if self.config.exit_at_end && self.at_end.len() >= assigned {
            info!("every assigned partition read to its end");
            for analyzer in self.analyzers.values_mut() {
                analyzer.finish(None, &mut self.outputs);
            }
            return Next::Stop;
        }
        Next::Continue
    }
}

/// Reads the schemas topic for the schema `payload` names, unless it was read for it
/// lately; whether the schema is known now.
async fn learn_writer_schema(
    schema_topic: &mut SchemaTopic,
    payload: &[u8],
    learnt: &mut WriterSchemas,
    metrics: &Metrics,
) -> bool {
    let Some(fingerprint) = fingerprint_of(payload) else {
        return false;
    };
    let number = u64::from_le_bytes(fingerprint);
    match schema_topic.learn_for(fingerprint, learnt).await {
        Ok(None) => false,
        Ok(Some(lookup)) => {
            let found = learnt.knows::<WatchEvent>(&fingerprint);
            WriterSchemaLookedUp {
                fingerprint: number,
                outcome: Ok(&lookup),
                found,
            }
            .emit(metrics);
            found
        }
        Err(error) => {
            WriterSchemaLookedUp {
                fingerprint: number,
                outcome: Err(&error),
                found: false,
            }
            .emit(metrics);
            false
        }
    }
}
