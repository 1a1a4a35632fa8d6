//! The topics the analyzer writes: the alerts topic (`--alerts-topic`), the commands topic
//! (`--cleanup-commands`) and the checkpoints topic (`--checkpoints-topic`, compacted). Each is looked up at start, and every [`RECHECK`] while one is
//! missing. A missing topic is created with `--create-topic` (the commands topic with a
//! day's retention, as the chart's topics Job sets it); without it, it makes `/readyz`
//! answer 503, naming it, while its sink keeps the transitions for when it exists (a sink
//! retrying `UnknownTopic` behind a ready probe was all an operator saw before, issue 42).

use std::time::Duration;

use ipaudit_runtime::kafka::topics::{self, Lookup};
use ipaudit_runtime::kafka::{Connection, TopicCreation, TopicSpec};
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use tokio::sync::watch;
use tracing::{error, info};

use crate::live::metrics::Metrics;
use crate::live::telemetry::{Failed, Failure};
use crate::live::CLIENT_ID;
use ipaudit_runtime::telemetry::InternalEvent as _;

/// How often topics found missing are looked up again.
pub const RECHECK: Duration = Duration::from_secs(10);

/// The topics the analyzer writes, and whether it may create them.
#[derive(Debug, Clone, Default)]
pub struct OutputTopics {
    /// Each topic as it would be created.
    pub topics: Vec<TopicSpec>,
    /// Create a missing one (`--create-topic`).
    pub create: bool,
}

impl OutputTopics {
    /// The alerts, commands and checkpoints topics, when they are written.
    pub fn of(
        alerts: Option<&str>,
        commands: Option<&str>,
        checkpoints: Option<&str>,
        creation: Option<TopicCreation>,
    ) -> OutputTopics {
        let how = creation.unwrap_or(TopicCreation {
            partitions: -1,
            replication: -1,
        });
        OutputTopics {
            topics: alerts
                .map(|t| TopicSpec::plain(t, how))
                .into_iter()
                .chain(commands.map(|t| TopicSpec::commands(t, how)))
                .chain(checkpoints.map(|t| TopicSpec::compacted(t, how)))
                .collect(),
            create: creation.is_some(),
        }
    }
}

/// Looks the topics up until every one exists (creating them when allowed), marking the
/// missing ones in `metrics` for `/readyz`.
pub async fn watch_output_topics(
    connection: Connection,
    wanted: OutputTopics,
    metrics: Metrics,
    mut shutdown: watch::Receiver<bool>,
) {
    if wanted.topics.is_empty() {
        return;
    }
    let admin: AdminClient<DefaultClientContext> = match connection.admin(CLIENT_ID).create() {
        Ok(admin) => admin,
        Err(e) => {
            Failed::new(Failure::OutputTopic, &e).emit(&metrics);
            return;
        }
    };
    let admin = std::sync::Arc::new(admin);
    let mut reported = std::collections::HashSet::new();
    loop {
        let mut missing = 0;
        for spec in &wanted.topics {
            let lookup_admin = std::sync::Arc::clone(&admin);
            let name = spec.name.clone();
            let found = tokio::task::spawn_blocking(move || {
                topics::lookup(lookup_admin.inner(), &name, Duration::from_secs(10))
            })
            .await;
            match found {
                Ok(Ok(Lookup::Exists)) => metrics.missing_topics().present(&spec.name),
                Ok(Ok(Lookup::Missing)) if wanted.create => {
                    match topics::create(&connection, CLIENT_ID, spec).await {
                        Ok(_) => {
                            info!(topic = %spec.name, partitions = spec.partitions,
                                replication = spec.replication, "created topic (-1: the broker's default)");
                            metrics.missing_topics().present(&spec.name);
                        }
                        Err(e) => {
                            missing += 1;
                            Failed::new(Failure::OutputTopic, &e)
                                .about(&spec.name)
                                .emit(&metrics);
                        }
                    }
                }
                Ok(Ok(Lookup::Missing)) => {
                    missing += 1;
                    metrics.missing_topics().missing(&spec.name);
                    if reported.insert(spec.name.clone()) {
                        error!(topic = %spec.name,
                            "topic does not exist: create it (the Helm chart's topics Job, deploy/topics.yaml), or pass --create-topic; its transitions wait in the store");
                    }
                }
                Ok(Ok(Lookup::Denied(code))) => {
                    missing += 1;
                    metrics.missing_topics().missing(&spec.name);
                    if reported.insert(spec.name.clone()) {
                        error!(topic = %spec.name, ?code, "Kafka does not let this principal see the topic: grant it (deploy/kafka-acls.sh)");
                    }
                }
                Ok(Err(e)) => {
                    missing += 1;
                    Failed::new(Failure::OutputTopic, &e)
                        .about(&spec.name)
                        .emit(&metrics);
                }
                Err(e) => {
                    missing += 1;
                    Failed::new(Failure::OutputTopic, &e)
                        .about(&spec.name)
                        .emit(&metrics);
                }
            }
        }
        if missing == 0 {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(RECHECK) => {}
            _ = shutdown.changed() => return,
        }
    }
}
