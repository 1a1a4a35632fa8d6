//! Live analysis end to end: simulated API server -> collector -> broker -> `analyzer run`
//! -> a webhook receiver and an Alertmanager stand-in (real HTTP servers in the test).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ipaudit_schemas::{
    decode, encode, Alert, AlertStatus, CleanupAction, CleanupCommand, EventType,
    RemediationOutcome, WatchEvent,
};
use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::broker::{create_topic, produce, read_topic};
use ipaudit_tests::collector::CollectorProcess;
use ipaudit_tests::receiver::{Received, Receiver};
use ipaudit_tests::scenario::{ip, play_kube_ovn_seed, subnet};
use ipaudit_tests::wait_for;
use ipaudit_tests::world::World;
use kube_sim::Kind;

fn alerts_topic(world: &World) -> String {
    format!("{}.alerts", world.topic)
}

fn analyzer(world: &World, receiver: &Receiver, name: &str) -> AnalyzerProcess {
    analyzer_with(world, receiver, name, &[])
}

fn analyzer_with(world: &World, receiver: &Receiver, name: &str, more: &[&str]) -> AnalyzerProcess {
    let alerts = alerts_topic(world);
    world
        .runtime
        .block_on(create_topic(&world.brokers, &alerts));
    let process = AnalyzerProcess::start(
        &world.brokers,
        &world.topic,
        &format!("ipaudit-{name}-{}", std::process::id()),
        &world.dir.path().join("analyzer"),
        &[
            "--webhook-url",
            &format!("{}/hook", receiver.url),
            "--alertmanager-url",
            &format!("{}/am", receiver.url),
            "--alerts-topic",
            &alerts,
        ]
        .into_iter()
        .chain(more.iter().copied())
        .collect::<Vec<_>>(),
    );
    wait_for(
        "the analyzer joins its group",
        Duration::from_secs(30),
        || {
            process
                .log_text()
                .contains("partitions assigned")
                .then_some(())
        },
    );
    process
}

fn rule(r: &Received) -> String {
    r.body["rule"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn the_seed_reaches_the_webhook_within_5s_and_alertmanager_in_v2_format() {
    let world = World::new("live-seed", None);
    let receiver = Receiver::start(&world.runtime);
    let _collector = world.collector();
    let analyzer = analyzer(&world, &receiver, "seed");
    let deleted_at = Instant::now();
    let seed = play_kube_ovn_seed(&world.sim, false);
    let hook = wait_for(
        "the rule-1 alert at the webhook",
        Duration::from_secs(15),
        || {
            receiver
                .received("/hook")
                .into_iter()
                .find(|r| rule(r) == "subnet-deleted-before-ip")
        },
    );
    let latency = hook.at.duration_since(deleted_at);
    assert!(
        latency < Duration::from_secs(5),
        "alert after {latency:?}; log:\n{}",
        analyzer.log_text()
    );
    assert_eq!(hook.body["status"], "FIRING");
    assert_eq!(hook.body["subject_name"], seed.leaked_ip);
    assert_eq!(hook.body["subnet"], seed.subnet);
    assert_eq!(
        hook.body["namespace"], seed.namespace,
        "the pod's, for routing"
    );
    assert_eq!(hook.body["cluster_id"], "lab");
    assert_eq!(
        hook.headers.get("idempotency-key").map(String::as_str),
        hook.body["transition_id"].as_str()
    );
    let am = wait_for("the alert at Alertmanager", Duration::from_secs(15), || {
        receiver
            .received("/am/api/v2/alerts")
            .into_iter()
            .find(|r| r.body[0]["labels"]["alertname"] == "subnet-deleted-before-ip")
    });
    let alert = &am.body[0];
    assert_eq!(alert["labels"]["rule"], "subnet-deleted-before-ip");
    assert_eq!(alert["labels"]["cluster"], "lab");
    assert_eq!(alert["labels"]["namespace"], seed.namespace);
    assert_eq!(alert["labels"]["subnet"], seed.subnet);
    assert_eq!(alert["labels"]["severity"], "critical");
    assert!(alert["annotations"]["summary"]
        .as_str()
        .is_some_and(|s| s.contains(seed.leaked_ip)));
    assert!(alert["startsAt"].is_string() && alert.get("endsAt").is_none());
    wait_for("the rule-2 alert", Duration::from_secs(15), || {
        receiver
            .received("/hook")
            .into_iter()
            .find(|r| rule(r) == "ip-stuck-terminating")
    });
    let records = read_topic(
        &world.brokers,
        &alerts_topic(&world),
        Duration::from_secs(15),
        |p| p.len() >= 2,
    );
    let on_kafka: Vec<(String, AlertStatus)> = records
        .iter()
        .map(|p| decode::<Alert>(p).expect("an Avro Alert"))
        .inspect(|a| assert_eq!(a.namespace.as_deref(), Some(seed.namespace), "{a:?}"))
        .map(|a| (a.rule, a.status))
        .collect();
    assert_eq!(
        on_kafka,
        [
            ("subnet-deleted-before-ip".to_owned(), AlertStatus::Firing),
            ("ip-stuck-terminating".to_owned(), AlertStatus::Firing)
        ]
    );
}

#[test]
fn the_healthy_order_sends_no_alert_and_no_command() {
    let world = World::new("live-healthy", None);
    let receiver = Receiver::start(&world.runtime);
    let _collector = world.collector();
    let commands = world.commands_topic();
    world
        .runtime
        .block_on(create_topic(&world.brokers, &commands));
    let _analyzer = analyzer_with(
        &world,
        &receiver,
        "healthy",
        &["--cleanup-commands", "--commands-topic", &commands],
    );
    play_kube_ovn_seed(&world.sim, true);
    // A canary leak afterwards proves the analyzer has processed everything before it.
    world
        .sim
        .create(Kind::Subnet, "", subnet("canary", "10.9.0.0/24"))
        .unwrap();
    world
        .sim
        .create(
            Kind::Ip,
            "",
            ip("bird.ns", "canary", "bird", "ns", "10.9.0.2", ""),
        )
        .unwrap();
    world.sim.delete(Kind::Subnet, "", "canary").unwrap();
    world
        .sim
        .remove_finalizers(Kind::Subnet, "", "canary")
        .unwrap();
    wait_for("the canary alert", Duration::from_secs(15), || {
        receiver
            .received("/hook")
            .into_iter()
            .find(|r| r.body["subnet"] == "canary")
    });
    let others: Vec<_> = receiver
        .received("/hook")
        .into_iter()
        .filter(|r| r.body["subnet"] != "canary")
        .map(|r| r.body)
        .collect();
    assert!(others.is_empty(), "{others:?}");
    // The canary is not stuck (its IP is not terminating): no command for anything.
    let sent = read_topic(&world.brokers, &commands, Duration::from_secs(2), |p| {
        !p.is_empty()
    });
    assert!(sent.is_empty(), "{} cleanup commands", sent.len());
}

#[test]
fn an_analyzer_killed_between_consuming_and_sending_delivers_each_alert_exactly_once() {
    let world = World::new("live-kill", None);
    let receiver = Receiver::start(&world.runtime);
    receiver.set_failing(true);
    let _collector = world.collector();
    let first = analyzer(&world, &receiver, "kill");
    play_kube_ovn_seed(&world.sim, false);
    wait_for("a first delivery attempt", Duration::from_secs(15), || {
        (receiver.attempts() > 0).then_some(())
    });
    first.kill();
    receiver.set_failing(false);
    let second = analyzer(&world, &receiver, "kill");
    wait_for("both alerts", Duration::from_secs(30), || {
        let rules: Vec<String> = receiver.received("/hook").iter().map(rule).collect();
        (rules.contains(&"subnet-deleted-before-ip".into())
            && rules.contains(&"ip-stuck-terminating".into()))
        .then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    let mut per_transition: BTreeMap<String, usize> = BTreeMap::new();
    for r in receiver.received("/hook") {
        *per_transition
            .entry(
                r.headers
                    .get("idempotency-key")
                    .cloned()
                    .unwrap_or_default(),
            )
            .or_default() += 1;
    }
    assert_eq!(
        per_transition.len(),
        2,
        "{per_transition:?}; log:\n{}",
        second.log_text()
    );
    assert!(
        per_transition.values().all(|n| *n == 1),
        "{per_transition:?}"
    );
}

fn remediations(world: &World, done: impl Fn(&[WatchEvent]) -> bool) -> Vec<WatchEvent> {
    world
        .events_until(Duration::from_secs(20), done)
        .into_iter()
        .filter(|e| e.event_type == EventType::Remediation)
        .collect()
}

#[test]
fn with_remediation_on_the_stuck_ip_loses_its_finalizer_and_disappears() {
    let world = World::new("remediate", None);
    let receiver = Receiver::start(&world.runtime);
    let collector = world.remediating_collector("on", &[]);
    let commands = world.commands_topic();
    let analyzer = analyzer_with(
        &world,
        &receiver,
        "remediate",
        &["--cleanup-commands", "--commands-topic", &commands],
    );
    let seed = play_kube_ovn_seed(&world.sim, false);
    wait_for("the stuck IP to be gone", Duration::from_secs(30), || {
        world
            .sim
            .get(Kind::Ip, "", seed.leaked_ip)
            .is_err()
            .then_some(())
    });
    let done = |events: &[WatchEvent]| {
        events
            .iter()
            .any(|e| e.event_type == EventType::Remediation)
    };
    let applied = remediations(&world, done);
    let outcome = applied[0].remediation.as_ref().expect("remediation record");
    assert_eq!(
        outcome.outcome,
        RemediationOutcome::Applied,
        "{}",
        collector.log_text()
    );
    assert_eq!(
        outcome.finalizer.as_deref(),
        Some("kubeovn.io/kube-ovn-controller")
    );
    assert_eq!(applied[0].object_key(), seed.leaked_ip);
    wait_for(
        "the stuck-IP alert resolves",
        Duration::from_secs(15),
        || {
            receiver
                .received("/hook")
                .into_iter()
                .find(|r| rule(r) == "ip-stuck-terminating" && r.body["status"] == "RESOLVED")
        },
    );
    // The record of the cleanup carries the IP's version before the patch, below the IP's
    // MODIFIED and DELETED that the patch caused: not versions going backwards.
    wait_for(
        "the analyzer consumes the cleanup record",
        Duration::from_secs(15),
        || (analyzer.events_consumed("REMEDIATION") >= 1.0).then_some(()),
    );
    analyzer.assert_no_new_epoch();
}

/// An IP that is terminating while its subnet never existed: eligible for cleanup.
fn stuck_ip(world: &World, name: &str) -> (String, String) {
    world
        .sim
        .create(
            Kind::Ip,
            "",
            ip(name, "gone-net", "p", "ns", "10.1.0.9", ""),
        )
        .unwrap();
    let marked = world.sim.delete(Kind::Ip, "", name).unwrap();
    let uid = marked["metadata"]["uid"].as_str().unwrap().to_owned();
    let rv = marked["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    (uid, rv)
}

fn command(cluster: &str, id: &str, name: &str, uid: &str, rv: &str) -> CleanupCommand {
    CleanupCommand {
        command_id: id.into(),
        cluster_id: cluster.into(),
        action: CleanupAction::RemoveFinalizer,
        target_kind: "IP".into(),
        target_name: name.into(),
        target_uid: uid.into(),
        expected_resource_version: rv.into(),
        finalizer: None,
        subnet: "gone-net".into(),
        reason_alert_id: "test".into(),
        // Fresh: collectors refuse commands older than --remediate-max-age.
        issued_at_ms: now_ms(),
        alert_fired_at_ms: now_ms(),
        target_namespace: None,
        address: None,
        signature: None,
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn send(world: &World, command: &CleanupCommand) {
    let payload = encode(command).unwrap();
    world.runtime.block_on(produce(
        &world.brokers,
        &world.commands_topic(),
        command.cluster_id.as_bytes(),
        &payload,
    ));
}

fn finalizers(world: &World, name: &str) -> usize {
    world.sim.get(Kind::Ip, "", name).map_or(0, |o| {
        o["metadata"]["finalizers"].as_array().map_or(0, Vec::len)
    })
}

#[test]
fn an_ip_deleted_and_recreated_with_the_same_name_is_never_patched() {
    let world = World::new("recreated", None);
    let _collector = world.remediating_collector("on", &[]);
    let (old_uid, _) = stuck_ip(&world, "again.ns");
    world
        .sim
        .remove_finalizers(Kind::Ip, "", "again.ns")
        .unwrap();
    let (new_uid, new_rv) = stuck_ip(&world, "again.ns");
    assert_ne!(old_uid, new_uid);
    // Everything matches the recreated IP except its uid.
    send(
        &world,
        &command("lab", "cmd-old", "again.ns", &old_uid, &new_rv),
    );
    let done = |events: &[WatchEvent]| {
        events
            .iter()
            .any(|e| e.event_type == EventType::Remediation)
    };
    let outcomes = remediations(&world, done);
    let record = outcomes[0].remediation.as_ref().unwrap();
    assert_eq!(record.outcome, RemediationOutcome::Skipped);
    assert!(record.reason.contains("uid changed"), "{}", record.reason);
    assert_eq!(
        finalizers(&world, "again.ns"),
        1,
        "the recreated IP keeps its finalizer"
    );
}

#[test]
fn a_command_for_another_cluster_is_ignored() {
    let world = World::new("othercluster", None);
    let _collector = world.remediating_collector("on", &[]);
    let (uid, rv) = stuck_ip(&world, "theirs.ns");
    send(
        &world,
        &command("elsewhere", "cmd-elsewhere", "theirs.ns", &uid, &rv),
    );
    // A command of ours behind it, with a stale version: once its outcome is recorded, the
    // one before it has been read too.
    send(
        &world,
        &command("lab", "cmd-marker", "theirs.ns", &uid, "1"),
    );
    let done = |events: &[WatchEvent]| {
        events
            .iter()
            .any(|e| e.event_type == EventType::Remediation)
    };
    let outcomes = remediations(&world, done);
    let ids: Vec<&str> = outcomes
        .iter()
        .filter_map(|e| e.remediation.as_ref())
        .map(|r| r.command_id.as_str())
        .collect();
    assert_eq!(ids, ["cmd-marker"]);
    assert_eq!(
        outcomes[0].remediation.as_ref().unwrap().outcome,
        RemediationOutcome::Skipped
    );
    assert_eq!(
        finalizers(&world, "theirs.ns"),
        1,
        "the other cluster's command changed nothing here"
    );
}

#[test]
fn an_analyzer_without_local_state_rebuilds_from_the_latest_snapshot() {
    let world = World::new("rebuild", None);
    let receiver = Receiver::start(&world.runtime);
    let _collector = CollectorProcess::start(&world.setup(), &["--snapshot-interval", "1s"]);
    let seed = play_kube_ovn_seed(&world.sim, false);
    // Let a few snapshots pass the leak: the subnet's deletion is now only in the history.
    std::thread::sleep(Duration::from_secs(4));
    let fresh = analyzer(&world, &receiver, "rebuild");
    let stuck = wait_for(
        "the stuck IP found from the snapshot",
        Duration::from_secs(20),
        || {
            receiver
                .received("/hook")
                .into_iter()
                .find(|r| rule(r) == "ip-stuck-terminating")
        },
    );
    assert_eq!(stuck.body["subject_name"], seed.leaked_ip);
    std::thread::sleep(Duration::from_secs(2));
    let rules: Vec<String> = receiver.received("/hook").iter().map(rule).collect();
    assert_eq!(
        rules,
        ["ip-stuck-terminating"],
        "the subnet's deletion lies before the snapshot, so rule 1 cannot fire: it did not read the history"
    );
    let log = fresh.log_text();
    assert!(log.contains("rebuilding from the latest snapshot"), "{log}");
}

#[test]
fn sigterm_stops_at_once_while_a_command_waits_for_its_topic_and_the_command_goes_out_after_the_restart(
) {
    let world = World::new("live-stop", None);
    let receiver = Receiver::start(&world.runtime);
    let _collector = world.collector();
    // The commands topic does not exist yet: the command's send waits for it.
    let commands = world.commands_topic();
    let flags = ["--cleanup-commands", "--commands-topic", commands.as_str()];
    let first = analyzer_with(&world, &receiver, "stop", &flags);
    let seed = play_kube_ovn_seed(&world.sim, false);
    wait_for("the stuck-IP alert", Duration::from_secs(15), || {
        receiver
            .received("/hook")
            .into_iter()
            .find(|r| rule(r) == "ip-stuck-terminating")
    });
    std::thread::sleep(Duration::from_secs(1));
    let stopping = Instant::now();
    assert!(first.terminate(Duration::from_secs(10)), "a clean exit");
    let took = stopping.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "SIGTERM waited {took:?} for the command's send"
    );
    world
        .runtime
        .block_on(create_topic(&world.brokers, &commands));
    let _second = analyzer_with(&world, &receiver, "stop", &flags);
    let sent = read_topic(&world.brokers, &commands, Duration::from_secs(20), |p| {
        !p.is_empty()
    });
    let command = decode::<CleanupCommand>(&sent[0]).expect("a cleanup command");
    assert_eq!(command.target_name, seed.leaked_ip);
}
