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
