//! Calico's IPAM kinds: IPAMBlock, IPAMHandle, BlockAffinity and IPPool, alike in
//! `crd.projectcalico.org/v1` and `projectcalico.org/v3` but for BlockAffinity's `deleted`
//! (a string in v1, a boolean in v3).
//!
//! A block is one object for up to 64 addresses (or more), rewritten whole on every
//! allocation: its converter reads it as one entry per allocated ordinal (address, handle,
//! pod, sequence number), so that comparing two versions says which allocation appeared or
//! went.

use serde_json::{Map, Value};

use crate::event::{
    CalicoAffinityInfo, CalicoAllocation, CalicoBlockInfo, CalicoHandleBlock, CalicoHandleInfo,
    CalicoPoolInfo, KindPart,
};
use crate::kubernetes::{parse_timestamp_ms, FieldReader, ObjectParts};

use super::whereabouts::{add_offset, network_address};

/// A block: one entry per allocated ordinal, with its attribute and sequence number.
pub(super) fn block(fields: &mut FieldReader, object: &ObjectParts<'_>) -> KindPart {
    let spec = object.spec;
    let cidr = fields.string(spec, "spec.cidr", "cidr");
    let network = network_address(&cidr);
    let attributes: &[Value] = match spec.get("attributes") {
        Some(Value::Array(items)) => items,
        None | Some(Value::Null) => &[],
        Some(_) => {
            fields.problem("spec.attributes", "expected an array");
            &[]
        }
    };
    let empty = Map::new();
    let sequence_numbers = fields
        .object(spec, "sequenceNumberForAllocation")
        .unwrap_or(&empty);
    let mut allocations = Vec::new();
    match spec.get("allocations") {
        None | Some(Value::Null) => {}
        Some(Value::Array(ordinals)) => {
            for (ordinal, entry) in ordinals.iter().enumerate() {
                let index = match entry {
                    Value::Null => continue,
                    Value::Number(n) => n.as_u64(),
                    _ => None,
                };
                let Some(index) = index else {
                    fields.problem("spec.allocations", "expected attribute indexes or nulls");
                    continue;
                };
                let attribute = usize::try_from(index)
                    .ok()
                    .and_then(|i| attributes.get(i))
                    .and_then(Value::as_object);
                if attribute.is_none() {
                    fields.problem("spec.allocations", "an index past spec.attributes");
                }
                let attribute = attribute.unwrap_or(&empty);
                let secondary = fields.object(attribute, "secondary").unwrap_or(&empty);
                let text = |key: &str| {
                    secondary
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let address = network
                    .and_then(|n| add_offset(n, ordinal as u128))
                    .map(|a| a.to_string())
                    .unwrap_or_default();
                allocations.push(CalicoAllocation {
                    ordinal: ordinal as i64,
                    address,
                    handle_id: fields.string(attribute, "spec.attributes.handle_id", "handle_id"),
                    sequence_number: sequence_numbers
                        .get(&ordinal.to_string())
                        .and_then(Value::as_i64),
                    namespace: text("namespace"),
                    pod: text("pod"),
                    node: text("node"),
                    r#type: text("type"),
                    released_at_ms: attribute
                        .get("releasedAt")
                        .and_then(Value::as_str)
                        .and_then(parse_timestamp_ms),
                });
            }
        }
        Some(_) => fields.problem("spec.allocations", "expected an array"),
    }
    KindPart::CalicoBlock(Box::new(CalicoBlockInfo {
        cidr,
        affinity: fields.string(spec, "spec.affinity", "affinity"),
        allocations,
        sequence_number: spec
            .get("sequenceNumber")
            .and_then(Value::as_i64)
            .unwrap_or(0),
        deleted: deleted(fields, spec),
    }))
}

/// A handle: its id and how many addresses it holds in which block.
pub(super) fn handle(fields: &mut FieldReader, object: &ObjectParts<'_>) -> KindPart {
    let spec = object.spec;
    let mut blocks = Vec::new();
    if let Some(map) = fields.object(spec, "block") {
        for (cidr, count) in map {
            match count.as_i64() {
                Some(count) => blocks.push(CalicoHandleBlock {
                    cidr: cidr.clone(),
                    count,
                }),
                None => fields.problem("spec.block", "expected counts"),
            }
        }
    }
    blocks.sort_by(|a, b| a.cidr.cmp(&b.cidr));
    KindPart::CalicoHandle(Box::new(CalicoHandleInfo {
        handle_id: fields.string(spec, "spec.handleID", "handleID"),
        blocks,
        deleted: deleted(fields, spec),
    }))
}

/// An affinity of a block to a node.
pub(super) fn affinity(fields: &mut FieldReader, object: &ObjectParts<'_>) -> KindPart {
    let spec = object.spec;
    KindPart::CalicoAffinity(Box::new(CalicoAffinityInfo {
        node: fields.string(spec, "spec.node", "node"),
        cidr: fields.string(spec, "spec.cidr", "cidr"),
        state: fields.string(spec, "spec.state", "state"),
        r#type: fields.string(spec, "spec.type", "type"),
        deleted: deleted(fields, spec),
    }))
}

/// A pool: its CIDR, block size and uses.
pub(super) fn pool(fields: &mut FieldReader, object: &ObjectParts<'_>) -> KindPart {
    let spec = object.spec;
    KindPart::CalicoPool(Box::new(CalicoPoolInfo {
        cidr: fields.string(spec, "spec.cidr", "cidr"),
        block_size: spec.get("blockSize").and_then(Value::as_i64),
        disabled: spec.get("disabled").and_then(Value::as_bool) == Some(true),
        allowed_uses: fields.strings(spec, "spec.allowedUses", "allowedUses"),
    }))
}

/// `spec.deleted`: a boolean, or in v1 BlockAffinities the string `"true"` / `"false"`
/// (read as Go's `strconv.ParseBool` reads it).
fn deleted(fields: &mut FieldReader, spec: &Map<String, Value>) -> bool {
    match spec.get("deleted") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(deleted)) => *deleted,
        Some(Value::String(text)) => match text.as_str() {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
            "0" | "f" | "F" | "FALSE" | "false" | "False" | "" => false,
            _ => {
                fields.problem("spec.deleted", "expected a boolean");
                false
            }
        },
        Some(_) => {
            fields.problem("spec.deleted", "expected a boolean");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::convert::from_object_of;
    use crate::event::{EventType, KindPart, Stream};
    use serde_json::json;

    #[test]
    fn a_block_reads_as_one_entry_per_allocated_ordinal_with_its_attribute() {
        let block = json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMBlock",
            "metadata": {"name": "10-244-120-64-26", "uid": "b1", "resourceVersion": "17"},
            "spec": {"cidr": "10.244.120.64/26", "affinity": "host:node1",
                "allocations": [0, 1, 1, null],
                "unallocated": [3],
                "attributes": [
                    {"handle_id": "vxlan-tunnel-addr-node1",
                     "secondary": {"node": "node1", "type": "vxlanTunnelAddress"}},
                    {"handle_id": "k8s-pod-network.3f1c",
                     "secondary": {"namespace": "default", "node": "node1", "pod": "web-0",
                        "timestamp": "2026-01-02 03:04:05.123456789 +0000 UTC"}}],
                "sequenceNumber": 17,
                "sequenceNumberForAllocation": {"0": 2, "1": 16, "2": 16},
                "deleted": false, "strictAffinity": false}});
        let converted =
            from_object_of(Stream::CalicoIpamBlock, EventType::Modified, &block).unwrap();
        assert!(converted.problems.is_empty(), "{:?}", converted.problems);
        let Some(KindPart::CalicoBlock(info)) = converted.event.part else {
            panic!("a block part");
        };
        assert_eq!(info.affinity, "host:node1");
        assert_eq!(info.sequence_number, 17);
        let read: Vec<(i64, &str, &str, &str, Option<i64>)> = info
            .allocations
            .iter()
            .map(|a| {
                (
                    a.ordinal,
                    a.address.as_str(),
                    a.handle_id.as_str(),
                    a.pod.as_str(),
                    a.sequence_number,
                )
            })
            .collect();
        assert_eq!(
            read,
            [
                (0, "10.244.120.64", "vxlan-tunnel-addr-node1", "", Some(2)),
                (
                    1,
                    "10.244.120.65",
                    "k8s-pod-network.3f1c",
                    "web-0",
                    Some(16)
                ),
                (
                    2,
                    "10.244.120.66",
                    "k8s-pod-network.3f1c",
                    "web-0",
                    Some(16)
                ),
            ]
        );
        assert_eq!(info.allocations[0].r#type, "vxlanTunnelAddress");
        assert_eq!(info.allocations[1].namespace, "default");
    }

    #[test]
    fn an_attribute_index_out_of_range_is_a_problem_and_the_allocation_is_kept() {
        let block = json!({"metadata": {"name": "b", "uid": "b", "resourceVersion": "3"},
            "spec": {"cidr": "fd00::/122", "allocations": [null, 5], "attributes": []}});
        let converted =
            from_object_of(Stream::CalicoV3IpamBlock, EventType::Added, &block).unwrap();
        let Some(KindPart::CalicoBlock(info)) = converted.event.part else {
            panic!("a block part");
        };
        assert_eq!(info.allocations[0].address, "fd00::1");
        assert_eq!(info.allocations[0].handle_id, "");
        assert_eq!(converted.problems[0].path, "spec.allocations");
    }

    #[test]
    fn a_v1_affinity_says_deleted_as_a_string_and_a_v3_one_as_a_boolean() {
        for (stream, deleted) in [
            (Stream::CalicoBlockAffinity, json!("true")),
            (Stream::CalicoV3BlockAffinity, json!(true)),
        ] {
            let affinity = json!({"metadata": {"name": "node1-10-244-120-64-26", "uid": "a",
                    "resourceVersion": "4"},
                "spec": {"node": "node1", "cidr": "10.244.120.64/26", "state": "confirmed",
                    "deleted": deleted}});
            let converted = from_object_of(stream, EventType::Modified, &affinity).unwrap();
            let Some(KindPart::CalicoAffinity(info)) = converted.event.part else {
                panic!("an affinity part");
            };
            assert!(info.deleted, "{stream:?}");
            assert_eq!(
                (info.node.as_str(), info.state.as_str()),
                ("node1", "confirmed")
            );
            assert!(converted.problems.is_empty());
        }
    }

    #[test]
    fn a_handle_reads_its_counts_per_block() {
        let handle = json!({"metadata": {"name": "k8s-pod-network.3f1c", "uid": "h",
                "resourceVersion": "5"},
            "spec": {"handleID": "k8s-pod-network.3F1C",
                "block": {"10.244.120.64/26": 2, "10.244.0.0/26": 1}}});
        let converted =
            from_object_of(Stream::CalicoIpamHandle, EventType::Added, &handle).unwrap();
        let Some(KindPart::CalicoHandle(info)) = converted.event.part else {
            panic!("a handle part");
        };
        assert_eq!(info.handle_id, "k8s-pod-network.3F1C");
        let blocks: Vec<(&str, i64)> = info
            .blocks
            .iter()
            .map(|b| (b.cidr.as_str(), b.count))
            .collect();
        assert_eq!(blocks, [("10.244.0.0/26", 1), ("10.244.120.64/26", 2)]);
    }
}
