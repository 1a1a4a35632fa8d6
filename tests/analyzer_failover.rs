//! The analyzer as a consumer group that fails over, on Apache Kafka: static membership
//! gives a restarted instance its partition back at once, without a rebalance of the other
//! members, and an instance that dies for good leaves its partition to another once its
//! session expires; that one takes it over from the dead one's handover in the
//! checkpoints topic. Each incident happens
//! after the fault, so only an analyzer that really owns the partition again can report it.

use std::time::{Duration, Instant};

use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::collector::CollectorProcess;
use ipaudit_tests::receiver::Receiver;
use ipaudit_tests::scenario::{play_subnet_deleted_under_live_ip, subnet_leak_alert};
use ipaudit_tests::world::World;
use ipaudit_tests::{poll_until, wait_for};

/// The analyzer's consumer session (`session.timeout.ms` of the runtime's group consumers):
/// how long the group coordinator waits before it gives a silent member's partitions away.
const SESSION: Duration = Duration::from_secs(10);

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

/// The member's rebalance callbacks so far (each assignment and each revocation it logged).
fn rebalance_callbacks(process: &AnalyzerProcess) -> Vec<String> {
    process
        .log_text()
        .lines()
        .filter(|l| l.contains("partitions assigned") || l.contains("partitions revoked"))
        .map(str::to_owned)
        .collect()
}

/// How many partitions of the events topic the member owns (its metric).
fn partitions_owned(process: &AnalyzerProcess) -> f64 {
    process.value("ipaudit_analyzer_assigned_partitions")
}

/// Watch events the member consumed (every stream and type).
fn events_consumed(process: &AnalyzerProcess) -> f64 {
    process
        .metrics()
        .lines()
        .filter(|l| l.starts_with("ipaudit_analyzer_events_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
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
    let alert = poll_until(Duration::from_secs(20), || {
        subnet_leak_alert(&receiver, "after")
    })
    .unwrap_or_else(|| {
        panic!(
            "no alert of the incident after the restart; log:\n{}",
            restarted.log_text()
        )
    });
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
fn with_two_analyzers_in_one_group_the_survivor_takes_over_the_partition_of_one_killed_for_good() {
    let world = World::new("failover-two", None);
    let receiver = Receiver::start(&world.runtime);
    let collector = CollectorProcess::start(&world.setup(), &["--snapshot-interval", "2s"]);
    let group = format!("ipaudit-two-{}", std::process::id());
    let a = member(&world, &receiver, &group, "analyzer-0");
    let b = member(&world, &receiver, &group, "analyzer-1");
    let a_owns = wait_for(
        "one member owns the partition",
        Duration::from_secs(40),
        || {
            // Both members joined (each was assigned, the partition or nothing), and the
            // group settled on one assignment for both.
            if rebalance_callbacks(&a).is_empty() || rebalance_callbacks(&b).is_empty() {
                return None;
            }
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
    // Failed once in CI (28 November 2026; 10 runs after passed, 5 of them beside two CPU
    // hogs): the logs say whether the owner read the incident and whether it fired.
    poll_until(Duration::from_secs(15), || {
        subnet_leak_alert(&receiver, "first")
    })
    .unwrap_or_else(|| {
        panic!(
            "the first alert, by the owner: nothing after 15 s; the owner's log:\n{}\nthe other member's log:\n{}\nthe collector's log:\n{}",
            owner.log_text(),
            survivor.log_text(),
            collector.log_text()
        )
    });
    owner.kill();
    let killed = Instant::now();
    // The next incident happens while no member owns the partition.
    play_subnet_deleted_under_live_ip(&world.sim, "second", 22);
    wait_for(
        "the survivor takes the partition over",
        SESSION + Duration::from_secs(30),
        || owns_a_partition(&survivor).then_some(()),
    );
    let taken_over = killed.elapsed();
    let alert = wait_for(
        "the alert of the incident played while nobody owned the partition",
        Duration::from_secs(30),
        || subnet_leak_alert(&receiver, "second"),
    );
    let alerted = alert.at.duration_since(killed);
    eprintln!(
        "failover: partition taken over {taken_over:?} after the kill (session {SESSION:?}), the incident meanwhile alerted {alerted:?} after the kill"
    );
    assert_eq!(alert.body["status"], "FIRING");
    let log = survivor.log_text();
    // Where the survivor took the partition up: at the dead owner's handover (written
    // within a checkpoint of its taking the partition, so always there by the kill), or
    // at a checkpoint of its own if that were newer (the partition was briefly its own
    // while the group formed) — never at a snapshot, which could be later than what was
    // consumed.
    let takeover = log
        .lines()
        .rfind(|l| l.contains("partitions assigned"))
        .unwrap_or_default();
    assert!(
        takeover.contains("Handover(") || takeover.contains("Checkpoint("),
        "the survivor resumes the dead owner's analysis: {takeover}\n{log}"
    );
    assert!(
        !log.contains("rebuilding from the snapshot"),
        "no rebuild from a snapshot:\n{log}"
    );
    // The dead member's session, then one rebalance (the survivor's next heartbeat, its
    // rejoin, the assignment and the handover read): measured 9.2 to 10.4 s with a
    // snapshot scan instead of the handover.
    let bound = SESSION + Duration::from_secs(5);
    assert!(
        taken_over < bound,
        "the survivor took the partition over {taken_over:?} after the kill (bound {bound:?}); log:\n{log}"
    );
    assert!(
        alerted < bound + Duration::from_secs(3),
        "the incident alerted {alerted:?} after the kill; log:\n{log}"
    );
}

#[test]
fn a_static_member_restarted_within_its_session_gets_its_partition_back_without_a_rebalance_of_the_other(
) {
    let world = World::partitioned("failover-static", 2);
    let receiver = Receiver::start(&world.runtime);
    let _collector = world.collector();
    let group = format!("ipaudit-static-{}", std::process::id());
    let a = member(&world, &receiver, &group, "analyzer-0");
    wait_for("the first member joins", Duration::from_secs(30), || {
        (partitions_owned(&a) == 2.0).then_some(())
    });
    let b = member(&world, &receiver, &group, "analyzer-1");
    wait_for(
        "each member owns one partition",
        Duration::from_secs(30),
        || (partitions_owned(&a) == 1.0 && partitions_owned(&b) == 1.0).then_some(()),
    );
    play_subnet_deleted_under_live_ip(&world.sim, "first", 31);
    wait_for("the first alert", Duration::from_secs(15), || {
        subnet_leak_alert(&receiver, "first")
    });
    // The owner of the cluster's partition is the member that consumed its events.
    let ((owner, owner_id), (other, other_id)) = if events_consumed(&a) > 0.0 {
        ((a, "analyzer-0"), (b, "analyzer-1"))
    } else {
        ((b, "analyzer-1"), (a, "analyzer-0"))
    };
    assert_eq!(
        events_consumed(&other),
        0.0,
        "one partition holds the cluster"
    );
    let other_callbacks = rebalance_callbacks(&other);

    owner.kill();
    let killed = Instant::now();
    let restarted = member(&world, &receiver, &group, owner_id);
    wait_for(
        "the restarted member gets its partition back",
        SESSION,
        || owns_a_partition(&restarted).then_some(()),
    );
    let back = killed.elapsed();
    assert!(
        back < SESSION,
        "back after {back:?}: after the session, not by static membership"
    );
    let incident = Instant::now();
    play_subnet_deleted_under_live_ip(&world.sim, "second", 32);
    let alert = wait_for(
        "the alert of the incident after the restart",
        Duration::from_secs(20),
        || subnet_leak_alert(&receiver, "second"),
    );
    let latency = alert.at.duration_since(incident);
    eprintln!("static failover: partition back {back:?} after the kill, alert {latency:?} after the incident");
    assert!(
        latency < Duration::from_secs(5),
        "alert {latency:?} after the incident; log:\n{}",
        restarted.log_text()
    );
    assert!(
        restarted.log_text().contains("Checkpoint("),
        "resumed from its own checkpoint:\n{}",
        restarted.log_text()
    );

    // Past the dead instance's session: had the coordinator rebalanced (at the restart or
    // at the expiry), the other member would have logged a revocation and an assignment.
    std::thread::sleep(
        (killed + SESSION + Duration::from_secs(3)).saturating_duration_since(Instant::now()),
    );
    assert_eq!(
        rebalance_callbacks(&other),
        other_callbacks,
        "{other_id} was rebalanced; its log:\n{}",
        other.log_text()
    );
    assert_eq!(partitions_owned(&other), 1.0);
    assert_eq!(partitions_owned(&restarted), 1.0);
}
