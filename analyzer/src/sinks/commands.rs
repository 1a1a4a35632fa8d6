//! Cleanup commands: each firing `ip-stuck-terminating` alert becomes a `CleanupCommand`
//! (remove kube-ovn's finalizer from that IP, at that uid and resourceVersion, while its
//! subnet is absent) on the commands topic, keyed by cluster id. The analyzer never talks
//! to the cluster; the collector of that cluster decides and acts.

use ipaudit_schemas::{encode, Alert, AlertStatus, CleanupAction, CleanupCommand, Stream};
use rdkafka::error::KafkaError;
use rdkafka::producer::FutureProducer;

use super::kafka::{idempotent_producer, send};
use super::SinkError;
use crate::rules::Rule;

/// The command a transition asks for, if any.
pub fn command_for(alert: &Alert, issued_at_ms: i64) -> Option<CleanupCommand> {
    if alert.rule != Rule::IpStuckTerminating.name() || alert.status != AlertStatus::Firing {
        return None;
    }
    // The IP's latest version the alert saw is the version the command may act on.
    let expected = alert
        .evidence
        .iter()
        .filter(|e| e.stream == Stream::Ip && e.name == alert.subject_name)
        .filter_map(|e| {
            e.resource_version
                .parse::<i64>()
                .ok()
                .map(|rv| (rv, &e.resource_version))
        })
        .max()?
        .1
        .clone();
    Some(CleanupCommand {
        command_id: format!("{}/{}", alert.alert_id, alert.fired_resource_version),
        cluster_id: alert.cluster_id.clone(),
        action: CleanupAction::RemoveFinalizer,
        target_kind: "IP".into(),
        target_name: alert.subject_name.clone(),
        target_uid: alert.subject_uid.clone(),
        expected_resource_version: expected,
        finalizer: None,
        subnet: alert.subnet.clone().unwrap_or_default(),
        reason_alert_id: alert.alert_id.clone(),
        issued_at_ms,
    })
}

/// Publishes cleanup commands.
pub struct CommandSink {
    topic: String,
    producer: FutureProducer,
}

impl CommandSink {
    /// An idempotent producer to `topic` (`ipaudit.commands`).
    pub fn new(
        brokers: &str,
        topic: &str,
        options: &[(String, String)],
    ) -> Result<Self, KafkaError> {
        Ok(CommandSink {
            topic: topic.to_owned(),
            producer: idempotent_producer(brokers, options)?,
        })
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub(super) async fn deliver(&self, alert: &Alert) -> Result<(), SinkError> {
        let Some(command) = command_for(alert, crate::live::now_ms()) else {
            return Ok(());
        };
        let payload = encode(&command).map_err(|e| SinkError::Kafka(e.to_string()))?;
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
    use ipaudit_schemas::{EventType, Evidence, Severity};

    fn alert(rule: &str, status: AlertStatus) -> Alert {
        let evidence = |stream, name: &str, rv: &str| Evidence {
            stream,
            event_type: EventType::Modified,
            name: name.into(),
            resource_version: rv.into(),
            time_ms: None,
            what: String::new(),
        };
        Alert {
            alert_id: "a1".into(),
            cluster_id: "prod".into(),
            rule: rule.into(),
            severity: Severity::Critical,
            status,
            subject_kind: "IP".into(),
            subject_name: "vm.ns".into(),
            subject_uid: "u1".into(),
            subnet: Some("net".into()),
            summary: String::new(),
            fix: None,
            epoch: 0,
            fired_at_ms: 0,
            resolved_at_ms: None,
            fired_resource_version: "120".into(),
            resolved_resource_version: None,
            evidence: vec![
                evidence(Stream::Subnet, "net", "130"),
                evidence(Stream::Ip, "vm.ns", "99"),
                evidence(Stream::Ip, "vm.ns", "118"),
            ],
        }
    }

    #[test]
    fn a_stuck_ip_gets_a_command_at_its_latest_version() {
        let command = command_for(&alert("ip-stuck-terminating", AlertStatus::Firing), 5).unwrap();
        assert_eq!(command.target_uid, "u1");
        assert_eq!(command.expected_resource_version, "118");
        assert_eq!(command.subnet, "net");
        assert_eq!(command.cluster_id, "prod");
        assert_eq!(command.command_id, "a1/120");
    }

    #[test]
    fn other_rules_and_resolutions_get_no_command() {
        assert!(command_for(&alert("subnet-deleted-before-ip", AlertStatus::Firing), 5).is_none());
        assert!(command_for(&alert("ip-stuck-terminating", AlertStatus::Resolved), 5).is_none());
    }
}
