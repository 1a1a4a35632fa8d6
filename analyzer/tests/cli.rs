//! `analyzer replay` as an operator runs it: output formats and exit codes.

use std::path::PathBuf;
use std::process::{Command, Output};

fn incident(name: &str) -> Vec<PathBuf> {
    // The checkout the test runs from, which a shared build cache may not have compiled.
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("../tests/fixtures/incidents")
        .join(name);
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

fn analyzer(args: &[&str], files: &[PathBuf]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_analyzer"))
        .args(args)
        .args(files)
        .output()
        .expect("analyzer runs")
}

#[test]
fn jsonl_on_the_kube_ovn_seed_prints_exactly_rule_1_and_rule_2_and_exits_1() {
    let out = analyzer(&["replay", "--format", "jsonl"], &incident("kube-ovn-seed"));
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ip = "test-vm-1.kube-ovn-dangling-ips.kube-ovn-dangling-ips-control-net.kube-ovn-dangling-ips.ovn";
    let rules: Vec<&str> = lines.iter().map(|l| l["rule"].as_str().unwrap()).collect();
    assert_eq!(rules, ["subnet-deleted-before-ip", "ip-stuck-terminating"]);
    for line in &lines {
        assert_eq!(line["severity"], "critical");
        assert_eq!(line["status"], "firing");
        assert_eq!(line["subject_kind"], "IP");
        assert_eq!(line["subject_name"], ip);
        assert_eq!(line["subnet"], "kube-ovn-dangling-ips-control-net");
        let evidence = line["evidence"].as_array().unwrap();
        assert!(evidence.iter().all(|e| e["stream"].is_string()
            && e["type"].is_string()
            && e["name"].is_string()
            && e["resource_version"].is_string()));
        assert!(evidence
            .iter()
            .any(|e| e["type"] == "DELETED" && e["resource_version"] == "1101"));
    }
}

#[test]
fn jsonl_on_the_healthy_teardown_prints_nothing_and_exits_0() {
    let out = analyzer(
        &["replay", "--format", "jsonl"],
        &incident("healthy-teardown"),
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
}

#[test]
fn the_text_report_shows_the_timeline_and_the_exact_patch_command() {
    let out = analyzer(&["replay"], &incident("kube-ovn-seed"));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("[CRITICAL] ip-stuck-terminating (FIRING)"),
        "{text}"
    );
    assert!(
        text.contains("2025-06-02T09:05:04Z     rv 1101       subnet DELETED"),
        "{text}"
    );
    assert!(
        text.contains(
            r#"--type=json -p '[{"op":"test","path":"/metadata/resourceVersion","value":"1120"}"#
        ),
        "{text}"
    );
}

#[test]
fn the_grace_period_and_now_are_flags() {
    let files = incident("subnet-stuck-terminating");
    assert_eq!(
        analyzer(&["replay", "--subnet-grace", "30m"], &files)
            .status
            .code(),
        Some(0)
    );
    let later = analyzer(
        &[
            "replay",
            "--subnet-grace",
            "30m",
            "--now",
            "2025-06-02T10:00:00Z",
        ],
        &files,
    );
    assert_eq!(later.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&later.stdout).contains("subnet-stuck-terminating"));
}

#[test]
fn usage_errors_and_unreadable_input_exit_2_with_a_message() {
    let no_files = analyzer(&["replay"], &[]);
    assert_eq!(no_files.status.code(), Some(2));
    let missing = analyzer(&["replay"], &[PathBuf::from("/nonexistent/ips.json")]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/ips.json"));
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.bin");
    std::fs::write(&garbage, b"\x00\x01not a recording").unwrap();
    let unknown = analyzer(&["replay"], &[garbage]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("not an Avro container file"));
    let bad_flag = analyzer(
        &["replay", "--subnet-grace", "soon"],
        &incident("kube-ovn-seed"),
    );
    assert_eq!(bad_flag.status.code(), Some(2));
}

#[test]
fn closing_the_pipe_early_is_no_panic_and_the_exit_status_still_counts_leaks() {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_analyzer"))
        .args(["replay", "--format", "jsonl"])
        .args(incident("kube-ovn-seed"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("analyzer runs");
    // `| head -0`: the reader is gone before the report is written.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("analyzer ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
}
