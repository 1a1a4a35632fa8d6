//! A restart never changes the alerts, end to end (issue 35): simulated API server ->
//! collector -> Apache Kafka -> two `analyzer run`s -> a webhook receiver. One analyzer runs
//! undisturbed; the other is SIGKILLed at random moments while a kube-ovn history plays (a
//! healthy teardown written 150 ms a step, the seed incident, churn, a watch gap ended by
//! 410 Gone with a second incident inside it) and restarted at once on the same state
//! directory each time, the first time before its first periodic checkpoint. The receiver
//! must see exactly the same transitions, by idempotency key, from both.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::receiver::{Received, Receiver};
use ipaudit_tests::scenario::{
    ip, play_kube_ovn_seed, play_subnet_deleted_under_live_ip, pod, subnet,
};
use ipaudit_tests::world::World;
use ipaudit_tests::{poll_until, wait_for};
use kube_sim::{Kind, KubeSim};

/// Kills of the restarted analyzer during (and just after) the history.
const KILLS: usize = 20;

/// The webhook path of each analyzer.
const UNDISTURBED: &str = "/undisturbed";
const RESTARTED: &str = "/restarted";

fn start_analyzer(world: &World, receiver: &Receiver, name: &str, path: &str) -> AnalyzerProcess {
    AnalyzerProcess::start(
        &world.brokers,
        &world.topic,
        &format!("ipaudit-{name}-{}", std::process::id()),
        &world.dir.path().join(name),
        &[
            "--webhook-url",
            &format!("{}{path}", receiver.url),
            // Kills land before, between and after checkpoints.
            "--checkpoint-interval",
            "2s",
        ],
    )
}

/// Waits until `analyzer` has joined its group and been given the partition.
fn wait_until_joined(analyzer: &AnalyzerProcess) {
    wait_for(
        "the analyzer joins its group",
        Duration::from_secs(30),
        || {
            analyzer
                .log_text()
                .contains("partitions assigned")
                .then_some(())
        },
    );
}

/// Each transition the receiver got on `path`, by idempotency key, with its rule and
/// subject (a key seen twice is a resend, counted once).
fn transitions(receiver: &Receiver, path: &str) -> BTreeSet<(String, String, String)> {
    receiver
        .received(path)
        .iter()
        .map(|r: &Received| {
            (
                r.headers
                    .get("idempotency-key")
                    .cloned()
                    .unwrap_or_default(),
                r.body["rule"].as_str().unwrap_or_default().to_owned(),
                r.body["subject_name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

/// A pod, its IP and their subnet created, then torn down in the right order, each write
/// 150 ms after the one before (as the field report's API server saw them).
fn healthy_teardown(sim: &KubeSim) {
    let step = || std::thread::sleep(Duration::from_millis(150));
    let ok = |r: Result<serde_json::Value, kube_sim::ApiError>| {
        r.expect("the simulated API server accepts the step")
    };
    ok(sim.create(Kind::Subnet, "", subnet("teardown-net", "10.50.0.0/24")));
    step();
    ok(sim.create(Kind::Pod, "apps", pod("web-1", "teardown-net", "10.50.0.7")));
    step();
    ok(sim.create(
        Kind::Ip,
        "",
        ip(
            "web-1.apps",
            "teardown-net",
            "web-1",
            "apps",
            "10.50.0.7",
            "",
        ),
    ));
    step();
    ok(sim.delete(Kind::Pod, "apps", "web-1"));
    step();
    ok(sim.delete(Kind::Ip, "", "web-1.apps"));
    step();
    ok(sim.remove_finalizers(Kind::Ip, "", "web-1.apps"));
    step();
    ok(sim.delete(Kind::Subnet, "", "teardown-net"));
    step();
    ok(sim.remove_finalizers(Kind::Subnet, "", "teardown-net"));
}

/// Pods and their IPs on the default subnet come and go, in the right order.
fn churn(sim: &KubeSim, pods: u8) {
    for i in 0..pods {
        let name = format!("churn-{i}");
        let address = format!("10.16.1.{}", i + 10);
        let ip_name = format!("{name}.apps");
        sim.create(Kind::Pod, "apps", pod(&name, "ovn-default", &address))
            .expect("pod");
        sim.create(
            Kind::Ip,
            "",
            ip(&ip_name, "ovn-default", &name, "apps", &address, ""),
        )
        .expect("ip");
        std::thread::sleep(Duration::from_millis(40));
        sim.delete(Kind::Pod, "apps", &name).expect("pod deleted");
        sim.delete(Kind::Ip, "", &ip_name).expect("ip deleted");
        sim.remove_finalizers(Kind::Ip, "", &ip_name)
            .expect("ip gone");
    }
}

/// The whole history; returns when it has been written.
fn play_history(sim: &KubeSim) {
    healthy_teardown(sim);
    play_kube_ovn_seed(sim, false);
    churn(sim, 25);
    // The API server goes away; meanwhile a subnet is deleted under a live IP; its
    // history is compacted, so the collector's watches come back to 410 Gone and relist.
    sim.pause();
    std::thread::sleep(Duration::from_millis(500));
    play_subnet_deleted_under_live_ip(sim, "gap-net", 77);
    sim.expire_history();
    sim.resume();
    churn(sim, 10);
}

/// Milliseconds until the next kill: a small xorshift, seeded from the clock (printed, so
/// that a failure can be replayed with `IPAUDIT_KILL_SEED`).
struct KillClock(u64);

impl KillClock {
    fn next_ms(&mut self, low: u64, high: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        low + self.0 % (high - low)
    }
}

#[test]
fn an_analyzer_sigkilled_at_random_moments_delivers_exactly_the_transitions_of_an_undisturbed_one()
{
    let world = World::new("crash-restarts", None);
    let receiver = Receiver::start(&world.runtime);
    let collector = world.collector();
    let undisturbed = start_analyzer(&world, &receiver, "undisturbed", UNDISTURBED);
    let seed = std::env::var("IPAUDIT_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    let mut clock = KillClock(seed);
    let mut kills = Vec::new();
    let restarted = std::thread::scope(|scope| {
        let mut restarted = start_analyzer(&world, &receiver, "restarted", RESTARTED);
        // Both read the partition from its start: each joins its group before anything
        // happens (a group that never consumed starts at the latest snapshot).
        wait_until_joined(&undisturbed);
        wait_until_joined(&restarted);
        let history = scope.spawn(|| play_history(&world.sim));
        // The first kill comes 300 ms into the history, before the first periodic
        // checkpoint with anything in it (2 s): only the one written when the partition
        // was assigned exists.
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        for kill in 0..KILLS {
            if kill > 0 {
                std::thread::sleep(Duration::from_millis(clock.next_ms(150, 1_200)));
            }
            kills.push(started.elapsed().as_millis());
            restarted.kill();
            restarted = start_analyzer(&world, &receiver, "restarted", RESTARTED);
        }
        history.join().expect("the history is written");
        restarted
    });

    let expected = |got: &BTreeSet<(String, String, String)>| {
        let rules: Vec<(&str, &str)> = got
            .iter()
            .map(|(_, rule, subject)| (rule.as_str(), subject.as_str()))
            .collect();
        rules.contains(&("subnet-deleted-before-ip", "test-vm-1.vms.vm-net.vms.ovn"))
            && rules.contains(&("ip-stuck-terminating", "test-vm-1.vms.vm-net.vms.ovn"))
            && rules.contains(&("ip-orphaned", "gap-net-ip.ns"))
    };
    let reported = poll_until(Duration::from_secs(60), || {
        expected(&transitions(&receiver, UNDISTURBED)).then_some(())
    });
    assert!(
        reported.is_some(),
        "the undisturbed analyzer reports both incidents: {:#?}\nits log:\n{}\ncollector log:\n{}",
        transitions(&receiver, UNDISTURBED),
        undisturbed.log_text(),
        collector.log_text(),
    );
    // Whatever else is still on its way arrives within seconds.
    std::thread::sleep(Duration::from_secs(3));
    let reference = transitions(&receiver, UNDISTURBED);
    assert!(
        !reference
            .iter()
            .any(|(_, _, subject)| subject == "web-1.apps" || subject == "teardown-net"),
        "the healthy teardown raises nothing: {reference:#?}"
    );
    let same = poll_until(Duration::from_secs(60), || {
        (transitions(&receiver, RESTARTED) == reference).then_some(())
    });
    let got = transitions(&receiver, RESTARTED);
    assert!(
        same.is_some(),
        "kill seed {seed} (IPAUDIT_KILL_SEED), kills at {kills:?} ms\n\
         only from the restarted analyzer: {:#?}\n\
         only from the undisturbed one: {:#?}\n\
         restarted analyzer's last log:\n{}\nundisturbed analyzer's log:\n{}",
        got.difference(&reference).collect::<Vec<_>>(),
        reference.difference(&got).collect::<Vec<_>>(),
        restarted.log_text(),
        undisturbed.log_text(),
    );
}
