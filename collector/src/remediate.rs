//! Executes cleanup commands, safely, when remediation is switched on (`--remediate`; off
//! by default, `dry-run` only checks and records). The commands topic is an instruction
//! channel into the cluster, and Kafka may be shared, so a command is obeyed only if:
//!
//! - it is for this cluster;
//! - with a commands key (`--commands-key-file`), it carries a valid HMAC-SHA256 signature
//!   made with that key (see `ipaudit_schemas::command`);
//! - its alert fired less than `--remediate-max-age` ago (a new consumer group replaying
//!   the topic, or a copy of an old command, is refused);
//! - its names are DNS-1123 subdomains (they go into the URL path);
//! - re-reading the live IP and its subnet shows the subnet still absent (a 404 whose
//!   `Status` names that subnet; the 404 of a resource type that is missing, as during a
//!   CRD reinstall, is a failure to retry, not an absent subnet), the IP terminating, and
//!   its uid and resourceVersion still the ones the command names.
//!
//! It then removes only kube-ovn's finalizer, with a JSON patch that tests the
//! resourceVersion and the finalizer, so it cannot hit a changed or recreated object: the
//! checks and the write are [`ipaudit_cleanup`]'s, which `kubectl ipaudit release` runs too.
//! Patches are rate-limited. Every outcome (applied, dry-run, skipped or refused and why,
//! failed) is recorded as a REMEDIATION event on the events topic, so the audit log holds
//! the action too.
//!
//! Delivery is at least once and idempotent by command id: a command's offset is committed
//! only after its outcome is recorded (a row in the `remediation_commands` table of the
//! state database and the event handed to the outbox writer). A FAILED outcome (the API
//! server did not answer as expected) is retried with exponential backoff up to
//! `--remediate-max-attempts` times. A DRY_RUN outcome is not final: a collector started
//! with `--remediate on` re-runs the commands it only dry-ran (within their max age).
//! Refusals for a bad signature are not stored under the command id, so that a forged
//! command cannot take the id of a real one.

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use ipaudit_runtime::clock::now_ms;
use ipaudit_runtime::kafka::NoOffset;
use ipaudit_schemas::{
    decode, CleanupAction, CleanupCommand, CommandKey, EventType, NameError, ObjectMeta,
    Remediation, RemediationOutcome, SignatureError, Stream, WatchEvent,
};
use kube::Client;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, info_span, warn, Instrument};

use crate::metrics::Metrics;
use crate::observed::{LiveChange, Observed};
use crate::telemetry::RemediationOutcomeRecorded;
use crate::telemetry::{Failed, Failure};
use crate::watch::event::Stamp;
use ipaudit_cleanup::{Cleanup, Mode, Outcome};
use ipaudit_runtime::telemetry::InternalEvent;

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

/// Where commands come from, who may send them, and how fast they may be applied.
#[derive(Debug, Clone)]
pub struct RemediateConfig {
    /// Off, dry-run or on.
    pub mode: RemediationMode,
    /// The brokers and how to reach them.
    pub connection: ipaudit_runtime::kafka::Connection,
    /// The commands topic.
    pub topic: String,
    /// At most this many patches per minute.
    pub max_per_minute: usize,
    /// Consumer group (default: `ipaudit-remediator-<cluster id>`).
    pub group: Option<String>,
    /// With a key, only commands signed with it are obeyed.
    pub key: Option<CommandKey>,
    /// Commands whose alert fired longer ago than this are refused.
    pub max_age: Duration,
    /// A command that FAILED is tried at most this many times in all.
    pub max_attempts: u32,
    /// Wait before the first retry; doubles with each further one (at most 5 minutes).
    pub retry_backoff: Duration,
}

/// Why the remediator stopped. All but [`RemediateError::Denied`] are worth a restart of
/// the process: the consumer or the state database may work again.
#[derive(Debug, thiserror::Error)]
pub enum RemediateError {
    /// The consumer could not be created or subscribed.
    #[error("commands consumer")]
    Kafka(#[from] KafkaError),
    /// Kafka's authorizer refuses this collector's principal what the remediator needs
    /// (read on the commands topic, or its consumer group). Not retried: nothing changes
    /// until an operator grants it, and a silent retry loop would look like a quiet
    /// cluster.
    #[error(
        "Kafka denies this collector's principal {what} ({code}): grant it with kafka-acls (deploy/kafka-acls.sh), or run as a principal that has it"
    )]
    Denied {
        /// What is denied, e.g. "read on topic ipaudit.commands".
        what: String,
        /// Kafka's error.
        code: rdkafka::types::RDKafkaErrorCode,
    },
    /// The record of handled commands failed.
    #[error("record of handled commands")]
    Sqlite(#[from] rusqlite::Error),
    /// The record of handled commands could not be opened.
    #[error("record of handled commands")]
    Open(#[from] ipaudit_runtime::sqlite::SqliteError),
}

/// Why a command is refused before anything is read from the cluster. None is retryable:
/// the same bytes are refused again.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    /// Not a CleanupCommand.
    #[error("undecodable command: {0}")]
    Undecodable(#[source] ipaudit_schemas::DecodeError),
    /// Unsigned or wrongly signed while this collector has a key.
    #[error("{0}")]
    Signature(#[source] SignatureError),
    /// A name that cannot be put into a URL path.
    #[error("{0}")]
    Name(#[source] NameError),
    /// Older than `--remediate-max-age`.
    #[error("expired: its alert fired {age} ago, longer than --remediate-max-age {max}")]
    Expired {
        /// How old.
        age: humantime::Duration,
        /// The limit.
        max: humantime::Duration,
    },
}

/// The last outcome of a command and what is still to be done, as stored.
struct Stored {
    outcome: String,
    retry_at_ms: Option<i64>,
}

/// The remediator's record in the state database: one row per command id obeyed (or
/// refused for its age or names), with the message as received so that it can be retried
/// or re-run with `--remediate on` after a dry run.
struct HandledCommands {
    // A Mutex only to make the remediator Sync across awaits; one task uses it.
    db: std::sync::Mutex<Connection>,
}

impl HandledCommands {
    fn open(path: &Path) -> Result<HandledCommands, RemediateError> {
        let db = ipaudit_runtime::sqlite::open(path, ipaudit_runtime::sqlite::Durability::Full)?;
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS remediation_commands (
                command_id TEXT PRIMARY KEY,
                payload BLOB NOT NULL,
                outcome TEXT NOT NULL,
                reason TEXT NOT NULL,
                attempts INTEGER NOT NULL,
                retry_at_ms INTEGER
            );
            CREATE INDEX IF NOT EXISTS remediation_commands_due
                ON remediation_commands (retry_at_ms) WHERE retry_at_ms IS NOT NULL;",
        )?;
        // Before it, handled commands were kept without their message: they stay handled.
        let old: bool = db.query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'handled_commands'",
            [],
            |r| r.get(0),
        )?;
        if old {
            db.execute_batch(
                "BEGIN;
                 INSERT OR IGNORE INTO remediation_commands
                     SELECT command_id, x'', outcome, reason, 1, NULL FROM handled_commands;
                 DROP TABLE handled_commands;
                 COMMIT;",
            )?;
        }
        Ok(HandledCommands {
            db: std::sync::Mutex::new(db),
        })
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, command_id: &str) -> Result<Option<Stored>, rusqlite::Error> {
        self.db()
            .query_row(
                "SELECT outcome, retry_at_ms FROM remediation_commands WHERE command_id = ?1",
                [command_id],
                |r| {
                    Ok(Stored {
                        outcome: r.get(0)?,
                        retry_at_ms: r.get(1)?,
                    })
                },
            )
            .optional()
    }

    fn attempts(&self, command_id: &str) -> Result<u32, rusqlite::Error> {
        Ok(self
            .db()
            .query_row(
                "SELECT attempts FROM remediation_commands WHERE command_id = ?1",
                [command_id],
                |r| r.get::<_, u32>(0),
            )
            .optional()?
            .unwrap_or(0))
    }

    fn record(
        &self,
        command_id: &str,
        payload: &[u8],
        outcome: &str,
        reason: &str,
        attempts: u32,
        retry_at_ms: Option<i64>,
    ) -> Result<(), rusqlite::Error> {
        self.db().execute(
            "INSERT INTO remediation_commands (command_id, payload, outcome, reason, attempts, retry_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (command_id) DO UPDATE SET outcome = ?3, reason = ?4, attempts = ?5, retry_at_ms = ?6",
            params![command_id, payload, outcome, reason, attempts, retry_at_ms],
        )?;
        Ok(())
    }

    /// Commands only dry-run so far become due now (a collector switched to `on`).
    fn rerun_dry_runs(&self, now_ms: i64) -> Result<usize, rusqlite::Error> {
        self.db().execute(
            "UPDATE remediation_commands SET retry_at_ms = ?1, attempts = 0
             WHERE outcome = ?2 AND length(payload) > 0",
            params![now_ms, RemediationOutcome::DryRun.as_str()],
        )
    }

    /// The command due first: (id, payload, due at).
    fn next_due(&self) -> Result<Option<(String, Vec<u8>, i64)>, rusqlite::Error> {
        self.db()
            .query_row(
                "SELECT command_id, payload, retry_at_ms FROM remediation_commands
                 WHERE retry_at_ms IS NOT NULL ORDER BY retry_at_ms LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
    }
}

/// The remediator's working state.
struct Remediator {
    client: Client,
    config: RemediateConfig,
    stamp: Stamp,
    handled: HandledCommands,
    events: mpsc::Sender<Observed>,
    recent: VecDeque<Instant>,
    metrics: Metrics,
}

/// A refusal before anything is read, as an outcome to record.
fn refused(refusal: &Refusal, rv: &str) -> Outcome {
    Outcome::skipped(format!("refused: {refusal}"), rv)
}

/// Runs until `shutdown`; outcomes go to `events` like any observed event.
pub async fn run_remediator(
    client: Client,
    config: RemediateConfig,
    stamp: Stamp,
    state_db: &Path,
    events: mpsc::Sender<Observed>,
    metrics: Metrics,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), RemediateError> {
    if config.mode == RemediationMode::Off {
        return Ok(());
    }
    metrics.remediating();
    let handled = HandledCommands::open(state_db)?;
    if config.mode == RemediationMode::On {
        let rerun = handled.rerun_dry_runs(now_ms())?;
        if rerun > 0 {
            info!(
                commands = rerun,
                "remediation is on: commands only dry-run so far are run again"
            );
        }
    }
    // Offsets are committed by hand, each after its command's outcome is recorded.
    let group = config
        .group
        .clone()
        .unwrap_or_else(|| format!("ipaudit-remediator-{}", stamp.cluster_id));
    let consumer: StreamConsumer = config
        .connection
        .group_consumer("ipaudit-collector", &group, None, NoOffset::Earliest)
        .create()?;
    consumer.subscribe(&[&config.topic])?;
    if config.key.is_none() {
        warn!("no commands key (--commands-key-file): unsigned commands are obeyed; anyone who can write the commands topic can remove finalizers in this cluster");
    }
    info!(mode = ?config.mode, topic = %config.topic, signed_only = config.key.is_some(), max_age = %humantime::Duration::from(config.max_age), "remediation enabled");
    let mut remediator = Remediator {
        client,
        config,
        stamp,
        handled,
        events,
        recent: VecDeque::new(),
        metrics,
    };
    loop {
        let due_in = remediator
            .handled
            .next_due()?
            .map(|(_, _, at)| Duration::from_millis(u64::try_from(at - now_ms()).unwrap_or(0)));
        let message = tokio::select! {
            message = consumer.recv() => Some(message),
            _ = tokio::time::sleep(due_in.unwrap_or(Duration::from_secs(3600))), if due_in.is_some() => None,
            _ = shutdown.changed() => return Ok(()),
        };
        let open = match message {
            None => remediator.retry_due(&mut shutdown).await?,
            Some(Ok(message)) => {
                let open = remediator.on_message(&message, &mut shutdown).await?;
                if open {
                    // Recorded: the command will not be lost if the process dies now. A
                    // failed commit only means the command is read again, and its id is
                    // recorded: it is not run twice.
                    if let Err(error) = consumer.commit_message(&message, CommitMode::Sync) {
                        Failed::new(Failure::CommandCommit, &error)
                            .about(&message.offset())
                            .emit(&remediator.metrics);
                    }
                }
                open
            }
            Some(Err(KafkaError::MessageConsumption(
                code @ (rdkafka::types::RDKafkaErrorCode::TopicAuthorizationFailed
                | rdkafka::types::RDKafkaErrorCode::GroupAuthorizationFailed),
            ))) => {
                let what = if code == rdkafka::types::RDKafkaErrorCode::TopicAuthorizationFailed {
                    format!("read on topic {}", remediator.config.topic)
                } else {
                    format!("the consumer group {group}")
                };
                return Err(RemediateError::Denied { what, code });
            }
            Some(Err(error)) => {
                Failed::new(Failure::CommandsConsumer, &error).emit(&remediator.metrics);
                true
            }
        };
        if !open {
            return Ok(());
        }
    }
}

impl Remediator {
    /// Handles one message; `false` when the process is shutting down (nothing recorded).
    async fn on_message(
        &mut self,
        message: &BorrowedMessage<'_>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<bool, RemediateError> {
        let payload = message.payload().unwrap_or_default();
        let command = match decode::<CleanupCommand>(payload) {
            Ok(command) => command,
            Err(error) => {
                // Any writer of the topic can put bytes there: record them, never obey.
                let id = format!(
                    "{}/{}/{}",
                    message.topic(),
                    message.partition(),
                    message.offset()
                );
                Failed::new(Failure::CommandUndecodable, &error)
                    .about(&id)
                    .emit(&self.metrics);
                let refusal = Refusal::Undecodable(error);
                let command = unreadable_command(&id, &self.stamp.cluster_id);
                return Ok(self.emit(&command, refused(&refusal, "")).await);
            }
        };
        if command.cluster_id != self.stamp.cluster_id {
            return Ok(true);
        }
        let span = info_span!("command", cluster = %command.cluster_id, command = %command.command_id, object = %command.target_name, resource_version = %command.expected_resource_version);
        if let Some(key) = &self.config.key {
            if let Err(error) = key.verify(&command) {
                // Not stored under its id: a forged command must not take a real one's id.
                let refusal = Refusal::Signature(error);
                span.in_scope(|| warn!(reason = %refusal, "command refused"));
                let outcome = refused(&refusal, &command.expected_resource_version);
                return Ok(self.emit(&command, outcome).await);
            }
        }
        if let Some(stored) = self.handled.get(&command.command_id)? {
            // Seen before (a redelivery, or a copy): its outcome is recorded already, and
            // retries and dry-run re-runs are driven from the record of handled commands.
            span.in_scope(|| debug!(outcome = %stored.outcome, retry_pending = stored.retry_at_ms.is_some(), "command seen before"));
            return Ok(true);
        }
        self.attempt(command, payload, shutdown)
            .instrument(span)
            .await
    }

    /// Retries the command due first.
    async fn retry_due(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<bool, RemediateError> {
        let Some((id, payload, _)) = self.handled.next_due()? else {
            return Ok(true);
        };
        let command = match decode::<CleanupCommand>(&payload) {
            Ok(command) => command,
            Err(error) => {
                // It decoded when it came; a schema this build does not know. Give up on it.
                Failed::new(Failure::StoredCommandUndecodable, &error)
                    .about(&id)
                    .emit(&self.metrics);
                self.handled.record(
                    &id,
                    &payload,
                    RemediationOutcome::Failed.as_str(),
                    &format!("stored command no longer decodes: {error}"),
                    self.config.max_attempts,
                    None,
                )?;
                return Ok(true);
            }
        };
        let span = info_span!("command", cluster = %command.cluster_id, command = %command.command_id, object = %command.target_name, resource_version = %command.expected_resource_version, retry = true);
        if let Some(key) = &self.config.key {
            // The key may have changed since the command was stored.
            if let Err(error) = key.verify(&command) {
                let refusal = Refusal::Signature(error);
                let outcome = refused(&refusal, &command.expected_resource_version);
                self.handled.record(
                    &id,
                    &payload,
                    outcome.outcome.as_str(),
                    &outcome.reason,
                    self.handled.attempts(&id)?,
                    None,
                )?;
                return Ok(self.emit(&command, outcome).await);
            }
        }
        self.attempt(command, &payload, shutdown)
            .instrument(span)
            .await
    }

    /// Checks, executes, records and emits one attempt at a command.
    async fn attempt(
        &mut self,
        command: CleanupCommand,
        payload: &[u8],
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<bool, RemediateError> {
        let attempts = self.handled.attempts(&command.command_id)? + 1;
        let outcome = match self.precheck(&command) {
            Err(refusal) => {
                warn!(reason = %refusal, "command refused");
                refused(&refusal, &command.expected_resource_version)
            }
            Ok(()) => {
                if !self.wait_for_rate_limit(shutdown).await {
                    return Ok(false);
                }
                let outcome = execute(&self.client, self.config.mode, &command).await;
                if outcome.outcome == RemediationOutcome::Applied {
                    self.recent.push_back(Instant::now());
                }
                outcome
            }
        };
        let mut outcome = outcome;
        let retry_at_ms = if outcome.outcome == RemediationOutcome::Failed {
            if attempts < self.config.max_attempts {
                let backoff = self
                    .config
                    .retry_backoff
                    .saturating_mul(1 << (attempts - 1).min(16))
                    .min(Duration::from_secs(300));
                outcome.reason = format!(
                    "{} (attempt {attempts} of {}; retrying in {})",
                    outcome.reason,
                    self.config.max_attempts,
                    humantime::Duration::from(backoff)
                );
                Some(now_ms() + i64::try_from(backoff.as_millis()).unwrap_or(i64::MAX / 2))
            } else {
                outcome.reason = format!(
                    "{} (attempt {attempts} of {}; giving up)",
                    outcome.reason, self.config.max_attempts
                );
                None
            }
        } else {
            None
        };
        info!(outcome = outcome.outcome.as_str(), reason = %outcome.reason, "cleanup command handled");
        self.handled.record(
            &command.command_id,
            payload,
            outcome.outcome.as_str(),
            &outcome.reason,
            attempts,
            retry_at_ms,
        )?;
        Ok(self.emit(&command, outcome).await)
    }

    /// The checks that need no API server: names and age.
    fn precheck(&self, command: &CleanupCommand) -> Result<(), Refusal> {
        command.check_names().map_err(Refusal::Name)?;
        let age_ms = now_ms().saturating_sub(command.age_reference_ms());
        let age = Duration::from_millis(u64::try_from(age_ms).unwrap_or(0));
        if age > self.config.max_age {
            return Err(Refusal::Expired {
                age: Duration::from_secs(age.as_secs()).into(),
                max: self.config.max_age.into(),
            });
        }
        Ok(())
    }

    /// Waits while the per-minute budget of patches is spent; `false` on shutdown.
    async fn wait_for_rate_limit(&mut self, shutdown: &mut watch::Receiver<bool>) -> bool {
        let minute = Duration::from_secs(60);
        while self.recent.front().is_some_and(|t| t.elapsed() > minute) {
            self.recent.pop_front();
        }
        if self.recent.len() >= self.config.max_per_minute.max(1) {
            let wait = self
                .recent
                .front()
                .map_or(Duration::ZERO, |t| minute.saturating_sub(t.elapsed()));
            info!(?wait, "remediation rate limit reached; waiting");
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => return false,
            }
        }
        true
    }

    /// Hands the outcome event to the outbox writer; `false` when it is gone (shutdown).
    async fn emit(&self, command: &CleanupCommand, outcome: Outcome) -> bool {
        RemediationOutcomeRecorded {
            outcome: outcome.outcome,
        }
        .emit(&self.metrics);
        let event = outcome_event(&self.stamp, command, outcome);
        self.events
            .send(Observed {
                event,
                live: LiveChange::None,
                resume_from: None,
            })
            .await
            .is_ok()
    }
}

/// A stand-in for a message that is not a command, so that its refusal can be recorded.
fn unreadable_command(id: &str, cluster_id: &str) -> CleanupCommand {
    CleanupCommand {
        command_id: id.to_owned(),
        cluster_id: cluster_id.to_owned(),
        action: CleanupAction::RemoveFinalizer,
        target_kind: String::new(),
        target_name: String::new(),
        target_uid: String::new(),
        expected_resource_version: String::new(),
        finalizer: None,
        subnet: String::new(),
        reason_alert_id: String::new(),
        issued_at_ms: 0,
        alert_fired_at_ms: 0,
        target_namespace: None,
        address: None,
        signature: None,
    }
}

fn outcome_event(stamp: &Stamp, command: &CleanupCommand, outcome: Outcome) -> WatchEvent {
    // Sequence 0: not part of the IP watch's own sequence.
    let mut event = stamp.marker(
        Stream::Ip,
        EventType::Remediation,
        &outcome.resource_version,
        0,
    );
    event.metadata = Some(ObjectMeta {
        uid: command.target_uid.clone(),
        name: command.target_name.clone(),
        ..ObjectMeta::default()
    });
    event.remediation = Some(Box::new(Remediation {
        command_id: command.command_id.clone(),
        reason_alert_id: command.reason_alert_id.clone(),
        action: command.action.as_str().to_owned(),
        outcome: outcome.outcome,
        reason: outcome.reason,
        finalizer: outcome.finalizer,
    }));
    event
}

/// The cleanup a command asks for, if this collector knows it: the command carries the
/// alert's typed cleanup, field by field.
pub fn cleanup_of(command: &CleanupCommand) -> Option<Cleanup> {
    let target_stream = ipaudit_schemas::kinds::stream_of_target_kind(&command.target_kind)?;
    Cleanup::of_alert(&ipaudit_schemas::Cleanup {
        action: command.action,
        target_stream,
        target_name: command.target_name.clone(),
        target_namespace: command.target_namespace.clone(),
        target_uid: command.target_uid.clone(),
        resource_version: command.expected_resource_version.clone(),
        finalizer: command.finalizer.clone().unwrap_or_default(),
        pool: command.subnet.clone(),
        address: command.address.clone(),
    })
}

/// Runs a command's cleanup in `mode` (see [`ipaudit_cleanup`]).
pub async fn execute(client: &Client, mode: RemediationMode, command: &CleanupCommand) -> Outcome {
    let Some(cleanup) = cleanup_of(command) else {
        return Outcome::skipped(
            format!(
                "unsupported action {:?} on {}",
                command.action, command.target_kind
            ),
            &command.expected_resource_version,
        );
    };
    let mode = match mode {
        RemediationMode::On => Mode::Apply,
        RemediationMode::DryRun | RemediationMode::Off => Mode::DryRun,
    };
    ipaudit_cleanup::apply(client, mode, &cleanup).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_names_a_calico_v3_target_by_its_resource_and_finds_that_group() {
        let command = |target_kind: &str, action: CleanupAction| CleanupCommand {
            target_kind: target_kind.to_owned(),
            action,
            target_name: "10-244-1-0-26".into(),
            target_uid: "b1".into(),
            expected_resource_version: "9".into(),
            address: Some("10.244.1.1".into()),
            ..unreadable_command("c1", "prod")
        };
        let stream_of = |c: &CleanupCommand| cleanup_of(c).map(|cleanup| cleanup.target().stream);
        assert_eq!(
            stream_of(&command(
                &ipaudit_schemas::kinds::target_kind_of(Stream::CalicoV3IpamBlock),
                CleanupAction::RemoveAllocation
            )),
            Some(Stream::CalicoV3IpamBlock)
        );
        assert_eq!(
            stream_of(&command("IPAMBlock", CleanupAction::RemoveAllocation)),
            Some(Stream::CalicoIpamBlock)
        );
        assert_eq!(
            stream_of(&command("IPPool", CleanupAction::RemoveAllocation)),
            Some(Stream::IpPool),
            "whereabouts' IPPool, as before"
        );
        assert_eq!(
            stream_of(&command("CiliumEndpoint", CleanupAction::Delete)),
            Some(Stream::CiliumEndpoint)
        );
        assert_eq!(
            stream_of(&command("NoSuchKind", CleanupAction::Delete)),
            None
        );
    }

    #[test]
    fn the_ledger_keeps_old_handled_commands_handled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbox.db");
        {
            let db = Connection::open(&path).unwrap();
            db.execute_batch(
                "CREATE TABLE handled_commands (command_id TEXT PRIMARY KEY, outcome TEXT NOT NULL, reason TEXT NOT NULL);
                 INSERT INTO handled_commands VALUES ('c1', 'applied', 'removed');",
            )
            .unwrap();
        }
        let handled = HandledCommands::open(&path).unwrap();
        let stored = handled.get("c1").unwrap().unwrap();
        assert_eq!(stored.outcome, "applied");
        assert_eq!(stored.retry_at_ms, None);
        // Opening twice is fine.
        drop(handled);
        assert!(HandledCommands::open(&path)
            .unwrap()
            .get("c1")
            .unwrap()
            .is_some());
    }

    #[test]
    fn dry_runs_become_due_when_remediation_is_switched_on() {
        let dir = tempfile::tempdir().unwrap();
        let handled = HandledCommands::open(&dir.path().join("outbox.db")).unwrap();
        handled
            .record("c1", b"bytes", "dry_run", "would remove", 1, None)
            .unwrap();
        handled
            .record("c2", b"bytes", "applied", "removed", 1, None)
            .unwrap();
        assert!(handled.next_due().unwrap().is_none());
        assert_eq!(handled.rerun_dry_runs(42).unwrap(), 1);
        let (id, payload, at) = handled.next_due().unwrap().unwrap();
        assert_eq!(
            (id.as_str(), payload.as_slice(), at),
            ("c1", &b"bytes"[..], 42)
        );
        assert_eq!(handled.attempts("c1").unwrap(), 0);
    }
}
