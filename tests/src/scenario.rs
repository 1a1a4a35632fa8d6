//! The seeds' scenarios, played on the simulated API server the way the IPAMs (kube-ovn,
//! whereabouts) and their users play them on a real one.

use kube_sim::{Kind, KubeSim, PatchType};

use crate::receiver::{Received, Receiver};
use serde_json::{json, Value};

/// kube-ovn's finalizer.
pub const FINALIZER: &str = "kubeovn.io/kube-ovn-controller";

/// A kube-ovn Subnet with its finalizer.
pub fn subnet(name: &str, cidr: &str) -> Value {
    json!({"metadata": {"name": name, "finalizers": [FINALIZER]},
        "spec": {"cidrBlock": cidr, "protocol": "IPv4", "provider": "ovn", "vpc": "ovn-cluster"},
        "status": {"v4usingIPs": 0, "v4availableIPs": 253}})
}

/// A kube-ovn IP of a pod on a subnet, with its finalizer.
pub fn ip(
    name: &str,
    subnet: &str,
    pod: &str,
    namespace: &str,
    address: &str,
    pod_type: &str,
) -> Value {
    json!({"metadata": {"name": name, "finalizers": [FINALIZER],
            "labels": {"ovn.kubernetes.io/subnet": subnet, subnet: ""}},
        "spec": {"subnet": subnet, "podName": pod, "namespace": namespace, "ipAddress": address,
            "v4IpAddress": address, "podType": pod_type, "nodeName": "node-1", "attachSubnets": []}})
}

/// A pod with kube-ovn's allocation annotations.
pub fn pod(name: &str, subnet: &str, address: &str) -> Value {
    json!({"metadata": {"name": name, "annotations": {
            "ovn.kubernetes.io/allocated": "true", "ovn.kubernetes.io/ip_address": address,
            "ovn.kubernetes.io/logical_switch": subnet}},
        "spec": {"nodeName": "node-1"}, "status": {"phase": "Running", "podIPs": [{"ip": address}]}})
}

/// Names in the kube-ovn seed.
pub struct Seed {
    /// The attachment subnet that is deleted first.
    pub subnet: &'static str,
    /// The IP that leaks.
    pub leaked_ip: &'static str,
    /// The namespace of its pod (the IP's `spec.namespace`; the IP is cluster-scoped).
    pub namespace: &'static str,
}

/// The kube-ovn seed (kube-ovn-dangling-ips): a kubevirt VM with an IP on its own subnet;
/// the teardown deletes the subnet while the IP still exists, then the IP is deleted and
/// hangs on its finalizer. With `healthy`, the IP goes first, as it should.
pub fn play_kube_ovn_seed(sim: &KubeSim, healthy: bool) -> Seed {
    let seed = Seed {
        subnet: "vm-net",
        leaked_ip: "test-vm-1.vms.vm-net.vms.ovn",
        namespace: "vms",
    };
    let ok = |r: Result<Value, kube_sim::ApiError>| {
        r.expect("the simulated API server accepts the step")
    };
    ok(sim.create(Kind::Subnet, "", subnet("ovn-default", "10.16.0.0/16")));
    ok(sim.create(Kind::Subnet, "", subnet(seed.subnet, "172.19.0.0/24")));
    ok(sim.create(
        Kind::Pod,
        "vms",
        pod("virt-launcher-test-vm-1", "ovn-default", "10.16.0.15"),
    ));
    ok(sim.create(
        Kind::Ip,
        "",
        ip(
            "test-vm-1.vms",
            "ovn-default",
            "test-vm-1",
            "vms",
            "10.16.0.15",
            "VirtualMachine",
        ),
    ));
    ok(sim.create(
        Kind::Ip,
        "",
        ip(
            seed.leaked_ip,
            seed.subnet,
            "test-vm-1",
            "vms",
            "172.19.0.12",
            "VirtualMachine",
        ),
    ));
    ok(sim.update(Kind::Subnet, "", seed.subnet, |s| {
        s["status"]["v4usingIPs"] = json!(1)
    }));
    // kubectl delete -f manifest.yaml
    ok(sim.delete(Kind::Pod, "vms", "virt-launcher-test-vm-1"));
    ok(sim.delete(Kind::Ip, "", "test-vm-1.vms"));
    ok(sim.remove_finalizers(Kind::Ip, "", "test-vm-1.vms"));
    if healthy {
        ok(sim.delete(Kind::Ip, "", seed.leaked_ip));
        ok(sim.remove_finalizers(Kind::Ip, "", seed.leaked_ip));
    }
    ok(sim.update(Kind::Subnet, "", seed.subnet, |s| {
        s["status"]["v4usingIPs"] = json!(0)
    }));
    ok(sim.delete(Kind::Subnet, "", seed.subnet));
    ok(sim.remove_finalizers(Kind::Subnet, "", seed.subnet));
    if !healthy {
        // The operator tries `kubectl delete ip ...`: it gets a deletionTimestamp and stays.
        ok(sim.delete(Kind::Ip, "", seed.leaked_ip));
    }
    seed
}

/// The namespace whereabouts keeps its IPPools and reservations in.
pub const WHEREABOUTS_NAMESPACE: &str = "kube-system";

/// The network of the whereabouts seed as multus names it in network-status: the
/// NetworkAttachmentDefinition `whereabouts-conf` in namespace `default`.
pub const WHEREABOUTS_NETWORK: &str = "default/whereabouts-conf";

/// A whereabouts IPPool over `range` (a CIDR) with no allocations.
pub fn ip_pool(name: &str, range: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"range": range, "allocations": {}}})
}

/// A whereabouts OverlappingRangeIPReservation of `address` for `podref`.
pub fn reservation(address: &str, podref: &str) -> Value {
    json!({"metadata": {"name": address.replace(':', "-")},
        "spec": {"podref": podref, "ifname": "net1"}})
}

/// A StatefulSet pod just scheduled: Pending, asking multus for the whereabouts network,
/// no network-status yet.
pub fn statefulset_pod(name: &str, statefulset: &str) -> Value {
    json!({"metadata": {"name": name,
            "annotations": {"k8s.v1.cni.cncf.io/networks": "whereabouts-conf"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": statefulset,
                "uid": format!("uid-statefulset-{statefulset}"), "controller": true}]},
        "spec": {"nodeName": "node-1"}, "status": {"phase": "Pending"}})
}

/// multus' network-status annotation: the cluster network on eth0, and `address` on the
/// whereabouts network on net1.
pub fn network_status(cluster_address: &str, address: &str) -> String {
    json!([
        {"name": "kindnet", "interface": "eth0", "ips": [cluster_address], "default": true},
        {"name": WHEREABOUTS_NETWORK, "interface": "net1", "ips": [address], "mac": "0a:58:0a:80:28:01"}
    ])
    .to_string()
}

/// Names in the whereabouts seed.
pub struct WhereaboutsSeed {
    /// The IPPool, in [`WHEREABOUTS_NAMESPACE`].
    pub pool: &'static str,
    /// The address released while its pod was alive, then handed out again.
    pub address: &'static str,
    /// The pod whose allocation the reconciler released while it was Pending.
    pub released_pod: &'static str,
    /// The pod that got the same address next.
    pub second_pod: &'static str,
}

/// The whereabouts seed (whereabouts #162, the field report): StatefulSet `web` has pods
/// web-0..2 with 10.128.40.45..47 from pool 10.128.40.0-24. web-2 is still Pending, without
/// network-status, when the ip-reconciler runs: it reads the pool at the version whereabouts
/// just wrote, finds no address in web-2's network-status, and removes allocation 47 with a
/// JSON patch testing that version, then deletes the reservation. 47 is free, so the next
/// pod, web-3, gets it; both pods then run with 10.128.40.47 on the same network.
pub fn play_whereabouts_reconciler_race(sim: &KubeSim) -> WhereaboutsSeed {
    let seed = WhereaboutsSeed {
        pool: "10.128.40.0-24",
        address: "10.128.40.47",
        released_pod: "web-2",
        second_pod: "web-3",
    };
    let ok = |r: Result<Value, kube_sim::ApiError>| {
        r.expect("the simulated API server accepts the step")
    };
    let ns = WHEREABOUTS_NAMESPACE;
    ok(sim.create(Kind::IpPool, ns, ip_pool(seed.pool, "10.128.40.0/24")));
    // whereabouts' CNI ADD: add the allocation under a resourceVersion precondition, then
    // reserve the address across overlapping ranges.
    let allocate = |offset: u32, pod: &str| {
        let pool = ok(sim.get(Kind::IpPool, ns, seed.pool));
        let rv = pool["metadata"]["resourceVersion"].clone();
        ok(sim.patch(
            Kind::IpPool,
            ns,
            seed.pool,
            PatchType::Json,
            &json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                {"op": "add", "path": format!("/spec/allocations/{offset}"),
                    "value": {"id": format!("sandbox-{pod}"), "podref": format!("default/{pod}"), "ifname": "net1"}}
            ]),
        ));
        ok(sim.create(
            Kind::OverlappingRangeIpReservation,
            ns,
            reservation(&format!("10.128.40.{offset}"), &format!("default/{pod}")),
        ));
    };
    // multus reports the addresses; the kubelet starts the containers.
    let running = |pod: &str, cluster_address: &str, address: &str| {
        ok(sim.update(Kind::Pod, "default", pod, |p| {
            p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"] =
                json!(network_status(cluster_address, address));
            p["status"] = json!({"phase": "Running", "podIPs": [{"ip": cluster_address}]});
        }));
    };
    for (ordinal, offset) in [(0, 45), (1, 46)] {
        let pod = format!("web-{ordinal}");
        ok(sim.create(Kind::Pod, "default", statefulset_pod(&pod, "web")));
        allocate(offset, &pod);
        running(
            &pod,
            &format!("10.244.1.{}", 10 + ordinal),
            &format!("10.128.40.{offset}"),
        );
    }
    ok(sim.create(
        Kind::Pod,
        "default",
        statefulset_pod(seed.released_pod, "web"),
    ));
    allocate(47, seed.released_pod);
    // The ip-reconciler: the pool as just written; web-2 is Pending with no network-status,
    // so allocation 47 looks orphaned.
    let pool = ok(sim.get(Kind::IpPool, ns, seed.pool));
    let rv = pool["metadata"]["resourceVersion"].clone();
    ok(sim.patch(
        Kind::IpPool,
        ns,
        seed.pool,
        PatchType::Json,
        &json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "remove", "path": "/spec/allocations/47"}
        ]),
    ));
    ok(sim.delete(Kind::OverlappingRangeIpReservation, ns, seed.address));
    ok(sim.create(
        Kind::Pod,
        "default",
        statefulset_pod(seed.second_pod, "web"),
    ));
    allocate(47, seed.second_pod);
    running(seed.released_pod, "10.244.1.12", seed.address);
    running(seed.second_pod, "10.244.1.13", seed.address);
    seed
}

/// A subnet `10.<third_octet>.0.0/24` deleted under a live IP: `subnet-deleted-before-ip`
/// fires for `name`.
pub fn play_subnet_deleted_under_live_ip(sim: &KubeSim, name: &str, third_octet: u8) {
    let cidr = format!("10.{third_octet}.0.0/24");
    sim.create(Kind::Subnet, "", subnet(name, &cidr)).unwrap();
    sim.create(
        Kind::Ip,
        "",
        ip(
            &format!("{name}-ip.ns"),
            name,
            &format!("{name}-pod"),
            "ns",
            &format!("10.{third_octet}.0.2"),
            "",
        ),
    )
    .unwrap();
    sim.delete(Kind::Subnet, "", name).unwrap();
    sim.remove_finalizers(Kind::Subnet, "", name).unwrap();
}

/// The `subnet-deleted-before-ip` alert about `subnet` the receiver got on `/hook`.
pub fn subnet_leak_alert(receiver: &Receiver, subnet: &str) -> Option<Received> {
    receiver
        .received("/hook")
        .into_iter()
        .find(|r| r.body["subnet"] == subnet && r.body["rule"] == "subnet-deleted-before-ip")
}
