//! The collector against a real kube-apiserver on etcd (`scripts/kube`), end to end to a
//! real broker: what the simulated API server only imitates. Objects are written through
//! the API with kubectl; cluster-scoped names carry the test's own prefix, so that tests
//! share one server.

use std::collections::BTreeSet;
use std::time::Duration;

use ipaudit_schemas::{EventType, Stream, WatchEvent};
use ipaudit_tests::collector::{
    event_key, watch_event_counts, CollectorProcess, CollectorSetup, EventKey,
};
use ipaudit_tests::kube::{resource_version, KubeServer};
use ipaudit_tests::wait_for;
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

/// `kubectl get RESOURCE -A --watch-only -o json --output-watch-events`: the server's own
/// watch of the same objects, as a second client sees it, its output in `out`.
fn reference_watch(
    kube: &KubeServer,
    resource: &str,
    out: &std::path::Path,
) -> std::process::Child {
    std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kube.kubeconfig)
        .args([
            "get",
            resource,
            "-A",
            "--watch-only",
            "--output-watch-events",
            "-o",
            "json",
        ])
        .stdout(std::fs::File::create(out).expect("reference watch output"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl")
}

/// The changes a reference watch printed, as keys of `stream`.
fn reference_changes(out: &std::path::Path, stream: Stream) -> Vec<EventKey> {
    let text = std::fs::read_to_string(out).expect("reference watch output");
    serde_json::Deserializer::from_str(&text)
        .into_iter::<serde_json::Value>()
        .map_while(Result::ok)
        .map(|event| {
            let object = &event["object"];
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let key = match object["metadata"]["namespace"].as_str() {
                Some(namespace) => format!("{namespace}/{name}"),
                None => name.to_owned(),
            };
            let event_type = match event["type"].as_str() {
                Some("ADDED") => EventType::Added,
                Some("MODIFIED") => EventType::Modified,
                Some("DELETED") => EventType::Deleted,
                other => panic!("a watch event type: {other:?}"),
            };
            (stream, key, event_type, resource_version(object))
        })
        .collect()
}

#[test]
fn a_paged_list_a_crd_created_and_upgraded_around_the_watch_and_a_burst_reach_kafka_once_each_as_the_servers_own_watch_saw_them(
) {
    let kube = KubeServer::start();
    let world = World::new("real-burst", None);
    kube.create(&subnet("burst-net", "10.80.0.0/16"));
    // More IPs than three pages of the collector's list (500 a page).
    const IPS: usize = 1_100;
    let items: Vec<serde_json::Value> = (0..IPS)
        .map(|i| {
            let mut object = ip(
                &format!("burst-{i:04}.ns"),
                "burst-net",
                &format!("10.80.{}.{}", i / 250, i % 250 + 2),
            );
            let parity = if i % 4 == 0 { "gone" } else { "kept" };
            object["metadata"]["labels"]["fate"] = json!(parity);
            object
        })
        .collect();
    kube.kubectl(
        &["create", "-f", "-"],
        Some(&json!({"apiVersion": "v1", "kind": "List", "items": items})),
    );
    // A CRD created just before the collector starts: its storage may still be
    // initializing when the first watch comes (a 429 the watcher must wait out).
    let crd = ipaudit_tests::manifest_dir()
        .join("../scripts/kube-build/crds/spiderendpoints.spiderpool.spidernet.io.yaml");
    let crd = crd.to_str().expect("UTF-8 path");
    kube.kubectl(&["delete", "-f", crd], None);
    kube.kubectl(&["create", "-f", crd], None);
    kube.kubectl(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            crd,
        ],
        None,
    );
    let setup = CollectorSetup {
        kubeconfig: &kube.kubeconfig,
        ..world.setup()
    };
    let collector = CollectorProcess::start(&setup, &["--watch-timeout", "10s"]);

    // The initial list: every IP once, in pages.
    let listed = |events: &[WatchEvent]| -> Vec<String> {
        let mut in_list = false;
        let mut names = Vec::new();
        for e in events.iter().filter(|e| e.stream == Stream::Ip) {
            match e.event_type {
                EventType::SyncStart => in_list = true,
                EventType::SyncEnd => in_list = false,
                EventType::Added if in_list => names.push(e.object_key()),
                _ => {}
            }
        }
        names
    };
    let events = world.events_until(Duration::from_secs(60), |e| listed(e).len() >= IPS);
    let names = listed(&events);
    assert_eq!(names.len(), IPS, "{}", collector.log_text());
    assert_eq!(
        names.iter().collect::<BTreeSet<_>>().len(),
        IPS,
        "each listed once"
    );

    // The IPAM's CRD is upgraded while the collector watches (a printer column added): the
    // server rebuilds that resource's storage, ends its watches, and a watch opened in
    // the next moments may get 429 "storage is (re)initializing".
    kube.kubectl(
        &[
            "patch",
            "crd",
            "spiderendpoints.spiderpool.spidernet.io",
            "--type",
            "json",
            "-p",
            r#"[{"op":"add","path":"/spec/versions/0/additionalPrinterColumns","value":[{"name":"Node","type":"string","jsonPath":".status.current.node"}]}]"#,
        ],
        None,
    );
    // A burst through the API, watched by the server's own second client too.
    let dir = world.dir.path();
    let mut references = [
        (
            reference_watch(&kube, "ips.kubeovn.io", &dir.join("ips.json")),
            Stream::Ip,
            dir.join("ips.json"),
        ),
        (
            reference_watch(
                &kube,
                "spiderendpoints.spiderpool.spidernet.io",
                &dir.join("endpoints.json"),
            ),
            Stream::SpiderEndpoint,
            dir.join("endpoints.json"),
        ),
    ];
    std::thread::sleep(Duration::from_secs(2));
    kube.kubectl(
        &["label", "ips.kubeovn.io", "-l", "fate", "touched=yes"],
        None,
    );
    kube.kubectl(
        &[
            "delete",
            "ips.kubeovn.io",
            "-l",
            "fate=gone",
            "--wait=false",
        ],
        None,
    );
    let endpoints: Vec<serde_json::Value> = (0..50)
        .map(|i| {
            json!({"apiVersion": "spiderpool.spidernet.io/v2beta1", "kind": "SpiderEndpoint",
                "metadata": {"name": format!("pod-{i:02}"), "namespace": "default"},
                "status": {"current": {"uid": format!("uid-{i}"), "node": "worker-1", "ips": []}}})
        })
        .collect();
    kube.kubectl(
        &["create", "-f", "-"],
        Some(&json!({"apiVersion": "v1", "kind": "List", "items": endpoints})),
    );
    let expected_changes = IPS + IPS / 4 + 50;
    wait_for(
        "the reference watches saw every change",
        Duration::from_secs(60),
        || {
            let seen: usize = references
                .iter()
                .map(|(_, stream, out)| reference_changes(out, *stream).len())
                .sum();
            (seen >= expected_changes).then_some(())
        },
    );
    let mut expected: Vec<EventKey> = Vec::new();
    for (child, stream, out) in &mut references {
        let _ = child.kill();
        let _ = child.wait();
        expected.extend(reference_changes(out, *stream));
    }
    assert_eq!(expected.len(), expected_changes);

    let done = |events: &[WatchEvent]| {
        let watched = watch_event_counts(events);
        expected.iter().all(|key| watched.contains_key(key))
    };
    let events = world.events_until(Duration::from_secs(90), done);
    let watched = watch_event_counts(&events);
    let missing: Vec<&EventKey> = expected
        .iter()
        .filter(|k| !watched.contains_key(k))
        .collect();
    assert!(
        missing.is_empty(),
        "missing {missing:?}; log:\n{}",
        collector.log_text()
    );
    let twice: Vec<(&EventKey, &usize)> = watched.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "each change once: {twice:?}");
    let extra: Vec<&EventKey> = watched
        .keys()
        .filter(|(stream, name, _, _)| {
            (*stream == Stream::Ip && name.starts_with("burst-"))
                || *stream == Stream::SpiderEndpoint
        })
        .filter(|k| !expected.contains(k))
        .collect();
    assert!(extra.is_empty(), "nothing the server did not do: {extra:?}");

    // Bookmarks: the server sends one before each 10 s watch request ends.
    let bookmarks = world.events_until(Duration::from_secs(30), |events| {
        events
            .iter()
            .any(|e| e.stream == Stream::Ip && e.event_type == EventType::Bookmark)
    });
    assert!(
        bookmarks
            .iter()
            .any(|e| e.stream == Stream::Ip && e.event_type == EventType::Bookmark),
        "a bookmark of the IP stream"
    );
}
