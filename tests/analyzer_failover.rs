//! The analyzer as a consumer group that fails over, on the real broker: static membership
//! gives a restarted instance its partition back at once, and an instance that dies for
//! good leaves its partition to another, which rebuilds it from the latest snapshot.
//! Each incident happens after the fault, so only an analyzer that really owns the
//! partition again can report it.

use std::time::{Duration, Instant};

use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::collector::CollectorProcess;
use ipaudit_tests::receiver::Receiver;
use ipaudit_tests::scenario::{play_subnet_deleted_under_live_ip, subnet_leak_alert};
use ipaudit_tests::wait_for;
use ipaudit_tests::world::World;

/// `analyzer run` in `group` as static member `instance`, with its own state directory.
fn member(world: &World, receiver: &Receiver, group: &str, instance: &str) -> AnalyzerProcess {
    AnalyzerProcess::start(
        &world.brokers,
        &world.topic,
        group,
        &world.dir.path().join(format!("analyzer-{instance}")),
        &[
            "--instance-id",
            instance,
            "--webhook-url",
            &format!("{}/hook", receiver.url),
        ],
    )
}

/// Whether the member's latest assignment holds a partition.
fn owns_a_partition(process: &AnalyzerProcess) -> bool {
    process
        .log_text()
        .lines()
        .rfind(|l| l.contains("partitions assigned") || l.contains("partitions revoked"))
        .is_some_and(|l| l.contains("partitions assigned") && !l.contains("starts=[]"))
}

#[test]
fn an_analyzer_sigkilled_and_restarted_reports_an_incident_after_the_restart_within_seconds() {
    let world = World::new("failover-restart", None);
    let receiver = Receiver::start(&world.runtime);
    let _collector = world.collector();
    let group = format!("ipaudit-restart-{}", std::process::id());
    let first = member(&world, &receiver, &group, "analyzer-0");
    wait_for(
        "the first start owns the partition",
        Duration::from_secs(30),
        || owns_a_partition(&first).then_some(()),
    );
    play_subnet_deleted_under_live_ip(&world.sim, "before", 11);
    wait_for("the alert before the kill", Duration::from_secs(15), || {
        subnet_leak_alert(&receiver, "before")
    });
    first.kill();
    let restarted = member(&world, &receiver, &group, "analyzer-0");
    wait_for(
        "the restarted instance gets its partition back",
        Duration::from_secs(15),
        || owns_a_partition(&restarted).then_some(()),
    );
    let incident = Instant::now();
    play_subnet_deleted_under_live_ip(&world.sim, "after", 12);
    let alert = wait_for(
        "the alert of the incident after the restart",
        Duration::from_secs(20),
        || subnet_leak_alert(&receiver, "after"),
    );
    let latency = alert.at.duration_since(incident);
    assert!(
        latency < Duration::from_secs(5),
        "alert {latency:?} after the incident; log:\n{}",
        restarted.log_text()
    );
    let log = restarted.log_text();
    assert!(
        log.contains("Checkpoint("),
        "resumed from its own checkpoint, not rebuilt:\n{log}"
    );
}

#[test]
#[ignore = "tansu 0.6.0 does not reassign a static member's partition after it died: the survivor stays without it for 60 s+ (run against a real Kafka with --ignored)"]
fn with_two_analyzers_in_one_group_the_survivor_takes_over_the_partition_of_one_killed_for_good() {
    let world = World::new("failover-two", None);
    let receiver = Receiver::start(&world.runtime);
    let _collector = CollectorProcess::start(&world.setup(), &["--snapshot-interval", "2s"]);
    let group = format!("ipaudit-two-{}", std::process::id());
    let a = member(&world, &receiver, &group, "analyzer-0");
    let b = member(&world, &receiver, &group, "analyzer-1");
    let a_owns = wait_for(
        "one member owns the partition",
        Duration::from_secs(40),
        || {
            // Let the group settle on one assignment for both members.
            std::thread::sleep(Duration::from_millis(500));
            match (owns_a_partition(&a), owns_a_partition(&b)) {
                (true, false) => Some(true),
                (false, true) => Some(false),
                _ => None,
            }
        },
    );
    let (owner, survivor) = if a_owns { (a, b) } else { (b, a) };
    play_subnet_deleted_under_live_ip(&world.sim, "first", 21);
    wait_for(
        "the first alert, by the owner",
        Duration::from_secs(15),
        || subnet_leak_alert(&receiver, "first"),
    );
    owner.kill();
    wait_for(
        "the survivor takes the partition over",
        Duration::from_secs(60),
        || owns_a_partition(&survivor).then_some(()),
    );
    play_subnet_deleted_under_live_ip(&world.sim, "second", 22);
    let alert = wait_for(
        "the alert of the incident after the kill",
        Duration::from_secs(30),
        || subnet_leak_alert(&receiver, "second"),
    );
    assert_eq!(alert.body["status"], "FIRING");
    let log = survivor.log_text();
    assert!(
        log.contains("rebuilding from the latest snapshot"),
        "the survivor had no state for the partition and rebuilt it from the snapshot:\n{log}"
    );
}
