//! Cilium's CiliumNode and CiliumEndpoint (cilium.io/v2). Per-address ownership is in the
//! API only in CRD-backed IPAM modes (`status.ipam.used`); in the others a node's CIDRs
//! and its endpoints' addresses are what there is.

use serde_json::{Map, Value};

use crate::event::{CiliumEndpointInfo, CiliumNodeInfo, CiliumUsedAddress, KindPart};
use crate::kubernetes::{FieldReader, ObjectParts};

/// A node's CIDRs and the addresses in use with their owners.
pub(super) fn node(fields: &mut FieldReader, object: &ObjectParts<'_>) -> KindPart {
    let empty = Map::new();
    let spec_ipam = fields.object(object.spec, "ipam").unwrap_or(&empty);
    let status_ipam = fields.object(object.status, "ipam").unwrap_or(&empty);
    let mut allocated_cidrs = Vec::new();
    if let Some(pools) = fields.object(spec_ipam, "pools") {
        match pools.get("allocated") {
            Some(Value::Array(entries)) => {
                for entry in entries.iter().filter_map(Value::as_object) {
                    allocated_cidrs.extend(fields.strings(
                        entry,
                        "spec.ipam.pools.allocated.cidrs",
                        "cidrs",
                    ));
                }
            }
            None | Some(Value::Null) => {}
            Some(_) => fields.problem("spec.ipam.pools.allocated", "expected an array"),
        }
    }
    let mut used = Vec::new();
    if let Some(map) = fields.object(status_ipam, "used") {
        for (address, entry) in map {
            let Some(entry) = entry.as_object() else {
                fields.problem("status.ipam.used", "expected objects as values");
                continue;
            };
            used.push(CiliumUsedAddress {
                address: address.clone(),
                owner: fields.string(entry, "status.ipam.used.owner", "owner"),
                resource: fields.string(entry, "status.ipam.used.resource", "resource"),
            });
        }
    }
    used.sort_by(|a, b| a.address.cmp(&b.address));
    let operator_error = fields
        .object(status_ipam, "operator-status")
        .map(|status| fields.string(status, "status.ipam.operator-status.error", "error"))
        .unwrap_or_default();
    KindPart::CiliumNode(Box::new(CiliumNodeInfo {
        pod_cidrs: fields.strings(spec_ipam, "spec.ipam.podCIDRs", "podCIDRs"),
        allocated_cidrs,
        used,
        operator_error,
    }))
}

/// An endpoint's addresses and the pod it stands for.
pub(super) fn endpoint(fields: &mut FieldReader, object: &ObjectParts<'_>) -> KindPart {
    let status = object.status;
    let empty = Map::new();
    let networking = fields.object(status, "networking").unwrap_or(&empty);
    let mut addresses = Vec::new();
    match networking.get("addressing") {
        Some(Value::Array(pairs)) => {
            for pair in pairs.iter().filter_map(Value::as_object) {
                for family in ["ipv4", "ipv6"] {
                    let address = fields.string(pair, "status.networking.addressing", family);
                    if !address.is_empty() {
                        addresses.push(address);
                    }
                }
            }
        }
        None | Some(Value::Null) => {}
        Some(_) => fields.problem("status.networking.addressing", "expected an array"),
    }
    let identifiers = fields
        .object(status, "external-identifiers")
        .unwrap_or(&empty);
    let path = "status.external-identifiers";
    let namespace = fields.string(identifiers, path, "k8s-namespace");
    let pod_name = fields.string(identifiers, path, "k8s-pod-name");
    let pod = if namespace.is_empty() || pod_name.is_empty() {
        String::new()
    } else {
        format!("{namespace}/{pod_name}")
    };
    KindPart::CiliumEndpoint(Box::new(CiliumEndpointInfo {
        endpoint_id: status.get("id").and_then(Value::as_i64),
        addresses,
        node_ip: fields.string(networking, "status.networking.node", "node"),
        pod,
        container_id: fields.string(identifiers, path, "container-id"),
        state: fields.string(status, "status.state", "state"),
    }))
}

#[cfg(test)]
mod tests {
    use crate::convert::from_object_of;
    use crate::event::{EventType, KindPart, Stream};
    use serde_json::json;

    #[test]
    fn a_cilium_node_reads_its_cidrs_and_the_owners_of_used_addresses() {
        let node = json!({"metadata": {"name": "node-a", "uid": "n", "resourceVersion": "8"},
            "spec": {"ipam": {"podCIDRs": ["10.0.1.0/24"],
                "pools": {"allocated": [{"pool": "default", "cidrs": ["10.10.0.0/27"]}]}}},
            "status": {"ipam": {"used": {
                "10.0.1.9": {"owner": "default/web-0 [restored]", "resource": "eni-1"},
                "10.0.1.1": {"owner": "router"}},
                "operator-status": {"error": "allocator full"}}}});
        let converted = from_object_of(Stream::CiliumNode, EventType::Modified, &node).unwrap();
        assert!(converted.problems.is_empty(), "{:?}", converted.problems);
        let Some(KindPart::CiliumNode(info)) = converted.event.part else {
            panic!("a CiliumNode part");
        };
        assert_eq!(info.pod_cidrs, ["10.0.1.0/24"]);
        assert_eq!(info.allocated_cidrs, ["10.10.0.0/27"]);
        let used: Vec<(&str, &str)> = info
            .used
            .iter()
            .map(|u| (u.address.as_str(), u.owner.as_str()))
            .collect();
        assert_eq!(
            used,
            [
                ("10.0.1.1", "router"),
                ("10.0.1.9", "default/web-0 [restored]")
            ]
        );
        assert_eq!(info.operator_error, "allocator full");
    }

    #[test]
    fn a_cilium_endpoint_reads_its_addresses_and_its_pod() {
        let endpoint = json!({"metadata": {"name": "web-0", "namespace": "default",
                "uid": "e", "resourceVersion": "9"},
            "status": {"id": 1234, "state": "ready",
                "networking": {"addressing": [{"ipv4": "10.0.1.9", "ipv6": "fd00::9"}],
                    "node": "192.168.0.10"},
                "external-identifiers": {"k8s-namespace": "default", "k8s-pod-name": "web-0",
                    "container-id": "c0ffee"}}});
        let converted =
            from_object_of(Stream::CiliumEndpoint, EventType::Added, &endpoint).unwrap();
        let Some(KindPart::CiliumEndpoint(info)) = converted.event.part else {
            panic!("a CiliumEndpoint part");
        };
        assert_eq!(info.addresses, ["10.0.1.9", "fd00::9"]);
        assert_eq!(info.pod, "default/web-0");
        assert_eq!(info.endpoint_id, Some(1234));
        assert_eq!(info.node_ip, "192.168.0.10");
    }
}
