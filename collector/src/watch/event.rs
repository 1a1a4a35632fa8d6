//! Kubernetes objects into `WatchEvent`s, stamped with who saw them when. Conversion is
//! lenient (see `ipaudit_schemas::kubernetes`): an object with unusable fields is kept
//! with what could be read, its raw JSON attached, and counted.

use ipaudit_schemas::convert::{from_object_of, ConvertError};
use ipaudit_schemas::kubernetes::FieldProblem;
use ipaudit_schemas::{EventType, ObjectMeta, Stream, WatchEvent};
use serde_json::Value;

/// Who records events, and how.
#[derive(Debug, Clone)]
pub struct Stamp {
    /// The cluster watched.
    pub cluster_id: String,
    /// This collector.
    pub collector_id: String,
    /// Attach every object's JSON (without managedFields), not only malformed ones.
    pub raw_objects: bool,
}

impl Stamp {
    fn stamp(&self, mut event: WatchEvent, sequence: i64) -> WatchEvent {
        event.cluster_id.clone_from(&self.cluster_id);
        event.collector_id.clone_from(&self.collector_id);
        event.sequence = sequence;
        event.observed_at_ms = Some(ipaudit_runtime::clock::now_ms());
        event
    }

    /// The event for an object as the API server sent it.
    pub fn object_event(
        &self,
        stream: Stream,
        event_type: EventType,
        object: &Value,
        sequence: i64,
    ) -> Result<(WatchEvent, Vec<FieldProblem>), ConvertError> {
        let converted = from_object_of(stream, event_type, object)?;
        let mut event = self.stamp(converted.event, sequence);
        if self.raw_objects || !converted.problems.is_empty() {
            event.raw_object = Some(raw_json(stream, object));
        }
        Ok((event, converted.problems))
    }

    /// A marker (BOOKMARK, SYNC_START, SYNC_END) at a resourceVersion.
    pub fn marker(
        &self,
        stream: Stream,
        event_type: EventType,
        resource_version: &str,
        sequence: i64,
    ) -> WatchEvent {
        self.stamp(
            WatchEvent::new(stream, event_type, resource_version),
            sequence,
        )
    }

    /// An object found missing by a relist at `list_rv`: deleted at or before it.
    pub fn deleted_on_relist(
        &self,
        stream: Stream,
        object: &LiveObject,
        list_rv: &str,
        sequence: i64,
    ) -> WatchEvent {
        let mut event = WatchEvent::new(stream, EventType::DeletedOnRelist, list_rv);
        event.metadata = Some(ObjectMeta {
            uid: object.uid.clone(),
            name: object.name.clone(),
            namespace: object.namespace.clone(),
            ..ObjectMeta::default()
        });
        self.stamp(event, sequence)
    }
}

/// What the collector remembers of a live object, to notice its deletion on a relist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveObject {
    /// metadata.uid.
    pub uid: String,
    /// metadata.name.
    pub name: String,
    /// metadata.namespace.
    pub namespace: Option<String>,
    /// Last resourceVersion seen.
    pub resource_version: String,
}

impl LiveObject {
    /// The live-object view of an event's object.
    pub fn of(event: &WatchEvent) -> Option<LiveObject> {
        let meta = event.metadata.as_ref()?;
        Some(LiveObject {
            uid: meta.uid.clone(),
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            resource_version: event.resource_version.clone(),
        })
    }
}

/// The annotation `kubectl apply` leaves: a copy of the whole object as applied, env
/// values included.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The object's JSON for the event, without what must not leave the cluster through the
/// audit log: managedFields (noise), the last-applied-configuration annotation, and for
/// Pods every container's env values (often credentials; `valueFrom` references stay).
fn raw_json(stream: Stream, object: &Value) -> String {
    let mut copy = object.clone();
    if let Some(meta) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            annotations.remove(LAST_APPLIED);
        }
    }
    if stream == Stream::Pod {
        drop_env_values(&mut copy);
    }
    copy.to_string()
}

/// Removes `value` from every env entry of every container, init container and ephemeral
/// container of a Pod.
fn drop_env_values(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers {
            let Some(env) = container.get_mut("env").and_then(Value::as_array_mut) else {
                continue;
            };
            for var in env.iter_mut().filter_map(Value::as_object_mut) {
                var.remove("value");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stamp() -> Stamp {
        Stamp {
            cluster_id: "c".into(),
            collector_id: "k".into(),
            raw_objects: false,
        }
    }

    #[test]
    fn a_malformed_object_is_kept_with_its_raw_json_and_its_problems() {
        let object = json!({"metadata": {"name": "a", "uid": "u", "resourceVersion": "7",
            "finalizers": "not-a-list", "managedFields": [{"time": "x"}]},
            "spec": {"subnet": 42}});
        let (event, problems) = stamp()
            .object_event(Stream::Ip, EventType::Modified, &object, 3)
            .unwrap();
        assert_eq!(event.resource_version_num, Some(7));
        assert_eq!(event.sequence, 3);
        assert_eq!(event.cluster_id, "c");
        let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, ["metadata.finalizers", "spec.subnet"]);
        let raw = event.raw_object.unwrap();
        assert!(raw.contains("not-a-list") && !raw.contains("managedFields"));
    }

    #[test]
    fn a_pods_raw_json_has_no_env_values_and_no_last_applied_configuration() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u",
            "resourceVersion": "9", "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{\"containers\":[{\"env\":[{\"name\":\"DB_PASSWORD\",\"value\":\"hunter2\"}]}]}}",
                "ovn.kubernetes.io/ip_address": "10.16.0.9"}},
            "spec": {
                "containers": [{"name": "app", "env": [
                    {"name": "DB_PASSWORD", "value": "hunter2"},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}],
                "initContainers": [{"name": "init", "env": [{"name": "SEED", "value": "s3cret"}]}],
                "ephemeralContainers": [{"name": "debug", "env": [{"name": "X", "value": "debug-secret"}]}]}});
        let raw = Stamp {
            raw_objects: true,
            ..stamp()
        };
        let event = raw
            .object_event(Stream::Pod, EventType::Added, &pod, 1)
            .unwrap()
            .0;
        let text = event.raw_object.unwrap();
        for secret in [
            "hunter2",
            "s3cret",
            "debug-secret",
            "last-applied-configuration",
        ] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        let kept: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            kept["spec"]["containers"][0]["env"][0],
            json!({"name": "DB_PASSWORD"})
        );
        assert_eq!(
            kept["spec"]["containers"][0]["env"][1]["valueFrom"]["secretKeyRef"]["name"],
            "s"
        );
        assert_eq!(
            kept["metadata"]["annotations"]["ovn.kubernetes.io/ip_address"],
            "10.16.0.9"
        );
    }

    #[test]
    fn a_malformed_pod_is_scrubbed_too() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u",
            "resourceVersion": "9", "finalizers": "not-a-list"},
            "spec": {"containers": [{"name": "app", "env": [{"name": "K", "value": "hunter2"}]}]}});
        let (event, problems) = stamp()
            .object_event(Stream::Pod, EventType::Added, &pod, 1)
            .unwrap();
        assert!(!problems.is_empty());
        let text = event.raw_object.unwrap();
        assert!(
            !text.contains("hunter2") && text.contains("not-a-list"),
            "{text}"
        );
    }

    #[test]
    fn a_well_formed_object_carries_no_raw_json_unless_asked() {
        let object = json!({"metadata": {"name": "a", "uid": "u", "resourceVersion": "7"}, "spec": {"subnet": "s"}});
        let (event, problems) = stamp()
            .object_event(Stream::Ip, EventType::Added, &object, 1)
            .unwrap();
        assert!(problems.is_empty() && event.raw_object.is_none());
        let raw = Stamp {
            raw_objects: true,
            ..stamp()
        };
        assert!(raw
            .object_event(Stream::Ip, EventType::Added, &object, 1)
            .unwrap()
            .0
            .raw_object
            .is_some());
    }
}
