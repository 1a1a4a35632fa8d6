//! `kubectl ipaudit` against the simulated API server: the one-shot check finds exactly the
//! leaks of a cluster (an IP whose subnet is absent, a terminating IP whose subnet is
//! absent) and not its healthy subnet, by itself and through kubectl's plugin discovery;
//! `release --from-report` lists them in a dry run, fixes them with `--apply`, skips an
//! object changed after the report, and refuses a report of another cluster or too old.

use std::path::{Path, PathBuf};
use std::process::Command;

use ipaudit_tests::collector::workspace_binary;
use ipaudit_tests::plugin::{path_with_the_plugin, Plugin, Run};
use kube_sim::{Kind, KubeSim, SimConfig};
use serde_json::{json, Value};

const FINALIZER: &str = "kubeovn.io/kube-ovn-controller";

/// A running simulated cluster, its kubeconfig, and a scratch directory.
struct Cluster {
    sim: KubeSim,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    _runtime: tokio::runtime::Runtime,
}

impl Cluster {
    fn start(uid: &str) -> Cluster {
        let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
        let sim = runtime
            .block_on(KubeSim::start(SimConfig {
                cluster_uid: uid.into(),
                ..SimConfig::default()
            }))
            .expect("kube-sim starts");
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        Cluster {
            sim,
            dir,
            kubeconfig,
            _runtime: runtime,
        }
    }

    /// A healthy subnet with two IPs and their pods, an IP whose subnet is absent, and a
    /// terminating IP whose subnet is absent.
    fn with_two_leaks(uid: &str) -> Cluster {
        let cluster = Cluster::start(uid);
        let sim = &cluster.sim;
        sim.create(Kind::Subnet, "", subnet("net-1")).unwrap();
        for (pod_name, address) in [("web-1", "10.16.0.11"), ("web-2", "10.16.0.12")] {
            sim.create(Kind::Pod, "default", pod(pod_name, address))
                .unwrap();
            sim.create(Kind::Ip, "", ip(pod_name, "net-1", address))
                .unwrap();
        }
        sim.create(Kind::Ip, "", ip("orphan", "gone-1", "10.17.0.5"))
            .unwrap();
        sim.create(Kind::Ip, "", ip("stuck", "gone-2", "10.18.0.5"))
            .unwrap();
        sim.delete(Kind::Ip, "", "stuck.default").unwrap();
        cluster
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Runs `kubectl-ipaudit ARGS` with this cluster's kubeconfig.
    fn plugin(&self, args: &[&str]) -> Run {
        self.runner().run(args)
    }

    fn runner(&self) -> Plugin {
        Plugin::new(&self.kubeconfig, self.dir.path())
    }

    fn exists(&self, name: &str) -> bool {
        self.sim.get(Kind::Ip, "", name).is_ok()
    }
}

fn subnet(name: &str) -> Value {
    json!({"metadata": {"name": name, "finalizers": [FINALIZER]},
        "spec": {"cidrBlock": "10.16.0.0/16", "provider": "ovn", "protocol": "IPv4"}})
}

fn ip(pod: &str, subnet: &str, address: &str) -> Value {
    json!({"metadata": {"name": format!("{pod}.default"), "finalizers": [FINALIZER],
            "labels": {"ovn.kubernetes.io/subnet": subnet}},
        "spec": {"podName": pod, "namespace": "default", "subnet": subnet,
            "ipAddress": address, "v4IpAddress": address, "podType": ""}})
}

fn pod(name: &str, address: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "default",
            "annotations": {"ovn.kubernetes.io/allocated": "true",
                "ovn.kubernetes.io/ip_address": address,
                "ovn.kubernetes.io/logical_switch": "net-1"}},
        "status": {"phase": "Running", "podIP": address, "podIPs": [{"ip": address}]}})
}

fn the_two_leaks() -> Vec<(String, String)> {
    vec![
        ("ip-orphaned".into(), "orphan.default".into()),
        ("ip-stuck-terminating".into(), "stuck.default".into()),
    ]
}

fn report_of(cluster: &Cluster) -> PathBuf {
    let report = cluster.path("report.json");
    let run = cluster.plugin(&["check", "-o", report.to_str().unwrap()]);
    assert_eq!(run.code, Some(1), "{run}");
    report
}

fn check_without_grace(cluster: &Cluster) -> (PathBuf, Run) {
    cluster.runner().check_without_grace()
}

fn release(cluster: &Cluster, report: &Path, extra: &[&str]) -> Run {
    cluster.runner().release(report, extra)
}

#[test]
fn check_reports_exactly_the_ip_of_an_absent_subnet_and_the_stuck_terminating_one() {
    let cluster = Cluster::with_two_leaks("cluster-a");
    let history = cluster.sim.journal().len();
    let run = cluster.plugin(&["check", "--format", "jsonl"]);
    assert_eq!(run.code, Some(1), "findings exit 1: {run}");
    assert_eq!(run.alerts(), the_two_leaks(), "{run}");
    // One object per page: every list is followed through its continue tokens.
    let paged = cluster.plugin(&["check", "--format", "jsonl", "--page-size", "1"]);
    assert_eq!(paged.alerts(), the_two_leaks(), "{paged}");
    assert_eq!(
        cluster.sim.journal().len(),
        history,
        "check is read-only: the cluster has no new change"
    );

    let text = cluster.plugin(&["check"]);
    assert_eq!(text.code, Some(1), "{text}");
    assert!(
        text.stdout.contains("2 alert(s): 2 firing")
            && text.stdout.contains("kube-system uid cluster-a")
            && text
                .stdout
                .contains("listed ips.kubeovn.io/v1 at resourceVersion"),
        "{text}"
    );
}

#[test]
fn check_of_a_healthy_cluster_exits_0() {
    let cluster = Cluster::start("healthy");
    cluster
        .sim
        .create(Kind::Subnet, "", subnet("net-1"))
        .unwrap();
    cluster
        .sim
        .create(Kind::Pod, "default", pod("web-1", "10.16.0.11"))
        .unwrap();
    cluster
        .sim
        .create(Kind::Ip, "", ip("web-1", "net-1", "10.16.0.11"))
        .unwrap();
    let run = cluster.plugin(&["check"]);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains("No leak found."), "{run}");
}

#[test]
fn check_without_a_reachable_cluster_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        &kubeconfig,
        kube_sim::kubeconfig(&format!("http://127.0.0.1:{port}")),
    )
    .unwrap();
    let mut command = Command::new(workspace_binary("kubectl-ipaudit"));
    command.arg("--kubeconfig").arg(&kubeconfig).arg("check");
    let run = Run::of(command);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("error:"), "{run}");
}

#[test]
fn kubectl_finds_the_plugin_on_path_and_runs_check() {
    // Plugin discovery is kubectl's: without it the test proves nothing, so it fails.
    assert!(
        Command::new("kubectl")
            .arg("version")
            .arg("--client")
            .output()
            .is_ok(),
        "kubectl is not on PATH: scripts/test puts the one scripts/kube builds there \
         (PATH=\"$(scripts/kube path):$PATH\")"
    );
    let cluster = Cluster::with_two_leaks("cluster-a");
    let run = cluster
        .runner()
        .run_through_kubectl(&["check", "--format", "jsonl"]);
    assert_eq!(run.code, Some(1), "{run}");
    assert_eq!(run.alerts(), the_two_leaks(), "{run}");

    let mut list = Command::new("kubectl");
    list.env("PATH", path_with_the_plugin())
        .args(["plugin", "list"]);
    let listed = Run::of(list);
    assert!(listed.stdout.contains("kubectl-ipaudit"), "{listed}");
}

#[test]
fn release_dry_run_lists_both_and_changes_nothing_then_apply_fixes_them() {
    let cluster = Cluster::with_two_leaks("cluster-a");
    let report = report_of(&cluster);
    let before: Vec<Value> = cluster.sim.list(Kind::Ip);

    let dry = release(&cluster, &report, &[]);
    assert_eq!(dry.code, Some(0), "{dry}");
    assert!(
        dry.line_about("IP orphan.default").starts_with("dry-run"),
        "{dry}"
    );
    assert!(
        dry.line_about("IP stuck.default").starts_with("dry-run"),
        "{dry}"
    );
    assert_eq!(
        cluster.sim.list(Kind::Ip),
        before,
        "a dry run changes nothing"
    );

    let applied = release(&cluster, &report, &["--apply"]);
    assert_eq!(applied.code, Some(0), "{applied}");
    assert!(
        applied
            .line_about("IP orphan.default")
            .starts_with("applied"),
        "{applied}"
    );
    assert!(
        applied
            .line_about("IP stuck.default")
            .starts_with("applied"),
        "{applied}"
    );
    assert!(
        !cluster.exists("orphan.default"),
        "the orphaned IP is deleted"
    );
    assert!(
        !cluster.exists("stuck.default"),
        "the stuck IP's finalizer is removed, so it is gone"
    );
    for healthy in ["web-1.default", "web-2.default"] {
        assert!(cluster.exists(healthy), "{healthy} is untouched");
    }
    assert!(cluster.sim.get(Kind::Subnet, "", "net-1").is_ok());

    let log = std::fs::read_to_string(cluster.path("release.log")).unwrap();
    let outcomes: Vec<(String, String)> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| {
            (
                v["mode"].as_str().unwrap().to_owned(),
                v["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("dry-run", "dry-run"),
            ("dry-run", "dry-run"),
            ("apply", "applied"),
            ("apply", "applied")
        ]
        .map(|(m, o)| (m.to_owned(), o.to_owned())),
        "every outcome is logged: {log}"
    );

    let after = cluster.plugin(&["check"]);
    assert_eq!(after.code, Some(0), "the cluster is clean: {after}");
}

#[test]
fn release_skips_an_object_changed_after_the_report_with_its_reason() {
    let cluster = Cluster::with_two_leaks("cluster-a");
    let report = report_of(&cluster);
    cluster
        .sim
        .update(Kind::Ip, "", "orphan.default", |o| {
            o["metadata"]["labels"]["touched"] = json!("yes");
        })
        .unwrap();
    let run = release(&cluster, &report, &["--apply"]);
    assert_eq!(run.code, Some(0), "{run}");
    let line = run.line_about("IP orphan.default");
    assert!(
        line.starts_with("skipped") && line.contains("resourceVersion changed"),
        "{run}"
    );
    assert!(
        cluster.exists("orphan.default"),
        "the changed IP is untouched"
    );
    assert!(
        !cluster.exists("stuck.default"),
        "the unchanged one is fixed"
    );
}

#[test]
fn release_refuses_a_report_of_another_cluster_or_too_old() {
    let cluster = Cluster::with_two_leaks("cluster-a");
    let report = report_of(&cluster);
    let other = Cluster::with_two_leaks("cluster-b");
    let run = release(&other, &report, &["--apply"]);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(
        run.stderr.contains("refused")
            && run.stderr.contains("cluster-a")
            && run.stderr.contains("cluster-b"),
        "{run}"
    );
    assert!(other.exists("orphan.default") && other.exists("stuck.default"));

    std::thread::sleep(std::time::Duration::from_millis(20));
    let old = release(&cluster, &report, &["--apply", "--max-report-age", "10ms"]);
    assert_eq!(old.code, Some(2), "{old}");
    assert!(old.stderr.contains("--max-report-age"), "{old}");
    assert!(cluster.exists("orphan.default") && cluster.exists("stuck.default"));
}

#[test]
fn release_removes_a_whereabouts_allocation_whose_pod_is_gone_and_keeps_the_live_one() {
    let cluster = Cluster::start("cluster-w");
    let sim = &cluster.sim;
    sim.create(Kind::Pod, "default", pod("web-1", "10.128.40.6"))
        .unwrap();
    sim.create(
        Kind::IpPool,
        "kube-system",
        json!({"metadata": {"name": "10.128.40.0-24"},
            "spec": {"range": "10.128.40.0/24", "allocations": {
                "5": {"id": "c-5", "podref": "default/gone-pod", "ifname": "net1"},
                "6": {"id": "c-6", "podref": "default/web-1", "ifname": "net1"}}}}),
    )
    .unwrap();
    // The pool was just created: with no grace, its allocation of a pod absent from the
    // complete list of pods is a leak now.
    let (report, run) = check_without_grace(&cluster);
    assert_eq!(
        run.alerts(),
        [(
            "ip-without-pod".to_owned(),
            "kube-system/10.128.40.0-24/10.128.40.5".to_owned()
        )],
        "{run}"
    );

    let dry = release(&cluster, &report, &[]);
    assert!(
        dry.line_about("10.128.40.5").starts_with("dry-run"),
        "{dry}"
    );
    let applied = release(&cluster, &report, &["--apply"]);
    assert_eq!(applied.code, Some(0), "{applied}");
    assert!(
        applied.line_about("10.128.40.5").starts_with("applied"),
        "{applied}"
    );
    let pool = sim
        .get(Kind::IpPool, "kube-system", "10.128.40.0-24")
        .unwrap();
    let allocations = pool["spec"]["allocations"].as_object().unwrap();
    assert_eq!(
        allocations.keys().collect::<Vec<_>>(),
        ["6"],
        "only the gone pod's allocation is removed: {pool}"
    );
}

#[test]
fn a_dry_run_of_a_whereabouts_allocation_and_its_reservation_shows_the_plan_the_apply_carries_out()
{
    let cluster = Cluster::start("cluster-wr");
    let sim = &cluster.sim;
    // The reservation first in the cluster, so that the report lists it first too.
    sim.create(
        Kind::OverlappingRangeIpReservation,
        "kube-system",
        json!({"metadata": {"name": "10.128.40.5"},
            "spec": {"podref": "default/gone-pod", "containerid": "c-5", "ifname": "net1"}}),
    )
    .unwrap();
    sim.create(
        Kind::IpPool,
        "kube-system",
        json!({"metadata": {"name": "10.128.40.0-24"},
            "spec": {"range": "10.128.40.0/24", "allocations": {
                "5": {"id": "c-5", "podref": "default/gone-pod", "ifname": "net1"}}}}),
    )
    .unwrap();
    let (report, run) = check_without_grace(&cluster);
    assert_eq!(run.alerts().len(), 2, "{run}");

    let dry = release(&cluster, &report, &[]);
    assert_eq!(dry.code, Some(0), "the apply would succeed: {dry}");
    let planned: Vec<&str> = dry
        .stdout
        .lines()
        .filter(|l| l.starts_with("dry-run"))
        .collect();
    assert_eq!(planned.len(), 2, "{dry}");
    assert!(
        planned[0].contains("remove-allocation") && planned[1].contains("delete"),
        "the allocation goes first, then its reservation: {dry}"
    );
    assert!(sim
        .get(
            Kind::OverlappingRangeIpReservation,
            "kube-system",
            "10.128.40.5"
        )
        .is_ok());

    let applied = release(&cluster, &report, &["--apply"]);
    assert_eq!(applied.code, Some(0), "{applied}");
    assert!(sim
        .get(
            Kind::OverlappingRangeIpReservation,
            "kube-system",
            "10.128.40.5"
        )
        .is_err());
}

#[test]
fn release_removes_a_spiderpool_entry_and_releases_a_stuck_endpoint_of_a_gone_pod_through_the_collectors_cleanups(
) {
    let cluster = Cluster::start("cluster-s");
    let sim = &cluster.sim;
    sim.create(Kind::Pod, "default", pod("api", "10.16.0.9"))
        .unwrap();
    let api_uid = sim.get(Kind::Pod, "default", "api").unwrap()["metadata"]["uid"].clone();
    let entries = json!({
        "172.18.40.10": {"pod": "default/gone", "podUid": "uid-gone"},
        "172.18.40.11": {"pod": "default/api", "podUid": api_uid},
    });
    sim.create(
        Kind::SpiderIpPool,
        "",
        json!({"metadata": {"name": "pool-a"},
            "spec": {"subnet": "172.18.0.0/16", "ips": ["172.18.40.10-172.18.40.20"]},
            "status": {"allocatedIPCount": 2, "allocatedIPs": entries.to_string()}}),
    )
    .unwrap();
    sim.create(
        Kind::SpiderEndpoint,
        "default",
        json!({"metadata": {"name": "gone", "finalizers": ["spiderpool.spidernet.io"]},
            "status": {"current": {"uid": "uid-gone", "node": "worker-1", "ips": [{
                "interface": "net1", "ipv4": "172.18.40.10/16", "ipv4Pool": "pool-a", "vlan": 0}]}}}),
    )
    .unwrap();
    sim.delete(Kind::SpiderEndpoint, "default", "gone").unwrap();
    let (report, run) = check_without_grace(&cluster);
    let alerts = run.alerts();
    for expected in [
        ("ip-without-pod", "pool-a/172.18.40.10"),
        ("ip-stuck-terminating", "default/gone"),
    ] {
        assert!(
            alerts.contains(&(expected.0.to_owned(), expected.1.to_owned())),
            "{expected:?} in {alerts:?}"
        );
    }
    let applied = release(&cluster, &report, &["--apply"]);
    assert_eq!(applied.code, Some(0), "{applied}");
    assert!(
        applied
            .line_about("pool-a")
            .starts_with("applied     remove-allocation"),
        "{applied}"
    );
    assert!(
        applied
            .line_about("SpiderEndpoint default/gone")
            .starts_with("applied     remove-finalizer"),
        "{applied}"
    );
    let pool = sim.get(Kind::SpiderIpPool, "", "pool-a").unwrap();
    let left: Value =
        serde_json::from_str(pool["status"]["allocatedIPs"].as_str().unwrap()).unwrap();
    assert_eq!(
        left.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["172.18.40.11"],
        "only the gone pod's entry is removed: {pool}"
    );
    assert!(
        sim.get(Kind::SpiderEndpoint, "default", "gone").is_err(),
        "the endpoint went once its finalizer was removed"
    );
}
