//! `analyzer run` restarted on a state directory it cannot use as it is: a store file
//! that is not a readable SQLite database, or a checkpoint this build cannot read (written
//! by a newer release). Each must be set aside with a warning and the analysis rebuilt
//! from the latest snapshot in the topic, never a crash loop. Simulated API server ->
//! collector -> real broker -> `analyzer run` -> a real HTTP webhook receiver.

use std::collections::HashMap;
use std::time::Duration;

use ipaudit_analyzer::live::store::Store;
use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::broker::create_topic;
use ipaudit_tests::collector::CollectorProcess;
use ipaudit_tests::receiver::{Received, Receiver};
use ipaudit_tests::scenario::{play_kube_ovn_seed, Seed};
use ipaudit_tests::wait_for;
use ipaudit_tests::world::World;

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
                [("kind-cluster", newer.to_vec())],
                &HashMap::from([(0, i64::MAX / 2)]),
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
