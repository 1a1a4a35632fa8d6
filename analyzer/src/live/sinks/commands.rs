//! Cleanup commands: each firing alert that carries a typed cleanup (`ip-stuck-terminating`:
//! remove the finalizer from that IP or SpiderEndpoint; `ip-without-pod` on a whereabouts
//! pool: remove that allocation; each at that uid and resourceVersion) becomes a `CleanupCommand` on the commands topic, keyed by cluster
//! id. The analyzer never talks to the cluster; the collector of that cluster decides and
//! acts.
//!
//! Each command carries the event time its alert fired (collectors refuse commands older
//! than their `--remediate-max-age`, so replaying the topic is harmless) and, with
//! `--commands-key-file`, an HMAC-SHA256 signature in its `signature` field (collectors
//! with the same key refuse every command without it).

use ipaudit_schemas::{
    encode, encode_as, Alert, AlertStatus, CleanupAction, CleanupCommand, CommandKey,
};
use rdkafka::error::KafkaError;
use rdkafka::producer::FutureProducer;

use super::kafka::{idempotent_producer, send};
use super::SinkError;

/// The command a transition asks for, if any: a firing alert's typed cleanup, which names
/// the exact version of the object it may act on.
pub fn command_for(alert: &Alert, issued_at_ms: i64) -> Option<CleanupCommand> {
    if alert.status != AlertStatus::Firing {
        return None;
    }
    let cleanup = alert.cleanup.as_ref()?;
    Some(CleanupCommand {
        command_id: format!("{}/{}", alert.alert_id, alert.fired_resource_version),
        cluster_id: alert.cluster_id.clone(),
        action: cleanup.action,
        target_kind: ipaudit_schemas::kinds::target_kind_of(cleanup.target_stream),
        target_name: cleanup.target_name.clone(),
        target_uid: cleanup.target_uid.clone(),
        expected_resource_version: cleanup.resource_version.clone(),
        finalizer: Some(cleanup.finalizer.clone()).filter(|f| !f.is_empty()),
        subnet: cleanup.pool.clone(),
        reason_alert_id: alert.alert_id.clone(),
        issued_at_ms,
        alert_fired_at_ms: alert.fired_at_ms,
        // A cluster-scoped target without an address keeps the command as collectors
        // before schema v3 read and verify it.
        target_namespace: cleanup.target_namespace.clone(),
        address: cleanup.address.clone(),
        signature: None,
    })
}

/// A command in the oldest schema that holds it: a command that needs nothing of schema v3
/// (a cluster-scoped target, no address, an action v2 knows) is written with v2, so that
/// collectors of the release before read it during a rolling upgrade (its signing layout
/// is v1's, unchanged).
pub fn encode_command(command: &CleanupCommand) -> Result<Vec<u8>, ipaudit_schemas::EncodeError> {
    let needs_v3 = command.target_namespace.is_some()
        || command.address.is_some()
        || !matches!(
            command.action,
            CleanupAction::RemoveFinalizer | CleanupAction::Nudge
        );
    if needs_v3 {
        encode(command)
    } else {
        encode_as(command, 2)
    }
}

/// Publishes cleanup commands, signed when it has a key.
pub struct CommandSink {
    topic: String,
    producer: FutureProducer,
    key: Option<CommandKey>,
}

impl CommandSink {
    /// An idempotent producer to `topic` (`ipaudit.commands`); commands are signed with
    /// `key` when one is given.
    pub fn new(
        connection: &ipaudit_runtime::kafka::Connection,
        topic: &str,
        key: Option<CommandKey>,
    ) -> Result<Self, KafkaError> {
        Ok(CommandSink {
            topic: topic.to_owned(),
            producer: idempotent_producer(connection)?,
            key,
        })
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub(super) async fn deliver(&self, alert: &Alert) -> Result<(), SinkError> {
        let Some(mut command) = command_for(alert, ipaudit_runtime::clock::now_ms()) else {
            return Ok(());
        };
        if let Some(key) = &self.key {
            key.sign(&mut command);
        }
        let payload = encode_command(&command).map_err(|e| SinkError::Kafka(e.to_string()))?;
        send(
            &self.producer,
            &self.topic,
            command.cluster_id.as_bytes(),
            &payload,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_schemas::{Cleanup, CleanupAction, Severity, Stream};

    fn alert(status: AlertStatus, cleanup: Option<Cleanup>) -> Alert {
        Alert {
            alert_id: "a1".into(),
            cluster_id: "prod".into(),
            rule: "ip-stuck-terminating".into(),
            severity: Severity::Critical,
            status,
            subject_kind: "IP".into(),
            subject_name: "vm.ns".into(),
            subject_uid: "u1".into(),
            subnet: Some("net".into()),
            summary: String::new(),
            // Text for a person; a command must never be read out of it.
            fix: Some("kubectl patch ip vm.ns ... \"value\":\"99\"".into()),
            epoch: 0,
            fired_at_ms: 4,
            resolved_at_ms: None,
            fired_resource_version: "120".into(),
            resolved_resource_version: None,
            evidence: Vec::new(),
            cleanup,
            url: None,
            namespace: None,
        }
    }

    fn cleanup() -> Cleanup {
        Cleanup {
            action: CleanupAction::RemoveFinalizer,
            target_stream: Stream::Ip,
            target_name: "vm.ns".into(),
            target_namespace: None,
            target_uid: "u1".into(),
            resource_version: "118".into(),
            finalizer: "kubeovn.io/kube-ovn-controller".into(),
            pool: "net".into(),
            address: None,
        }
    }

    #[test]
    fn a_firing_alert_with_a_cleanup_gets_a_command_for_exactly_that_version() {
        let command = command_for(&alert(AlertStatus::Firing, Some(cleanup())), 5).unwrap();
        assert_eq!(command.target_kind, "IP");
        assert_eq!(command.target_uid, "u1");
        assert_eq!(command.expected_resource_version, "118");
        assert_eq!(
            command.finalizer.as_deref(),
            Some("kubeovn.io/kube-ovn-controller")
        );
        assert_eq!(command.subnet, "net");
        assert_eq!(command.cluster_id, "prod");
        assert_eq!(command.command_id, "a1/120");
        assert_eq!(command.alert_fired_at_ms, 4, "the alert's firing time");
        assert_eq!(command.issued_at_ms, 5);
        assert_eq!(command.signature, None, "signed by the sink, with its key");
    }

    #[test]
    fn a_namespaced_target_and_an_address_travel_in_their_own_fields() {
        let allocation = Cleanup {
            action: CleanupAction::RemoveAllocation,
            target_stream: Stream::IpPool,
            target_name: "10.200.0.0-16".into(),
            target_namespace: Some("kube-system".into()),
            finalizer: String::new(),
            pool: "10.200.0.0-16".into(),
            address: Some("10.200.5.12".into()),
            ..cleanup()
        };
        let command = command_for(&alert(AlertStatus::Firing, Some(allocation)), 5).unwrap();
        assert_eq!(command.target_kind, "IPPool");
        assert_eq!(command.target_name, "10.200.0.0-16");
        assert_eq!(command.target_namespace.as_deref(), Some("kube-system"));
        assert_eq!(command.address.as_deref(), Some("10.200.5.12"));
        assert_eq!(command.finalizer, None);
        command.check_names().unwrap();
        // A kube-ovn IP's command stays as collectors before schema v3 read it.
        let ip = command_for(&alert(AlertStatus::Firing, Some(cleanup())), 5).unwrap();
        assert_eq!((ip.target_namespace, ip.address), (None, None));
    }

    #[test]
    fn a_kube_ovn_command_is_written_with_schema_v2_and_a_namespaced_one_with_v3() {
        use ipaudit_schemas::Record as _;
        let versions = CleanupCommand::schemas().versions();
        let key = CommandKey::from_secret("0123456789abcdef0123").unwrap();
        let mut ip = command_for(&alert(AlertStatus::Firing, Some(cleanup())), 5).unwrap();
        key.sign(&mut ip);
        let bytes = encode_command(&ip).unwrap();
        assert_eq!(
            bytes[2..10],
            versions[1].fingerprint,
            "v2, as older collectors read"
        );
        let read: CleanupCommand = ipaudit_schemas::decode(&bytes).unwrap();
        assert_eq!(read, ip);
        assert_eq!(key.verify(&read), Ok(()));
        let pool = Cleanup {
            action: CleanupAction::RemoveAllocation,
            target_stream: Stream::IpPool,
            target_namespace: Some("kube-system".into()),
            address: Some("10.200.5.12".into()),
            ..cleanup()
        };
        let v3 = command_for(&alert(AlertStatus::Firing, Some(pool)), 5).unwrap();
        let bytes = encode_command(&v3).unwrap();
        assert_eq!(bytes[2..10], versions[2].fingerprint);
        assert_eq!(
            ipaudit_schemas::decode::<CleanupCommand>(&bytes).unwrap(),
            v3
        );
    }

    #[test]
    fn alerts_without_a_cleanup_and_resolutions_get_no_command() {
        assert!(command_for(&alert(AlertStatus::Firing, None), 5).is_none());
        assert!(command_for(&alert(AlertStatus::Resolved, Some(cleanup())), 5).is_none());
    }
}
