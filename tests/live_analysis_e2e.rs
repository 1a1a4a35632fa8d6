//! Live analysis end to end: simulated API server -> collector -> broker -> `analyzer run`
//! -> a webhook receiver and an Alertmanager stand-in (real HTTP servers in the test).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ipaudit_schemas::{decode, Alert, AlertStatus};
use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::broker::{create_topic, read_topic};
use ipaudit_tests::receiver::{Received, Receiver};
use ipaudit_tests::scenario::{ip, play_kube_ovn_seed, subnet};
use ipaudit_tests::world::World;
use kube_sim::Kind;

fn wait_for<T>(what: &str, timeout: Duration, mut found: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = found() {
            return value;
        }
        assert!(
            start.elapsed() < timeout,
            "{what}: nothing after {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn alerts_topic(world: &World) -> String {
    format!("{}.alerts", world.topic)
}

fn analyzer(world: &World, receiver: &Receiver, name: &str) -> AnalyzerProcess {
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
        ],
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
fn the_healthy_order_sends_no_alert() {
    let world = World::new("live-healthy", None);
    let receiver = Receiver::start(&world.runtime);
    let _collector = world.collector();
    let _analyzer = analyzer(&world, &receiver, "healthy");
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
