//! Relist consistency of the live analysis: a relist never overrides a newer event.
//!
//! A collector writes a complete list of a stream (`SYNC_START`, every object as `ADDED`
//! with its own version, `SYNC_END`) on start, after 410 Gone and every
//! `--snapshot-interval`, taken at the version its watch of that stream has reached and
//! written between that watch's events. The streams reach the partition with delays of
//! their own, so a list comes after newer events of the other streams, and its objects
//! carry versions older still. Such a list says nothing the history had not said, so it
//! must not change the alerts: for each history (the seed incidents of every IPAM;
//! generated kube-ovn histories with healthy teardowns in both orders, watch gaps, two
//! collectors) and every point of it, a list of each stream inserted there leaves the
//! transitions of the live loop (`live_model`) exactly those of the history without it.
//!
//! What a list cannot be held to, and is not tested here: one after a watch gap (410 Gone)
//! stands in for events nobody saw. Its `DELETED_ON_RELIST` says the object went at or
//! before the list's version, not when: the rules treat such a deletion as unordered
//! against the others (the crash test's histories have them).

mod live_model;

use std::collections::BTreeMap;

use ipaudit_schemas::builders::EventBuilder;
use ipaudit_schemas::{EventType, Stream, WatchEvent};
use live_model::{
    incidents, kube_ovn_history, partition_of, run_uninterrupted, seed_bytes, teardown, Delivery,
    Teardown, Writer,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// Each stream runs behind the others by up to this (within the reorder window of 1 s).
const STREAM_DELAY_MS: i64 = 900;

/// The complete list of `stream` a collector takes right after `history[at]`, at that
/// event's version, framed: every object of the stream whose last event up to there is
/// not a deletion, as ADDED with that event's content and version. `None` where the
/// history cannot say what such a list holds: at an event without a version, inside a
/// list of the same stream, or before the end of the stream's first list when the stream
/// begins with one (a recording starts with a list of objects at their latest versions;
/// what existed before those versions it does not show).
fn list_after(history: &[WatchEvent], stream: Stream, at: usize) -> Option<Vec<WatchEvent>> {
    let point = &history[at];
    let version = point.resource_version_num?;
    let begins_with_a_list = history
        .iter()
        .find(|e| e.stream == stream)
        .is_some_and(|e| e.event_type == EventType::SyncStart);
    let mut known = !begins_with_a_list;
    let mut in_list = false;
    let mut last: BTreeMap<String, &WatchEvent> = BTreeMap::new();
    for event in history[..=at].iter().filter(|e| e.stream == stream) {
        match event.event_type {
            EventType::SyncStart => in_list = true,
            EventType::SyncEnd => {
                in_list = false;
                known = true;
            }
            t if t.carries_object() => {
                last.insert(event.object_key(), event);
            }
            _ => {}
        }
    }
    if in_list || !known {
        return None;
    }
    let stamped = |mut event: WatchEvent| {
        event.observed_at_ms = point.observed_at_ms;
        event
    };
    let mut frame = vec![stamped(EventBuilder::marker(
        stream,
        EventType::SyncStart,
        version,
    ))];
    for event in last.values().filter(|e| !e.event_type.is_deletion()) {
        let mut listed = stamped((*event).clone());
        listed.event_type = EventType::Added;
        frame.push(listed);
    }
    frame.push(stamped(EventBuilder::marker(
        stream,
        EventType::SyncEnd,
        version,
    )));
    Some(frame)
}

/// `history` with `frames` (each after its point) inserted.
fn with_lists(history: &[WatchEvent], frames: &[(usize, Vec<WatchEvent>)]) -> Vec<WatchEvent> {
    let mut merged =
        Vec::with_capacity(history.len() + frames.iter().map(|f| f.1.len()).sum::<usize>());
    for (index, event) in history.iter().enumerate() {
        merged.push(event.clone());
        for (_, frame) in frames.iter().filter(|(at, _)| *at == index) {
            merged.extend(frame.iter().cloned());
        }
    }
    merged
}

fn streams_of(history: &[WatchEvent]) -> Vec<Stream> {
    let mut streams: Vec<Stream> = history.iter().map(|e| e.stream).collect();
    streams.sort();
    streams.dedup();
    streams
}

/// The transitions of the live loop over `history` delivered as `delivery` says: each
/// id with what it says.
fn transitions(history: &[WatchEvent], delivery: Delivery) -> BTreeMap<String, String> {
    run_uninterrupted(&partition_of(history, delivery)).said
}

/// Panics at the first insertion point (every event of `history`, every stream) where a
/// list changes the transitions; returns how many points were tried.
fn assert_no_list_changes_the_alerts(
    name: &str,
    history: &[WatchEvent],
    delivery: Delivery,
) -> usize {
    let expected = transitions(history, delivery);
    let mut tried = 0;
    for stream in streams_of(history) {
        for at in 0..history.len() {
            let Some(frame) = list_after(history, stream, at) else {
                continue;
            };
            let listed = with_lists(history, &[(at, frame)]);
            let point = &history[at];
            assert_eq!(
                transitions(&listed, delivery),
                expected,
                "{name}: a list of {stream} at version {} (after {:?} {} of {}) changed the alerts",
                point.resource_version,
                point.event_type,
                point.stream,
                point.object_key(),
            );
            tried += 1;
        }
    }
    tried
}

#[test]
fn a_list_of_any_stream_at_any_point_of_a_seed_incident_leaves_its_alerts_unchanged() {
    let incidents = incidents();
    assert!(incidents.len() >= 10, "{} incidents found", incidents.len());
    let mut points = 0;
    for (index, (name, history)) in incidents.iter().enumerate() {
        let delivery = Delivery {
            jitter_ms: 0,
            stream_delay_ms: STREAM_DELAY_MS,
            second_collector: index % 3 == 0,
            seed: index as u64,
        };
        points += assert_no_list_changes_the_alerts(name, history, delivery);
    }
    assert!(points > 500, "{points} insertion points");
}

#[test]
fn a_list_at_any_point_of_a_healthy_or_leaking_teardown_leaves_its_alerts_unchanged() {
    use Teardown::*;
    let cases: [(&str, Vec<Teardown>); 3] = [
        ("healthy teardown", vec![InOrder]),
        ("subnet deleted first", vec![SubnetFirst]),
        (
            "healthy teardown then the seed incident, an IP gone in a watch gap",
            vec![InOrder, SubnetFirst, IpGoneInWatchGap, Kept],
        ),
    ];
    for (index, (name, teardowns)) in cases.iter().enumerate() {
        // Writes 30 ms apart: a fast teardown, faster than the streams' delays.
        let history = kube_ovn_history(teardowns, 30);
        for second_collector in [false, true] {
            let delivery = Delivery {
                jitter_ms: 0,
                stream_delay_ms: STREAM_DELAY_MS,
                second_collector,
                seed: index as u64,
            };
            assert_no_list_changes_the_alerts(name, &history, delivery);
        }
    }
}

/// Found by the property below (case `([Kept, Kept], 10, false, 8892399621073691058, 5)`):
/// a list of subnets taken before subnet `s1` was created reaches the analyzer after the IP
/// that names `s1`; the list says nothing of `s1`, so nothing fires.
#[test]
fn a_subnet_list_older_than_the_ip_naming_a_newer_subnet_fires_nothing() {
    let history = kube_ovn_history(&[Teardown::Kept, Teardown::Kept], 10);
    let lists = [
        (4, Stream::Pod),
        (0, Stream::Subnet),
        (0, Stream::Subnet),
        (1, Stream::Subnet),
        (5, Stream::Pod),
    ];
    let frames: Vec<(usize, Vec<WatchEvent>)> = lists
        .into_iter()
        .filter_map(|(at, stream)| list_after(&history, stream, at).map(|frame| (at, frame)))
        .collect();
    assert_eq!(frames.len(), lists.len());
    let listed = with_lists(&history, &frames);
    let delivery = Delivery {
        jitter_ms: 0,
        stream_delay_ms: STREAM_DELAY_MS,
        second_collector: false,
        seed: 8_892_399_621_073_691_058,
    };
    assert_eq!(
        transitions(&listed, delivery),
        transitions(&history, delivery)
    );
}

#[test]
fn random_histories_with_lists_anywhere_give_the_alerts_of_the_history_without_them() {
    let mut runner = TestRunner::new(Config {
        cases: 48,
        ..Config::default()
    });
    let strategy = (
        prop::collection::vec(teardown(), 1..6),
        10i64..400,
        any::<bool>(),
        any::<u64>(),
        1usize..6,
    );
    runner
        .run(
            &strategy,
            |(teardowns, step_ms, second_collector, seed, lists)| {
                let history = kube_ovn_history(&teardowns, step_ms);
                let delivery = Delivery {
                    jitter_ms: 0,
                    stream_delay_ms: STREAM_DELAY_MS,
                    second_collector,
                    seed,
                };
                let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(seed));
                let streams = streams_of(&history);
                let frames: Vec<(usize, Vec<WatchEvent>)> = (0..lists)
                    .filter_map(|_| {
                        let at = rng.random_range(0..history.len());
                        let stream = streams[rng.random_range(0..streams.len())];
                        list_after(&history, stream, at).map(|frame| (at, frame))
                    })
                    .collect();
                let listed = with_lists(&history, &frames);
                prop_assert_eq!(
                    transitions(&listed, delivery),
                    transitions(&history, delivery),
                    "lists after {:?}",
                    frames
                        .iter()
                        .map(|(at, f)| (*at, f[0].stream))
                        .collect::<Vec<_>>()
                );
                Ok(())
            },
        )
        .expect("no history whose alerts change with a list");
}

/// A healthy teardown written fast (pod, IP, then subnet), the IP's last two events lost
/// to its watch when `relisted`: the IP watch then relists at the version of the subnet's
/// deletion, the last write, and finds the IP gone there.
fn healthy_teardown(relisted: bool) -> Vec<WatchEvent> {
    let mut w = Writer {
        events: Vec::new(),
        rv: 1_500,
        t: 1_750_000_000_000,
        step_ms: 20,
    };
    let pod = EventBuilder::pod("ns", "p").uid("pod-1");
    let subnet = EventBuilder::subnet("s").uid("subnet-1");
    let ip = EventBuilder::ip("p.ns", "s")
        .uid("ip-1")
        .ip_of("ns", "p", "10.1.0.2", "");
    w.write(subnet.clone().added());
    w.write(pod.clone().added());
    w.write(ip.clone().added());
    w.write(pod.deleted());
    if relisted {
        w.unseen(2);
    } else {
        let at = w.write(ip.clone().deleting(w.next_ms()).modified());
        w.write(ip.clone().deleting(at).finalizers(&[]).deleted());
    }
    let at = w.write(subnet.clone().deleting(w.next_ms()).modified());
    w.write(subnet.deleting(at).finalizers(&[]).deleted());
    if relisted {
        w.relist(
            Stream::Ip,
            vec![ip.finalizers(&[]).build(EventType::DeletedOnRelist)],
        );
    }
    w.events
}

#[test]
fn a_relist_that_finds_an_ip_gone_at_the_version_of_its_subnets_deletion_fires_nothing() {
    // The relist's deletion and the subnet's real DELETED share a version; the IP went
    // before it (two objects never change at one version), so the teardown was healthy,
    // whichever of the two reaches the analyzer first.
    let healthy = healthy_teardown(false);
    let relisted = healthy_teardown(true);
    for seed in 0..32 {
        for second_collector in [false, true] {
            let delivery = Delivery {
                jitter_ms: 0,
                stream_delay_ms: STREAM_DELAY_MS,
                second_collector,
                seed,
            };
            assert_eq!(transitions(&healthy, delivery), BTreeMap::new());
            assert_eq!(
                transitions(&relisted, delivery),
                BTreeMap::new(),
                "delivery {delivery:?}"
            );
        }
    }
}

/// Found by the property above (case `([SubnetFirst, InOrder], 10, true,
/// 11743469094269226270, 1)`): a Pod list at the version of subnet `s0`'s deletion, its
/// Pods the first stream to show up, while the IP stream is the slowest. The Pods were
/// released at once (no IPAM stream was known to wait for), so the deletion was released
/// on arrival, ahead of the IP that still named `s0`: `subnet-deleted-before-ip` was lost.
#[test]
fn a_pod_list_before_any_ipam_stream_shows_keeps_a_subnets_deletion_behind_the_ip_naming_it() {
    use Teardown::*;
    let history = kube_ovn_history(&[SubnetFirst, InOrder], 10);
    let frames: Vec<(usize, Vec<WatchEvent>)> = list_after(&history, Stream::Pod, 7)
        .map(|frame| (7, frame))
        .into_iter()
        .collect();
    assert_eq!(frames.len(), 1);
    let listed = with_lists(&history, &frames);
    for second_collector in [false, true] {
        let delivery = Delivery {
            jitter_ms: 0,
            stream_delay_ms: STREAM_DELAY_MS,
            second_collector,
            seed: 11_743_469_094_269_226_270,
        };
        let alerts = transitions(&listed, delivery);
        assert!(
            alerts
                .keys()
                .any(|id| alerts[id].starts_with("subnet-deleted-before-ip firing")),
            "{alerts:?}"
        );
        assert_eq!(alerts, transitions(&history, delivery));
    }
}
