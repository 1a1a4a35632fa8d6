//! `analyzer run` restarted on a state directory it cannot use as it is: a store file
//! that is not a readable SQLite database, a checkpoint this build cannot read (written
//! by a newer release), or a checkpoint whose offset Kafka no longer has (the records
//! were deleted while it was down). Each must be set aside with a warning and the analysis
//! rebuilt from the latest snapshot in the topic, never a crash loop. Simulated API server ->
//! collector -> real broker -> `analyzer run` -> a real HTTP webhook receiver.

use std::collections::HashMap;
use std::time::Duration;

use ipaudit_analyzer::live::store::Store;
use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::broker::{create_topic, delete_records, watermarks};
use ipaudit_tests::collector::CollectorProcess;
use ipaudit_tests::receiver::{Received, Receiver};
use ipaudit_tests::scenario::{
    play_kube_ovn_seed, play_subnet_deleted_under_live_ip, subnet_leak_alert, Seed,
};
use ipaudit_tests::world::World;
use ipaudit_tests::{poll_until, wait_for};

fn rule(r: &Received) -> String {
    r.body["rule"].as_str().unwrap_or_default().to_owned()
}

/// The kube-ovn seed, played with a collector that snapshots every second, then left
/// until a few snapshots have passed the leak.
fn seed_with_snapshots(world: &World) -> (CollectorProcess, Seed) {
    let collector = CollectorProcess::start(&world.setup(), &["--snapshot-interval", "1s"]);
    let seed = play_kube_ovn_seed(&world.sim, false);
    std::thread::sleep(Duration::from_secs(4));
    (collector, seed)
}

/// Starts `analyzer run` on the world's state directory, sending to `receiver`.
fn analyzer(world: &World, receiver: &Receiver, name: &str) -> AnalyzerProcess {
    let alerts = format!("{}.alerts", world.topic);
    world
        .runtime
        .block_on(create_topic(&world.brokers, &alerts));
    AnalyzerProcess::start(
        &world.brokers,
        &world.topic,
        &format!("ipaudit-{name}-{}", std::process::id()),
        &world.dir.path().join("analyzer"),
        &[
            "--webhook-url",
            &format!("{}/hook", receiver.url),
            "--alerts-topic",
            &alerts,
        ],
    )
}

/// The analyzer found the leaked IP from the latest snapshot alone: the stuck IP, and not
/// the subnet's deletion, which lies before the snapshot.
fn assert_rebuilt_from_the_snapshot(receiver: &Receiver, seed: &Seed, log: impl Fn() -> String) {
    let stuck = wait_for(
        "the stuck IP found from the snapshot",
        Duration::from_secs(30),
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
    assert_eq!(rules, ["ip-stuck-terminating"], "{}", log());
    assert!(
        log().contains("rebuilding from the latest snapshot"),
        "{}",
        log()
    );
}

#[test]
fn a_corrupt_store_file_is_moved_aside_and_the_analysis_rebuilt_from_the_latest_snapshot() {
    let world = World::new("corrupt-store", None);
    let receiver = Receiver::start(&world.runtime);
    let (_collector, seed) = seed_with_snapshots(&world);
    let state_dir = world.dir.path().join("analyzer");
    std::fs::create_dir_all(&state_dir).unwrap();
    let garbage = b"SQLite format 3\0 but the pages are gone ".repeat(200);
    std::fs::write(state_dir.join("analyzer.db"), &garbage).unwrap();

    let running = analyzer(&world, &receiver, "corrupt-store");
    assert_rebuilt_from_the_snapshot(&receiver, &seed, || running.log_text());
    let log = running.log_text();
    assert!(log.contains("moved aside"), "{log}");
    let aside: Vec<_> = std::fs::read_dir(&state_dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("analyzer.db.unreadable-")
        })
        .collect();
    assert_eq!(aside.len(), 1, "the corrupt file is kept for a person");
    assert_eq!(std::fs::read(aside[0].path()).unwrap(), garbage);
}

#[test]
fn a_checkpoint_of_a_newer_format_is_set_aside_and_the_analysis_rebuilt_from_the_latest_snapshot() {
    let world = World::new("newer-checkpoint", None);
    let receiver = Receiver::start(&world.runtime);
    let (_collector, seed) = seed_with_snapshots(&world);
    let state_dir = world.dir.path().join("analyzer");
    std::fs::create_dir_all(&state_dir).unwrap();
    {
        // What a newer release would leave: a checkpoint in a format this build does not
        // know, with offsets that would skip everything if they were believed.
        let mut store = Store::open(&state_dir.join("analyzer.db")).unwrap();
        let newer = br#"{"format": 99, "clusters": "a shape from the future"}"#;
        store
            .checkpoint(
                &world.topic,
                [("kind-cluster", &newer[..])],
                &HashMap::from([(0, i64::MAX / 2)]),
                &Default::default(),
            )
            .unwrap();
    }

    let mut running = analyzer(&world, &receiver, "newer-checkpoint");
    assert_rebuilt_from_the_snapshot(&receiver, &seed, || running.log_text());
    let log = running.log_text();
    assert!(log.contains("set aside"), "{log}");
    assert!(
        !running.wait(Duration::from_millis(100)),
        "still running: {log}"
    );

    // The next start resumes from the analyzer's own checkpoint: the unreadable one is
    // gone, not met (and rebuilt from) again at every start.
    std::thread::sleep(Duration::from_secs(2));
    running.kill();
    let again = analyzer(&world, &receiver, "newer-checkpoint");
    wait_for(
        "the restart resumes from its checkpoint",
        Duration::from_secs(20),
        || {
            again
                .log_text()
                .contains("cluster resumed from the checkpoint")
                .then_some(())
        },
    );
    let log = again.log_text();
    assert!(
        !log.contains("set aside") && !log.contains("rebuilding"),
        "{log}"
    );
}

/// Records deleted (the admin API's DeleteRecords, as retention would) past the analyzer's
/// checkpoint while it was down: on restart it counts the gap, rebuilds the partition from
/// a snapshot after the gap, and the incident that follows still fires.
#[test]
fn records_deleted_past_the_checkpoint_while_down_are_counted_and_rebuilt_from_a_snapshot_and_the_next_incident_fires(
) {
    let world = World::new("out-of-range", None);
    let receiver = Receiver::start(&world.runtime);
    let _collector = CollectorProcess::start(&world.setup(), &["--snapshot-interval", "1s"]);
    let first = analyzer(&world, &receiver, "out-of-range");
    wait_for(
        "the analyzer owns the partition",
        Duration::from_secs(30),
        || (first.value("ipaudit_analyzer_assigned_partitions") == 1.0).then_some(()),
    );
    play_subnet_deleted_under_live_ip(&world.sim, "before", 51);
    wait_for("the alert before the stop", Duration::from_secs(30), || {
        subnet_leak_alert(&receiver, "before")
    });
    // A checkpoint (every second) holds the offset reached.
    std::thread::sleep(Duration::from_secs(2));
    first.kill();

    // While it is down the cluster changes, and the partition loses everything up to here.
    for i in 0..5u8 {
        play_subnet_deleted_under_live_ip(&world.sim, &format!("while-down-{i}"), 60 + i);
    }
    std::thread::sleep(Duration::from_millis(1_500));
    let (_, high) = watermarks(&world.brokers, &world.topic, 0);
    let low = world
        .runtime
        .block_on(delete_records(&world.brokers, &world.topic, 0, high));
    assert_eq!(low, high);
    // The collector's next snapshots start after the gap.
    std::thread::sleep(Duration::from_secs(3));

    let mut restarted = analyzer(&world, &receiver, "out-of-range");
    poll_until(Duration::from_secs(30), || {
        (restarted.value("ipaudit_analyzer_offset_out_of_range_total{partition=\"0\"}") > 0.0)
            .then_some(())
    })
    .unwrap_or_else(|| panic!("the gap is not counted; log:\n{}", restarted.log_text()));
    let log = restarted.log_text();
    let rebuilt = log
        .lines()
        .find(|l| l.contains("checkpointed offset is outside the log"))
        .unwrap_or_else(|| panic!("the gap is logged:\n{log}"));
    assert!(
        rebuilt.contains("start=Snapshot("),
        "rebuilt from a snapshot after the gap: {rebuilt}"
    );
    play_subnet_deleted_under_live_ip(&world.sim, "after", 52);
    let alert = poll_until(Duration::from_secs(30), || {
        subnet_leak_alert(&receiver, "after")
    })
    .unwrap_or_else(|| {
        panic!(
            "no alert of the incident after the rebuild; log:\n{}",
            restarted.log_text()
        )
    });
    assert_eq!(alert.body["status"], "FIRING");
    assert!(!restarted.wait(Duration::from_millis(100)), "still running");
}
