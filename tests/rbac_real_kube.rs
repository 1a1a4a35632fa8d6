//! The chart's RBAC on a real kube-apiserver (RBAC on, `scripts/kube`), each test on a
//! server of its own (ClusterRoles are cluster-wide): the collector's ServiceAccount,
//! ClusterRoles and bindings as `helm template` renders them, applied to the server, and
//! tokens from the TokenRequest API. With its own token the collector lists and watches
//! every kind and may write nothing; with remediation on, the server grants exactly the
//! writes of the cleanup table; `kubectl ipaudit check` works with the read-only token; a
//! token without the roles stops the collector at start with an error that names each
//! missing permission, instead of a watcher retrying a 403 for ever.

use std::time::Duration;

use ipaudit_cleanup::WRITES;
use ipaudit_schemas::{EventType, Stream, KINDS};
use ipaudit_tests::collector::{CollectorProcess, CollectorSetup};
use ipaudit_tests::kube::{KubeServer, CHART_NAMESPACE};
use ipaudit_tests::plugin::Plugin;
use ipaudit_tests::world::World;
use serde_json::{json, Value};

/// `ips.kubeovn.io`, `pods`: a kind's resource as kubectl names it.
fn resource(kind: &ipaudit_schemas::KindSpec) -> String {
    if kind.group.is_empty() {
        kind.plural.to_owned()
    } else {
        format!("{}.{}", kind.plural, kind.group)
    }
}

/// One object of every kind the collector watches, made by the admin.
fn one_of_each_kind(kube: &KubeServer) {
    let mut objects: Vec<Value> = vec![
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}),
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "net-1"},
            "spec": {"cidrBlock": "10.16.0.0/16", "protocol": "IPv4", "provider": "ovn"}}),
        json!({"apiVersion": "kubeovn.io/v1", "kind": "IP", "metadata": {"name": "web-1.default"},
            "spec": {"podName": "web-1", "namespace": "default", "subnet": "net-1",
                "ipAddress": "10.16.0.5", "v4IpAddress": "10.16.0.5", "podType": ""}}),
        json!({"apiVersion": "whereabouts.cni.cncf.io/v1alpha1", "kind": "IPPool",
            "metadata": {"name": "10.128.40.0-24", "namespace": "kube-system"},
            "spec": {"range": "10.128.40.0/24", "allocations": {
                "6": {"id": "c-6", "podref": "default/web-1", "ifname": "net1"}}}}),
        json!({"apiVersion": "whereabouts.cni.cncf.io/v1alpha1",
            "kind": "OverlappingRangeIPReservation",
            "metadata": {"name": "10.128.40.6", "namespace": "kube-system"},
            "spec": {"podref": "default/web-1", "containerid": "c-6", "ifname": "net1"}}),
        json!({"apiVersion": "spiderpool.spidernet.io/v2beta1", "kind": "SpiderIPPool",
            "metadata": {"name": "pool-a"},
            "spec": {"subnet": "172.18.0.0/16", "ips": ["172.18.40.10-172.18.40.20"]}}),
        json!({"apiVersion": "spiderpool.spidernet.io/v2beta1", "kind": "SpiderEndpoint",
            "metadata": {"name": "web-1", "namespace": "default"},
            "status": {"current": {"uid": "uid-web-1", "node": "worker-1", "ips": []}}}),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-1"},
            "spec": {"podCIDRs": ["10.244.1.0/24"]}}),
        json!({"apiVersion": "cilium.io/v2", "kind": "CiliumNode", "metadata": {"name": "worker-1"},
            "spec": {"ipam": {"podCIDRs": ["10.0.1.0/24"]}}}),
        json!({"apiVersion": "cilium.io/v2", "kind": "CiliumEndpoint",
            "metadata": {"name": "web-1", "namespace": "default"},
            "status": {"networking": {"addressing": [{"ipv4": "10.0.1.9"}], "node": "192.168.0.10"}}}),
    ];
    // Calico's four kinds in each of its API groups.
    for api_version in ["crd.projectcalico.org/v1", "projectcalico.org/v3"] {
        objects.extend([
            json!({"apiVersion": api_version, "kind": "IPPool", "metadata": {"name": "default-ipv4"},
                "spec": {"cidr": "10.244.0.0/16", "blockSize": 26}}),
            json!({"apiVersion": api_version, "kind": "IPAMBlock",
                "metadata": {"name": "10-244-1-0-26"},
                "spec": {"cidr": "10.244.1.0/26", "affinity": "host:worker-1",
                    "allocations": [0], "unallocated": [],
                    "attributes": [{"handle_id": "k8s-pod-network.c0ffee",
                        "secondary": {"namespace": "default", "pod": "web-1", "node": "worker-1"}}],
                    "sequenceNumber": 1, "sequenceNumberForAllocation": {"0": 1}}}),
            json!({"apiVersion": api_version, "kind": "IPAMHandle",
                "metadata": {"name": "k8s-pod-network.c0ffee"},
                "spec": {"handleID": "k8s-pod-network.c0ffee", "block": {"10.244.1.0/26": 1}}}),
            json!({"apiVersion": api_version, "kind": "BlockAffinity",
                "metadata": {"name": "worker-1-10-244-1-0-26"},
                "spec": {"node": "worker-1", "cidr": "10.244.1.0/26", "state": "confirmed",
                    "deleted": if api_version.starts_with("crd.") { json!("false") } else { json!(false) }}}),
        ]);
    }
    for object in &objects {
        kube.create(object);
    }
}

#[test]
fn the_collector_with_the_charts_token_lists_and_watches_every_kind_and_may_write_nothing() {
    let kube = KubeServer::start();
    let world = World::new("rbac-read", None);
    let kubeconfig = kube.chart_collector_kubeconfig(false, world.dir.path());
    let setup = CollectorSetup {
        kubeconfig: &kubeconfig,
        ..world.setup()
    };
    let collector = CollectorProcess::start(&setup, &[]);
    one_of_each_kind(&kube);
    let added = |events: &[ipaudit_schemas::WatchEvent]| -> Vec<Stream> {
        let mut streams: Vec<Stream> = events
            .iter()
            .filter(|e| e.event_type == EventType::Added)
            .map(|e| e.stream)
            .collect();
        streams.sort_by_key(|s| KINDS.iter().position(|k| k.stream == *s));
        streams.dedup();
        streams
    };
    let every_kind: Vec<Stream> = KINDS.iter().map(|k| k.stream).collect();
    let events = world.events_until(Duration::from_secs(60), |e| added(e) == every_kind);
    assert_eq!(
        added(&events),
        every_kind,
        "a watch event of every kind: {}",
        collector.log_text()
    );

    for kind in KINDS.iter() {
        for verb in ["create", "update", "patch", "delete", "deletecollection"] {
            assert!(
                !kube.can(&kubeconfig, verb, &resource(kind), None),
                "{verb} {}",
                resource(kind)
            );
        }
    }
    // And a write itself: the server refuses it.
    let refused = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "patch",
            "ips.kubeovn.io",
            "web-1.default",
            "--type",
            "merge",
        ])
        .args(["-p", r#"{"metadata":{"labels":{"x":"y"}}}"#])
        .output()
        .expect("kubectl");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("Forbidden"),
        "{said}"
    );

    // The one-shot check needs no more than the collector's reads; the cluster's identity
    // (kube-system's uid) is not among them, so it names the cluster by its URL.
    let plugin = Plugin::new(&kubeconfig, world.dir.path());
    let check = plugin.run(&["check"]);
    assert_eq!(check.code, Some(0), "a healthy cluster: {check}");
}

#[test]
fn with_remediation_on_the_charts_roles_grant_exactly_the_writes_of_the_cleanup_table() {
    let kube = KubeServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = kube.chart_collector_kubeconfig(true, dir.path());
    let mut granted = Vec::new();
    for kind in KINDS.iter() {
        for subresource in [None, Some("status")] {
            for verb in [
                "get",
                "list",
                "watch",
                "create",
                "update",
                "patch",
                "delete",
                "deletecollection",
            ] {
                if kube.can(&kubeconfig, verb, &resource(kind), subresource) {
                    granted.push((kind.stream, subresource, verb));
                }
            }
        }
    }
    let mut expected = Vec::new();
    for kind in KINDS.iter() {
        for verb in ["get", "list", "watch"] {
            expected.push((kind.stream, None, verb));
        }
    }
    for write in WRITES {
        expected.push((write.stream, write.subresource, write.verb));
    }
    let order = |(stream, sub, verb): &(Stream, Option<&'static str>, &'static str)| {
        (KINDS.iter().position(|k| k.stream == *stream), *sub, *verb)
    };
    granted.sort_by_key(order);
    expected.sort_by_key(order);
    assert_eq!(granted, expected);
}

#[test]
fn a_token_without_the_roles_stops_the_collector_at_start_naming_each_missing_permission() {
    let kube = KubeServer::start();
    let world = World::new("rbac-none", None);
    kube.kubectl(&["create", "namespace", CHART_NAMESPACE], None);
    kube.kubectl(
        &["create", "serviceaccount", "nobody", "-n", CHART_NAMESPACE],
        None,
    );
    let nobody = kube.service_account_kubeconfig(CHART_NAMESPACE, "nobody", world.dir.path());
    let setup = CollectorSetup {
        kubeconfig: &nobody,
        ..world.setup()
    };
    let mut collector = CollectorProcess::start_unready(&setup, &[]);
    let status = collector.wait_exit(Duration::from_secs(30));
    let log = collector.log_text();
    assert!(
        status.is_some_and(|s| !s.success()),
        "the collector stops: {log}"
    );
    assert!(
        log.contains("(system:serviceaccount:ipaudit:nobody) may not list pods, watch pods, list ips.kubeovn.io"),
        "who and what: {log}"
    );
    assert!(!log.contains("retrying"), "no retry loop: {log}");

    // The read-only role with remediation asked for: the start names the writes missing.
    let reader = kube.chart_collector_kubeconfig(false, world.dir.path());
    let setup = CollectorSetup {
        kubeconfig: &reader,
        ..world.setup()
    };
    let mut collector = CollectorProcess::start_unready(
        &setup,
        &[
            "--remediate",
            "on",
            "--commands-topic",
            "rbac-none.commands",
        ],
    );
    let status = collector.wait_exit(Duration::from_secs(30));
    let log = collector.log_text();
    assert!(
        status.is_some_and(|s| !s.success()),
        "the collector stops: {log}"
    );
    let writes: Vec<String> = WRITES
        .iter()
        .map(|w| {
            let kind = KINDS.iter().find(|k| k.stream == w.stream).expect("a kind");
            let sub = w.subresource.map(|s| format!("/{s}")).unwrap_or_default();
            format!("{} {}{sub}", w.verb, resource(kind))
        })
        .collect();
    assert!(
        log.contains(&format!("may not {}:", writes.join(", "))),
        "exactly the cleanup writes are missing: {log}"
    );
    assert!(
        log.contains("ipaudit-collector-remediate"),
        "names the role: {log}"
    );

    // kubectl ipaudit with the same token: a clear error, exit 2.
    let plugin = Plugin::new(&nobody, world.dir.path());
    let check = plugin.run(&["check"]);
    assert_eq!(check.code, Some(2), "{check}");
    assert!(
        check.stderr.contains("cannot list ips.kubeovn.io") && check.stderr.contains("forbidden"),
        "{check}"
    );
}
