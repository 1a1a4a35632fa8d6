//! Pods (core/v1): phase, node, addresses as the CNI reported them (multus'
//! network-status), kube-ovn's per-provider allocation annotations, Calico's container id,
//! whether the pod is a disruption target and whether it uses its node's network. Nodes
//! (core/v1): that they exist, and their pod CIDRs.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::event::{KindPart, NetworkStatus, NodeInfo, PodAllocation, PodInfo};
use crate::kubernetes::{FieldReader, ObjectParts};

/// The annotation multus writes with the addresses a pod holds, per network.
pub const NETWORK_STATUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";

/// The annotation Calico's CNI plugin writes with the pod's sandbox: its handle is
/// `k8s-pod-network.<id>`. Calico keeps it when it empties the IP annotations on release.
pub const CALICO_CONTAINER_ID_ANNOTATION: &str = "cni.projectcalico.org/containerID";

/// What ipaudit keeps of a Pod.
pub(super) fn pod(fields: &mut FieldReader, object: &ObjectParts<'_>) -> KindPart {
    let (spec, status) = (object.spec, object.status);
    let empty = Map::new();
    let annotations = fields.object(object.meta, "annotations").unwrap_or(&empty);
    let pod_ips = match status.get("podIPs") {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|i| i.get("ip").and_then(Value::as_str).map(str::to_owned))
            .collect(),
        None | Some(Value::Null) => Vec::new(),
        Some(_) => {
            fields.problem("status.podIPs", "expected an array");
            Vec::new()
        }
    };
    let disruption_target = match status.get("conditions") {
        Some(Value::Array(conditions)) => conditions.iter().any(|c| {
            c.get("type").and_then(Value::as_str) == Some("DisruptionTarget")
                && c.get("status").and_then(Value::as_str) == Some("True")
        }),
        _ => false,
    };
    KindPart::Pod(Box::new(PodInfo {
        phase: fields.string(status, "status.phase", "phase"),
        node_name: fields.string(spec, "spec.nodeName", "nodeName"),
        pod_ips,
        allocations: pod_allocations(annotations),
        network_status: network_status(fields, annotations),
        disruption_target,
        host_network: spec.get("hostNetwork").and_then(Value::as_bool) == Some(true),
        calico_container_id: fields.string(
            annotations,
            "metadata.annotations[cni.projectcalico.org/containerID]",
            CALICO_CONTAINER_ID_ANNOTATION,
        ),
    }))
}

/// What ipaudit keeps of a Node: its pod CIDRs (that it exists is the event itself).
pub(super) fn node(fields: &mut FieldReader, object: &ObjectParts<'_>) -> KindPart {
    KindPart::Node(Box::new(NodeInfo {
        pod_cidrs: fields.strings(object.spec, "spec.podCIDRs", "podCIDRs"),
    }))
}

/// multus' network-status: a JSON list, written as a string, of `{name, interface, ips,
/// mac, default}`.
fn network_status(
    fields: &mut FieldReader,
    annotations: &Map<String, Value>,
) -> Vec<NetworkStatus> {
    const PATH: &str = "metadata.annotations[k8s.v1.cni.cncf.io/network-status]";
    let Some(text) = annotations
        .get(NETWORK_STATUS_ANNOTATION)
        .and_then(Value::as_str)
    else {
        return Vec::new();
    };
    let Ok(Value::Array(entries)) = serde_json::from_str::<Value>(text) else {
        fields.problem(PATH, "expected a JSON list in the string");
        return Vec::new();
    };
    let text = |entry: &Value, key: &str| {
        entry
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    entries
        .iter()
        .filter(|e| e.is_object())
        .map(|entry| NetworkStatus {
            name: text(entry, "name"),
            interface: text(entry, "interface"),
            ips: entry
                .get("ips")
                .and_then(Value::as_array)
                .map(|ips| {
                    ips.iter()
                        .filter_map(Value::as_str)
                        .map(|ip| ip.split('/').next().unwrap_or(ip).to_owned())
                        .collect()
                })
                .unwrap_or_default(),
            mac: text(entry, "mac"),
            default: entry
                .get("default")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
        .collect()
}

/// kube-ovn's per-provider annotations: `<provider>.kubernetes.io/<field>`, where the
/// primary network's provider is `ovn`.
fn pod_allocations(annotations: &Map<String, Value>) -> Vec<PodAllocation> {
    let mut by_provider: BTreeMap<&str, PodAllocation> = BTreeMap::new();
    for (key, value) in annotations {
        let Some((provider, field)) = key.split_once(".kubernetes.io/") else {
            continue;
        };
        let Some(value) = value.as_str() else {
            continue;
        };
        let entry = match field {
            "allocated" | "ip_address" | "mac_address" | "logical_switch" | "cidr" => by_provider
                .entry(provider)
                .or_insert_with(|| PodAllocation {
                    provider: provider.to_owned(),
                    ..PodAllocation::default()
                }),
            _ => continue,
        };
        match field {
            "allocated" => entry.allocated = value == "true",
            "ip_address" => entry.ip_address = value.to_owned(),
            "mac_address" => entry.mac_address = value.to_owned(),
            "logical_switch" => entry.logical_switch = value.to_owned(),
            "cidr" => entry.cidr = value.to_owned(),
            _ => {}
        }
    }
    by_provider.into_values().collect()
}
