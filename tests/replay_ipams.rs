//! The recorded incidents of every IPAM, replayed: the whereabouts reconciler race, the
//! spiderpool reclaim failures, the addresses kept on purpose, healthy churn, kube-ovn
//! recordings that begin after the subnet went, and Calico's and Cilium's leaks (dead
//! pods' allocations, orphan and missing handles, blocks of gone nodes, a live pod's
//! address released, stale used addresses and endpoints, dangling CiliumNodes). Each folder of `fixtures/incidents/` is a
//! set of kubectl watch recordings (one file per kind, written by `make_fixtures.py`, whose
//! docstrings tell each story); each test replays one with the default grace periods and
//! asserts exactly the alerts it raises (rule, status, subject) and the resourceVersions
//! that carry the story.

use std::collections::HashMap;

use ipaudit_analyzer::offline::replay::{replay, ReplayOptions, ReplayOutcome};
use ipaudit_analyzer::present::{AlertHistory, Findings};
use ipaudit_schemas::{EventType, Stream};
use ipaudit_tests::{incident_files, kubectl_events};

/// The folders this file replays.
const INCIDENTS: &[&str] = &[
    "whereabouts-reconciler-race",
    "spiderpool-pod-gone-node-down",
    "spiderpool-pool-deleted-with-entries",
    "whereabouts-statefulset-recreated",
    "spiderpool-statefulset-recreated",
    "kubevirt-launcher-replaced",
    "whereabouts-healthy-churn",
    "spiderpool-healthy-churn",
    "kube-ovn-starts-after-subnet-gone",
    "kube-ovn-ip-added-after-subnet-deleted",
    "calico-node-crash-leaks",
    "calico-orphan-handles",
    "calico-gc-released-live-pod",
    "calico-healthy-churn",
    "cilium-stale-entries",
    "cilium-dangling-node",
];

/// (rule, status, subject name).
type Found = (String, String, String);

fn replayed(files: &[std::path::PathBuf]) -> Findings {
    let outcome: ReplayOutcome = replay(files, &ReplayOptions::default()).expect("replay");
    let problems: Vec<String> = outcome.problems.iter().map(ToString::to_string).collect();
    assert!(
        problems.is_empty(),
        "the recording reads cleanly: {problems:?}"
    );
    Findings::from_outputs(&outcome.outputs)
}

fn replay_incident(incident: &str) -> Findings {
    replayed(&incident_files(incident))
}

fn found(findings: &Findings) -> Vec<Found> {
    findings
        .alerts
        .iter()
        .map(|h| {
            let a = h.latest();
            (
                a.rule.clone(),
                a.status.as_str().to_owned(),
                a.subject_name.clone(),
            )
        })
        .collect()
}

fn firing(rule: &str, subject: &str) -> Found {
    (rule.to_owned(), "firing".to_owned(), subject.to_owned())
}

/// The one alert of `rule` about `subject`.
fn alert<'a>(findings: &'a Findings, rule: &str, subject: &str) -> &'a AlertHistory {
    let mut matching = findings
        .alerts
        .iter()
        .filter(|h| h.fired.rule == rule && h.fired.subject_name == subject);
    let history = matching
        .next()
        .unwrap_or_else(|| panic!("{rule} about {subject}: {:?}", found(findings)));
    assert!(matching.next().is_none(), "one {rule} about {subject}");
    history
}

/// Whether the alert's evidence holds the event of `stream` and `event_type` at `rv`.
fn cites(history: &AlertHistory, stream: Stream, event_type: EventType, rv: &str) -> bool {
    history
        .latest()
        .evidence
        .iter()
        .any(|e| e.stream == stream && e.event_type == event_type && e.resource_version == rv)
}

fn assert_cites(history: &AlertHistory, stream: Stream, event_type: EventType, rv: &str) {
    assert!(
        cites(history, stream, event_type, rv),
        "{} about {} cites {stream:?} {event_type:?} at {rv}: {:?}",
        history.fired.rule,
        history.fired.subject_name,
        history
            .latest()
            .evidence
            .iter()
            .map(|e| (e.stream, e.event_type, e.resource_version.as_str()))
            .collect::<Vec<_>>()
    );
}

// whereabouts#162, as its log tells it: allocation 47 written for web-2 at 733533, removed
// by the ip-reconciler at the next version (its patch tested 733533) while web-2 is
// Pending, then handed to web-3, whose network-status shows it at 733549.
const RACE_RELEASED: &str = "733534";
const RACE_WEB_3_SHOWS_47: &str = "733549";

fn race_alerts() -> Vec<Found> {
    vec![
        firing("ip-released-while-pod-alive", "default/web-2"),
        firing("duplicate-ip", "10.128.40.47"),
    ]
}

#[test]
fn whereabouts_reconciler_race_is_a_release_while_the_pod_lives_and_a_duplicate() {
    let findings = replay_incident("whereabouts-reconciler-race");
    assert_eq!(found(&findings), race_alerts());

    let released = alert(&findings, "ip-released-while-pod-alive", "default/web-2");
    assert_eq!(released.fired.fired_resource_version, RACE_RELEASED);
    assert_cites(released, Stream::IpPool, EventType::Modified, RACE_RELEASED);

    let duplicate = alert(&findings, "duplicate-ip", "10.128.40.47");
    assert_eq!(duplicate.fired.fired_resource_version, RACE_WEB_3_SHOWS_47);
    assert_cites(
        duplicate,
        Stream::Pod,
        EventType::Modified,
        RACE_WEB_3_SHOWS_47,
    );
    // Which pod keeps the address is a person's decision: no cleanup, and the alert says so.
    for report_only in [released, duplicate] {
        assert!(report_only.fired.cleanup.is_none());
        let fix = report_only.fired.fix.as_deref().unwrap_or_default();
        assert!(
            fix.contains("report-only: ipaudit sends no cleanup"),
            "{fix}"
        );
    }
}

#[test]
fn the_race_gives_the_same_alerts_from_one_concatenated_file() {
    let dir = tempfile::tempdir().unwrap();
    let joined = dir.path().join("all.json");
    let text: Vec<u8> = incident_files("whereabouts-reconciler-race")
        .iter()
        .rev()
        .flat_map(|f| std::fs::read(f).unwrap())
        .collect();
    std::fs::write(&joined, text).unwrap();
    assert_eq!(found(&replayed(&[joined])), race_alerts());
}

#[test]
fn a_spiderpool_pod_force_deleted_from_a_down_node_leaves_its_entry_and_a_stuck_endpoint() {
    const POD_DELETED: &str = "5120492";
    const ENDPOINT_COLLECTED: &str = "5120494";
    let findings = replay_incident("spiderpool-pod-gone-node-down");
    let mut seen = found(&findings);
    seen.sort();
    assert_eq!(
        seen,
        [
            firing("ip-stuck-terminating", "shop/checkout-6d9f7c8b5d-x2k9p"),
            firing("ip-without-pod", "underlay-v4/172.18.40.11"),
        ]
    );
    let entry = alert(&findings, "ip-without-pod", "underlay-v4/172.18.40.11");
    assert_cites(entry, Stream::Pod, EventType::Deleted, POD_DELETED);
    let endpoint = alert(
        &findings,
        "ip-stuck-terminating",
        "shop/checkout-6d9f7c8b5d-x2k9p",
    );
    assert_cites(
        endpoint,
        Stream::SpiderEndpoint,
        EventType::Modified,
        ENDPOINT_COLLECTED,
    );
}

#[test]
fn a_spiderpool_pool_deleted_with_live_entries_is_stuck_terminating() {
    const POOL_DELETED: &str = "6230135";
    let findings = replay_incident("spiderpool-pool-deleted-with-entries");
    assert_eq!(
        found(&findings),
        [firing("subnet-stuck-terminating", "tenant-a-v4")]
    );
    let stuck = alert(&findings, "subnet-stuck-terminating", "tenant-a-v4");
    assert_cites(
        stuck,
        Stream::SpiderIpPool,
        EventType::Modified,
        POOL_DELETED,
    );
}

#[test]
fn a_statefulset_pod_recreated_under_its_name_keeps_its_whereabouts_address_silently() {
    let findings = replay_incident("whereabouts-statefulset-recreated");
    assert_eq!(found(&findings), Vec::<Found>::new());
}

#[test]
fn a_statefulset_pod_recreated_under_its_name_keeps_its_spiderpool_address_silently() {
    let findings = replay_incident("spiderpool-statefulset-recreated");
    assert_eq!(found(&findings), Vec::<Found>::new());
}

#[test]
fn a_kubevirt_launcher_replaced_keeps_the_vm_address_silently() {
    let findings = replay_incident("kubevirt-launcher-replaced");
    assert_eq!(found(&findings), Vec::<Found>::new());
}

#[test]
fn healthy_whereabouts_churn_raises_nothing() {
    let findings = replay_incident("whereabouts-healthy-churn");
    assert_eq!(found(&findings), Vec::<Found>::new());
}

#[test]
fn healthy_spiderpool_churn_raises_nothing() {
    let findings = replay_incident("spiderpool-healthy-churn");
    assert_eq!(found(&findings), Vec::<Found>::new());
}

const DANGLING_IP: &str =
    "test-vm-1.kube-ovn-dangling-ips.kube-ovn-dangling-ips-control-net.kube-ovn-dangling-ips.ovn";

#[test]
fn a_kube_ovn_recording_started_after_the_subnet_went_finds_the_orphaned_ip() {
    let findings = replay_incident("kube-ovn-starts-after-subnet-gone");
    assert_eq!(found(&findings), [firing("ip-orphaned", DANGLING_IP)]);
    let orphan = alert(&findings, "ip-orphaned", DANGLING_IP);
    assert_eq!(
        orphan.fired.subnet.as_deref(),
        Some("kube-ovn-dangling-ips-control-net")
    );
    assert_cites(orphan, Stream::Ip, EventType::Added, "1032");
}

#[test]
fn a_kube_ovn_ip_added_after_its_subnet_was_deleted_is_orphaned_not_deleted_before_ip() {
    const SUBNET_DELETED: &str = "3405";
    const IP_ADDED: &str = "3407";
    let findings = replay_incident("kube-ovn-ip-added-after-subnet-deleted");
    let ip = "app-5d8c7b9f6-qwz4r.tenant-b";
    assert_eq!(found(&findings), [firing("ip-orphaned", ip)]);
    let orphan = alert(&findings, "ip-orphaned", ip);
    assert_eq!(orphan.fired.subnet.as_deref(), Some("tenant-b-net"));
    assert_eq!(orphan.fired.fired_resource_version, IP_ADDED);
    assert_cites(orphan, Stream::Subnet, EventType::Deleted, SUBNET_DELETED);
    assert_cites(orphan, Stream::Ip, EventType::Added, IP_ADDED);
}

/// What the tests above rely on, checked without the analyzer: every file converts, opens
/// with its initial list (ADDED events at versions below every watch event after it), its
/// watch events go up, and the files of one incident share one counter (no version twice).
#[test]
fn every_ipam_recording_is_kubectl_output_on_one_version_counter() {
    for incident in INCIDENTS {
        let files = incident_files(incident);
        assert!(files.len() >= 2, "{incident}: one file per kind");
        let mut versions: HashMap<i64, String> = HashMap::new();
        for file in &files {
            let name = file.display().to_string();
            let events = kubectl_events(file);
            let listed = events
                .iter()
                .take_while(|e| e.event_type == EventType::Added)
                .count();
            assert!(listed > 0, "{name} opens with its initial list");
            let rvs: Vec<i64> = events
                .iter()
                .map(|e| e.resource_version_num.expect("numeric version"))
                .collect();
            let (list, watch) = rvs.split_at(listed);
            if let (Some(highest), Some(first)) = (list.iter().max(), watch.first()) {
                assert!(highest < first, "{name}: list below the watch");
            }
            assert!(
                watch.windows(2).all(|w| w[0] < w[1]),
                "{name}: watch versions go up"
            );
            for rv in rvs {
                if let Some(other) = versions.insert(rv, name.clone()) {
                    panic!("{incident}: version {rv} twice ({other}, {name})");
                }
            }
        }
    }
}

/// Every alert about a pod's address names the pod's namespace (Alert v6), from each IPAM's
/// own record of it: whereabouts' podRef, spiderpool's entry and SpiderEndpoint, a kube-ovn
/// IP's `spec.namespace` (the IP itself is cluster-scoped); a pool's own alert names none.
#[test]
fn every_alert_about_a_pods_address_names_the_pods_namespace_and_a_pools_own_alert_none() {
    let mut namespaces = Vec::new();
    for incident in INCIDENTS {
        for history in &replay_incident(incident).alerts {
            let fired = &history.fired;
            assert_eq!(
                history.latest().namespace,
                fired.namespace,
                "a resolution keeps it"
            );
            namespaces.push((
                fired.rule.as_str().to_owned(),
                fired.subject_name.clone(),
                fired.namespace.clone(),
            ));
        }
    }
    let some = |ns: &str| Some(ns.to_owned());
    let expected = [
        ("ip-released-while-pod-alive", "default/web-2", some("default")),
        ("duplicate-ip", "10.128.40.47", some("default")),
        ("ip-stuck-terminating", "shop/checkout-6d9f7c8b5d-x2k9p", some("shop")),
        ("ip-without-pod", "underlay-v4/172.18.40.11", some("shop")),
        ("subnet-stuck-terminating", "tenant-a-v4", None),
        (
            "ip-orphaned",
            "test-vm-1.kube-ovn-dangling-ips.kube-ovn-dangling-ips-control-net.kube-ovn-dangling-ips.ovn",
            some("kube-ovn-dangling-ips"),
        ),
        ("ip-orphaned", "app-5d8c7b9f6-qwz4r.tenant-b", some("tenant-b")),
        ("ip-without-pod", "10.244.2.1", some("shop")),
        ("ip-without-pod", "10.244.2.2", some("shop")),
        ("block-of-missing-node", "worker-2", None),
        (
            "handle-without-ip",
            "k8s-pod-network.9be6fc0c853e779ad5409c3cbba287cfdfb35f1e0603f446fc7b7659a02df715",
            None,
        ),
        ("ip-without-handle", "10.244.1.3", some("shop")),
        ("ip-released-while-pod-alive", "payments/payments-0", some("payments")),
        ("duplicate-ip", "10.244.1.5", some("payments")),
        ("ip-without-pod", "10.0.1.22", some("search")),
        ("ip-without-pod", "10.0.1.21", some("search")),
        ("block-of-missing-node", "worker-3", None),
    ]
    .map(|(rule, subject, namespace)| (rule.to_owned(), subject.to_owned(), namespace));
    assert_eq!(namespaces, expected);
}

fn sorted_found(findings: &Findings) -> Vec<Found> {
    let mut seen = found(findings);
    seen.sort();
    seen
}

#[test]
fn a_crashed_calico_node_leaves_its_dead_pods_addresses_and_its_block() {
    const FIRST_POD_DELETED: &str = "8800220";
    const NODE_DELETED: &str = "8800275";
    let findings = replay_incident("calico-node-crash-leaks");
    assert_eq!(
        sorted_found(&findings),
        [
            firing("block-of-missing-node", "worker-2"),
            firing("ip-without-pod", "10.244.2.1"),
            firing("ip-without-pod", "10.244.2.2"),
        ],
        "never the tunnel address 10.244.2.0, nothing for the replacements"
    );
    let leaked = alert(&findings, "ip-without-pod", "10.244.2.1");
    assert_cites(leaked, Stream::Pod, EventType::Deleted, FIRST_POD_DELETED);
    assert!(
        leaked.fired.summary.contains("15 min"),
        "{}",
        leaked.fired.summary
    );
    let node = alert(&findings, "block-of-missing-node", "worker-2");
    assert_cites(node, Stream::Node, EventType::Deleted, NODE_DELETED);
    assert_cites(
        node,
        Stream::CalicoBlockAffinity,
        EventType::Added,
        "8800115",
    );
}

#[test]
fn calico_handles_left_behind_or_deleted_by_hand_are_found_and_migrated_ones_are_not() {
    const RELEASE_WITHOUT_DECREMENT: &str = "6120482";
    const LAST_BLOCK_WRITE: &str = "6120476";
    let findings = replay_incident("calico-orphan-handles");
    let orphan = findings
        .alerts
        .iter()
        .find(|h| h.fired.rule == "handle-without-ip")
        .expect("the orphan handle");
    assert!(orphan.fired.subject_name.starts_with("k8s-pod-network."));
    assert_eq!(
        sorted_found(&findings),
        [
            firing("handle-without-ip", &orphan.fired.subject_name),
            firing("ip-without-handle", "10.244.1.3"),
        ],
        "the `\\r\\neth0` handle of the migrated allocation is its clean id's"
    );
    assert_eq!(
        orphan.fired.fired_resource_version,
        RELEASE_WITHOUT_DECREMENT
    );
    let missing = alert(&findings, "ip-without-handle", "10.244.1.3");
    assert_cites(
        missing,
        Stream::CalicoIpamBlock,
        EventType::Modified,
        LAST_BLOCK_WRITE,
    );
}

#[test]
fn calicos_gc_releasing_a_live_pods_address_is_a_release_while_alive_then_a_duplicate() {
    const RELEASED: &str = "9301265";
    const REALLOCATED: &str = "9301274";
    let findings = replay_incident("calico-gc-released-live-pod");
    assert_eq!(
        sorted_found(&findings),
        [
            firing("duplicate-ip", "10.244.1.5"),
            firing("ip-released-while-pod-alive", "payments/payments-0"),
        ]
    );
    let released = alert(
        &findings,
        "ip-released-while-pod-alive",
        "payments/payments-0",
    );
    assert_eq!(released.fired.fired_resource_version, RELEASED);
    assert_cites(
        released,
        Stream::CalicoIpamBlock,
        EventType::Modified,
        RELEASED,
    );
    let duplicate = alert(&findings, "duplicate-ip", "10.244.1.5");
    assert_eq!(duplicate.fired.fired_resource_version, REALLOCATED);
    assert!(
        duplicate.fired.summary.contains("in Calico's IPAM"),
        "{}",
        duplicate.fired.summary
    );
}

#[test]
fn healthy_calico_churn_raises_nothing() {
    assert_eq!(found(&replay_incident("calico-healthy-churn")), []);
}

#[test]
fn cilium_used_addresses_and_endpoints_of_gone_pods_are_found_after_their_graces() {
    let findings = replay_incident("cilium-stale-entries");
    assert_eq!(
        sorted_found(&findings),
        [
            firing("ip-without-pod", "10.0.1.21"),
            firing("ip-without-pod", "10.0.1.22"),
        ],
        "never the router or health addresses, nothing for the pod that went cleanly"
    );
    let used = alert(&findings, "ip-without-pod", "10.0.1.21");
    assert_cites(used, Stream::Pod, EventType::Deleted, "7702334");
    assert!(
        used.fired.summary.contains("11 min"),
        "{}",
        used.fired.summary
    );
    let endpoint = alert(&findings, "ip-without-pod", "10.0.1.22");
    assert_cites(
        endpoint,
        Stream::CiliumEndpoint,
        EventType::Added,
        "7702316",
    );
    assert!(
        endpoint.fired.summary.contains("10 min"),
        "{}",
        endpoint.fired.summary
    );
}

#[test]
fn a_ciliumnode_left_by_its_deleted_node_is_found_and_one_collected_with_it_is_not() {
    let findings = replay_incident("cilium-dangling-node");
    assert_eq!(
        found(&findings),
        [firing("block-of-missing-node", "worker-3")]
    );
    let node = alert(&findings, "block-of-missing-node", "worker-3");
    assert_cites(node, Stream::Node, EventType::Deleted, "5500757");
    assert_cites(node, Stream::CiliumNode, EventType::Added, "5500713");
}
