//! Cleanup against a real kube-apiserver on etcd (`scripts/kube`), on a server of each
//! test's own (a check and an analysis read the whole cluster): `kubectl ipaudit check` and
//! `release --apply` for every action of the remediation table (kube-ovn, whereabouts,
//! spiderpool, status subresource included), each refused by the server when its object
//! moves between the reread and the write, and the whole pipeline (collector, Kafka,
//! analyzer, cleanup command, the collector's remediator), so that the patches with their
//! `test` operations and the preconditions meet the real server's validation, not the
//! simulator's.

use std::time::Duration;

use ipaudit_schemas::{EventType, RemediationOutcome, WatchEvent};
use ipaudit_tests::interloper::Interloper;
use ipaudit_tests::kube::KubeServer;
use ipaudit_tests::plugin::{Plugin, Run};
use ipaudit_tests::receiver::Receiver;
use ipaudit_tests::wait_for;
use ipaudit_tests::world::World;
use serde_json::{json, Value};

const FINALIZER: &str = "kubeovn.io/kube-ovn-controller";

/// A kube-ovn IP of pod `default/<pod>` on `subnet`, with kube-ovn's finalizer.
fn ip(pod: &str, subnet: &str, address: &str) -> Value {
    json!({"apiVersion": "kubeovn.io/v1", "kind": "IP",
        "metadata": {"name": format!("{pod}.default"), "finalizers": [FINALIZER],
            "labels": {"ovn.kubernetes.io/subnet": subnet}},
        "spec": {"podName": pod, "namespace": "default", "subnet": subnet,
            "ipAddress": address, "v4IpAddress": address, "podType": ""}})
}

/// A pod that exists (Pending for ever: there is no kubelet); its uid.
fn pod(kube: &KubeServer, name: &str) -> Value {
    let pod = kube.create(&json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}));
    pod["metadata"]["uid"].clone()
}

const IP_POOLS: &str = "ippools.whereabouts.cni.cncf.io";
const RESERVATIONS: &str = "overlappingrangeipreservations.whereabouts.cni.cncf.io";
const SPIDER_POOLS: &str = "spiderippools.spiderpool.spidernet.io";
const SPIDER_ENDPOINTS: &str = "spiderendpoints.spiderpool.spidernet.io";

/// One leak for each action of the remediation table, left through the API as the IPAM
/// controllers leave them, beside live objects that must stay: a kube-ovn IP whose subnet
/// is absent and one stuck terminating on kube-ovn's finalizer; a whereabouts allocation
/// and a reservation of gone pods, beside the allocation of a live pod; a spiderpool status
/// entry of a gone pod beside a live one's, and a SpiderEndpoint stuck on its finalizer.
fn leaks_of_every_ipam(kube: &KubeServer) {
    // The kube-ovn IPs' pods exist: the leak is their subnet's, not a gone pod's.
    pod(kube, "orphan");
    pod(kube, "stuck");
    kube.create(&ip("orphan", "gone-1", "10.17.0.5"));
    kube.create(&ip("stuck", "gone-2", "10.18.0.5"));
    kube.delete("ips.kubeovn.io", "stuck.default");

    pod(kube, "web-1");
    kube.create(
        &json!({"apiVersion": "whereabouts.cni.cncf.io/v1alpha1", "kind": "IPPool",
        "metadata": {"name": "10.128.40.0-24", "namespace": "kube-system"},
        "spec": {"range": "10.128.40.0/24", "allocations": {
            "5": {"id": "c-5", "podref": "default/gone-pod", "ifname": "net1"},
            "6": {"id": "c-6", "podref": "default/web-1", "ifname": "net1"}}}}),
    );
    kube.create(&json!({"apiVersion": "whereabouts.cni.cncf.io/v1alpha1",
        "kind": "OverlappingRangeIPReservation",
        "metadata": {"name": "10.128.40.7", "namespace": "kube-system"},
        "spec": {"podref": "default/gone-pod-2", "containerid": "c-7", "ifname": "net1"}}));

    let api_uid = pod(kube, "api");
    kube.create(
        &json!({"apiVersion": "spiderpool.spidernet.io/v2beta1", "kind": "SpiderIPPool",
        "metadata": {"name": "pool-a"},
        "spec": {"subnet": "172.18.0.0/16", "ips": ["172.18.40.10-172.18.40.20"]}}),
    );
    // The status subresource: spiderpool's controller writes it, a create drops it.
    let entries = json!({
        "172.18.40.10": {"pod": "default/gone", "podUid": "uid-gone"},
        "172.18.40.11": {"pod": "default/api", "podUid": api_uid},
    });
    kube.patch_status(
        SPIDER_POOLS,
        "pool-a",
        &json!({"status": {"allocatedIPCount": 2, "allocatedIPs": entries.to_string()}}),
    );
    kube.create(
        &json!({"apiVersion": "spiderpool.spidernet.io/v2beta1", "kind": "SpiderEndpoint",
        "metadata": {"name": "gone", "namespace": "default",
            "finalizers": ["spiderpool.spidernet.io"]},
        "status": {"current": {"uid": "uid-gone", "node": "worker-1", "ips": [{
            "interface": "net1", "ipv4": "172.18.40.10/16", "ipv4Pool": "pool-a", "vlan": 0}]}}}),
    );
    kube.delete(SPIDER_ENDPOINTS, "gone");
}

/// What the check of [`leaks_of_every_ipam`] reports, and the text that names each one's
/// line in a release.
const EVERY_LEAK: [(&str, &str, &str); 6] = [
    ("ip-orphaned", "orphan.default", "IP orphan.default"),
    ("ip-stuck-terminating", "stuck.default", "IP stuck.default"),
    (
        "ip-without-pod",
        "kube-system/10.128.40.0-24/10.128.40.5",
        "10.128.40.5",
    ),
    ("ip-without-pod", "kube-system/10.128.40.7", "10.128.40.7"),
    ("ip-without-pod", "pool-a/172.18.40.10", "pool-a"),
    (
        "ip-stuck-terminating",
        "default/gone",
        "SpiderEndpoint default/gone",
    ),
];

/// Checks a cluster holding [`leaks_of_every_ipam`]: it finds exactly those; the report.
fn report_of_every_leak(plugin: &Plugin) -> std::path::PathBuf {
    let (report, run) = plugin.check_without_grace();
    let mut expected: Vec<(String, String)> = EVERY_LEAK
        .iter()
        .map(|(rule, subject, _)| (rule.to_string(), subject.to_string()))
        .collect();
    expected.sort();
    assert_eq!(run.alerts(), expected, "{run}");
    report
}

/// The line of `release` about each leak, by its subject.
fn lines_about_every_leak(run: &Run) -> Vec<(&'static str, String)> {
    EVERY_LEAK
        .iter()
        .map(|(_, subject, line)| (*subject, run.line_about(line).to_owned()))
        .collect()
}

#[test]
fn every_cleanup_of_the_remediation_table_is_applied_on_a_real_server_and_keeps_the_live_objects() {
    let kube = KubeServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    leaks_of_every_ipam(&kube);
    let plugin = Plugin::new(&kube.kubeconfig, dir.path());
    let report = report_of_every_leak(&plugin);

    let dry = plugin.release(&report, &[]);
    assert_eq!(dry.code, Some(0), "the apply would succeed: {dry}");
    for (subject, line) in lines_about_every_leak(&dry) {
        assert!(line.starts_with("dry-run"), "{subject}: {dry}");
    }
    let applied = plugin.release(&report, &["--apply"]);
    assert_eq!(applied.code, Some(0), "{applied}");
    for (subject, line) in lines_about_every_leak(&applied) {
        assert!(line.starts_with("applied"), "{subject}: {applied}");
    }

    for name in ["orphan.default", "stuck.default"] {
        assert!(!kube.exists("ips.kubeovn.io", name, &[]), "{name} is gone");
    }
    let pool = kube.get(IP_POOLS, "10.128.40.0-24", &["-n", "kube-system"]);
    let allocations: Vec<&String> = pool["spec"]["allocations"]
        .as_object()
        .expect("allocations")
        .keys()
        .collect();
    assert_eq!(
        allocations,
        ["6"],
        "only the gone pod's allocation is removed: {pool}"
    );
    assert!(!kube.exists(RESERVATIONS, "10.128.40.7", &["-n", "kube-system"]));
    let spider_pool = kube.get(SPIDER_POOLS, "pool-a", &[]);
    let entries: Value = serde_json::from_str(
        spider_pool["status"]["allocatedIPs"]
            .as_str()
            .expect("allocatedIPs"),
    )
    .expect("allocatedIPs is JSON");
    assert_eq!(
        entries
            .as_object()
            .expect("entries")
            .keys()
            .collect::<Vec<_>>(),
        ["172.18.40.11"],
        "only the gone pod's entry is removed, through the status subresource: {spider_pool}"
    );
    assert!(
        !kube.exists(SPIDER_ENDPOINTS, "gone", &[]),
        "the endpoint went once its finalizer was removed"
    );
    let after = plugin.run(&["check", "--owner-grace", "0s"]);
    assert_eq!(after.code, Some(0), "the cluster is clean: {after}");
}

#[test]
fn every_cleanup_whose_object_changes_between_reread_and_write_is_refused_by_the_real_server_and_skipped(
) {
    let kube = KubeServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    leaks_of_every_ipam(&kube);
    let report = report_of_every_leak(&Plugin::new(&kube.kubeconfig, dir.path()));
    let objects = |kube: &KubeServer| {
        [
            "ips.kubeovn.io",
            IP_POOLS,
            RESERVATIONS,
            SPIDER_POOLS,
            SPIDER_ENDPOINTS,
        ]
        .map(|resource| kube.kubectl(&["get", resource, "-A", "-o", "name"], None))
    };
    let before = objects(&kube);

    // Each write reaches the server right after another writer changed its object: the
    // reread saw the version of the report, the write's preconditions no longer hold.
    let interloper = Interloper::start(&kube);
    let through = Plugin::new(&interloper.kubeconfig, dir.path());
    let run = through.release(&report, &["--apply"]);
    assert_eq!(run.code, Some(0), "a skip is not a failure: {run}");
    // The server's refusals: 409 for a DELETE whose preconditions fail, a bare 422 for a
    // JSON patch whose `test` fails.
    for (subject, line) in lines_about_every_leak(&run) {
        let refusal = if line.contains(" delete ") {
            "(409: Operation cannot be fulfilled"
        } else {
            "(422: a test of the patch no longer holds"
        };
        assert!(
            line.starts_with("skipped") && line.contains(refusal),
            "{subject} is skipped with the server's refusal {refusal}: {run}"
        );
    }
    assert_eq!(
        interloper.changed().len(),
        EVERY_LEAK.len(),
        "one write per leak reached the server: {:?}",
        interloper.changed()
    );
    assert_eq!(objects(&kube), before, "nothing was deleted");
    let pool = kube.get(IP_POOLS, "10.128.40.0-24", &["-n", "kube-system"]);
    assert_eq!(
        pool["spec"]["allocations"].as_object().map(|a| a.len()),
        Some(2),
        "{pool}"
    );
    let spider_pool = kube.get(SPIDER_POOLS, "pool-a", &[]);
    assert!(
        spider_pool["status"]["allocatedIPs"]
            .as_str()
            .is_some_and(|e| e.contains("172.18.40.10")),
        "{spider_pool}"
    );
}

#[test]
fn kubectl_ipaudit_through_plugin_discovery_frees_a_stuck_ip_on_a_real_server_and_skips_one_changed_since_the_report(
) {
    let kube = KubeServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    // Two IPs terminating on kube-ovn's finalizer, their subnets absent: stuck for good.
    for (pod, address) in [("stuck-a", "10.18.0.5"), ("stuck-b", "10.18.0.6")] {
        kube.create(&ip(pod, &format!("gone-{pod}"), address));
        kube.delete("ips.kubeovn.io", &format!("{pod}.default"));
    }
    let plugin = Plugin::new(&kube.kubeconfig, dir.path());
    let report = dir.path().join("report.json");
    let check = plugin.run_through_kubectl(&["check", "-o", report.to_str().unwrap()]);
    assert_eq!(check.code, Some(1), "leaks found: {check}");
    // stuck-b changes after the report: its release must not act on the old version.
    kube.patch(
        "ips.kubeovn.io",
        "stuck-b.default",
        &json!({"metadata": {"labels": {"touched": "yes"}}}),
    );
    let log = dir.path().join("release.log");
    let run = plugin.run_through_kubectl(&[
        "release",
        "--from-report",
        report.to_str().unwrap(),
        "--log-file",
        log.to_str().unwrap(),
        "--apply",
    ]);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.line_about("stuck-a.default").starts_with("applied"),
        "{run}"
    );
    let skipped = run.line_about("stuck-b.default");
    assert!(
        skipped.starts_with("skipped") && skipped.contains("resourceVersion changed"),
        "{run}"
    );
    assert!(
        !kube.exists("ips.kubeovn.io", "stuck-a.default", &[]),
        "the real server deleted the IP once its finalizer was removed"
    );
    assert!(
        kube.exists("ips.kubeovn.io", "stuck-b.default", &[]),
        "the changed IP is untouched"
    );
}

#[test]
fn a_cleanup_command_frees_the_stuck_ip_on_a_real_server_with_the_charts_roles_and_its_alert_resolves(
) {
    let kube = KubeServer::start();
    let world = World::new("real-remediate", None);
    let receiver = Receiver::start(&world.runtime);
    // The collector runs as the chart's ServiceAccount with remediation on: its cleanup
    // writes pass the server's RBAC with the chart's roles, not an admin's.
    let kubeconfig = kube.chart_collector_kubeconfig(true, world.dir.path());
    let (collector, analyzer) =
        world.cleanup_loop_on(&kubeconfig, &format!("{}/hook", receiver.url), &[]);
    // The seed incident, played through the API: the subnet goes while its IP names it,
    // then the IP is deleted and stays on kube-ovn's finalizer.
    kube.create(&json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
        "metadata": {"name": "seed-net"},
        "spec": {"cidrBlock": "10.19.0.0/24", "protocol": "IPv4", "provider": "ovn"}}));
    kube.create(&ip("vm-1", "seed-net", "10.19.0.5"));
    kube.delete("subnets.kubeovn.io", "seed-net");
    kube.delete("ips.kubeovn.io", "vm-1.default");
    wait_for("the stuck IP is gone", Duration::from_secs(60), || {
        (!kube.exists("ips.kubeovn.io", "vm-1.default", &[])).then_some(())
    });
    wait_for(
        "the stuck-IP alert resolves",
        Duration::from_secs(30),
        || {
            receiver.received("/hook").into_iter().find(|r| {
                r.body["rule"] == "ip-stuck-terminating" && r.body["status"] == "RESOLVED"
            })
        },
    );
    // The collector's record of the cleanup is on the events topic: applied, on that IP.
    let applied = |events: &[WatchEvent]| {
        events.iter().any(|e| {
            e.event_type == EventType::Remediation
                && e.object_key() == "vm-1.default"
                && e.remediation
                    .as_ref()
                    .is_some_and(|r| r.outcome == RemediationOutcome::Applied)
        })
    };
    let events = world.events_until(Duration::from_secs(30), applied);
    assert!(applied(&events), "{}", collector.log_text());
    analyzer.assert_no_new_epoch();
}
