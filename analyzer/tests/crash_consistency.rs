//! Crash consistency of the live analysis: a restart never changes the alerts.
//!
//! The live loop is modelled as `live_model` describes, and a checkpoint saves the analysis
//! together with the offset of the next message. The process may die after any message; it then
//! restarts a little later from its last checkpoint (or from the start of the partition
//! when it never checkpointed) and consumes from there, catching up on what was delivered
//! meanwhile.
//!
//! For each history (the seed incidents of `tests/fixtures/incidents/`; generated kube-ovn
//! histories: healthy teardowns in both orders, watch gaps ended by a relist with
//! `DELETED_ON_RELIST`, two collectors, streams delivered out of order within the reorder
//! window; and random ones of those, as a property) and every message boundary as a kill
//! point, with checkpoints taken at random moments, the transitions seen before the kill
//! and after the restart, by id, are exactly those of the uninterrupted run.

mod live_model;

use std::collections::BTreeSet;
use std::rc::Rc;

use ipaudit_analyzer::analysis::engine::Analyzer;
use ipaudit_schemas::WatchEvent;
use live_model::{
    config, incidents, kube_ovn_history, partition_of, run_uninterrupted, seed_bytes, teardown,
    Checkpoint, Delivered, Delivery, Message, Process, Teardown,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// Each history's kill points are tried under this many random checkpoint schedules.
const CHECKPOINT_SCHEDULES: usize = 3;
/// How long a killed analyzer stays down before it runs again.
const DOWN_MS: i64 = 3_000;
/// What the uninterrupted run had done when it consumed a message, for a kill there.
struct Boundary {
    /// Transitions stored so far.
    delivered: usize,
    wall_ms: i64,
    /// The last checkpoint written.
    checkpoint: Option<Checkpoint>,
}

/// Every message boundary of `log` as a kill point, with checkpoints after the messages
/// `checkpoint_after` names: panics at the first kill point whose transitions (before the
/// kill, and after the restart from the last checkpoint) differ from the uninterrupted
/// run's. A killed run is the uninterrupted one up to its kill, so that prefix is run once.
fn assert_no_kill_point_changes_the_alerts(
    name: &str,
    log: &[Message],
    checkpoint_after: &BTreeSet<usize>,
) {
    let mut uninterrupted = Delivered::default();
    let mut boundaries = Vec::with_capacity(log.len());
    let mut checkpoint: Option<Checkpoint> = None;
    Process::first(log).run(log, &mut uninterrupted, |process, delivered| {
        if checkpoint_after.contains(&process.next) {
            checkpoint = Some(Rc::new((process.analyzer.checkpoint(), process.next)));
        }
        boundaries.push(Boundary {
            delivered: delivered.ids.len(),
            wall_ms: process.wall_ms,
            checkpoint: checkpoint.clone(),
        });
    });
    let expected = uninterrupted.set();
    for (index, boundary) in boundaries.iter().enumerate() {
        let mut delivered = Delivered {
            ids: uninterrupted.ids[..boundary.delivered].to_vec(),
            ..Delivered::default()
        };
        let restart_ms = boundary.wall_ms + DOWN_MS;
        Process::restarted(boundary.checkpoint.as_ref(), restart_ms).run(
            log,
            &mut delivered,
            |_, _| {},
        );
        let event = &log[index].event;
        assert_eq!(
            delivered.set(),
            expected,
            "{name}: killed after message {} of {} ({:?} at version {}), last checkpoint before message {:?}",
            index + 1,
            log.len(),
            event.event_type,
            event.resource_version,
            boundary.checkpoint.as_ref().map(|c| c.1),
        );
    }
}

/// Checkpoints after about one message in `every`, at random.
fn random_checkpoints(len: usize, every: u32, rng: &mut TestRng) -> BTreeSet<usize> {
    (1..=len)
        .filter(|_| rng.random_range(0..every) == 0)
        .collect()
}

/// The alert transitions of `history` replayed offline (everything at once, then the end).
fn replayed(history: &[WatchEvent]) -> Vec<String> {
    let mut analyzer = Analyzer::new(config());
    let mut out = Vec::new();
    for event in history {
        analyzer.step(event.clone(), &mut out);
    }
    analyzer.finish(None, &mut out);
    let mut delivered = Delivered::default();
    delivered.take(&mut out);
    delivered.ids
}

#[test]
fn every_seed_incident_gives_the_same_transitions_whenever_the_analyzer_dies() {
    let incidents = incidents();
    assert!(incidents.len() >= 10, "{} incidents found", incidents.len());
    let mut kill_points = 0;
    for (index, (name, history)) in incidents.iter().enumerate() {
        let delivery = Delivery {
            jitter_ms: 300,
            stream_delay_ms: 0,
            second_collector: index % 3 == 0,
            seed: index as u64,
        };
        let log = partition_of(history, delivery);
        assert_eq!(
            run_uninterrupted(&log).ids.is_empty(),
            replayed(history).is_empty(),
            "{name}: the uninterrupted live run finds what a replay finds"
        );
        let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(index as u64));
        for _ in 0..CHECKPOINT_SCHEDULES {
            let checkpoints = random_checkpoints(log.len(), 8, &mut rng);
            assert_no_kill_point_changes_the_alerts(name, &log, &checkpoints);
        }
        kill_points += log.len();
    }
    assert!(kill_points > 1_000, "{kill_points} kill points");
}

#[test]
fn healthy_teardowns_in_either_order_give_the_same_transitions_whenever_the_analyzer_dies() {
    use Teardown::*;
    let cases: [(&str, Vec<Teardown>); 4] = [
        ("healthy teardown", vec![InOrder]),
        ("subnet deleted first", vec![SubnetFirst]),
        (
            "healthy teardown then the seed incident",
            vec![InOrder, SubnetFirst, Kept],
        ),
        (
            "an IP gone in a watch gap",
            vec![InOrder, IpGoneInWatchGap, SubnetFirst],
        ),
    ];
    for (index, (name, teardowns)) in cases.iter().enumerate() {
        // Writes 150 ms apart, as the API server saw them in the field report.
        let history = kube_ovn_history(teardowns, 150);
        for second_collector in [false, true] {
            let delivery = Delivery {
                jitter_ms: 900,
                stream_delay_ms: 0,
                second_collector,
                seed: index as u64,
            };
            let log = partition_of(&history, delivery);
            let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(index as u64));
            for _ in 0..CHECKPOINT_SCHEDULES {
                let checkpoints = random_checkpoints(log.len(), 5, &mut rng);
                assert_no_kill_point_changes_the_alerts(name, &log, &checkpoints);
            }
        }
    }
}

#[test]
fn random_histories_give_the_same_transitions_whenever_the_analyzer_dies() {
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    let strategy = (
        prop::collection::vec(teardown(), 1..6),
        10i64..400,
        0i64..900,
        any::<bool>(),
        any::<u64>(),
        2u32..8,
    );
    runner
        .run(
            &strategy,
            |(teardowns, step_ms, jitter_ms, second_collector, seed, every)| {
                let history = kube_ovn_history(&teardowns, step_ms);
                let log = partition_of(
                    &history,
                    Delivery {
                        jitter_ms,
                        stream_delay_ms: 0,
                        second_collector,
                        seed,
                    },
                );
                let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(seed));
                let checkpoints = random_checkpoints(log.len(), every, &mut rng);
                assert_no_kill_point_changes_the_alerts("a random history", &log, &checkpoints);
                Ok(())
            },
        )
        .expect("no history whose alerts change with a restart");
}
