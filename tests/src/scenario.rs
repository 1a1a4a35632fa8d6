//! The seeds' scenarios, played on the simulated API server the way kube-ovn and its users
//! play them on a real one.

use kube_sim::{Kind, KubeSim};
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
}

/// The kube-ovn seed (kube-ovn-dangling-ips): a kubevirt VM with an IP on its own subnet;
/// the teardown deletes the subnet while the IP still exists, then the IP is deleted and
/// hangs on its finalizer. With `healthy`, the IP goes first, as it should.
pub fn play_kube_ovn_seed(sim: &KubeSim, healthy: bool) -> Seed {
    let seed = Seed {
        subnet: "vm-net",
        leaked_ip: "test-vm-1.vms.vm-net.vms.ovn",
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
