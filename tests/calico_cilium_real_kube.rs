//! Calico's and Cilium's leaks through the whole live pipeline on a real kube-apiserver
//! (`scripts/kube`, their CRDs from `scripts/kube-build/crds`): objects written through
//! the API as Calico's CNI plugin and Cilium's agent write them, the collector watching
//! them (both of Calico's API groups are served there), Kafka, `analyzer run`, the webhook.
//! One test per IPAM; the grace periods are seconds so that the leaks are found while the
//! test waits, and a pod's label is touched now and then to move event time.

use std::time::Duration;

use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::collector::{CollectorProcess, CollectorSetup};
use ipaudit_tests::kube::KubeServer;
use ipaudit_tests::receiver::Receiver;
use ipaudit_tests::wait_for;
use ipaudit_tests::world::World;
use serde_json::{json, Value};

/// A pod that exists (Pending for ever: there is no kubelet), with `annotations`; its
/// addresses written to its status as a kubelet would.
fn pod(kube: &KubeServer, name: &str, annotations: Value, address: &str) {
    kube.create(&json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}));
    kube.patch_status(
        "pods",
        name,
        &json!({"status": {"podIP": address, "podIPs": [{"ip": address}]}}),
    );
}

/// Deletes a pod at once, as `kubectl delete --force --grace-period=0` does (no kubelet
/// would ever confirm a graceful deletion here).
fn force_delete(kube: &KubeServer, name: &str) {
    kube.kubectl(
        &[
            "delete",
            "pod",
            name,
            "--force",
            "--grace-period=0",
            "--wait=false",
        ],
        None,
    );
}

/// The firing alert of `rule` about `subject` the webhook received, waiting up to a minute
/// while a pod's label is touched twice a second (event time moves with the events).
fn firing(kube: &KubeServer, receiver: &Receiver, rule: &str, subject: &str) -> Value {
    let mut tick = 0;
    wait_for(
        &format!("{rule} about {subject}"),
        Duration::from_secs(60),
        || {
            tick += 1;
            if tick % 10 == 0 {
                kube.patch(
                    "pods",
                    "ticker",
                    &json!({"metadata": {"labels": {"tick": tick.to_string()}}}),
                );
            }
            alerts(receiver).into_iter().find(|a| {
                a["rule"] == rule && a["subject_name"] == subject && a["status"] == "FIRING"
            })
        },
    )
}

/// Every alert transition the webhook received, in order.
fn alerts(receiver: &Receiver) -> Vec<Value> {
    receiver
        .received("/hook")
        .into_iter()
        .map(|r| r.body)
        .collect()
}

/// A collector (as admin) and an analyzer with second-long graces, sending to a webhook.
fn pipeline(
    kube: &KubeServer,
    world: &World,
    receiver: &Receiver,
) -> (CollectorProcess, AnalyzerProcess) {
    let setup = CollectorSetup {
        kubeconfig: &kube.kubeconfig,
        ..world.setup()
    };
    let collector = CollectorProcess::start(&setup, &[]);
    let analyzer = AnalyzerProcess::start(
        &world.brokers,
        &world.topic,
        &format!("analyzer-{}", world.topic),
        &world.dir.path().join("analyzer"),
        &[
            "--webhook-url",
            &format!("{}/hook", receiver.url),
            "--owner-grace",
            "3s",
            "--calico-grace",
            "3s",
            "--cilium-grace",
            "3s",
            "--handle-grace",
            "2s",
        ],
    );
    analyzer.wait_joined(Duration::from_secs(30));
    (collector, analyzer)
}

#[test]
fn calicos_leaks_written_through_a_real_api_server_are_alerted_live() {
    let kube = KubeServer::start();
    let world = World::new("calico-live", None);
    let receiver = Receiver::start(&world.runtime);
    let (collector, analyzer) = pipeline(&kube, &world, &receiver);
    kube.create(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-1"}}));
    pod(&kube, "ticker", json!({}), "10.6.0.99");
    // Two pods on Calico's network, each with its handle (written first) and its ordinal
    // of worker-1's block, in the v1 API group.
    let calico = |container: &str| json!({"cni.projectcalico.org/containerID": container});
    pod(&kube, "web-0", calico("c0"), "10.244.1.1");
    pod(&kube, "web-1", calico("c1"), "10.244.1.2");
    for container in ["c0", "c1"] {
        kube.create(
            &json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMHandle",
            "metadata": {"name": format!("k8s-pod-network.{container}")},
            "spec": {"handleID": format!("k8s-pod-network.{container}"),
                "block": {"10.244.1.0/26": 1}, "deleted": false}}),
        );
    }
    let attribute = |pod: &str, container: &str| {
        json!({"handle_id": format!("k8s-pod-network.{container}"),
        "secondary": {"namespace": "default", "pod": pod, "node": "worker-1"}})
    };
    let mut allocations = vec![Value::Null; 64];
    allocations[1] = json!(0);
    allocations[2] = json!(1);
    kube.create(
        &json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMBlock",
        "metadata": {"name": "10-244-1-0-26"},
        "spec": {"cidr": "10.244.1.0/26", "affinity": "host:worker-1",
            "allocations": allocations, "unallocated": (3..64).collect::<Vec<_>>(),
            "attributes": [attribute("web-0", "c0"), attribute("web-1", "c1")],
            "sequenceNumber": 2, "sequenceNumberForAllocation": {"1": 1, "2": 2},
            "deleted": false, "strictAffinity": false}}),
    );
    kube.create(
        &json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "BlockAffinity",
        "metadata": {"name": "worker-1-10-244-1-0-26"},
        "spec": {"node": "worker-1", "cidr": "10.244.1.0/26", "state": "confirmed",
            "type": "host", "deleted": "false"}}),
    );

    // web-0 is force-deleted: the CNI DEL never ran, its allocation stays.
    force_delete(&kube, "web-0");
    let leaked = firing(&kube, &receiver, "ip-without-pod", "10.244.1.1");
    assert_eq!(leaked["namespace"], "default");
    // web-1's handle is deleted by hand while web-1 runs.
    kube.delete("ipamhandles.crd.projectcalico.org", "k8s-pod-network.c1");
    firing(&kube, &receiver, "ip-without-handle", "10.244.1.2");
    // worker-1 goes while its block and affinity are kept. (web-0's handle still counts
    // the address its block still allocates: no handle-without-ip.)
    kube.delete("nodes", "worker-1");
    let node = firing(&kube, &receiver, "block-of-missing-node", "worker-1");
    assert!(
        node["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("10.244.1.0/26"),
        "{node}"
    );
    let all = alerts(&receiver);
    assert!(
        all.iter()
            .all(|a| a["rule"] != "handle-without-ip" && a["rule"] != "duplicate-ip"),
        "nothing else: {all:?}\n{}",
        analyzer.log_text()
    );
    drop(collector);
}

#[test]
fn ciliums_leaks_written_through_a_real_api_server_are_alerted_live() {
    let kube = KubeServer::start();
    let world = World::new("cilium-live", None);
    let receiver = Receiver::start(&world.runtime);
    let (collector, analyzer) = pipeline(&kube, &world, &receiver);
    kube.create(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-2"}}));
    pod(&kube, "ticker", json!({}), "10.6.0.99");
    pod(&kube, "api-0", json!({}), "10.0.2.10");
    pod(&kube, "api-1", json!({}), "10.0.2.11");
    kube.create(&json!({"apiVersion": "cilium.io/v2", "kind": "CiliumNode",
        "metadata": {"name": "worker-2"}, "spec": {"ipam": {"podCIDRs": ["10.0.2.0/24"]}}}));
    // The agent writes the addresses in use through the status subresource; after its
    // restart the owners read "[restored]".
    kube.patch_status(
        "ciliumnodes.cilium.io",
        "worker-2",
        &json!({"status": {"ipam": {"used": {
            "10.0.2.1": {"owner": "router"},
            "10.0.2.2": {"owner": "health"},
            "10.0.2.10": {"owner": "default/api-0 [restored]"}}}}}),
    );
    kube.create(
        &json!({"apiVersion": "cilium.io/v2", "kind": "CiliumEndpoint",
        "metadata": {"name": "api-1", "namespace": "default"},
        "status": {"id": 812, "state": "ready",
            "networking": {"addressing": [{"ipv4": "10.0.2.11"}], "node": "10.6.0.12"},
            "external-identifiers": {"k8s-namespace": "default", "k8s-pod-name": "api-1"}}}),
    );
    force_delete(&kube, "api-0");
    force_delete(&kube, "api-1");
    firing(&kube, &receiver, "ip-without-pod", "10.0.2.10");
    firing(&kube, &receiver, "ip-without-pod", "10.0.2.11");
    kube.delete("nodes", "worker-2");
    firing(&kube, &receiver, "block-of-missing-node", "worker-2");
    let all = alerts(&receiver);
    assert!(
        all.iter()
            .all(|a| a["subject_name"] != "10.0.2.1" && a["subject_name"] != "10.0.2.2"),
        "never the agent's router and health addresses: {all:?}\n{}",
        analyzer.log_text()
    );
    drop(collector);
}

#[test]
fn kubectl_ipaudit_check_finds_calico_and_cilium_leaks_and_release_fixes_exactly_them_guarded() {
    let kube = KubeServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    kube.create(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-1"}}));
    let calico = |container: &str| json!({"cni.projectcalico.org/containerID": container});
    pod(&kube, "web-1", calico("c1"), "10.244.1.2");
    // Handles: web-1's, gone web-0's, and an orphan no block carries.
    for (container, count) in [("c1", 1), ("c0", 1), ("c9", 1)] {
        kube.create(
            &json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMHandle",
            "metadata": {"name": format!("k8s-pod-network.{container}")},
            "spec": {"handleID": format!("k8s-pod-network.{container}"),
                "block": {"10.244.1.0/26": count}, "deleted": false}}),
        );
    }
    kube.create(
        &json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMHandle",
        "metadata": {"name": "vxlan-tunnel-addr-worker-1"},
        "spec": {"handleID": "vxlan-tunnel-addr-worker-1", "block": {"10.244.1.0/26": 1},
            "deleted": false}}),
    );
    let mut allocations = vec![Value::Null; 64];
    allocations[0] = json!(0);
    allocations[1] = json!(1);
    allocations[2] = json!(2);
    kube.create(
        &json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMBlock",
        "metadata": {"name": "10-244-1-0-26"},
        "spec": {"cidr": "10.244.1.0/26", "affinity": "host:worker-1",
            "allocations": allocations, "unallocated": (3..64).collect::<Vec<_>>(),
            "attributes": [
                {"handle_id": "vxlan-tunnel-addr-worker-1",
                    "secondary": {"node": "worker-1", "type": "vxlanTunnelAddress"}},
                {"handle_id": "k8s-pod-network.c0",
                    "secondary": {"namespace": "default", "pod": "web-0", "node": "worker-1"}},
                {"handle_id": "k8s-pod-network.c1",
                    "secondary": {"namespace": "default", "pod": "web-1", "node": "worker-1"}}],
            "sequenceNumber": 3, "sequenceNumberForAllocation": {"0": 1, "1": 2, "2": 3},
            "deleted": false, "strictAffinity": false}}),
    );
    // The pool, an IPv6 block with its node's VXLAN tunnel address, and two pods whose
    // addresses Calico does not account for: one outside every pool, one no block allocates.
    kube.create(
        &json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool",
        "metadata": {"name": "default-ipv4"}, "spec": {"cidr": "10.244.0.0/16"}}),
    );
    kube.create(
        &json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool",
        "metadata": {"name": "default-ipv6"}, "spec": {"cidr": "fd00:10::/48"}}),
    );
    kube.create(
        &json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMHandle",
        "metadata": {"name": "vxlan-v6-tunnel-addr-worker-1"},
        "spec": {"handleID": "vxlan-v6-tunnel-addr-worker-1", "block": {"fd00:10::/122": 1},
            "deleted": false}}),
    );
    kube.create(
        &json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMBlock",
        "metadata": {"name": "fd00-10---122"},
        "spec": {"cidr": "fd00:10::/122", "affinity": "host:worker-1",
            "allocations": [0, null], "unallocated": [1],
            "attributes": [{"handle_id": "vxlan-v6-tunnel-addr-worker-1",
                "secondary": {"node": "worker-1", "type": "vxlanV6TunnelAddress"}}],
            "sequenceNumber": 1, "sequenceNumberForAllocation": {"0": 1},
            "deleted": false, "strictAffinity": false}}),
    );
    pod(&kube, "stray", calico("c7"), "192.168.50.5");
    pod(&kube, "unrecorded", calico("c8"), "10.244.1.9");
    // A CiliumEndpoint of a pod that is gone.
    kube.create(
        &json!({"apiVersion": "cilium.io/v2", "kind": "CiliumEndpoint",
        "metadata": {"name": "cache-1", "namespace": "default"},
        "status": {"id": 77, "state": "ready",
            "networking": {"addressing": [{"ipv4": "10.0.2.11"}], "node": "10.6.0.12"}}}),
    );

    let plugin = ipaudit_tests::plugin::Plugin::new(&kube.kubeconfig, dir.path());
    let report = dir.path().join("report.json");
    let check = |out: &std::path::Path| {
        plugin.run(&[
            "check",
            "--format",
            "jsonl",
            "--owner-grace",
            "0s",
            "--calico-grace",
            "0s",
            "--handle-grace",
            "0s",
            "-o",
            out.to_str().expect("UTF-8 path"),
        ])
    };
    let found = check(&report);
    assert_eq!(found.code, Some(1), "leaks found: {found}");
    assert_eq!(
        found.alerts(),
        [
            (
                "handle-without-ip".to_owned(),
                "k8s-pod-network.c9".to_owned()
            ),
            ("ip-without-pod".to_owned(), "10.0.2.11".to_owned()),
            ("ip-without-pod".to_owned(), "10.244.1.1".to_owned()),
        ],
        "{found}"
    );
    // The Calico findings in calicoctl's categories, with ipaudit's own two.
    let categories: Value = found
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["record"] == "calico")
        .expect("a calico record");
    let items = |ipaudit: &str, calicoctl: &str| -> Vec<String> {
        categories["categories"]
            .as_array()
            .expect("categories")
            .iter()
            .find(|c| c["ipaudit"] == ipaudit && c["calicoctl"] == calicoctl)
            .and_then(|c| serde_json::from_value(c["items"].clone()).ok())
            .unwrap_or_else(|| panic!("{ipaudit} / {calicoctl}: {categories}"))
    };
    assert_eq!(
        items(
            "ip-without-pod",
            "IPs that are allocated in IPAM but not actually in use"
        ),
        ["10.244.1.1"]
    );
    assert_eq!(
        items("handle-without-ip", "handles with no matching IPs"),
        ["k8s-pod-network.c9"]
    );
    assert_eq!(
        items(
            "ip-without-handle",
            "handles mentioned in blocks with no matching handle resource"
        ),
        Vec::<String>::new()
    );
    assert_eq!(
        items("check", "in-use IPs that are not in active IP pools"),
        ["192.168.50.5 (pod default/stray)"]
    );
    assert_eq!(
        items(
            "check",
            "in-use IPs that are in active IP pools but have no corresponding IPAM allocation"
        ),
        ["10.244.1.9 (pod default/unrecorded)"]
    );
    assert_eq!(items("block-of-missing-node", ""), Vec::<String>::new());
    assert_eq!(
        items("check", ""),
        ["fd00:10:: (vxlanV6TunnelAddress of worker-1)"]
    );
    let dry = plugin.release(&report, &[]);
    assert_eq!(dry.code, Some(0), "{dry}");
    assert!(dry.line_about("10.244.1.1").starts_with("dry-run"), "{dry}");
    let applied = plugin.release(&report, &["--apply"]);
    assert_eq!(applied.code, Some(0), "{applied}");
    for what in ["10.244.1.1", "k8s-pod-network.c9", "cache-1"] {
        assert!(
            applied.line_about(what).starts_with("applied"),
            "{what}: {applied}"
        );
    }

    // The block, as libcalico-go's release leaves it: the ordinal free at the end of
    // unallocated, web-0's attribute gone and web-1's renumbered, the sequence bumped.
    let block = kube.get("ipamblocks.crd.projectcalico.org", "10-244-1-0-26", &[]);
    let spec = &block["spec"];
    assert_eq!(spec["allocations"][0], 0);
    assert!(spec["allocations"][1].is_null(), "{spec}");
    assert_eq!(spec["allocations"][2], 1);
    assert_eq!(spec["attributes"][1]["handle_id"], "k8s-pod-network.c1");
    assert_eq!(
        spec["unallocated"].as_array().and_then(|u| u.last()),
        Some(&json!(1))
    );
    assert_eq!(spec["sequenceNumber"], 4);
    assert!(
        spec["sequenceNumberForAllocation"].get("1").is_none(),
        "{spec}"
    );
    for (handle, exists) in [
        ("k8s-pod-network.c0", false),
        ("k8s-pod-network.c9", false),
        ("k8s-pod-network.c1", true),
        ("vxlan-tunnel-addr-worker-1", true),
    ] {
        assert_eq!(
            kube.exists("ipamhandles.crd.projectcalico.org", handle, &[]),
            exists,
            "{handle}"
        );
    }
    assert!(!kube.exists("ciliumendpoints.cilium.io", "cache-1", &[]));
    let after = check(&dir.path().join("after.json"));
    assert_eq!(after.code, Some(0), "the cluster is clean: {after}");
}

#[test]
fn a_cleanup_command_releases_a_leaked_allocation_of_a_v3_calico_block_with_the_charts_roles() {
    let kube = KubeServer::start();
    let world = World::new("calico-remediate", None);
    let receiver = Receiver::start(&world.runtime);
    // The collector runs as the chart's ServiceAccount with remediation on: its writes pass
    // the server's RBAC with the chart's roles.
    let kubeconfig = kube.chart_collector_kubeconfig(true, world.dir.path());
    let (collector, _analyzer) = world.cleanup_loop_on(
        &kubeconfig,
        &format!("{}/hook", receiver.url),
        &["--calico-grace", "3s"],
    );
    kube.create(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-1"}}));
    pod(&kube, "ticker", json!({}), "10.6.0.99");
    pod(
        &kube,
        "web-0",
        json!({"cni.projectcalico.org/containerID": "c0"}),
        "10.245.1.1",
    );
    // Calico 3.32's v3 group: the command must name it, or the collector would patch v1.
    kube.create(
        &json!({"apiVersion": "projectcalico.org/v3", "kind": "IPAMHandle",
        "metadata": {"name": "k8s-pod-network.c0"},
        "spec": {"handleID": "k8s-pod-network.c0", "block": {"10.245.1.0/26": 1},
            "deleted": false}}),
    );
    let mut allocations = vec![Value::Null; 64];
    allocations[1] = json!(0);
    kube.create(
        &json!({"apiVersion": "projectcalico.org/v3", "kind": "IPAMBlock",
        "metadata": {"name": "10-245-1-0-26"},
        "spec": {"cidr": "10.245.1.0/26", "affinity": "host:worker-1",
            "allocations": allocations, "unallocated": (2..64).chain([0]).collect::<Vec<_>>(),
            "attributes": [{"handle_id": "k8s-pod-network.c0",
                "secondary": {"namespace": "default", "pod": "web-0", "node": "worker-1"}}],
            "sequenceNumber": 1, "sequenceNumberForAllocation": {"1": 1},
            "deleted": false, "strictAffinity": false}}),
    );
    force_delete(&kube, "web-0");
    firing(&kube, &receiver, "ip-without-pod", "10.245.1.1");
    wait_for(
        "the allocation released and its alert resolved",
        Duration::from_secs(60),
        || {
            alerts(&receiver)
                .into_iter()
                .find(|a| a["rule"] == "ip-without-pod" && a["status"] == "RESOLVED")
        },
    );
    let block = kube.get("ipamblocks.projectcalico.org", "10-245-1-0-26", &[]);
    assert!(block["spec"]["allocations"][1].is_null(), "{block}");
    assert_eq!(block["spec"]["attributes"], json!([]), "{block}");
    assert!(
        !kube.exists("ipamhandles.projectcalico.org", "k8s-pod-network.c0", &[]),
        "the handle went with its last address"
    );
    drop(collector);
}
