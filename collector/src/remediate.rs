//! Executes cleanup commands, safely, when remediation is switched on (`--remediate`; off
//! by default, `dry-run` only logs). A command is for one cluster; before acting the
//! collector re-reads the live IP and its subnet, and acts only if the subnet is still
//! absent, the IP is terminating, and its uid and resourceVersion are still the ones the
//! command names. It then removes only kube-ovn's finalizer, with a JSON patch that tests
//! the resourceVersion and the finalizer, so it cannot hit a changed or recreated object.
//! Actions are rate-limited, each command is handled once, and every outcome (applied,
//! dry-run, skipped and why, failed) is recorded as a REMEDIATION event on the events
//! topic, so the audit log holds the action too.

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use ipaudit_schemas::{
    decode, is_kube_ovn_finalizer, CleanupAction, CleanupCommand, EventType, ObjectMeta,
    Remediation, RemediationOutcome, Stream, WatchEvent,
};
use kube::Client;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use crate::event::Stamp;
use crate::watch::{LiveChange, Observed};

/// Whether and how commands are executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemediationMode {
    /// Commands are not read at all.
    Off,
    /// Every check runs; the outcome is recorded; nothing is patched.
    DryRun,
    /// Checks pass, then the finalizer is removed.
    On,
}

/// Where commands come from and how fast they may be applied.
#[derive(Debug, Clone)]
pub struct RemediateConfig {
    /// Off, dry-run or on.
    pub mode: RemediationMode,
    /// The brokers and how to reach them.
    pub connection: ipaudit_kafka::Connection,
    /// The commands topic.
    pub topic: String,
    /// At most this many patches per minute.
    pub max_per_minute: usize,
    /// Consumer group (default: `ipaudit-remediator-<cluster id>`).
    pub group: Option<String>,
}

/// Why the remediator stopped.
#[derive(Debug, thiserror::Error)]
pub enum RemediateError {
    /// The consumer could not be created.
    #[error("commands consumer")]
    Kafka(#[from] KafkaError),
    /// The record of handled commands failed.
    #[error("record of handled commands")]
    Sqlite(#[from] rusqlite::Error),
}

/// Runs until `shutdown`; outcomes go to `events` like any observed event.
pub async fn run_remediator(
    client: Client,
    config: RemediateConfig,
    stamp: Stamp,
    state_db: &Path,
    events: mpsc::Sender<Observed>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), RemediateError> {
    if config.mode == RemediationMode::Off {
        return Ok(());
    }
    let handled = Connection::open(state_db)?;
    handled.busy_timeout(Duration::from_secs(10))?;
    handled.execute_batch(
        "CREATE TABLE IF NOT EXISTS handled_commands (command_id TEXT PRIMARY KEY, outcome TEXT NOT NULL, reason TEXT NOT NULL)",
    )?;
    let mut consumer_config = ClientConfig::new();
    consumer_config
        .set(
            "group.id",
            config
                .group
                .clone()
                .unwrap_or_else(|| format!("ipaudit-remediator-{}", stamp.cluster_id)),
        )
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "true");
    config.connection.apply(&mut consumer_config);
    let consumer: StreamConsumer = consumer_config.create()?;
    consumer.subscribe(&[&config.topic])?;
    info!(mode = ?config.mode, topic = %config.topic, "remediation enabled");
    let mut recent: VecDeque<Instant> = VecDeque::new();
    loop {
        let message = tokio::select! {
            message = consumer.recv() => message,
            _ = shutdown.changed() => return Ok(()),
        };
        let message = match message {
            Ok(m) => m,
            Err(error) => {
                warn!(%error, "commands consumer error");
                continue;
            }
        };
        let command = match message.payload().map(decode::<CleanupCommand>) {
            Some(Ok(command)) => command,
            Some(Err(error)) => {
                warn!(%error, offset = message.offset(), "undecodable command ignored");
                continue;
            }
            None => continue,
        };
        if command.cluster_id != stamp.cluster_id {
            continue;
        }
        let seen: Option<String> = handled
            .query_row(
                "SELECT outcome FROM handled_commands WHERE command_id = ?1",
                [&command.command_id],
                |r| r.get(0),
            )
            .optional()?;
        if seen.is_some() {
            continue;
        }
        while recent
            .front()
            .is_some_and(|t| t.elapsed() > Duration::from_secs(60))
        {
            recent.pop_front();
        }
        if recent.len() >= config.max_per_minute.max(1) {
            let wait = recent.front().map_or(Duration::ZERO, |t| {
                Duration::from_secs(60).saturating_sub(t.elapsed())
            });
            info!(?wait, "remediation rate limit reached; waiting");
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => return Ok(()),
            }
        }
        let (outcome, reason, finalizer, rv) = execute(&client, config.mode, &command).await;
        if outcome == RemediationOutcome::Applied {
            recent.push_back(Instant::now());
        }
        info!(command = %command.command_id, ip = %command.target_name, outcome = outcome.as_str(), %reason, "cleanup command handled");
        handled.execute(
            "INSERT OR IGNORE INTO handled_commands (command_id, outcome, reason) VALUES (?1, ?2, ?3)",
            params![command.command_id, outcome.as_str(), reason],
        )?;
        let event = outcome_event(&stamp, &command, outcome, reason, finalizer, &rv);
        if events
            .send(Observed {
                event,
                live: LiveChange::None,
                resume_from: None,
            })
            .await
            .is_err()
        {
            return Ok(());
        }
    }
}

fn outcome_event(
    stamp: &Stamp,
    command: &CleanupCommand,
    outcome: RemediationOutcome,
    reason: String,
    finalizer: Option<String>,
    resource_version: &str,
) -> WatchEvent {
    // Sequence 0: not part of the IP watch's own sequence.
    let mut event = stamp.marker(Stream::Ip, EventType::Remediation, resource_version, 0);
    event.metadata = Some(ObjectMeta {
        uid: command.target_uid.clone(),
        name: command.target_name.clone(),
        ..ObjectMeta::default()
    });
    event.remediation = Some(Remediation {
        command_id: command.command_id.clone(),
        reason_alert_id: command.reason_alert_id.clone(),
        action: match command.action {
            CleanupAction::RemoveFinalizer => "REMOVE_FINALIZER".into(),
            CleanupAction::Nudge => "NUDGE".into(),
        },
        outcome,
        reason,
        finalizer,
    });
    event
}

type Outcome = (RemediationOutcome, String, Option<String>, String);

/// Runs the checks and, if they pass and remediation is on, the patch.
async fn execute(client: &Client, mode: RemediationMode, command: &CleanupCommand) -> Outcome {
    let skipped =
        |reason: String, rv: &str| (RemediationOutcome::Skipped, reason, None, rv.to_owned());
    let expected = command.expected_resource_version.as_str();
    if command.action != CleanupAction::RemoveFinalizer || command.target_kind != "IP" {
        return skipped(
            format!(
                "unsupported action {:?} on {}",
                command.action, command.target_kind
            ),
            expected,
        );
    }
    let ip_path = format!("/apis/kubeovn.io/v1/ips/{}", command.target_name);
    let ip = match get(client, &ip_path).await {
        Ok(Some(ip)) => ip,
        Ok(None) => return skipped("the IP no longer exists".into(), expected),
        Err(e) => {
            return (
                RemediationOutcome::Failed,
                format!("cannot read the IP: {e}"),
                None,
                expected.to_owned(),
            )
        }
    };
    let uid = ip
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let rv = ip
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if uid != command.target_uid {
        return skipped(
            format!(
                "uid changed: the IP was recreated ({uid} is not {})",
                command.target_uid
            ),
            &rv,
        );
    }
    if rv != expected {
        return skipped(format!("resourceVersion changed ({rv} is not {expected}): the IP was updated since the alert"), &rv);
    }
    if ip
        .pointer("/metadata/deletionTimestamp")
        .is_none_or(Value::is_null)
    {
        return skipped("the IP is not terminating".into(), &rv);
    }
    let subnet = ip
        .pointer("/spec/subnet")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if subnet != command.subnet {
        return skipped(
            format!("the IP names subnet {subnet:?}, not {:?}", command.subnet),
            &rv,
        );
    }
    match get(client, &format!("/apis/kubeovn.io/v1/subnets/{subnet}")).await {
        Ok(None) => {}
        Ok(Some(_)) => {
            return skipped(
                format!("subnet {subnet} exists: kube-ovn can finish the deletion itself"),
                &rv,
            )
        }
        Err(e) => {
            return (
                RemediationOutcome::Failed,
                format!("cannot read subnet {subnet}: {e}"),
                None,
                rv,
            )
        }
    }
    let finalizers: Vec<&str> = ip
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some((index, finalizer)) = finalizers
        .iter()
        .enumerate()
        .find(|(_, f)| is_kube_ovn_finalizer(f))
    else {
        return skipped("the IP has no kube-ovn finalizer".into(), &rv);
    };
    let finalizer = (*finalizer).to_owned();
    if mode == RemediationMode::DryRun {
        return (
            RemediationOutcome::DryRun,
            format!("all checks passed; would remove {finalizer}"),
            Some(finalizer),
            rv,
        );
    }
    let patch = json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": finalizer},
        {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
    ]);
    let request = http::Request::patch(&ip_path)
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        .body(serde_json::to_vec(&patch).unwrap_or_default());
    let request = match request {
        Ok(r) => r,
        Err(e) => {
            return (
                RemediationOutcome::Failed,
                format!("cannot build the patch: {e}"),
                Some(finalizer),
                rv,
            )
        }
    };
    match client.request::<Value>(request).await {
        Ok(_) => (
            RemediationOutcome::Applied,
            format!("removed {finalizer} at resourceVersion {rv}"),
            Some(finalizer),
            rv,
        ),
        Err(kube::Error::Api(status))
            if status.code == 409 || status.code == 422 || status.code == 404 =>
        {
            (
                RemediationOutcome::Skipped,
                format!(
                    "the IP changed while patching ({}): {}",
                    status.code, status.message
                ),
                Some(finalizer),
                rv,
            )
        }
        Err(e) => (
            RemediationOutcome::Failed,
            format!("patch failed: {e}"),
            Some(finalizer),
            rv,
        ),
    }
}

/// GETs an object; `None` when it does not exist.
async fn get(client: &Client, path: &str) -> Result<Option<Value>, kube::Error> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    match client.request::<Value>(request).await {
        Ok(object) => Ok(Some(object)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}
