//! `replay-bench`: the benchmark checks the findings of a history it generated against the
//! leaks it planted, so that a faster replay that finds less fails instead of reporting a
//! figure.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn replay_bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_replay-bench"))
        .args(args)
        .output()
        .expect("replay-bench runs")
}

/// Runs the bench binary `binary` with `args` and checks that it succeeded (its output
/// and errors said if not).
fn succeeded(binary: &str, args: &[&str]) -> Output {
    let out = Command::new(binary)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{binary} runs: {e}"));
    assert!(
        out.status.success(),
        "{binary}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A small history generated in a temporary directory, and where its planted leaks'
/// findings are written.
struct Generated {
    dir: tempfile::TempDir,
    history: PathBuf,
    planted: PathBuf,
}

fn generated() -> Generated {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history.avro");
    generate(&history);
    let planted = dir.path().join("history.avro.planted.json");
    Generated {
        dir,
        history,
        planted,
    }
}

fn generate(history: &Path) {
    succeeded(
        env!("CARGO_BIN_EXE_replay-bench"),
        &[
            "generate",
            "--subnets",
            "40",
            "--ips",
            "800",
            "--events",
            "4000",
            "--leak-one-in",
            "2",
            "--out",
            history.to_str().unwrap(),
        ],
    );
}

/// Checks that a `replay-bench run` succeeded and found exactly the 200 leaks `generate`
/// planted; `context` says which run it was.
fn assert_found_exactly_the_planted(out: &Output, context: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{context}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("findings: exactly the 200 planted"),
        "{context}: {stdout}"
    );
}

#[test]
fn a_generated_history_replays_to_exactly_the_findings_of_its_planted_leaks() {
    // The directory lives as long as its binding.
    let Generated {
        dir: _dir,
        history,
        planted,
    } = generated();
    let planted: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(planted).unwrap()).unwrap();
    // 10 of the 40 subnets are torn down, every second of them early: 5 subnets of 20 IPs,
    // each IP stuck on its finalizer after its subnet's deletion.
    assert_eq!(planted.len(), 200);
    assert!(planted
        .iter()
        .all(|f| f["subject_kind"] == "IP" && f["subject_name"].as_str().is_some()));
    let out = replay_bench(&["run", history.to_str().unwrap()]);
    assert_found_exactly_the_planted(&out, "the Avro history");
}

#[test]
fn findings_that_differ_from_the_planted_leaks_fail_the_run_and_say_which() {
    let Generated {
        dir,
        history,
        planted,
    } = generated();
    let mut planted: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(planted).unwrap()).unwrap();
    let dropped = planted.remove(0);
    planted.push(serde_json::json!({
        "rule": "duplicate-ip",
        "subject_kind": "IP",
        "subject_name": "never-planted",
    }));
    let edited = dir.path().join("edited.json");
    std::fs::write(&edited, serde_json::to_vec(&planted).unwrap()).unwrap();
    let out = replay_bench(&[
        "run",
        history.to_str().unwrap(),
        "--planted",
        edited.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a difference must fail the run");
    assert!(
        stderr.contains("the findings differ from the planted leaks"),
        "{stderr}"
    );
    assert!(
        stderr.contains("never-planted"),
        "the finding that did not fire: {stderr}"
    );
    assert!(
        stderr.contains(dropped["subject_name"].as_str().unwrap()),
        "the finding fired but not planted: {stderr}"
    );
}

#[test]
fn a_history_without_its_planted_leaks_is_replayed_and_said_unchecked() {
    // The directory lives as long as its binding.
    let Generated {
        dir: _dir,
        history,
        planted,
    } = generated();
    std::fs::remove_file(planted).unwrap();
    let out = replay_bench(&["run", history.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("findings not checked"));
}

#[test]
fn a_kubectl_recording_of_a_generated_history_replays_to_its_planted_findings() {
    let Generated {
        dir,
        history,
        planted,
    } = generated();
    // As served (every object with its creation time and a real object's content), and
    // lean (what the Avro events keep: no time at all until the first IP terminates).
    for shape in [&["--as-served"][..], &[][..]] {
        let recording = dir.path().join(format!("recording{}", shape.len()));
        let mut from_avro = vec![
            "from-avro",
            history.to_str().unwrap(),
            "--out",
            recording.to_str().unwrap(),
        ];
        from_avro.extend(shape);
        succeeded(env!("CARGO_BIN_EXE_kubectl-bench"), &from_avro);
        let files: Vec<String> = ["subnets", "ips", "pods"]
            .iter()
            .map(|kind| recording.join(format!("{kind}.json")).display().to_string())
            .collect();
        let mut args = vec!["run"];
        args.extend(files.iter().map(String::as_str));
        args.extend(["--planted", planted.to_str().unwrap()]);
        let out = replay_bench(&args);
        assert_found_exactly_the_planted(&out, &format!("the recording {shape:?}"));
    }
}

#[test]
fn state_bench_classes_times_every_event_of_a_history_under_its_kind_and_type() {
    let Generated {
        dir: _dir,
        history,
        planted: _,
    } = generated();
    let out = succeeded(
        env!("CARGO_BIN_EXE_state-bench"),
        &["classes", history.to_str().unwrap()],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    // "IP ADDED   800   1.2   1500   30.0 %": kind, type, events, ms, ns/event, share.
    let rows: Vec<(String, u64)> = stdout
        .lines()
        .filter(|line| line.ends_with('%') && !line.starts_with("kind"))
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            (
                format!("{} {}", words[0], words[1]),
                words[2].parse().unwrap(),
            )
        })
        .collect();
    let events = |class: &str| rows.iter().find(|(c, _)| c == class).map(|(_, n)| *n);
    assert_eq!(events("IP ADDED"), Some(800), "{stdout}");
    assert_eq!(events("Pod ADDED"), Some(800), "{stdout}");
    assert_eq!(events("Subnet ADDED"), Some(40), "{stdout}");
    // Every event the replay reads is counted once, in some class.
    let replayed = replay_bench(&["run", history.to_str().unwrap()]);
    let replayed = String::from_utf8_lossy(&replayed.stdout);
    let total: u64 = replayed
        .split_whitespace()
        .skip_while(|word| *word != "replayed")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("replay-bench says how many events it replayed");
    assert_eq!(rows.iter().map(|(_, n)| n).sum::<u64>(), total, "{stdout}");
}

#[test]
fn compare_sets_the_kubectl_recording_and_the_memory_per_live_object_beside_the_avro_figures() {
    let Generated { dir, history, .. } = generated();
    let recording = dir.path().join("kubectl");
    let (history, recording) = (history.to_str().unwrap(), recording.to_str().unwrap());
    succeeded(
        env!("CARGO_BIN_EXE_kubectl-bench"),
        &["from-avro", history, "--out", recording],
    );
    let out = succeeded(
        env!("CARGO_BIN_EXE_replay-bench"),
        &[
            "compare",
            history,
            "--runs",
            "1",
            "--kubectl",
            recording,
            "--live",
            history,
            // No interpreter of that name: fastavro is left out, whatever is installed.
            "--python",
            "no-such-python",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let row = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("no row {name}: {text}"))
            .to_owned()
    };
    // Each input's rows are set against that input's analyzer replay.
    assert!(row("analyzer replay (decode + every rule)").ends_with("| 1.00 |"));
    row("apache-avro Reader to Values (decode only)");
    assert!(
        row("analyzer replay of its kubectl recording (parse + every rule)").ends_with("| 1.00 |")
    );
    row("serde_json Value parse of the recording (parse only)");
    assert!(text.contains("fastavro: skipped"), "{text}");
    let memory = text
        .lines()
        .find(|l| l.starts_with("peak memory per live object"))
        .unwrap_or_else(|| panic!("no memory line: {text}"));
    assert!(memory.contains("bytes per live object"), "{memory}");
}

#[test]
fn a_closed_output_ends_replay_bench_with_an_error_not_a_panic() {
    let Generated {
        dir: _dir,
        history,
        planted: _,
    } = generated();
    // The pipe's reading end is closed before the run starts: its first line fails.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_replay-bench"))
        .args(["run", history.to_str().unwrap()])
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .stdout(writer)
        .output()
        .expect("replay-bench runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("Broken pipe"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
