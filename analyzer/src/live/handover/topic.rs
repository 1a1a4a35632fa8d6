//! The checkpoints topic: the owner of a partition writes its handover there
//! ([`HandoverWriter`]), and the member that takes the partition over reads it
//! ([`HandoverReader`], blocking, from the rebalance callback).
//!
//! Events partition P is handed over in partition `P mod n` of the checkpoints topic (`n`
//! its partition count; the chart gives it the events topic's). A write is its chunks,
//! then its manifest, then tombstones for the chunks of the writes before it, so that
//! compaction keeps one manifest and one set of chunks per partition.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use ipaudit_runtime::kafka::{Connection, Delivery};

use super::payload::{Assembly, Encoded, Handover, Key, Manifest, PayloadError, FORMAT};
use crate::live::CLIENT_ID;

/// How long one read of the checkpoints topic may take before the partition is rebuilt
/// from a snapshot instead.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a write waits for the broker's acknowledgements.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a handover could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// Kafka failed (retrying may help: the next write, the next takeover).
    #[error("checkpoints topic {topic}")]
    Kafka {
        /// The checkpoints topic.
        topic: String,
        /// What Kafka said.
        #[source]
        source: KafkaError,
    },
    /// The checkpoints topic does not exist (create it: the chart's topics Job).
    #[error("checkpoints topic {0} does not exist")]
    NoTopic(String),
    /// What was read cannot be used (retrying does not help: it is rebuilt from a snapshot).
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// The read did not finish in time.
    #[error("reading checkpoints topic {0} took longer than {READ_TIMEOUT:?}")]
    Timeout(String),
}

impl HandoverError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, HandoverError::Payload(_))
    }

    /// A short name for the counter's label.
    pub fn kind(&self) -> &'static str {
        match self {
            HandoverError::Kafka { .. } => "kafka",
            HandoverError::NoTopic(_) => "no_topic",
            HandoverError::Payload(_) => "unusable",
            HandoverError::Timeout(_) => "timeout",
        }
    }
}

/// One write of the chunks of one handover still in the topic: (generation, chunks).
pub type Write = (u64, u32);

/// What one write put in the topic.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    /// The events partition.
    pub partition: i32,
    /// The handover's length.
    pub bytes: usize,
    /// Its chunks.
    pub chunks: u32,
    /// The chunks of earlier writes tombstoned.
    pub tombstones: u32,
    /// How long the write took, acknowledgements included.
    pub took: Duration,
}

/// Writes handovers: one per owner, writes one after another.
pub struct HandoverWriter {
    producer: FutureProducer,
    topic: String,
    writer: String,
    partitions: Option<i32>,
    /// Per events partition, the writes whose chunks are in the topic and not yet
    /// tombstoned (the latest one's, and those a takeover found).
    earlier: HashMap<i32, Vec<Write>>,
}

impl HandoverWriter {
    /// A writer of `topic`, naming itself `writer` in its manifests.
    pub fn new(
        connection: &Connection,
        topic: &str,
        writer: &str,
    ) -> Result<HandoverWriter, HandoverError> {
        let producer = connection
            .producer(CLIENT_ID, Delivery::Awaited)
            .create()
            .map_err(kafka(topic))?;
        Ok(HandoverWriter {
            producer,
            topic: topic.to_owned(),
            writer: writer.to_owned(),
            partitions: None,
            earlier: HashMap::new(),
        })
    }

    /// The writes of `partition` a takeover found in the topic: the next write of the
    /// partition tombstones their chunks.
    pub fn inherit(&mut self, partition: i32, writes: Vec<Write>) {
        let earlier = self.earlier.entry(partition).or_default();
        for write in writes {
            if !earlier.contains(&write) {
                earlier.push(write);
            }
        }
    }

    /// Writes `handover`: its chunks, its manifest, then tombstones for the chunks of the
    /// writes before it; returns once the broker has acknowledged everything.
    pub async fn write(&mut self, handover: &Handover) -> Result<Written, HandoverError> {
        let started = Instant::now();
        let encoded = Encoded::of(handover)?;
        let target = self.target(handover.partition).await?;
        let partition = handover.partition;
        let earlier = self.earlier.remove(&partition).unwrap_or_default();
        let generation = (ipaudit_runtime::clock::now_ms().max(0) as u64)
            .max(earlier.iter().map(|(g, _)| g + 1).max().unwrap_or(0));
        let result = self
            .write_generation(
                &encoded,
                target,
                partition,
                generation,
                handover.next_offset,
                &earlier,
            )
            .await;
        match result {
            Ok(tombstones) => {
                self.earlier
                    .insert(partition, vec![(generation, encoded.chunk_count())]);
                Ok(Written {
                    partition,
                    bytes: encoded.bytes.len(),
                    chunks: encoded.chunk_count(),
                    tombstones,
                    took: started.elapsed(),
                })
            }
            Err(error) => {
                // Whatever of this write reached the topic is tombstoned by the next one.
                let mut kept = earlier;
                kept.push((generation, encoded.chunk_count()));
                self.earlier.insert(partition, kept);
                Err(error)
            }
        }
    }

    async fn write_generation(
        &self,
        encoded: &Encoded,
        target: i32,
        partition: i32,
        generation: u64,
        next_offset: i64,
        earlier: &[Write],
    ) -> Result<u32, HandoverError> {
        let mut deliveries = Vec::new();
        for (index, chunk) in encoded.chunks().enumerate() {
            let key = Key::Chunk {
                partition,
                generation,
                index: index as u32,
            }
            .encode();
            deliveries.push(self.send(target, &key, Some(chunk))?);
        }
        let mut first_chunk_offset = None;
        for delivery in deliveries {
            let offset = await_delivery(delivery, &self.topic).await?;
            first_chunk_offset.get_or_insert(offset);
        }
        let manifest = Manifest {
            format: FORMAT,
            partition,
            generation,
            chunks: encoded.chunk_count(),
            first_chunk_offset: first_chunk_offset.unwrap_or(-1),
            bytes: encoded.bytes.len() as u64,
            sha256: encoded.sha256.clone(),
            next_offset,
            writer: self.writer.clone(),
            written_at_ms: ipaudit_runtime::clock::now_ms(),
        };
        let manifest_bytes =
            serde_json::to_vec(&manifest).map_err(|e| HandoverError::Payload(e.into()))?;
        let key = Key::Manifest { partition }.encode();
        let delivery = self.send(target, &key, Some(&manifest_bytes))?;
        await_delivery(delivery, &self.topic).await?;
        let mut tombstones = Vec::new();
        for (old, chunks) in earlier.iter().filter(|(g, _)| *g != generation) {
            for index in 0..*chunks {
                let key = Key::Chunk {
                    partition,
                    generation: *old,
                    index,
                }
                .encode();
                tombstones.push(self.send(target, &key, None)?);
            }
        }
        let count = tombstones.len() as u32;
        for delivery in tombstones {
            await_delivery(delivery, &self.topic).await?;
        }
        Ok(count)
    }

    fn send(
        &self,
        target: i32,
        key: &str,
        value: Option<&[u8]>,
    ) -> Result<rdkafka::producer::DeliveryFuture, HandoverError> {
        let mut record = FutureRecord::<str, [u8]>::to(&self.topic)
            .partition(target)
            .key(key);
        if let Some(value) = value {
            record = record.payload(value);
        }
        self.producer
            .send_result(record)
            .map_err(|(source, _)| kafka(&self.topic)(source))
    }

    /// The checkpoints topic's partition that holds events partition `partition`.
    async fn target(&mut self, partition: i32) -> Result<i32, HandoverError> {
        let count = match self.partitions {
            Some(count) => count,
            None => {
                let producer = self.producer.clone();
                let topic = self.topic.clone();
                let count =
                    tokio::task::spawn_blocking(move || partition_count(producer.client(), &topic))
                        .await
                        .map_err(|_| HandoverError::Timeout(self.topic.clone()))??;
                self.partitions = Some(count);
                count
            }
        };
        Ok(partition.rem_euclid(count))
    }
}

async fn await_delivery(
    delivery: rdkafka::producer::DeliveryFuture,
    topic: &str,
) -> Result<i64, HandoverError> {
    match tokio::time::timeout(WRITE_TIMEOUT, delivery).await {
        Ok(Ok(Ok(delivered))) => Ok(delivered.offset),
        Ok(Ok(Err((error, _)))) => Err(kafka(topic)(error)),
        Ok(Err(_)) | Err(_) => Err(HandoverError::Timeout(topic.to_owned())),
    }
}

fn kafka(topic: &str) -> impl Fn(KafkaError) -> HandoverError + '_ {
    move |source| match source.rdkafka_error_code() {
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
            HandoverError::NoTopic(topic.to_owned())
        }
        _ => HandoverError::Kafka {
            topic: topic.to_owned(),
            source,
        },
    }
}

/// How many partitions `topic` has.
fn partition_count<C: rdkafka::client::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
) -> Result<i32, HandoverError> {
    let metadata = client
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(kafka(topic))?;
    let found = metadata.topics().iter().find(|t| t.name() == topic);
    match found {
        Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
            Ok(t.partitions().len() as i32)
        }
        _ => Err(HandoverError::NoTopic(topic.to_owned())),
    }
}

/// A handover read back, with what the reader found around it.
#[derive(Debug)]
pub struct Taken {
    /// Its manifest.
    pub manifest: Manifest,
    /// The handover.
    pub handover: Handover,
    /// The writes whose chunks are in the topic (the manifest's, and any a writer left
    /// without a manifest): the next write tombstones them.
    pub writes: Vec<Write>,
    /// How long the read took.
    pub took: Duration,
}

/// Reads handovers, blocking.
#[derive(Clone)]
pub struct HandoverReader {
    connection: Connection,
    topic: String,
}

impl HandoverReader {
    /// A reader of `topic`.
    pub fn new(connection: Connection, topic: &str) -> HandoverReader {
        HandoverReader {
            connection,
            topic: topic.to_owned(),
        }
    }

    /// The checkpoints topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The latest handover of events partition `partition`, unless there is none or it
    /// does not go past `newer_than` (the next offset of the state this member has).
    pub fn take(
        &self,
        partition: i32,
        newer_than: Option<i64>,
    ) -> Result<Option<Taken>, HandoverError> {
        let started = Instant::now();
        let consumer: BaseConsumer = self
            .connection
            .reader(CLIENT_ID, "ipaudit-handover-read")
            .create()
            .map_err(kafka(&self.topic))?;
        let count = partition_count(consumer.client(), &self.topic)?;
        let target = partition.rem_euclid(count);
        let (low, high) = consumer
            .fetch_watermarks(&self.topic, target, Duration::from_secs(10))
            .map_err(kafka(&self.topic))?;
        // The manifest is near the end: only the tombstones of the write before it, and
        // the chunks of a write that never got its manifest, come after it.
        let mut window = 16i64;
        let (manifest_offset, manifest, tail) = loop {
            let from = (high - window).max(low);
            let mut latest: Option<(i64, Manifest)> = None;
            let mut chunks: Vec<(i64, Key)> = Vec::new();
            self.read(
                &consumer,
                target,
                from..high,
                |offset, key, value| {
                    match key {
                        Key::Manifest { .. } => {
                            if let Some(manifest) =
                                value.and_then(|v| serde_json::from_slice::<Manifest>(v).ok())
                            {
                                latest = Some((offset, manifest));
                            }
                        }
                        Key::Chunk { .. } if value.is_some() => chunks.push((offset, key)),
                        Key::Chunk { .. } => {}
                    }
                    true
                },
                partition,
            )?;
            if let Some((offset, manifest)) = latest {
                break (offset, manifest, chunks);
            }
            if from <= low {
                return Ok(None);
            }
            window = window.saturating_mul(4);
        };
        if newer_than.is_some_and(|next| manifest.next_offset <= next) {
            return Ok(None);
        }
        // Writes after the manifest that never got one.
        let mut torn: BTreeMap<u64, u32> = BTreeMap::new();
        for (offset, key) in tail {
            if let Key::Chunk {
                generation, index, ..
            } = key
            {
                if offset > manifest_offset && generation != manifest.generation {
                    let count = torn.entry(generation).or_default();
                    *count = (*count).max(index + 1);
                }
            }
        }
        let mut assembly = Assembly::new(manifest.clone());
        let start = manifest.first_chunk_offset.max(low);
        self.read(
            &consumer,
            target,
            start..manifest_offset,
            |_, key, value| {
                assembly.offer(key, value);
                !assembly.complete()
            },
            partition,
        )?;
        let handover = assembly.finish()?;
        let mut writes = vec![(manifest.generation, manifest.chunks)];
        writes.extend(torn);
        Ok(Some(Taken {
            manifest,
            handover,
            writes,
            took: started.elapsed(),
        }))
    }

    /// Reads `offsets` of checkpoints partition `target`, handing each record of events
    /// partition `partition` to `see` until it returns false.
    fn read(
        &self,
        consumer: &BaseConsumer,
        target: i32,
        offsets: std::ops::Range<i64>,
        mut see: impl FnMut(i64, Key, Option<&[u8]>) -> bool,
        partition: i32,
    ) -> Result<(), HandoverError> {
        if offsets.is_empty() {
            return Ok(());
        }
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(&self.topic, target, Offset::Offset(offsets.start))
            .map_err(kafka(&self.topic))?;
        consumer.assign(&list).map_err(kafka(&self.topic))?;
        let deadline = Instant::now() + READ_TIMEOUT;
        let mut next = offsets.start;
        while next < offsets.end {
            if Instant::now() > deadline {
                return Err(HandoverError::Timeout(self.topic.clone()));
            }
            match consumer.poll(Duration::from_millis(500)) {
                Some(Ok(message)) => {
                    next = message.offset() + 1;
                    if message.offset() >= offsets.end {
                        break;
                    }
                    let Some(key) = message.key().and_then(Key::parse) else {
                        continue;
                    };
                    if key.partition() == partition
                        && !see(message.offset(), key, message.payload())
                    {
                        break;
                    }
                }
                Some(Err(error)) => return Err(kafka(&self.topic)(error)),
                None => {}
            }
        }
        Ok(())
    }
}
