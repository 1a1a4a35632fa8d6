//! `analyzer replay` given hostile, broken and large input, as an operator would run it:
//! memory stays bounded by the analysis, nothing is skipped without saying so, and no fix
//! command can run anything but kubectl.
//!
//! The binary is run as a process (build it first: `cargo build --bins`), and its peak
//! memory is the kernel's account of the child (`wait4`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ipaudit_schemas::builders::EventBuilder;
use ipaudit_schemas::{ContainerWriter, Stream, WatchEvent};
use ipaudit_tests::collector::workspace_binary;
use ipaudit_tests::measure::{run_measured, write_kubectl_recording};
use ipaudit_tests::write_recording;

const MIB: u64 = 1024 * 1024;

fn replay(args: &[&str], files: &[&Path]) -> Output {
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

/// A subnet deleted under a live IP at rv 50 (and the IP terminating after it), with
/// `filler` unrelated IPs in between: the seeds' leak.
fn leak_history(filler: i64) -> (Vec<WatchEvent>, Vec<WatchEvent>, Vec<WatchEvent>) {
    let mut before = vec![
        EventBuilder::bookmark(Stream::Pod, 1),
        EventBuilder::subnet("net1").rv(10).at(1_000).added(),
        EventBuilder::ip("leaked-ip.ns", "net1")
            .rv(11)
            .at(1_001)
            .added(),
    ];
    for e in &mut before {
        e.observed_at_ms = Some(1_000);
    }
    let middle = (0..filler)
        .map(|i| {
            EventBuilder::ip(&format!("other-{i}.ns"), "net2")
                .rv(20 + i)
                .at(2_000 + i)
                .added()
        })
        .collect();
    let after = vec![
        EventBuilder::subnet("net1").rv(1_000).at(9_000).deleted(),
        EventBuilder::ip("leaked-ip.ns", "net1")
            .rv(1_001)
            .at(9_001)
            .deleting(9_001)
            .modified(),
    ];
    (before, middle, after)
}

/// Writes `blocks` as separate container blocks; returns each block's byte range.
fn write_blocks(path: &Path, blocks: &[Vec<WatchEvent>]) -> Vec<std::ops::Range<usize>> {
    let mut writer = ContainerWriter::<WatchEvent, _>::new(Vec::new()).expect("container");
    let mut sequence = 0;
    for block in blocks {
        for event in block {
            let mut event = event.clone();
            sequence += 1;
            event.sequence = sequence;
            event.cluster_id = "lab".into();
            event.collector_id = "collector-0".into();
            writer.append(&event).expect("append");
        }
        writer.flush().expect("flush");
    }
    let bytes = writer.finish().expect("finish");
    let sync = bytes[bytes.len() - 16..].to_vec();
    let ends: Vec<usize> = bytes
        .windows(16)
        .enumerate()
        .filter(|(_, w)| *w == &sync[..])
        .map(|(i, _)| i + 16)
        .collect();
    std::fs::write(path, &bytes).expect("write");
    ends.windows(2).map(|w| w[0]..w[1]).collect()
}

#[test]
fn twenty_megabytes_of_open_braces_finish_fast_in_bounded_memory_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("braces.json");
    std::fs::write(&path, "{\n".repeat(10 * MIB as usize)).unwrap();
    let measured = run_measured(
        &workspace_binary("analyzer"),
        &[
            "replay".as_ref(),
            "--no-progress".as_ref(),
            path.as_os_str(),
        ],
    );
    assert_eq!(measured.code, Some(2), "nothing readable exits 2");
    assert!(
        measured.max_rss_bytes < 200 * MIB,
        "peak RSS {} MiB",
        measured.max_rss_bytes / MIB
    );
    // Generous for a debug build on a shared machine; the point is seconds, not minutes.
    assert!(
        measured.elapsed.as_secs() < 60,
        "took {:?}",
        measured.elapsed
    );
    let out = replay(&["--format", "jsonl"], &[&path]);
    let last = text(&out).lines().last().map(str::to_owned).unwrap();
    let summary: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(summary["record"], "input");
    assert_eq!(summary["events"], 0);
    assert_eq!(summary["skipped"], 10 * MIB);
    assert_eq!(summary["problems_listed"].as_array().unwrap().len(), 100);
}

#[test]
fn a_kubectl_recording_four_times_longer_replays_in_the_same_memory() {
    let dir = tempfile::tempdir().unwrap();
    let peak = |mib: u64| {
        let path = dir.path().join(format!("ips-{mib}.json"));
        write_kubectl_recording(&path, 500, mib * MIB);
        let measured = run_measured(
            &workspace_binary("analyzer"),
            &[
                "replay".as_ref(),
                "--no-progress".as_ref(),
                path.as_os_str(),
            ],
        );
        assert_eq!(measured.code, Some(0), "{mib} MiB: no leak in this history");
        measured.max_rss_bytes
    };
    let small = peak(6);
    let large = peak(24);
    // Read whole, 18 MiB more of input would cost far more than 18 MiB of memory.
    assert!(
        large < small + 8 * MIB,
        "6 MiB -> {} MiB peak, 24 MiB -> {} MiB peak",
        small / MIB,
        large / MIB
    );
}

#[test]
fn a_corrupt_middle_block_still_yields_the_leak_after_it_and_says_what_was_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.avro");
    let (before, middle, after) = leak_history(40);
    let blocks = write_blocks(&path, &[before, middle, after]);
    assert!(blocks.len() >= 3, "{blocks:?}");
    let mut bytes = std::fs::read(&path).unwrap();
    // The middle block's compressed data is overwritten: it cannot inflate.
    let m = blocks[1].clone();
    for b in &mut bytes[m.start + 8..m.end - 20] {
        *b ^= 0x5A;
    }
    std::fs::write(&path, &bytes).unwrap();
    let out = replay(&[], &[&path]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("[CRITICAL] subnet-deleted-before-ip (FIRING)"),
        "{report}"
    );
    assert!(report.contains("SKIPPED INPUT"), "{report}");
    assert!(
        report.contains(&format!("block at byte {}", m.start)),
        "{report}"
    );
    assert!(
        report.contains("resumed at the next sync marker"),
        "{report}"
    );
    let strict = replay(&["--strict"], &[&path]);
    assert_eq!(strict.status.code(), Some(2), "--strict: any skip exits 2");
}

#[test]
fn concatenated_container_files_are_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (before, middle, after) = leak_history(3);
    let a = dir.path().join("a.avro");
    let b = dir.path().join("b.avro");
    write_recording(&a, &[before, middle].concat());
    write_recording(&b, &after);
    let both = dir.path().join("both.avro");
    let mut joined = std::fs::read(&a).unwrap();
    joined.extend(std::fs::read(&b).unwrap());
    std::fs::write(&both, joined).unwrap();
    let out = replay(&[], &[&both]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(report.starts_with("ipaudit replay: 8 events"), "{report}");
    assert!(report.contains("subnet-deleted-before-ip"), "{report}");
    assert!(!report.contains("SKIPPED"), "{report}");
}

#[test]
fn a_forged_object_name_yields_no_runnable_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("forged.avro");
    let hostile = "ip1$(id>&2)";
    let events = vec![
        EventBuilder::bookmark(Stream::Pod, 1),
        EventBuilder::subnet("net1").rv(10).at(1_000).added(),
        EventBuilder::ip(hostile, "net1").rv(11).at(1_001).added(),
        EventBuilder::ip("honest.ns", "net1")
            .rv(12)
            .at(1_002)
            .added(),
        EventBuilder::subnet("net1").rv(20).at(2_000).deleted(),
        EventBuilder::ip(hostile, "net1")
            .rv(21)
            .at(2_001)
            .deleting(2_001)
            .modified(),
        EventBuilder::ip("honest.ns", "net1")
            .rv(22)
            .at(2_002)
            .deleting(2_002)
            .modified(),
    ];
    write_recording(&path, &events);
    let out = replay(&["--format", "jsonl"], &[&path]);
    assert_eq!(out.status.code(), Some(1));
    let alerts: Vec<serde_json::Value> = text(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let stuck = |name: &str| {
        alerts
            .iter()
            .find(|a| a["rule"] == "ip-stuck-terminating" && a["subject_name"] == name)
            .unwrap_or_else(|| panic!("no ip-stuck-terminating for {name}: {alerts:?}"))
            .clone()
    };
    for alert in alerts.iter().filter(|a| a["subject_name"] == hostile) {
        assert!(alert["fix"].is_null(), "{alert}");
        assert!(
            alert["summary"]
                .as_str()
                .unwrap()
                .contains("(no fix command is given: "),
            "{alert}"
        );
    }
    let honest = stuck("honest.ns");
    let fix = honest["fix"].as_str().unwrap();
    let argv = shlex::split(fix).expect("the fix lexes");
    assert_eq!(
        argv[..6],
        ["kubectl", "patch", "ip", "honest.ns", "--type=json", "-p"]
    );
    assert_eq!(argv.len(), 7, "{argv:?}");
    let patch: serde_json::Value = serde_json::from_str(&argv[6]).unwrap();
    assert_eq!(
        patch[0]["value"], "22",
        "guarded by the numeric resourceVersion"
    );
    // Every fix of every alert, pasted into a shell, runs nothing but kubectl.
    for alert in &alerts {
        let Some(fix) = alert["fix"].as_str() else {
            continue;
        };
        for command in ipaudit_analyzer::analysis::fix::commands(fix) {
            assert!(
                ipaudit_analyzer::analysis::fix::is_inert_in_shell(command),
                "{command}"
            );
            assert_eq!(shlex::split(command).unwrap()[0], "kubectl");
        }
        assert!(!fix.contains(hostile), "{fix}");
    }
}

#[test]
fn a_restore_like_history_raises_the_alert() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("restore.avro");
    let at = |mut e: WatchEvent, t: i64| {
        e.observed_at_ms = Some(t);
        e
    };
    let events = vec![
        at(EventBuilder::bookmark(Stream::Pod, 100), 1_000),
        at(EventBuilder::subnet("net1").rv(100).added(), 1_000),
        at(EventBuilder::ip("ip-a.ns", "net1").rv(101).added(), 1_001),
        at(
            EventBuilder::subnet("net1").rv(150).using_ips(1).modified(),
            1_002,
        ),
        at(
            EventBuilder::ip("ip-a.ns", "net1").rv(160).modified(),
            1_003,
        ),
        at(EventBuilder::bookmark(Stream::Pod, 170), 1_004),
        // etcd restored from a backup: versions start again lower.
        at(EventBuilder::subnet("net1").rv(110).deleted(), 5_000),
        at(
            EventBuilder::ip("ip-a.ns", "net1")
                .rv(111)
                .deleting(5_001)
                .modified(),
            5_001,
        ),
        at(EventBuilder::bookmark(Stream::Pod, 120), 5_002),
    ];
    write_recording(&path, &events);
    let out = replay(&[], &[&path]);
    let report = text(&out);
    assert!(report.contains("EPOCH 1"), "{report}");
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("[CRITICAL] subnet-deleted-before-ip (FIRING)"),
        "{report}"
    );
}

#[test]
fn a_non_numeric_resource_version_is_an_input_problem_not_an_event() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("subnets.json");
    let doc = |rv: &str, t: &str| {
        format!(
            r#"{{"type":"{t}","object":{{"apiVersion":"kubeovn.io/v1","kind":"Subnet","metadata":{{"name":"net1","uid":"u1","resourceVersion":"{rv}","creationTimestamp":"2025-06-02T09:00:00Z"}},"spec":{{"cidrBlock":"10.0.0.0/24"}}}}}}"#
        )
    };
    let mut file = std::fs::File::create(&path).unwrap();
    writeln!(file, "{}", doc("10", "ADDED")).unwrap();
    writeln!(file, "{}", doc("5$(id)", "DELETED")).unwrap();
    drop(file);
    let out = replay(&[], &[&path]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(
        report.contains("resourceVersion \"5$(id)\" is not a decimal number"),
        "{report}"
    );
    assert!(report.contains("line 2, column 1"), "{report}");
    assert!(
        report.contains("1 document(s)/record(s) skipped"),
        "{report}"
    );
    assert_eq!(replay(&["--strict"], &[&path]).status.code(), Some(2));
}

#[test]
fn input_where_nothing_is_usable_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("garbage.json");
    std::fs::write(
        &path,
        "{\"type\": \"ADDED\", \"object\": {\"kind\": \"Nothing\"}}\n",
    )
    .unwrap();
    let out = replay(&[], &[&path]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("No event could be read"),
        "{}",
        text(&out)
    );
}
