//! whereabouts' IPPool and OverlappingRangeIPReservation (whereabouts.cni.cncf.io/v1alpha1).

use std::net::IpAddr;

use serde_json::Value;

use crate::event::{IpPoolAllocation, IpPoolInfo, IpReservationInfo, KindPart};
use crate::kubernetes::{FieldReader, ObjectParts};

/// spec of an IPPool: its range and its allocations, each with the address its offset
/// stands for.
pub(super) fn ip_pool(fields: &mut FieldReader, object: &ObjectParts<'_>) -> KindPart {
    let spec = object.spec;
    let range = fields.string(spec, "spec.range", "range");
    let network = network_address(&range);
    let mut allocations = Vec::new();
    match spec.get("allocations") {
        None | Some(Value::Null) => {}
        Some(Value::Object(entries)) => {
            for (offset, entry) in entries {
                let Some(entry) = entry.as_object() else {
                    fields.problem("spec.allocations", "expected objects as values");
                    continue;
                };
                let address = match (network, offset.parse::<u128>()) {
                    (Some(network), Ok(offset)) => add_offset(network, offset),
                    _ => None,
                };
                allocations.push(IpPoolAllocation {
                    offset: offset.clone(),
                    address: address.map(|a| a.to_string()).unwrap_or_default(),
                    container_id: fields.string(entry, "spec.allocations.id", "id"),
                    podref: fields.string(entry, "spec.allocations.podref", "podref"),
                    ifname: fields.string(entry, "spec.allocations.ifname", "ifname"),
                });
            }
        }
        Some(_) => fields.problem("spec.allocations", "expected an object"),
    }
    // whereabouts writes keys sorted as text ("100" < "45"); people read offsets as numbers.
    allocations.sort_by_key(|a| {
        (
            a.offset.parse::<u128>().unwrap_or(u128::MAX),
            a.offset.clone(),
        )
    });
    KindPart::IpPool(Box::new(IpPoolInfo { range, allocations }))
}

/// spec of a reservation, and its address, which only its name holds.
pub(super) fn reservation(fields: &mut FieldReader, object: &ObjectParts<'_>) -> KindPart {
    let spec = object.spec;
    KindPart::IpReservation(Box::new(IpReservationInfo {
        address: address_in_name(object.name())
            .map(|a| a.to_string())
            .unwrap_or_default(),
        podref: fields.string(spec, "spec.podref", "podref"),
        ifname: fields.string(spec, "spec.ifname", "ifname"),
        container_id: fields.string(spec, "spec.containerid", "containerid"),
    }))
}

/// The network address of a CIDR (`10.128.40.0/24` -> 10.128.40.0).
pub(super) fn network_address(cidr: &str) -> Option<IpAddr> {
    let (address, prefix) = cidr.split_once('/')?;
    let address: IpAddr = address.trim().parse().ok()?;
    let prefix: u32 = prefix.trim().parse().ok()?;
    Some(match address {
        IpAddr::V4(v4) => {
            let mask = u32::MAX
                .checked_shl(32u32.checked_sub(prefix)?)
                .unwrap_or(0);
            IpAddr::V4((u32::from(v4) & mask).into())
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX
                .checked_shl(128u32.checked_sub(prefix)?)
                .unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
    })
}

/// `network + offset`, in 128-bit arithmetic; `None` past the end of the address family.
pub(super) fn add_offset(network: IpAddr, offset: u128) -> Option<IpAddr> {
    match network {
        IpAddr::V4(v4) => {
            let sum = u128::from(u32::from(v4)).checked_add(offset)?;
            Some(IpAddr::V4(u32::try_from(sum).ok()?.into()))
        }
        IpAddr::V6(v6) => Some(IpAddr::V6(u128::from(v6).checked_add(offset)?.into())),
    }
}

/// The address in a reservation's name: the IP with `:` written as `-`, possibly after a
/// `<network_name>-` prefix. The longest dash-separated suffix that reads as an address;
/// for IPv6 behind a network name that ends in a hex group (`net-1-fd00--10`) the name is
/// ambiguous and that group is read as part of the address.
fn address_in_name(name: &str) -> Option<IpAddr> {
    std::iter::once(0)
        .chain(name.match_indices('-').map(|(i, _)| i + 1))
        .find_map(|start| name[start..].replace('-', ":").parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::from_object_of;
    use crate::event::{EventType, Stream};
    use serde_json::json;

    #[test]
    fn an_offset_is_an_address_in_the_range() {
        let net = network_address("10.128.40.0/24").unwrap();
        assert_eq!(add_offset(net, 47).unwrap().to_string(), "10.128.40.47");
        let net = network_address("10.128.40.7/24").unwrap();
        assert_eq!(net.to_string(), "10.128.40.0", "host bits are cleared");
        let v6 = network_address("fd00:10::/64").unwrap();
        assert_eq!(
            add_offset(v6, 0x1_0000_0001).unwrap().to_string(),
            "fd00:10::1:0:1"
        );
        assert!(add_offset(network_address("255.255.255.0/24").unwrap(), 256).is_none());
        assert!(network_address("10.0.0.0/33").is_none());
    }

    #[test]
    fn a_reservation_name_holds_its_address() {
        for (name, address) in [
            ("10.128.40.47", "10.128.40.47"),
            ("fd00--10", "fd00::10"),
            ("mynet-fd00--10", "fd00::10"),
            ("net-1-fd00--10", "1:fd00::10"),
            ("whereabouts-conf-10.1.2.3", "10.1.2.3"),
        ] {
            assert_eq!(
                address_in_name(name).unwrap().to_string(),
                address,
                "{name}"
            );
        }
        assert!(address_in_name("not-an-address").is_none());
    }

    #[test]
    fn a_pool_lists_its_allocations_by_offset_with_their_addresses() {
        let pool = json!({"metadata": {"name": "10.128.40.0-24", "namespace": "kube-system",
            "uid": "u", "resourceVersion": "733533"},
            "spec": {"range": "10.128.40.0/24", "allocations": {
                "47": {"id": "be47", "podref": "default/web-2"},
                "100": {"id": "c100", "podref": "default/web-9", "ifname": "net1"},
                "x": {"id": "bad", "podref": "default/odd"},
                "45": {"id": "0b40", "podref": "default/web-0"}}}});
        let converted = from_object_of(Stream::IpPool, EventType::Modified, &pool).unwrap();
        let Some(KindPart::IpPool(info)) = converted.event.part else {
            panic!("an IPPool part");
        };
        let seen: Vec<(&str, &str, &str)> = info
            .allocations
            .iter()
            .map(|a| (a.offset.as_str(), a.address.as_str(), a.podref.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                ("45", "10.128.40.45", "default/web-0"),
                ("47", "10.128.40.47", "default/web-2"),
                ("100", "10.128.40.100", "default/web-9"),
                ("x", "", "default/odd"),
            ]
        );
        assert!(converted.problems.is_empty());
    }
}
