//! The collector against a real kube-apiserver on etcd (`scripts/kube`), end to end to a
//! real broker: what the simulated API server only imitates. Objects are written through
//! the API with kubectl; cluster-scoped names carry the test's own prefix, so that tests
//! share one server.

use std::time::Duration;

use ipaudit_schemas::{EventType, Stream, WatchEvent};
use ipaudit_tests::collector::{
    event_key, watch_event_counts, CollectorProcess, CollectorSetup, EventKey,
};
use ipaudit_tests::kube::{resource_version, KubeServer};
use ipaudit_tests::world::World;
use serde_json::json;

fn subnet(name: &str, cidr: &str) -> serde_json::Value {
    json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
        "metadata": {"name": name},
        "spec": {"cidrBlock": cidr, "protocol": "IPv4", "provider": "ovn", "vpc": "ovn-cluster"}})
}

fn ip(name: &str, subnet: &str, address: &str) -> serde_json::Value {
    json!({"apiVersion": "kubeovn.io/v1", "kind": "IP",
        "metadata": {"name": name, "labels": {"ovn.kubernetes.io/subnet": subnet}},
        "spec": {"subnet": subnet, "podName": "p", "namespace": "ns", "ipAddress": address,
            "v4IpAddress": address, "podType": "", "nodeName": "node-1", "attachSubnets": []}})
}

#[test]
fn periodic_snapshots_on_a_real_server_are_listed_at_the_watchs_version_and_cost_no_event() {
    let kube = KubeServer::shared_or_start();
    let world = World::new("real-snapshot", None);
    let prefix = format!("real-snapshot-{}", std::process::id());
    let setup = CollectorSetup {
        kubeconfig: &kube.kubeconfig,
        ..world.setup()
    };
    let collector = CollectorProcess::start(&setup, &["--snapshot-interval", "1s"]);
    let net = format!("{prefix}-net");
    kube.create(&subnet(&net, "10.77.0.0/24"));
    let name = format!("{prefix}-p.ns");
    let added = resource_version(&kube.create(&ip(&name, &net, "10.77.0.5")));
    let modified = resource_version(&kube.patch(
        "ips.kubeovn.io",
        &name,
        &json!({"metadata": {"labels": {"moved": "yes"}}}),
    ));
    kube.delete("ips.kubeovn.io", &name);
    let ip_events = |events: &[WatchEvent]| -> Vec<(EventType, i64)> {
        events
            .iter()
            .filter(|e| e.stream == Stream::Ip && e.object_key() == name)
            .map(|e| (e.event_type, e.resource_version_num.unwrap_or(-1)))
            .collect()
    };
    // Done once the IP's deletion came and two snapshots of IPs were framed after it.
    let done = |events: &[WatchEvent]| {
        let Some(deleted) = ip_events(events)
            .iter()
            .find(|(t, _)| *t == EventType::Deleted)
            .map(|(_, rv)| *rv)
        else {
            return false;
        };
        events
            .iter()
            .filter(|e| {
                e.stream == Stream::Ip
                    && e.event_type == EventType::SyncEnd
                    && e.resource_version_num >= Some(deleted)
            })
            .count()
            >= 2
    };
    let events = world.events_until(Duration::from_secs(60), done);
    assert!(done(&events), "log:\n{}", collector.log_text());
    let seen = ip_events(&events);
    for expected in [(EventType::Added, added), (EventType::Modified, modified)] {
        assert!(seen.contains(&expected), "{expected:?} in {seen:?}");
    }
    assert!(
        !events
            .iter()
            .any(|e| e.event_type == EventType::DeletedOnRelist),
        "the watch said what happened"
    );
    assert!(
        collector.counter("ipaudit_collector_relists_total{stream=\"ip\",reason=\"snapshot\"}")
            >= 2.0
    );
    assert_eq!(
        collector
            .counter("ipaudit_collector_relists_total{stream=\"ip\",reason=\"snapshot_fallback\"}"),
        0.0,
        "the real server lists at the watch's version: log:\n{}",
        collector.log_text()
    );
}

#[test]
fn an_api_server_restart_mid_watch_and_a_collector_restart_lose_no_change() {
    // A server of this test's own: its API server is restarted.
    let kube = KubeServer::start();
    let world = World::new("real-restarts", None);
    let setup = CollectorSetup {
        kubeconfig: &kube.kubeconfig,
        ..world.setup()
    };
    let collector = CollectorProcess::start(&setup, &[]);
    let key = |event_type: EventType, object: &serde_json::Value| -> EventKey {
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        (Stream::Ip, name, event_type, resource_version(object))
    };
    kube.create(&subnet("restarts-net", "10.78.0.0/24"));
    let a = kube.create(&ip("restarts-a.ns", "restarts-net", "10.78.0.2"));
    // The API server goes away in the middle of the watches and comes back. Its new watch
    // cache may no longer serve the version a watch resumes from (410): the collector then
    // relists, and what changed meanwhile arrives listed at its version.
    kube.restart_apiserver();
    let b = kube.create(&ip("restarts-b.ns", "restarts-net", "10.78.0.3"));
    let across_restart = [key(EventType::Added, &a), key(EventType::Added, &b)];
    // The collector goes away; the cluster changes meanwhile.
    let wait_for_b =
        |events: &[WatchEvent]| events.iter().any(|e| e.object_key() == "restarts-b.ns");
    world.events_until(Duration::from_secs(60), wait_for_b);
    collector.kill();
    let moved = kube.patch(
        "ips.kubeovn.io",
        "restarts-a.ns",
        &json!({"metadata": {"labels": {"moved": "yes"}}}),
    );
    let c = kube.create(&ip("restarts-c.ns", "restarts-net", "10.78.0.4"));
    kube.delete("ips.kubeovn.io", "restarts-b.ns");
    // Resumed from the stored versions, which the server still has: watch events.
    let while_down = [key(EventType::Modified, &moved), key(EventType::Added, &c)];
    let resumed = CollectorProcess::start(&setup, &[]);
    let done = |events: &[WatchEvent]| {
        let recorded: Vec<EventKey> = events.iter().map(event_key).collect();
        let watched = watch_event_counts(events);
        across_restart.iter().all(|e| recorded.contains(e))
            && while_down.iter().all(|e| watched.contains_key(e))
            && watched.keys().any(|(stream, name, t, _)| {
                *stream == Stream::Ip && *t == EventType::Deleted && name == "restarts-b.ns"
            })
    };
    let events = world.events_until(Duration::from_secs(60), done);
    assert!(
        done(&events),
        "recorded {across_restart:?}, watched {while_down:?} and the DELETED of restarts-b.ns; watched {:?}; log:\n{}",
        watch_event_counts(&events),
        resumed.log_text()
    );
    assert!(
        !events
            .iter()
            .any(|e| e.event_type == EventType::DeletedOnRelist),
        "the watches resumed where they stopped: nothing was relisted"
    );
    assert_eq!(
        resumed.counter("ipaudit_collector_relists_total{stream=\"ip\",reason=\"expired\"}"),
        0.0
    );
}

#[test]
fn a_watch_resumed_from_a_compacted_version_relists_and_records_what_was_deleted_meanwhile() {
    // Watches go to etcd, so that compaction expires a version at once (with the watch
    // cache, only its window does, about 75 s).
    let kube = KubeServer::start_with(&["--no-watch-cache"]);
    let world = World::new("real-expired", None);
    let setup = CollectorSetup {
        kubeconfig: &kube.kubeconfig,
        ..world.setup()
    };
    let collector = CollectorProcess::start(&setup, &[]);
    kube.create(&subnet("expired-net", "10.79.0.0/24"));
    kube.create(&ip("expired-kept.ns", "expired-net", "10.79.0.2"));
    kube.create(&ip("expired-gone.ns", "expired-net", "10.79.0.3"));
    world.events_until(Duration::from_secs(60), |events| {
        events.iter().any(|e| e.object_key() == "expired-gone.ns")
    });
    collector.kill();
    kube.delete("ips.kubeovn.io", "expired-gone.ns");
    let latest = resource_version(&kube.create(&ip("expired-new.ns", "expired-net", "10.79.0.4")));
    kube.compact(latest);

    let resumed = CollectorProcess::start(&setup, &[]);
    let done = |events: &[WatchEvent]| {
        events.iter().any(|e| {
            e.event_type == EventType::DeletedOnRelist && e.object_key() == "expired-gone.ns"
        }) && events.iter().any(|e| e.object_key() == "expired-new.ns")
    };
    let events = world.events_until(Duration::from_secs(60), done);
    assert!(done(&events), "log:\n{}", resumed.log_text());
    assert!(
        resumed.counter("ipaudit_collector_relists_total{stream=\"ip\",reason=\"expired\"}") >= 1.0,
        "{}",
        resumed.metrics()
    );
    assert!(
        !events.iter().any(|e| {
            e.event_type == EventType::DeletedOnRelist && e.object_key() == "expired-kept.ns"
        }),
        "only what was deleted is"
    );
}
