//! The yardsticks of the live path's benchmarks (issue 44), in Rust with rdkafka and the
//! programs' own client policies, so that a figure and its reference differ only in the
//! work a program does on top:
//! - [`decode_all`]: a consumer that reads a topic from its start and decodes every
//!   message with the project's decoder into the analysis' event type (the fields the
//!   analysis reads, one event reused), doing nothing else: the analyzer's catch-up
//!   without the analysis, the store and the sinks;
//! - [`send_like_the_collector`]: a producer that sends the same records as the
//!   collector (key, value, headers) with the collector's policy (idempotence, acks=all,
//!   zstd, linger 5 ms, `Delivery::Outbox`), waiting once at the end: the collector's
//!   drain without the outbox.

use std::time::{Duration, Instant};

use ipaudit_analyzer::analysis::ANALYSIS_FIELDS;
use ipaudit_runtime::kafka::{Connection, Delivery};
use ipaudit_schemas::{decode_into_with, WatchEvent, WriterSchemas};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

/// Reads partition 0 of `topic` from its start until `expected` messages are read, each
/// decoded as the analyzer decodes it; returns how many decoded and how long it took
/// (from the assignment to the last message).
pub fn decode_all(brokers: &str, topic: &str, expected: usize) -> (usize, Duration) {
    let connection = Connection::plaintext(brokers);
    // The analyzer's consumer settings that bear on fetching: the runtime's consumer
    // policy, and `live::consume::consumer`'s own.
    let consumer: BaseConsumer = connection
        .reader("ipaudit-reference", "ipaudit-reference-consumer")
        .set("fetch.wait.max.ms", "100")
        .create()
        .expect("a consumer");
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Beginning)
        .expect("partition 0");
    consumer.assign(&list).expect("assigned");
    let learnt = WriterSchemas::new();
    let mut event = WatchEvent::blank();
    let (mut read, mut decoded) = (0, 0);
    let started = Instant::now();
    while read < expected {
        match consumer.poll(Duration::from_secs(1)) {
            Some(Ok(message)) => {
                read += 1;
                if let Some(payload) = message.payload() {
                    if decode_into_with(payload, &ANALYSIS_FIELDS, &mut event, &learnt).is_ok() {
                        decoded += 1;
                    }
                }
            }
            Some(Err(error)) => panic!("consumer error: {error}"),
            None => assert!(
                started.elapsed() < Duration::from_secs(3_600),
                "{read} of {expected} read after an hour"
            ),
        }
    }
    (decoded, started.elapsed())
}

/// One record as it is in a topic.
struct Record {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Vec<u8>)>,
}

/// Reads every record of partition 0 of `source` into memory (after the first `skip`),
/// then sends them all to a new topic of one partition with the collector's producer
/// policy and waits once at the end; returns how many were sent and the time from the
/// first send to the last acknowledgement.
pub fn send_like_the_collector(
    brokers: &str,
    source: &str,
    skip: usize,
    runtime: &tokio::runtime::Runtime,
) -> (usize, Duration) {
    let connection = Connection::plaintext(brokers);
    let consumer: BaseConsumer = connection
        .reader("ipaudit-reference", "ipaudit-reference-dump")
        .create()
        .expect("a consumer");
    let (low, high) = consumer
        .fetch_watermarks(source, 0, Duration::from_secs(10))
        .expect("watermarks");
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(source, 0, Offset::Offset(low))
        .expect("partition 0");
    consumer.assign(&list).expect("assigned");
    let mut records = Vec::with_capacity((high - low) as usize);
    while (records.len() as i64) < high - low {
        if let Some(Ok(message)) = consumer.poll(Duration::from_secs(1)) {
            let headers = message
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|header| {
                            (
                                header.key.to_owned(),
                                header.value.map(<[u8]>::to_vec).unwrap_or_default(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            records.push(Record {
                key: message.key().map(<[u8]>::to_vec),
                value: message.payload().map(<[u8]>::to_vec),
                headers,
            });
        }
    }
    let records: Vec<Record> = records.into_iter().skip(skip).collect();
    let destination = format!("{source}.reference");
    runtime.block_on(crate::broker::create_topic(brokers, &destination));
    let producer: FutureProducer = connection
        .producer("ipaudit-collector", Delivery::Outbox)
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .expect("a producer");
    // Warm-up, not timed: the idempotent producer's id and the connection.
    runtime
        .block_on(producer.send(
            FutureRecord::<[u8], [u8]>::to(&destination).key(b"warm-up"),
            Duration::from_secs(30),
        ))
        .map_err(|(e, _)| e)
        .expect("warm-up delivered");
    let started = Instant::now();
    let mut pending = Vec::with_capacity(records.len());
    for record in &records {
        let mut headers = OwnedHeaders::new();
        for (key, value) in &record.headers {
            headers = headers.insert(rdkafka::message::Header {
                key,
                value: Some(value),
            });
        }
        let mut out = FutureRecord::<[u8], [u8]>::to(&destination).headers(headers);
        if let Some(key) = &record.key {
            out = out.key(key);
        }
        if let Some(value) = &record.value {
            out = out.payload(value);
        }
        pending.push(crate::broker::send_when_there_is_room(&producer, out));
    }
    runtime.block_on(async {
        for delivery in pending {
            delivery
                .await
                .expect("a delivery result")
                .map_err(|(e, _)| e)
                .expect("delivered");
        }
    });
    (records.len(), started.elapsed())
}
