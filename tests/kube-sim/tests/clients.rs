//! Real clients against the simulated API server: kubectl, and the semantics a controller
//! relies on (finalizers, JSON patch preconditions, 410 for expired watches).

use std::process::Command;

use kube_sim::{Kind, KubeSim, SimConfig};
use serde_json::{json, Value};

fn kubectl(sim: &KubeSim, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .args(["--server", &sim.url()])
        .args(args)
        .output()
        .expect("kubectl is installed");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ip(name: &str) -> Value {
    json!({"metadata": {"name": name, "finalizers": ["kubeovn.io/kube-ovn-controller"]},
        "spec": {"subnet": "net-1", "ipAddress": "10.0.0.5"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_lists_gets_patches_and_deletes_ips() {
    let sim = KubeSim::start(SimConfig::default()).await.unwrap();
    sim.create(Kind::Ip, "", ip("vm-1.ns")).unwrap();
    let sim = std::sync::Arc::new(sim);
    let s = sim.clone();
    tokio::task::spawn_blocking(move || {
        let (ok, out, err) = kubectl(&s, &["get", "ips", "-o", "json"]);
        assert!(ok, "{err}");
        let list: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(list["items"][0]["metadata"]["name"], "vm-1.ns");
        let (ok, _, err) = kubectl(&s, &["delete", "ip", "vm-1.ns", "--wait=false"]);
        assert!(ok, "{err}");
        let (ok, out, _) = kubectl(&s, &["get", "ip", "vm-1.ns", "-o", "json"]);
        assert!(ok);
        let marked: Value = serde_json::from_str(&out).unwrap();
        assert!(marked["metadata"]["deletionTimestamp"].is_string(), "finalizer keeps it");
        let stale = r#"[{"op":"test","path":"/metadata/resourceVersion","value":"1"},{"op":"remove","path":"/metadata/finalizers/0"}]"#;
        let (ok, _, err) = kubectl(&s, &["patch", "ip", "vm-1.ns", "--type=json", "-p", stale]);
        assert!(!ok && err.contains("could not be applied"), "a stale precondition is refused: {err}");
        let rv = marked["metadata"]["resourceVersion"].as_str().unwrap();
        let fresh = format!(
            r#"[{{"op":"test","path":"/metadata/resourceVersion","value":"{rv}"}},{{"op":"remove","path":"/metadata/finalizers/0"}}]"#
        );
        let (ok, _, err) = kubectl(&s, &["patch", "ip", "vm-1.ns", "--type=json", "-p", &fresh]);
        assert!(ok, "{err}");
        let (ok, _, err) = kubectl(&s, &["get", "ip", "vm-1.ns"]);
        assert!(!ok && err.contains("not found"), "gone once the last finalizer is removed: {err}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_watch_prints_every_change_as_a_watch_event() {
    let sim = std::sync::Arc::new(KubeSim::start(SimConfig::default()).await.unwrap());
    sim.create(Kind::Ip, "", ip("a.ns")).unwrap();
    let url = sim.url();
    let watcher = tokio::task::spawn_blocking(move || {
        Command::new("timeout")
            .args([
                "3",
                "kubectl",
                "--server",
                &url,
                "get",
                "ips",
                "-w",
                "-o",
                "json",
                "--output-watch-events",
            ])
            .output()
            .expect("kubectl")
    });
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
    sim.delete(Kind::Ip, "", "a.ns").unwrap();
    sim.remove_finalizers(Kind::Ip, "", "a.ns").unwrap();
    let out = watcher.await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let types: Vec<String> = serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .map(|d| d.unwrap()["type"].as_str().unwrap().to_owned())
        .collect();
    // Removing the last finalizer of a terminating object deletes it: no MODIFIED between.
    assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"], "{text}");
}

#[tokio::test]
async fn watching_from_an_expired_version_gets_an_in_stream_410() {
    let sim = KubeSim::start(SimConfig {
        history_window: 1,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    sim.create(Kind::Ip, "", ip("a.ns")).unwrap();
    sim.create(Kind::Ip, "", ip("b.ns")).unwrap();
    let addr = sim.addr();
    let body = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        write!(
            stream,
            "GET /apis/kubeovn.io/v1/ips?watch=true&resourceVersion=1000 HTTP/1.0\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(response.starts_with("HTTP/1.0 200"), "{response}");
        response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default()
    })
    .await
    .unwrap();
    let event: Value = serde_json::from_str(body.lines().next().unwrap_or("{}")).unwrap();
    assert_eq!(event["type"], "ERROR");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["reason"], "Expired");
}

/// Pods and whereabouts' kinds only: a cluster where whereabouts is the only IPAM.
fn whereabouts_only() -> SimConfig {
    SimConfig::serving(&[Kind::Pod, Kind::IpPool, Kind::OverlappingRangeIpReservation])
}

fn ip_pool(allocations: Value) -> Value {
    json!({"metadata": {"name": "10.128.40.0-24"},
        "spec": {"range": "10.128.40.0/24", "allocations": allocations}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_on_a_whereabouts_only_cluster_sees_and_patches_only_whereabouts_kinds() {
    let sim = KubeSim::start(whereabouts_only()).await.unwrap();
    let pool = sim
        .create(
            Kind::IpPool,
            "kube-system",
            ip_pool(json!({"47": {"id": "c-47", "podref": "default/web-2", "ifname": "net1"}})),
        )
        .unwrap();
    assert_eq!(pool["apiVersion"], "whereabouts.cni.cncf.io/v1alpha1");
    assert_eq!(pool["metadata"]["namespace"], "kube-system");
    assert_eq!(
        sim.create(Kind::Ip, "", ip("vm-1.ns")).unwrap_err().code,
        404,
        "kube-ovn's IP is not served"
    );
    let sim = std::sync::Arc::new(sim);
    let s = sim.clone();
    tokio::task::spawn_blocking(move || {
        let (ok, out, err) = kubectl(&s, &["api-resources", "-o", "name"]);
        assert!(ok, "{err}");
        let mut names: Vec<&str> = out.lines().collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "ippools.whereabouts.cni.cncf.io",
                "overlappingrangeipreservations.whereabouts.cni.cncf.io",
                "pods"
            ]
        );
        let (ok, _, err) = kubectl(&s, &["get", "ips"]);
        assert!(!ok && err.contains("the server doesn't have a resource type"), "{err}");
        let (ok, out, err) = kubectl(&s, &["get", "ippools", "-n", "kube-system", "-o", "json"]);
        assert!(ok, "{err}");
        let list: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(list["items"][0]["spec"]["allocations"]["47"]["podref"], "default/web-2");
        let (ok, out, err) = kubectl(&s, &["get", "ippools", "-A", "-o", "json"]);
        assert!(ok, "{err}");
        assert!(out.contains("10.128.40.0-24"), "listed across namespaces");
        // whereabouts' reconciler: test the version it read, then remove the allocation.
        let rv = list["items"][0]["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
        let release = |rv: &str| {
            format!(
                r#"[{{"op":"test","path":"/metadata/resourceVersion","value":"{rv}"}},{{"op":"remove","path":"/spec/allocations/47"}}]"#
            )
        };
        let args = |p: &str| {
            ["patch", "ippools.whereabouts.cni.cncf.io", "10.128.40.0-24", "-n", "kube-system", "--type=json", "-p"]
                .iter()
                .map(|a| (*a).to_owned())
                .chain([p.to_owned()])
                .collect::<Vec<String>>()
        };
        let stale = args(&release("1"));
        let (ok, _, err) = kubectl(&s, &stale.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(!ok && err.contains("could not be applied"), "{err}");
        let fresh = args(&release(&rv));
        let (ok, _, err) = kubectl(&s, &fresh.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(ok, "{err}");
    })
    .await
    .unwrap();
    let pool = sim
        .get(Kind::IpPool, "kube-system", "10.128.40.0-24")
        .unwrap();
    assert_eq!(pool["spec"]["allocations"], json!({}));
}

#[tokio::test]
async fn kube_rs_discovers_lists_and_watches_only_the_served_kinds() {
    use futures::StreamExt as _;
    use kube::api::{Api, DynamicObject, ListParams, WatchEvent, WatchParams};
    use kube::discovery::Discovery;

    let sim = KubeSim::start(SimConfig {
        bookmark_interval: std::time::Duration::from_millis(100),
        ..SimConfig::serving(&[Kind::Pod, Kind::SpiderIpPool, Kind::SpiderEndpoint])
    })
    .await
    .unwrap();
    let config = kube::Config::new(sim.url().parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let mut groups: Vec<&str> = discovery.groups().map(|g| g.name()).collect();
    groups.sort_unstable();
    assert_eq!(groups, ["", "spiderpool.spidernet.io"]);
    let not_served = client.list_api_group_resources("kubeovn.io/v1").await;
    assert!(
        matches!(&not_served, Err(kube::Error::Api(s)) if s.code == 404),
        "{not_served:?}"
    );
    let (pools, caps) = discovery
        .get("spiderpool.spidernet.io")
        .and_then(|g| {
            g.recommended_resources()
                .into_iter()
                .find(|(r, _)| r.plural == "spiderippools")
        })
        .expect("spiderippools discovered");
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);
    sim.create(
        Kind::SpiderIpPool,
        "",
        json!({"metadata": {"name": "pool-a", "finalizers": ["spiderpool.spidernet.io"]},
            "spec": {"subnet": "172.18.0.0/16", "ips": ["172.18.40.10-172.18.40.20"]}}),
    )
    .unwrap();
    let api: Api<DynamicObject> = Api::all_with(client, &pools);
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let rv = list.metadata.resource_version.unwrap();
    let events = api.watch(&WatchParams::default(), &rv).await.unwrap();
    let mut events = std::pin::pin!(events);
    sim.delete(Kind::SpiderIpPool, "", "pool-a").unwrap();
    let (mut modified, mut bookmarks) = (false, 0);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while !(modified && bookmarks > 0) {
        let event = tokio::time::timeout_at(deadline, events.next())
            .await
            .expect("a MODIFIED and a BOOKMARK within 5s");
        match event {
            Some(Ok(WatchEvent::Modified(o))) => {
                assert!(
                    o.metadata.deletion_timestamp.is_some(),
                    "the finalizer keeps it"
                );
                modified = true;
            }
            Some(Ok(WatchEvent::Bookmark(b))) => {
                assert!(!b.metadata.resource_version.is_empty());
                bookmarks += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_system_names_the_cluster_and_a_delete_honours_its_preconditions() {
    let sim = KubeSim::start(SimConfig {
        cluster_uid: "cluster-b".into(),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let created = sim.create(Kind::Ip, "", ip("a.ns")).unwrap();
    let uid = created["metadata"]["uid"].as_str().unwrap().to_owned();
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let config = kube::Config::new(sim.url().parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    let kube_system = namespaces.get("kube-system").await.unwrap();
    assert_eq!(kube_system.metadata.uid.as_deref(), Some("cluster-b"));
    assert!(namespaces.get("default").await.is_err());

    let resource = kube::discovery::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("kubeovn.io", "v1", "IP"),
        "ips",
    );
    let ips: kube::Api<kube::core::DynamicObject> = kube::Api::all_with(client, &resource);
    let delete = |uid: &str, rv: &str| kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: Some(rv.to_owned()),
        }),
        ..kube::api::DeleteParams::default()
    };
    for (wrong_uid, wrong_rv) in [("other-uid", rv.as_str()), (uid.as_str(), "1")] {
        match ips.delete("a.ns", &delete(wrong_uid, wrong_rv)).await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 409, "{status:?}"),
            other => panic!("a failed precondition must be 409: {other:?}"),
        }
    }
    assert!(sim.get(Kind::Ip, "", "a.ns").unwrap()["metadata"]["deletionTimestamp"].is_null());
    ips.delete("a.ns", &delete(&uid, &rv)).await.unwrap();
    let marked = sim.get(Kind::Ip, "", "a.ns").unwrap();
    assert!(
        marked["metadata"]["deletionTimestamp"].is_string(),
        "its finalizer keeps it, terminating"
    );
}
