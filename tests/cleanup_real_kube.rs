//! Cleanup against a real kube-apiserver on etcd (`scripts/kube`), on a server of each
//! test's own (a check and an analysis read the whole cluster): `kubectl ipaudit check` and
//! `release --apply`, and the whole pipeline (collector, Kafka, analyzer, cleanup command,
//! the collector's remediator), so that the patches with their `test` operations and the
//! preconditions meet the real server's validation, not the simulator's.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ipaudit_schemas::{EventType, RemediationOutcome, WatchEvent};
use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::collector::{workspace_binary, CollectorSetup};
use ipaudit_tests::kube::KubeServer;
use ipaudit_tests::receiver::Receiver;
use ipaudit_tests::wait_for;
use ipaudit_tests::world::World;
use serde_json::{json, Value};

const FINALIZER: &str = "kubeovn.io/kube-ovn-controller";

/// A kube-ovn IP of pod `default/<pod>` on `subnet`, with kube-ovn's finalizer.
fn ip(pod: &str, subnet: &str, address: &str) -> Value {
    json!({"apiVersion": "kubeovn.io/v1", "kind": "IP",
        "metadata": {"name": format!("{pod}.default"), "finalizers": [FINALIZER],
            "labels": {"ovn.kubernetes.io/subnet": subnet}},
        "spec": {"podName": pod, "namespace": "default", "subnet": subnet,
            "ipAddress": address, "v4IpAddress": address, "podType": ""}})
}

/// `kubectl-ipaudit ARGS` against the server: exit code and stdout.
fn plugin(kube: &KubeServer, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(workspace_binary("kubectl-ipaudit"))
        .arg("--kubeconfig")
        .arg(&kube.kubeconfig)
        .args(args)
        .output()
        .expect("kubectl-ipaudit runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn exists(kube: &KubeServer, name: &str) -> bool {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kube.kubeconfig)
        .args(["get", "ips.kubeovn.io", name])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn release(kube: &KubeServer, dir: &Path, report: &Path) -> (Option<i32>, String, String) {
    let log = dir.join("release.log");
    plugin(
        kube,
        &[
            "release",
            "--from-report",
            report.to_str().unwrap(),
            "--log-file",
            log.to_str().unwrap(),
            "--rate",
            "50/s",
            "--apply",
        ],
    )
}

#[test]
fn release_on_a_real_server_frees_a_stuck_ip_and_skips_one_changed_since_the_report() {
    let kube = KubeServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    // Two IPs terminating on kube-ovn's finalizer, their subnets absent: stuck for good.
    for (pod, address) in [("stuck-a", "10.18.0.5"), ("stuck-b", "10.18.0.6")] {
        kube.create(&ip(pod, &format!("gone-{pod}"), address));
        kube.delete("ips.kubeovn.io", &format!("{pod}.default"));
    }
    let report = dir.path().join("report.json");
    let (code, out, err) = plugin(&kube, &["check", "-o", report.to_str().unwrap()]);
    assert_eq!(code, Some(1), "leaks found:\n{out}{err}");
    // stuck-b changes after the report: its release must not act on the old version.
    kube.patch(
        "ips.kubeovn.io",
        "stuck-b.default",
        &json!({"metadata": {"labels": {"touched": "yes"}}}),
    );
    let (code, out, err) = release(&kube, dir.path(), &report);
    assert_eq!(code, Some(0), "{out}{err}");
    let line = |name: &str| {
        out.lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no line about {name}:\n{out}"))
            .to_owned()
    };
    assert!(line("stuck-a.default").starts_with("applied"), "{out}");
    let skipped = line("stuck-b.default");
    assert!(
        skipped.starts_with("skipped") && skipped.contains("resourceVersion changed"),
        "{out}"
    );
    assert!(
        !exists(&kube, "stuck-a.default"),
        "the real server deleted the IP once its finalizer was removed"
    );
    assert!(
        exists(&kube, "stuck-b.default"),
        "the changed IP is untouched"
    );
}

#[test]
fn a_cleanup_command_frees_the_stuck_ip_on_a_real_server_and_its_alert_resolves() {
    let kube = KubeServer::start();
    let world = World::new("real-remediate", None);
    let receiver = Receiver::start(&world.runtime);
    let commands = world.commands_topic();
    let setup = CollectorSetup {
        kubeconfig: &kube.kubeconfig,
        ..world.setup()
    };
    let collector = world.remediating_collector_on(&setup, "on", &[]);
    let analyzer = AnalyzerProcess::start(
        &world.brokers,
        &world.topic,
        &format!("analyzer-{commands}"),
        &world.dir.path().join("analyzer"),
        &[
            "--webhook-url",
            &format!("{}/hook", receiver.url),
            "--cleanup-commands",
            "--commands-topic",
            &commands,
        ],
    );
    analyzer.wait_joined(Duration::from_secs(30));
    // The seed incident, played through the API: the subnet goes while its IP names it,
    // then the IP is deleted and stays on kube-ovn's finalizer.
    kube.create(&json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
        "metadata": {"name": "seed-net"},
        "spec": {"cidrBlock": "10.19.0.0/24", "protocol": "IPv4", "provider": "ovn"}}));
    kube.create(&ip("vm-1", "seed-net", "10.19.0.5"));
    kube.delete("subnets.kubeovn.io", "seed-net");
    kube.delete("ips.kubeovn.io", "vm-1.default");
    wait_for("the stuck IP is gone", Duration::from_secs(60), || {
        (!exists(&kube, "vm-1.default")).then_some(())
    });
    wait_for(
        "the stuck-IP alert resolves",
        Duration::from_secs(30),
        || {
            receiver.received("/hook").into_iter().find(|r| {
                r.body["rule"] == "ip-stuck-terminating" && r.body["status"] == "RESOLVED"
            })
        },
    );
    // The collector's record of the cleanup is on the events topic: applied, on that IP.
    let applied = |events: &[WatchEvent]| {
        events.iter().any(|e| {
            e.event_type == EventType::Remediation
                && e.object_key() == "vm-1.default"
                && e.remediation
                    .as_ref()
                    .is_some_and(|r| r.outcome == RemediationOutcome::Applied)
        })
    };
    let events = world.events_until(Duration::from_secs(30), applied);
    assert!(applied(&events), "{}", collector.log_text());
    analyzer.assert_no_new_epoch();
}
