//! kube-ovn's IP and Subnet (kubeovn.io/v1).

use crate::event::{IpInfo, KindPart, SubnetInfo};
use crate::kubernetes::{FieldReader, ObjectParts};

/// spec of an IP.
pub(super) fn ip(fields: &mut FieldReader, object: &ObjectParts<'_>) -> KindPart {
    let spec = object.spec;
    KindPart::Ip(Box::new(IpInfo {
        subnet: fields.string(spec, "spec.subnet", "subnet"),
        attach_subnets: fields.strings(spec, "spec.attachSubnets", "attachSubnets"),
        pod_name: fields.string(spec, "spec.podName", "podName"),
        pod_namespace: fields.string(spec, "spec.namespace", "namespace"),
        node_name: fields.string(spec, "spec.nodeName", "nodeName"),
        ip_address: fields.string(spec, "spec.ipAddress", "ipAddress"),
        v4_ip_address: fields.string(spec, "spec.v4IpAddress", "v4IpAddress"),
        v6_ip_address: fields.string(spec, "spec.v6IpAddress", "v6IpAddress"),
        attach_ips: fields.strings(spec, "spec.attachIps", "attachIps"),
        mac_address: fields.string(spec, "spec.macAddress", "macAddress"),
        pod_type: fields.string(spec, "spec.podType", "podType"),
    }))
}

/// spec and status counts of a Subnet; counts stay decimal text (IPv6 counts exceed u64).
pub(super) fn subnet(fields: &mut FieldReader, object: &ObjectParts<'_>) -> KindPart {
    let (spec, status) = (object.spec, object.status);
    KindPart::Subnet(Box::new(SubnetInfo {
        cidr_block: fields.string(spec, "spec.cidrBlock", "cidrBlock"),
        vpc: fields.string(spec, "spec.vpc", "vpc"),
        provider: fields.string(spec, "spec.provider", "provider"),
        protocol: fields.string(spec, "spec.protocol", "protocol"),
        gateway: fields.string(spec, "spec.gateway", "gateway"),
        v4_using_ips: fields.count(status, "status.v4usingIPs", "v4usingIPs"),
        v4_available_ips: fields.count(status, "status.v4availableIPs", "v4availableIPs"),
        v6_using_ips: fields.count(status, "status.v6usingIPs", "v6usingIPs"),
        v6_available_ips: fields.count(status, "status.v6availableIPs", "v6availableIPs"),
    }))
}
