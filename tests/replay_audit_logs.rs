//! `analyzer replay` given Kubernetes API server audit logs, run as an operator would run
//! it: the kube-ovn seed incident from its audit log alone (two HA API servers, one file
//! gzipped) and from its watch recordings beside a Metadata-level audit log must raise the
//! same alerts and name the same people; a healthy audit log raises nothing.
//!
//! The fixtures are `fixtures/audit/` (written by its `make_audit_fixtures.py`). The binary
//! is run as a process (build it first: `cargo build --bins`).

use std::path::PathBuf;
use std::process::{Command, Output};

use ipaudit_tests::collector::workspace_binary;
use ipaudit_tests::incident_files;
use serde_json::Value;

const LEAKED_IP: &str =
    "test-vm-1.kube-ovn-dangling-ips.kube-ovn-dangling-ips-control-net.kube-ovn-dangling-ips.ovn";
const SUBNET: &str = "kube-ovn-dangling-ips-control-net";
const ALICE: &str = "alice@example.com";
const BOB: &str = "bob@example.com";
const OVN: &str = "system:serviceaccount:kube-system:ovn";

fn audit(path: &str) -> PathBuf {
    ipaudit_tests::manifest_dir()
        .join("fixtures/audit")
        .join(path)
}

/// The seed as its two API servers logged it.
fn seed_audit_files() -> Vec<PathBuf> {
    vec![
        audit("kube-ovn-seed/apiserver-1.log"),
        audit("kube-ovn-seed/apiserver-2.log.gz"),
    ]
}

/// The seed's watch recordings and its Metadata-level audit log.
fn seed_recordings_and_metadata_audit() -> Vec<PathBuf> {
    let mut files = incident_files("kube-ovn-seed");
    files.push(audit("kube-ovn-seed-metadata/audit.log"));
    files
}

fn replay(args: &[&str], files: &[PathBuf]) -> Output {
    Command::new(workspace_binary("analyzer"))
        .arg("replay")
        .arg("--no-progress")
        .args(args)
        .args(files)
        .output()
        .expect("analyzer runs")
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The `"record": "alert"` lines of `--format jsonl` output.
fn jsonl_alerts(files: &[PathBuf]) -> Vec<Value> {
    let output = replay(&["--format", "jsonl"], files);
    assert!(
        output.status.code().is_some_and(|c| c < 2),
        "exit {:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    text(&output)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .filter(|v| v["record"] == "alert")
        .collect()
}

fn alert<'a>(alerts: &'a [Value], rule: &str) -> &'a Value {
    alerts
        .iter()
        .find(|a| a["rule"] == rule)
        .unwrap_or_else(|| panic!("no {rule} alert in {alerts:#?}"))
}

/// The evidence entry of `stream`/`type` about `name`.
fn entry<'a>(alert: &'a Value, stream: &str, event_type: &str, name: &str) -> &'a Value {
    alert["evidence"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["stream"] == stream && e["type"] == event_type && e["name"] == name)
        .unwrap_or_else(|| panic!("no {stream} {event_type} {name} in {alert:#}"))
}

fn user(entry: &Value) -> Option<&str> {
    entry["actor"]["user"].as_str()
}

/// What must be the same whatever the input: each alert's rule, subject and status, and
/// its evidence as (stream, type, object, who).
fn story(alerts: &[Value]) -> Vec<(String, String, String, Vec<[String; 4]>)> {
    let s = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    alerts
        .iter()
        .map(|a| {
            let evidence = a["evidence"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| {
                    [
                        s(&e["stream"]),
                        s(&e["type"]),
                        s(&e["name"]),
                        s(&e["actor"]["user"]),
                    ]
                })
                .collect();
            (
                s(&a["rule"]),
                s(&a["subject_name"]),
                s(&a["status"]),
                evidence,
            )
        })
        .collect()
}

#[test]
fn the_seed_from_its_audit_log_alone_names_who_deleted_the_subnet_who_removed_its_finalizer_and_who_deleted_the_ip(
) {
    let alerts = jsonl_alerts(&seed_audit_files());
    let rules: Vec<&str> = alerts.iter().filter_map(|a| a["rule"].as_str()).collect();
    assert_eq!(rules, ["subnet-deleted-before-ip", "ip-stuck-terminating"]);
    assert!(alerts.iter().all(|a| a["status"] == "firing"));
    assert!(alerts.iter().all(|a| a["subject_name"] == LEAKED_IP));

    let leak = alert(&alerts, "subnet-deleted-before-ip");
    let requested = entry(leak, "subnet", "MODIFIED", SUBNET);
    assert_eq!(user(requested), Some(ALICE), "who asked for the deletion");
    assert_eq!(requested["resource_version"], "1100");
    let gone = entry(leak, "subnet", "DELETED", SUBNET);
    assert_eq!(user(gone), Some(OVN), "who removed the last finalizer");
    assert!(
        gone["what"]
            .as_str()
            .is_some_and(|w| w.contains("removed the last finalizer")),
        "{gone:#}"
    );
    // Its version is never logged: ordered by audit time just after the delete's.
    assert_eq!(gone["resource_version"], "1100+1");

    let stuck = alert(&alerts, "ip-stuck-terminating");
    let deleted = entry(stuck, "ip", "MODIFIED", LEAKED_IP);
    assert_eq!(user(deleted), Some(BOB), "who deleted the IP");
    assert_eq!(deleted["resource_version"], "1120");
    assert_eq!(
        deleted["actor"]["source_ips"],
        serde_json::json!(["192.168.10.34"])
    );
    assert!(deleted["actor"]["user_agent"]
        .as_str()
        .is_some_and(|a| a.starts_with("kubectl/")));
    assert!(deleted["actor"]["impersonated_user"].is_null());
}

#[test]
fn the_watch_recordings_beside_a_metadata_level_audit_log_give_the_same_alerts_and_actors() {
    let from_audit = jsonl_alerts(&seed_audit_files());
    let from_recordings = jsonl_alerts(&seed_recordings_and_metadata_audit());
    assert_eq!(story(&from_recordings), story(&from_audit));
    // With the RequestResponse-level log instead, matched by resourceVersion where it can.
    let mut beside_full_log = incident_files("kube-ovn-seed");
    beside_full_log.extend(seed_audit_files());
    assert_eq!(story(&jsonl_alerts(&beside_full_log)), story(&from_audit));
    // The versions are the recordings' own.
    let leak = alert(&from_recordings, "subnet-deleted-before-ip");
    assert_eq!(
        entry(leak, "subnet", "DELETED", SUBNET)["resource_version"],
        "1101"
    );
    assert_eq!(user(entry(leak, "subnet", "DELETED", SUBNET)), Some(OVN));
}

#[test]
fn a_healthy_audit_log_raises_nothing() {
    let output = replay(&[], &[audit("healthy/audit.log")]);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(0), "{report}");
    assert!(report.contains("No leak found."), "{report}");
    assert!(report.contains("0 alert(s)"), "{report}");
    assert!(
        report.contains("write(s) of watched kinds used"),
        "the audit log was read: {report}"
    );
}

#[test]
fn refused_deletes_and_reads_just_before_a_deletion_are_never_named_as_its_actor() {
    // Without bob's delete, the only requests on the IP near its deletion are carol's
    // (403), dave's (an admission webhook's denial) and bob's reads: none may be named.
    let dir = tempfile::tempdir().unwrap();
    let log = std::fs::read_to_string(audit("kube-ovn-seed-metadata/audit.log")).unwrap();
    // They are moved to within milliseconds of the IP's deletion, so that only what they
    // are keeps them from being named, not their time.
    let near =
        |v: &mut Value, at: &str| v["stageTimestamp"] = format!("2025-06-02T09:07:{at}Z").into();
    let without: String = log
        .lines()
        .filter_map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["objectRef"]["name"] == LEAKED_IP {
                match (v["user"]["username"].as_str(), v["verb"].as_str()) {
                    (Some(BOB), Some("delete")) => return None,
                    (Some("carol@example.com"), _) => near(&mut v, "00.050000"),
                    (Some("dave@example.com"), _) => near(&mut v, "00.020000"),
                    (Some(BOB), _) => near(&mut v, "00.010000"),
                    _ => {}
                }
            }
            Some(format!("{v}\n"))
        })
        .collect();
    assert!(
        without.lines().all(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            !(v["verb"] == "delete" && v["user"]["username"] == BOB)
        }),
        "bob's delete is out"
    );
    assert!(without.contains("carol@example.com") && without.contains("\"code\":403"));
    assert!(without.contains("dave@example.com") && without.contains("admission webhook"));
    assert!(
        without.contains("09:07:00.010000Z"),
        "bob's reads moved next to the deletion"
    );
    let path = dir.path().join("audit.log");
    std::fs::write(&path, without).unwrap();
    let mut files = incident_files("kube-ovn-seed");
    files.push(path);
    let alerts = jsonl_alerts(&files);
    let stuck = alert(&alerts, "ip-stuck-terminating");
    let deleted = entry(stuck, "ip", "MODIFIED", LEAKED_IP);
    assert!(deleted["actor"].is_null(), "{deleted:#}");
    // The rest of the story still has its actors.
    let leak = alert(&alerts, "subnet-deleted-before-ip");
    assert_eq!(user(entry(leak, "subnet", "MODIFIED", SUBNET)), Some(ALICE));
}

#[test]
fn the_text_report_shows_who_did_each_step_and_which_events_were_ordered_by_audit_time() {
    let output = replay(&[], &seed_audit_files());
    let report = text(&output);
    assert_eq!(output.status.code(), Some(1), "alerts fire: {report}");
    assert!(
        report.contains(&format!("by {ALICE} from 192.168.10.21, kubectl/v1.30.2")),
        "{report}"
    );
    assert!(
        report.contains(&format!("by {BOB} from 192.168.10.34")),
        "{report}"
    );
    assert!(
        report.contains(&format!("by {OVN} from 172.18.0.3")),
        "{report}"
    );
    assert!(report.contains("rv 1100+1"), "{report}");
    assert!(
        report.contains("ordered by audit time after the latest known version V, shown as rv V+n"),
        "{report}"
    );
    assert!(report.contains("2 file(s)"), "both HA files read: {report}");
}

#[test]
fn a_broken_line_in_an_audit_log_is_an_input_problem_at_its_line_and_the_rest_is_analysed() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = std::fs::read_to_string(audit("kube-ovn-seed/apiserver-1.log")).unwrap();
    let lines = log.lines().count();
    log.push_str("{\"kind\":\"Event\",\"apiVersion\":\"audit.k8s.io/v1\",\"verb\":\"delete\n");
    log.push_str("{\"kind\":\"Event\",\"apiVersion\":\"audit.k8s.io/v1\",\"stage\":\"ResponseComplete\",\"verb\":\"delete\",\"objectRef\":{\"resource\":\"ips\",\"apiGroup\":\"kubeovn.io\",\"name\":\"x\"},\"responseStatus\":{\"code\":200},\"stageTimestamp\":\"yesterday\"}\n");
    let path = dir.path().join("apiserver-1.log");
    std::fs::write(&path, log).unwrap();
    let output = replay(&[], &[path, audit("kube-ovn-seed/apiserver-2.log.gz")]);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert!(
        report.contains(&format!("line {}, column 1", lines + 1))
            && report.contains("invalid audit entry"),
        "{report}"
    );
    assert!(
        report.contains(&format!("line {}, column 1", lines + 2))
            && report.contains("stageTimestamp \"yesterday\" is not an RFC 3339 time"),
        "{report}"
    );
    assert!(
        report.contains("SKIPPED INPUT: 2 input problem(s)"),
        "{report}"
    );
    assert!(
        report.contains("[CRITICAL] ip-stuck-terminating (FIRING)"),
        "{report}"
    );

    let strict = replay(&["--strict"], &[dir.path().join("apiserver-1.log")]);
    assert_eq!(
        strict.status.code(),
        Some(2),
        "--strict refuses skipped input"
    );
}

/// The level `deploy/audit-policy.yaml` logs a request at: its first matching rule's.
fn policy_level(policy: &serde_yaml_ng::Value, verb: &str, group: &str, resource: &str) -> String {
    let empty = Vec::new();
    let list = |v: &serde_yaml_ng::Value| v.as_sequence().unwrap_or(&empty).clone();
    let names = |v: &serde_yaml_ng::Value| -> Vec<String> {
        list(v)
            .iter()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    for rule in list(&policy["rules"]) {
        let verbs = names(&rule["verbs"]);
        let resources = list(&rule["resources"]);
        let verb_matches = verbs.is_empty() || verbs.iter().any(|v| v == verb);
        let resource_matches = resources.is_empty()
            || resources.iter().any(|r| {
                r["group"].as_str().unwrap_or("") == group
                    && names(&r["resources"]).iter().any(|n| n == resource)
            });
        if verb_matches && resource_matches {
            return rule["level"].as_str().unwrap_or("?").to_owned();
        }
    }
    "None".to_owned()
}

#[test]
fn the_audit_policy_logs_every_write_of_the_watched_kinds_with_its_object_and_no_reads() {
    let path = ipaudit_tests::manifest_dir().join("../deploy/audit-policy.yaml");
    let policy: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(policy["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(policy["kind"], "Policy");
    assert_eq!(policy["omitManagedFields"], true);
    for spec in ipaudit_schemas::KINDS {
        let level = |verb: &str, resource: &str| policy_level(&policy, verb, spec.group, resource);
        for read in ["get", "list", "watch"] {
            assert_eq!(
                level(read, spec.plural),
                "None",
                "{read} {}",
                spec.resource()
            );
        }
        if spec.group.is_empty() {
            // Pods and Nodes: their objects when created and deleted, who changed them.
            let plural = spec.plural;
            assert_eq!(level("create", plural), "RequestResponse", "{plural}");
            assert_eq!(level("delete", plural), "RequestResponse", "{plural}");
            assert_eq!(level("patch", plural), "Metadata", "{plural}");
            assert_eq!(
                level("update", &format!("{plural}/status")),
                "Metadata",
                "{plural}"
            );
            continue;
        }
        for write in ["create", "update", "patch", "delete"] {
            assert_eq!(
                level(write, spec.plural),
                "RequestResponse",
                "{write} {}",
                spec.resource()
            );
        }
    }
    // A resource name does not match its subresources: the status writes are listed.
    assert_eq!(
        policy_level(&policy, "update", "kubeovn.io", "subnets/status"),
        "RequestResponse"
    );
    assert_eq!(
        policy_level(
            &policy,
            "update",
            "spiderpool.spidernet.io",
            "spiderippools/status"
        ),
        "RequestResponse"
    );
    assert_eq!(policy_level(&policy, "create", "", "configmaps"), "None");
    assert_eq!(policy_level(&policy, "delete", "", "secrets"), "None");
}

#[test]
fn a_finalizer_removed_by_hand_shows_as_such_with_who_removed_it() {
    // The same incident, but bob strips the subnet's finalizer with kubectl patch.
    let dir = tempfile::tempdir().unwrap();
    let log = std::fs::read_to_string(audit("kube-ovn-seed-metadata/audit.log")).unwrap();
    let mut changed = 0;
    let by_hand: String = log
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["verb"] == "patch"
                && v["objectRef"]["resource"] == "subnets"
                && v["objectRef"]["name"] == SUBNET
            {
                v["user"] = serde_json::json!({"username": BOB});
                v["userAgent"] = "kubectl/v1.30.2 (linux/amd64) kubernetes/3968350".into();
                changed += 1;
            }
            format!("{v}\n")
        })
        .collect();
    assert_eq!(changed, 1);
    let path = dir.path().join("audit.log");
    std::fs::write(&path, by_hand).unwrap();
    let mut files = incident_files("kube-ovn-seed");
    files.push(path);
    let alerts = jsonl_alerts(&files);
    let gone = entry(
        alert(&alerts, "subnet-deleted-before-ip"),
        "subnet",
        "DELETED",
        SUBNET,
    );
    assert_eq!(user(gone), Some(BOB));
    assert!(
        gone["what"]
            .as_str()
            .is_some_and(|w| w.ends_with(&format!("(patch by {BOB} removed the last finalizer)"))),
        "{gone:#}"
    );
}
