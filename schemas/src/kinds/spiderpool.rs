//! spiderpool's SpiderIPPool and SpiderEndpoint (spiderpool.spidernet.io/v2beta1).

use serde_json::{Map, Value};

use crate::event::{
    KindPart, SpiderAllocation, SpiderEndpointAddress, SpiderEndpointInfo, SpiderIpPoolInfo,
};
use crate::kubernetes::{FieldReader, ObjectParts};

/// spec and allocations of a pool. `status.allocatedIPs` is a JSON string encoding a map
/// `IP -> {pod, podUid}`; unknown keys of older releases are ignored.
pub(super) fn ip_pool(fields: &mut FieldReader, object: &ObjectParts<'_>) -> KindPart {
    const PATH: &str = "status.allocatedIPs";
    let (spec, status) = (object.spec, object.status);
    let parsed;
    let entries: Option<&Map<String, Value>> = match status.get("allocatedIPs") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text.is_empty() => None,
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => {
                parsed = map;
                Some(&parsed)
            }
            _ => {
                fields.problem(PATH, "expected a JSON object in the string");
                None
            }
        },
        // Tolerated: a tool that wrote the map itself rather than its JSON text.
        Some(Value::Object(map)) => Some(map),
        Some(_) => {
            fields.problem(PATH, "expected a string");
            None
        }
    };
    let mut allocations: Vec<SpiderAllocation> = entries
        .into_iter()
        .flatten()
        .filter_map(|(address, entry)| {
            let entry = entry.as_object()?;
            Some(SpiderAllocation {
                address: address.clone(),
                pod: fields.string(entry, "status.allocatedIPs.pod", "pod"),
                pod_uid: fields.string(entry, "status.allocatedIPs.podUid", "podUid"),
            })
        })
        .collect();
    allocations.sort_by(|a, b| a.address.cmp(&b.address));
    let allocated_ip_count = status.get("allocatedIPCount").and_then(Value::as_i64);
    KindPart::SpiderIpPool(Box::new(SpiderIpPoolInfo {
        subnet: fields.string(spec, "spec.subnet", "subnet"),
        ips: fields.strings(spec, "spec.ips", "ips"),
        allocations,
        allocated_ip_count,
    }))
}

/// The pod an endpoint stands for (`status.current`) and its owner controller.
pub(super) fn endpoint(fields: &mut FieldReader, object: &ObjectParts<'_>) -> KindPart {
    let status = object.status;
    let empty = Map::new();
    let current = fields.object(status, "current").unwrap_or(&empty);
    let addresses = match current.get("ips") {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_object)
            .map(|ip| SpiderEndpointAddress {
                interface: fields.string(ip, "status.current.ips.interface", "interface"),
                ipv4: fields.string(ip, "status.current.ips.ipv4", "ipv4"),
                ipv6: fields.string(ip, "status.current.ips.ipv6", "ipv6"),
                ipv4_pool: fields.string(ip, "status.current.ips.ipv4Pool", "ipv4Pool"),
                ipv6_pool: fields.string(ip, "status.current.ips.ipv6Pool", "ipv6Pool"),
            })
            .collect(),
        None | Some(Value::Null) => Vec::new(),
        Some(_) => {
            fields.problem("status.current.ips", "expected an array");
            Vec::new()
        }
    };
    KindPart::SpiderEndpoint(Box::new(SpiderEndpointInfo {
        pod_uid: fields.string(current, "status.current.uid", "uid"),
        node: fields.string(current, "status.current.node", "node"),
        addresses,
        owner_controller_type: fields.string(
            status,
            "status.ownerControllerType",
            "ownerControllerType",
        ),
        owner_controller_name: fields.string(
            status,
            "status.ownerControllerName",
            "ownerControllerName",
        ),
    }))
}

#[cfg(test)]
mod tests {
    use crate::convert::from_object_of;
    use crate::event::{EventType, KindPart, Stream};
    use serde_json::json;

    #[test]
    fn a_pool_reads_its_allocations_from_the_json_string() {
        let pool = json!({"metadata": {"name": "pool-a", "uid": "u", "resourceVersion": "9"},
            "spec": {"subnet": "172.18.0.0/16", "ips": ["172.18.40.10-172.18.40.20"]},
            "status": {"allocatedIPCount": 1, "allocatedIPs":
                "{\"172.18.40.10\":{\"pod\":\"default/api-7c9\",\"podUid\":\"p1\",\"interface\":\"eth0\"}}"}});
        let converted = from_object_of(Stream::SpiderIpPool, EventType::Added, &pool).unwrap();
        let Some(KindPart::SpiderIpPool(info)) = converted.event.part else {
            panic!("a SpiderIPPool part");
        };
        assert_eq!(info.allocations.len(), 1);
        assert_eq!(info.allocations[0].address, "172.18.40.10");
        assert_eq!(info.allocations[0].pod, "default/api-7c9");
        assert_eq!(info.allocations[0].pod_uid, "p1");
        assert_eq!(info.allocated_ip_count, Some(1));
        assert!(converted.problems.is_empty());
    }

    #[test]
    fn an_unreadable_allocation_string_is_a_problem_not_a_lost_event() {
        let pool = json!({"metadata": {"name": "pool-a", "uid": "u", "resourceVersion": "9"},
            "status": {"allocatedIPs": "{not json"}});
        let converted = from_object_of(Stream::SpiderIpPool, EventType::Added, &pool).unwrap();
        assert_eq!(converted.event.resource_version_num, Some(9));
        assert_eq!(converted.problems[0].path, "status.allocatedIPs");
    }
}
