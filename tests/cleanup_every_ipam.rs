//! Cleanup for every IPAM, live: the finding fires at the analyzer, its typed cleanup goes
//! to the collector as a command on Apache Kafka, the collector's cleanup module
//! (`cleanup/src, the ipaudit-cleanup crate`) re-reads the target and writes with the API server's own
//! preconditions, the object changes exactly as written, and the alert resolves. A target
//! changed after its finding (another allocation, its pod back) is skipped with the reason
//! and nothing written; a dry run writes nothing; a collector with a commands key refuses
//! an unsigned command.
//!
//! - whereabouts: an IPPool allocation whose pod is gone (`ip-without-pod`) loses exactly
//!   that allocation, and the pod's OverlappingRangeIPReservation is deleted once no
//!   allocation backs it;
//! - spiderpool: a SpiderIPPool entry of a gone pod (`ip-without-pod`) leaves
//!   `status.allocatedIPs`, the other entries kept; a SpiderEndpoint stuck terminating after
//!   its pod went (`ip-stuck-terminating`) loses spiderpool's finalizer, and goes.
//!
//! kube-ovn's cleanup (an IP stuck terminating) is proved by `live_analysis_e2e`.

use std::time::Duration;

use ipaudit_schemas::{
    encode, CleanupAction, CleanupCommand, EventType, Remediation, RemediationOutcome, WatchEvent,
};
use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::broker::produce;
use ipaudit_tests::receiver::Receiver;
use ipaudit_tests::scenario::{ip_pool, reservation, WHEREABOUTS_NAMESPACE};
use ipaudit_tests::wait_for;
use ipaudit_tests::world::World;
use kube_sim::{Kind, PatchType};
use serde_json::json;

const POOL: &str = "10.128.40.0-24";

/// The analyzer sending cleanup commands, owner grace 2 s (a gone pod's allocation is
/// reported 2 s of event time after the pod went).
fn analyzer(world: &World, receiver: &Receiver) -> AnalyzerProcess {
    let process = AnalyzerProcess::start(
        &world.brokers,
        &world.topic,
        &format!("group-of-{}", world.topic),
        &world.dir.path().join("analyzer"),
        &[
            "--webhook-url",
            &format!("{}/hook", receiver.url),
            "--cleanup-commands",
            "--commands-topic",
            &world.commands_topic(),
            "--owner-grace",
            "2s",
        ],
    );
    process.wait_joined(Duration::from_secs(30));
    process
}

/// A Running pod `default/NAME` with `address` on the whereabouts network.
fn running_pod(world: &World, name: &str, address: &str) {
    world
        .sim
        .create(
            Kind::Pod,
            "default",
            json!({"metadata": {"name": name, "annotations": {
                    "k8s.v1.cni.cncf.io/network-status": ipaudit_tests::scenario::network_status("10.244.1.10", address)}},
                "spec": {"nodeName": "node-1"},
                "status": {"phase": "Running", "podIPs": [{"ip": "10.244.1.10"}]}}),
        )
        .expect("pod");
}

/// Allocates `10.128.40.OFFSET` in the pool to `default/POD` as whereabouts does (a patch
/// testing the pool's version, then the reservation).
fn allocate(world: &World, offset: u32, pod: &str) {
    let ns = WHEREABOUTS_NAMESPACE;
    let pool = world.sim.get(Kind::IpPool, ns, POOL).expect("pool");
    world
        .sim
        .patch(
            Kind::IpPool,
            ns,
            POOL,
            PatchType::Json,
            &json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": pool["metadata"]["resourceVersion"]},
                {"op": "add", "path": format!("/spec/allocations/{offset}"),
                    "value": {"id": format!("sandbox-{pod}"), "podref": format!("default/{pod}"), "ifname": "net1"}}
            ]),
        )
        .expect("allocation");
    world
        .sim
        .create(
            Kind::OverlappingRangeIpReservation,
            ns,
            reservation(&format!("10.128.40.{offset}"), &format!("default/{pod}")),
        )
        .expect("reservation");
}

/// The pool's allocations by offset.
fn allocations(world: &World) -> Vec<String> {
    let pool = world
        .sim
        .get(Kind::IpPool, WHEREABOUTS_NAMESPACE, POOL)
        .expect("pool");
    pool["spec"]["allocations"]
        .as_object()
        .map(|a| a.keys().cloned().collect())
        .unwrap_or_default()
}

/// The collector's REMEDIATION events on the events topic, once `count` are there.
fn remediations(world: &World, count: usize) -> Vec<WatchEvent> {
    let of = |events: &[WatchEvent]| -> Vec<WatchEvent> {
        events
            .iter()
            .filter(|e| e.event_type == EventType::Remediation)
            .cloned()
            .collect()
    };
    of(&world.events_until(Duration::from_secs(30), |events| of(events).len() >= count))
}

/// The outcome of the one command sent, once recorded; it must be `expected`.
fn outcome_of(world: &World, expected: RemediationOutcome) -> Remediation {
    let record = remediations(world, 1)
        .into_iter()
        .next()
        .and_then(|e| e.remediation)
        .expect("remediation record");
    assert_eq!(record.outcome, expected, "{}", record.reason);
    *record
}

/// The first record of a command doing `action`, once recorded; it must be `expected`.
/// Where two commands race, the other one's records (a retried attempt) may come first.
fn outcome_of_action(world: &World, action: &str, expected: RemediationOutcome) -> Remediation {
    let of_action = |events: &[WatchEvent]| -> Option<Remediation> {
        events
            .iter()
            .filter_map(|e| e.remediation.as_deref())
            .find(|r| r.action == action)
            .cloned()
    };
    let events = world.events_until(Duration::from_secs(30), |events| {
        of_action(events).is_some()
    });
    let record = of_action(&events).unwrap_or_else(|| panic!("no record of a {action} command"));
    assert_eq!(record.outcome, expected, "{}", record.reason);
    record
}

/// The webhook's transitions of `rule`: (status, subject).
fn transitions(receiver: &Receiver, rule: &str) -> Vec<(String, String)> {
    receiver
        .received("/hook")
        .into_iter()
        .filter(|r| r.body["rule"] == rule)
        .map(|r| {
            (
                r.body["status"].as_str().unwrap_or_default().to_owned(),
                r.body["subject_name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_whereabouts_allocation_and_reservation_of_a_gone_pod_are_removed_and_their_alerts_resolve() {
    let world = World::new("clean-whereabouts", None);
    let receiver = Receiver::start(&world.runtime);
    // A reservation's command that comes before its pool's allocation is gone is retried.
    let collector = world.remediating_collector("on", &["--remediate-retry-backoff", "1s"]);
    let analyzer = analyzer(&world, &receiver);
    world
        .sim
        .create(
            Kind::IpPool,
            WHEREABOUTS_NAMESPACE,
            ip_pool(POOL, "10.128.40.0/24"),
        )
        .expect("pool");
    for (offset, pod) in [(45, "web-0"), (46, "web-1")] {
        running_pod(&world, pod, &format!("10.128.40.{offset}"));
        allocate(&world, offset, pod);
    }
    world
        .sim
        .delete(Kind::Pod, "default", "web-0")
        .expect("pod gone");
    let subject = format!("{WHEREABOUTS_NAMESPACE}/{POOL}/10.128.40.45");
    wait_for(
        "the allocation's alert resolves",
        Duration::from_secs(60),
        || {
            transitions(&receiver, "ip-without-pod")
                .contains(&("RESOLVED".to_owned(), subject.clone()))
                .then_some(())
        },
    );
    assert_eq!(
        allocations(&world),
        ["46"],
        "exactly the gone pod's allocation was removed; collector log:\n{}",
        collector.log_text()
    );
    let record = outcome_of_action(&world, "REMOVE_ALLOCATION", RemediationOutcome::Applied);
    assert!(
        record
            .reason
            .starts_with("removed allocation 45 (10.128.40.45 for default/web-0)"),
        "{}",
        record.reason
    );
    assert!(
        transitions(&receiver, "ip-without-pod").contains(&("FIRING".to_owned(), subject.clone())),
        "it fired first"
    );
    // The reservation of the gone pod goes too, once no allocation backs it; web-1's stays.
    let reservation = format!("{WHEREABOUTS_NAMESPACE}/10.128.40.45");
    wait_for(
        "the reservation's alert resolves",
        Duration::from_secs(60),
        || {
            transitions(&receiver, "ip-without-pod")
                .contains(&("RESOLVED".to_owned(), reservation.clone()))
                .then_some(())
        },
    );
    let ns = WHEREABOUTS_NAMESPACE;
    assert!(world
        .sim
        .get(Kind::OverlappingRangeIpReservation, ns, "10.128.40.45")
        .is_err());
    assert!(world
        .sim
        .get(Kind::OverlappingRangeIpReservation, ns, "10.128.40.46")
        .is_ok());
    // The collector's records of its cleanups carry the versions their targets had before
    // the patch, below the watch events of the patch itself: the analyzer takes none of
    // them for versions going backwards.
    wait_for(
        "the analyzer consumes the cleanup records",
        Duration::from_secs(30),
        || (analyzer.events_consumed("REMEDIATION") >= 2.0).then_some(()),
    );
    analyzer.assert_no_new_epoch();
}

/// A fresh, unsigned command of cluster `lab` to do `action` to `kind` `namespace/name`
/// at `object`'s uid and resourceVersion, as the analyzer sends it.
fn command_for(
    id: &str,
    action: CleanupAction,
    kind: &str,
    object: &serde_json::Value,
    address: Option<&str>,
) -> CleanupCommand {
    let field = |name: &str| {
        object["metadata"][name]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    CleanupCommand {
        command_id: id.into(),
        cluster_id: "lab".into(),
        action,
        target_kind: kind.into(),
        target_name: field("name"),
        target_uid: field("uid"),
        expected_resource_version: field("resourceVersion"),
        finalizer: None,
        subnet: if kind == "IPPool" {
            field("name")
        } else {
            String::new()
        },
        reason_alert_id: "test".into(),
        // Fresh: collectors refuse commands older than --remediate-max-age.
        issued_at_ms: now_ms(),
        alert_fired_at_ms: now_ms(),
        target_namespace: Some(field("namespace")).filter(|n| !n.is_empty()),
        address: address.map(str::to_owned),
        signature: None,
    }
}

/// Puts `command` on the world's commands topic.
fn send(world: &World, command: &CleanupCommand) {
    world.runtime.block_on(produce(
        &world.brokers,
        &world.commands_topic(),
        command.cluster_id.as_bytes(),
        &encode(command).expect("command encodes"),
    ));
}

/// Sends the command the analyzer would for the allocation at offset 45 of the pool at
/// `uid` and `rv`, on the world's commands topic.
fn send_allocation_command(world: &World, id: &str, uid: &str, rv: &str) {
    let pool = json!({"metadata": {"name": POOL, "namespace": WHEREABOUTS_NAMESPACE,
        "uid": uid, "resourceVersion": rv}});
    send(
        world,
        &command_for(
            id,
            CleanupAction::RemoveAllocation,
            "IPPool",
            &pool,
            Some("10.128.40.45"),
        ),
    );
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The pool with web-0's allocation (its pod gone) and web-1's: its uid and version.
fn pool_with_a_gone_pods_allocation(world: &World) -> (String, String) {
    world
        .sim
        .create(
            Kind::IpPool,
            WHEREABOUTS_NAMESPACE,
            ip_pool(POOL, "10.128.40.0/24"),
        )
        .expect("pool");
    allocate(world, 45, "web-0");
    let pool = world
        .sim
        .get(Kind::IpPool, WHEREABOUTS_NAMESPACE, POOL)
        .expect("pool");
    let field = |name: &str| {
        pool["metadata"][name]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    (field("uid"), field("resourceVersion"))
}

#[test]
fn a_pool_changed_after_the_finding_is_skipped_a_dry_run_writes_nothing_and_an_unsigned_command_is_refused(
) {
    let world = World::new("clean-skip", None);
    let dry = World::new("clean-dry", None);
    let keyed = World::new("clean-keyed", None);
    let _collector = world.remediating_collector("on", &[]);
    let _dry_collector = dry.remediating_collector("dry-run", &[]);
    let key = keyed.dir.path().join("commands.key");
    std::fs::write(&key, format!("{}\n", "5f".repeat(32))).expect("key file");
    let _keyed_collector =
        keyed.remediating_collector("on", &["--commands-key-file", &key.display().to_string()]);

    // Another allocation after the finding: the pool's version moved on.
    let (uid, rv) = pool_with_a_gone_pods_allocation(&world);
    running_pod(&world, "web-1", "10.128.40.46");
    allocate(&world, 46, "web-1");
    send_allocation_command(&world, "changed", &uid, &rv);
    let record = outcome_of(&world, RemediationOutcome::Skipped);
    assert!(
        record.reason.starts_with("resourceVersion changed"),
        "{}",
        record.reason
    );
    assert_eq!(allocations(&world), ["45", "46"], "nothing written");

    let (uid, rv) = pool_with_a_gone_pods_allocation(&dry);
    send_allocation_command(&dry, "dry", &uid, &rv);
    let record = outcome_of(&dry, RemediationOutcome::DryRun);
    assert!(
        record.reason.contains("would remove allocation 45"),
        "{}",
        record.reason
    );
    assert_eq!(allocations(&dry), ["45"], "a dry run writes nothing");

    // A collector with a commands key obeys only commands signed with it.
    let (uid, rv) = pool_with_a_gone_pods_allocation(&keyed);
    send_allocation_command(&keyed, "unsigned", &uid, &rv);
    let record = outcome_of(&keyed, RemediationOutcome::Skipped);
    assert!(
        record.reason.starts_with("refused: ") && record.reason.contains("unsigned"),
        "{}",
        record.reason
    );
    assert_eq!(allocations(&keyed), ["45"], "nothing written");
}

#[test]
fn a_spiderendpoint_stuck_after_its_pod_went_loses_spiderpools_finalizer_and_goes() {
    let world = World::new("clean-spiderpool", None);
    let receiver = Receiver::start(&world.runtime);
    let collector = world.remediating_collector("on", &[]);
    let _analyzer = analyzer(&world, &receiver);
    let (ns, name) = ("shop", "checkout-7hq4m");
    world
        .sim
        .create(
            Kind::Pod,
            ns,
            json!({"metadata": {"name": name}, "spec": {"nodeName": "worker-1"},
                "status": {"phase": "Running", "podIPs": [{"ip": "10.244.2.7"}]}}),
        )
        .expect("pod");
    let pod_uid = world.sim.get(Kind::Pod, ns, name).expect("pod")["metadata"]["uid"].clone();
    world
        .sim
        .create(
            Kind::SpiderEndpoint,
            ns,
            json!({"metadata": {"name": name, "finalizers": ["spiderpool.spidernet.io"]},
                "status": {"current": {"uid": pod_uid, "node": "worker-1", "ips": [{
                    "interface": "net1", "ipv4": "172.18.40.12/16", "ipv4Pool": "underlay-v4", "vlan": 0}]},
                    "ownerControllerName": "checkout", "ownerControllerType": "Deployment"}}),
        )
        .expect("endpoint");
    // The node goes: the pod is force-deleted, spiderpool marks the endpoint for deletion
    // and never removes its finalizer (the field report).
    world.sim.delete(Kind::Pod, ns, name).expect("pod gone");
    world
        .sim
        .delete(Kind::SpiderEndpoint, ns, name)
        .expect("endpoint marked");
    let gone = ipaudit_tests::poll_until(Duration::from_secs(60), || {
        world
            .sim
            .get(Kind::SpiderEndpoint, ns, name)
            .is_err()
            .then_some(())
    });
    assert!(
        gone.is_some(),
        "the endpoint is released and goes; alerts {:?}; collector log:\n{}",
        receiver
            .received("/hook")
            .iter()
            .map(|r| &r.body)
            .collect::<Vec<_>>(),
        collector.log_text()
    );
    let applied = remediations(&world, 1);
    let record = applied[0].remediation.as_ref().expect("remediation record");
    assert_eq!(
        record.outcome,
        RemediationOutcome::Applied,
        "{}; collector log:\n{}",
        record.reason,
        collector.log_text()
    );
    assert_eq!(record.finalizer.as_deref(), Some("spiderpool.spidernet.io"));
    let key = format!("{ns}/{name}");
    wait_for(
        "the endpoint's alert resolves",
        Duration::from_secs(30),
        || {
            transitions(&receiver, "ip-stuck-terminating")
                .contains(&("RESOLVED".to_owned(), key.clone()))
                .then_some(())
        },
    );
}

#[test]
fn a_spiderippool_entry_of_a_gone_pod_is_removed_and_the_others_kept() {
    let world = World::new("clean-spiderpool-entry", None);
    let receiver = Receiver::start(&world.runtime);
    let collector = world.remediating_collector("on", &[]);
    let _analyzer = analyzer(&world, &receiver);
    let mut uids = Vec::new();
    for name in ["cache-0", "api"] {
        world
            .sim
            .create(
                Kind::Pod,
                "default",
                json!({"metadata": {"name": name}, "spec": {"nodeName": "worker-1"},
                    "status": {"phase": "Running"}}),
            )
            .expect("pod");
        uids.push(
            world.sim.get(Kind::Pod, "default", name).expect("pod")["metadata"]["uid"].clone(),
        );
    }
    let entries = json!({
        "172.18.40.10": {"pod": "default/cache-0", "podUid": uids[0]},
        "172.18.40.11": {"pod": "default/api", "podUid": uids[1]},
    });
    world
        .sim
        .create(
            Kind::SpiderIpPool,
            "",
            json!({"metadata": {"name": "pool-a"},
                "spec": {"subnet": "172.18.0.0/16", "ips": ["172.18.40.10-172.18.40.20"]},
                "status": {"allocatedIPCount": 2, "allocatedIPs": entries.to_string()}}),
        )
        .expect("pool");
    world
        .sim
        .delete(Kind::Pod, "default", "cache-0")
        .expect("pod gone");
    let subject = "pool-a/172.18.40.10".to_owned();
    let resolved = ipaudit_tests::poll_until(Duration::from_secs(60), || {
        transitions(&receiver, "ip-without-pod")
            .contains(&("RESOLVED".to_owned(), subject.clone()))
            .then_some(())
    });
    assert!(
        resolved.is_some(),
        "the entry's alert resolves; alerts {:?}; collector log:\n{}",
        transitions(&receiver, "ip-without-pod"),
        collector.log_text()
    );
    let pool = world
        .sim
        .get(Kind::SpiderIpPool, "", "pool-a")
        .expect("pool");
    let left: serde_json::Value = serde_json::from_str(
        pool["status"]["allocatedIPs"]
            .as_str()
            .expect("a JSON string still"),
    )
    .expect("JSON");
    assert_eq!(
        left,
        json!({"172.18.40.11": {"pod": "default/api", "podUid": uids[1]}}),
        "exactly the gone pod's entry was removed"
    );
    assert_eq!(pool["status"]["allocatedIPCount"], 1);
    let record = outcome_of(&world, RemediationOutcome::Applied);
    assert!(
        record
            .reason
            .starts_with("removed the entry of 172.18.40.10 for default/cache-0"),
        "{}",
        record.reason
    );
}

#[test]
fn a_target_whose_pod_came_back_is_skipped_with_the_reason_and_nothing_written() {
    let world = World::new("clean-pod-back", None);
    let _collector = world.remediating_collector("on", &[]);
    // Records of pod default/back, which is alive again when the commands come.
    running_pod(&world, "back", "10.128.40.47");
    let records = records_of(&world, "back", "10.128.40.47", "172.18.40.10");
    records.send_commands(&world);
    let outcomes = remediations(&world, 3);
    assert_eq!(outcomes.len(), 3);
    for record in outcomes.iter().filter_map(|e| e.remediation.as_ref()) {
        assert_eq!(record.outcome, RemediationOutcome::Skipped, "{record:?}");
        assert!(
            record.reason.contains("pod default/back exists"),
            "{}: {}",
            record.command_id,
            record.reason
        );
    }
    records.all_unchanged(&world);
}

#[test]
fn a_dry_run_of_each_whereabouts_and_spiderpool_cleanup_passes_its_checks_and_writes_nothing() {
    let world = World::new("clean-dry-all", None);
    let _collector = world.remediating_collector("dry-run", &[]);
    // Records of pod default/gone, which never was (or is long gone).
    let records = records_of(&world, "gone", "10.128.40.48", "172.18.40.12");
    records.send_commands(&world);
    let outcomes = remediations(&world, 3);
    assert_eq!(outcomes.len(), 3);
    for record in outcomes.iter().filter_map(|e| e.remediation.as_ref()) {
        assert_eq!(record.outcome, RemediationOutcome::DryRun, "{record:?}");
        assert!(
            record.reason.starts_with("all checks passed; would "),
            "{}",
            record.reason
        );
    }
    records.all_unchanged(&world);
}

/// The whereabouts and spiderpool records of one pod: its reservation, a SpiderIPPool
/// with its entry, and its SpiderEndpoint marked for deletion (spiderpool's finalizer
/// keeps it).
struct PodRecords {
    pod: String,
    spider_address: String,
    reservation: serde_json::Value,
    pool: serde_json::Value,
    entries: String,
    endpoint: serde_json::Value,
}

/// Creates the records of pod `default/POD`: a reservation of `whereabouts_address` and
/// an entry of `spider_address` in SpiderIPPool `pool-POD`.
fn records_of(
    world: &World,
    pod: &str,
    whereabouts_address: &str,
    spider_address: &str,
) -> PodRecords {
    let sim = &world.sim;
    let podref = format!("default/{pod}");
    let reservation = sim
        .create(
            Kind::OverlappingRangeIpReservation,
            WHEREABOUTS_NAMESPACE,
            reservation(whereabouts_address, &podref),
        )
        .expect("reservation");
    let entries =
        json!({spider_address: {"pod": podref, "podUid": format!("u-{pod}")}}).to_string();
    let pool = sim
        .create(
            Kind::SpiderIpPool,
            "",
            json!({"metadata": {"name": format!("pool-{pod}")},
                "spec": {"subnet": "172.18.0.0/16", "ips": ["172.18.40.10-172.18.40.20"]},
                "status": {"allocatedIPCount": 1, "allocatedIPs": entries}}),
        )
        .expect("pool");
    sim.create(
        Kind::SpiderEndpoint,
        "default",
        json!({"metadata": {"name": pod, "finalizers": ["spiderpool.spidernet.io"]},
            "status": {"current": {"uid": format!("u-{pod}"), "node": "worker-1", "ips": []}}}),
    )
    .expect("endpoint");
    let endpoint = sim
        .delete(Kind::SpiderEndpoint, "default", pod)
        .expect("marked");
    PodRecords {
        pod: pod.to_owned(),
        spider_address: spider_address.to_owned(),
        reservation,
        pool,
        entries,
        endpoint,
    }
}

impl PodRecords {
    /// The three commands the analyzer would send for them, on the commands topic.
    fn send_commands(&self, world: &World) {
        let reservation_kind = "OverlappingRangeIPReservation";
        for command in [
            command_for(
                "reservation",
                CleanupAction::Delete,
                reservation_kind,
                &self.reservation,
                None,
            ),
            command_for(
                "entry",
                CleanupAction::RemoveAllocation,
                "SpiderIPPool",
                &self.pool,
                Some(&self.spider_address),
            ),
            command_for(
                "endpoint",
                CleanupAction::RemoveFinalizer,
                "SpiderEndpoint",
                &self.endpoint,
                None,
            ),
        ] {
            send(world, &command);
        }
    }

    /// Asserts that none of them was written.
    fn all_unchanged(&self, world: &World) {
        let sim = &world.sim;
        let name = |o: &serde_json::Value| {
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        let kind = Kind::OverlappingRangeIpReservation;
        assert!(sim
            .get(kind, WHEREABOUTS_NAMESPACE, &name(&self.reservation))
            .is_ok());
        let pool = sim
            .get(Kind::SpiderIpPool, "", &name(&self.pool))
            .expect("pool");
        assert_eq!(
            pool["status"]["allocatedIPs"],
            self.entries.as_str(),
            "the entry stays"
        );
        let endpoint = sim
            .get(Kind::SpiderEndpoint, "default", &self.pod)
            .expect("endpoint");
        assert_eq!(
            endpoint["metadata"]["finalizers"],
            json!(["spiderpool.spidernet.io"])
        );
    }
}
