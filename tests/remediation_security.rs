//! The commands topic as an attacker or a broken cluster would use it, end to end: the
//! simulated API server, the real broker, the collector (and the analyzer) as processes.
//! A collector with a commands key obeys only fresh commands signed with it; it records
//! every refusal with its reason; a dry run does not use a command up; a 404 that does not
//! name the subnet is not an absent subnet; a FAILED command is retried, a bounded number
//! of times. And `--help` never shows a secret taken from the environment.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use ipaudit_schemas::{
    encode, CleanupAction, CleanupCommand, CommandKey, EventType, Remediation, RemediationOutcome,
    WatchEvent,
};
use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::broker::produce;
use ipaudit_tests::collector::{workspace_binary, CollectorProcess};
use ipaudit_tests::scenario::{ip, play_kube_ovn_seed};
use ipaudit_tests::world::World;
use kube_sim::Kind;

const KEY: &str = "7f3c0b8e2a9d41c6b5e8f0a1d2c3b4a5";
const OTHER_KEY: &str = "0000000000000000000000000000000000";

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Writes `key` to a file as an operator would (`openssl rand -hex 32 > key`).
fn key_file(world: &World, key: &str) -> PathBuf {
    let path = world.dir.path().join("commands.key");
    std::fs::write(&path, format!("{key}\n")).expect("key file");
    path
}

/// A collector executing commands (`mode`: on or dry-run) with the commands key in a file.
fn remediating_collector(world: &World, mode: &str, extra: &[&str]) -> CollectorProcess {
    let key = key_file(world, KEY).display().to_string();
    let flags: Vec<&str> = ["--commands-key-file", key.as_str()]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    world.remediating_collector(mode, &flags)
}

/// An IP that is terminating while its subnet never existed: eligible for cleanup.
fn stuck_ip(world: &World, name: &str) -> (String, String) {
    world
        .sim
        .create(
            Kind::Ip,
            "",
            ip(name, "gone-net", "p", "ns", "10.1.0.9", ""),
        )
        .expect("IP created");
    let marked = world.sim.delete(Kind::Ip, "", name).expect("IP marked");
    let meta = &marked["metadata"];
    (
        meta["uid"].as_str().unwrap_or_default().to_owned(),
        meta["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// A fresh, unsigned command to remove the finalizer of `name` at `uid`/`rv`.
fn command(id: &str, name: &str, uid: &str, rv: &str) -> CleanupCommand {
    CleanupCommand {
        command_id: id.into(),
        cluster_id: "lab".into(),
        action: CleanupAction::RemoveFinalizer,
        target_kind: "IP".into(),
        target_name: name.into(),
        target_uid: uid.into(),
        expected_resource_version: rv.into(),
        finalizer: Some("kubeovn.io/kube-ovn-controller".into()),
        subnet: "gone-net".into(),
        reason_alert_id: "alert-1".into(),
        issued_at_ms: now_ms(),
        alert_fired_at_ms: now_ms(),
        target_namespace: None,
        address: None,
        signature: None,
    }
}

fn signed(mut command: CleanupCommand, key: &str) -> CleanupCommand {
    CommandKey::from_secret(key)
        .expect("a usable key")
        .sign(&mut command);
    command
}

fn send(world: &World, command: &CleanupCommand) {
    let payload = encode(command).expect("encodes");
    world.runtime.block_on(produce(
        &world.brokers,
        &world.commands_topic(),
        command.cluster_id.as_bytes(),
        &payload,
    ));
}

/// Every remediation record on the events topic, once `done` holds for them (or after
/// `timeout`).
fn remediations(
    world: &World,
    timeout: Duration,
    done: impl Fn(&[Remediation]) -> bool,
) -> Vec<Remediation> {
    let of = |events: &[WatchEvent]| -> Vec<Remediation> {
        events
            .iter()
            .filter(|e| e.event_type == EventType::Remediation)
            .filter_map(|e| e.remediation.as_deref().cloned())
            .collect()
    };
    of(&world.events_until(timeout, |events| done(&of(events))))
}

/// The records of command `id`, waiting until there are `n` of them.
fn records_of(world: &World, id: &str, n: usize) -> Vec<Remediation> {
    remediations(world, Duration::from_secs(30), |r| {
        r.iter().filter(|r| r.command_id == id).count() >= n
    })
    .into_iter()
    .filter(|r| r.command_id == id)
    .collect()
}

fn finalizers(world: &World, name: &str) -> usize {
    world.sim.get(Kind::Ip, "", name).map_or(0, |o| {
        o["metadata"]["finalizers"].as_array().map_or(0, Vec::len)
    })
}

/// Sends `command`, waits for its one record, checks that it is a refusal whose reason
/// says `why`, and that the IP kept its finalizer.
fn assert_refused(
    world: &World,
    collector: &CollectorProcess,
    command: &CleanupCommand,
    why: &str,
) {
    send(world, command);
    let records = records_of(world, &command.command_id, 1);
    let record = &records[0];
    assert_eq!(
        record.outcome,
        RemediationOutcome::Skipped,
        "{record:?}; log:\n{}",
        collector.log_text()
    );
    assert!(
        record.reason.starts_with("refused: ") && record.reason.contains(why),
        "reason {:?} does not say {why:?}",
        record.reason
    );
    assert_eq!(
        finalizers(world, &command.target_name),
        1,
        "a refused command changed the IP"
    );
}

#[test]
fn an_unsigned_command_is_refused_with_the_reason_recorded() {
    let world = World::new("sec-unsigned", None);
    let collector = remediating_collector(&world, "on", &[]);
    let (uid, rv) = stuck_ip(&world, "unsigned.ns");
    assert_refused(
        &world,
        &collector,
        &command("cmd-unsigned", "unsigned.ns", &uid, &rv),
        "unsigned command",
    );
}

#[test]
fn a_command_signed_with_another_key_is_refused_with_the_reason_recorded() {
    let world = World::new("sec-wrongkey", None);
    let collector = remediating_collector(&world, "on", &[]);
    let (uid, rv) = stuck_ip(&world, "forged.ns");
    assert_refused(
        &world,
        &collector,
        &signed(command("cmd-forged", "forged.ns", &uid, &rv), OTHER_KEY),
        "wrong signature",
    );
    // A signed command changed after signing is refused alike.
    let mut tampered = signed(command("cmd-tampered", "forged.ns", &uid, &rv), KEY);
    tampered.subnet = "gone-net2".into();
    assert_refused(&world, &collector, &tampered, "wrong signature");
}

#[test]
fn an_expired_command_is_refused_with_the_reason_recorded() {
    let world = World::new("sec-expired", None);
    let collector = remediating_collector(&world, "on", &["--remediate-max-age", "10m"]);
    let (uid, rv) = stuck_ip(&world, "old.ns");
    // Signed with the right key, for the IP as it is now; but its alert fired an hour ago,
    // as when a new consumer group replays the topic.
    let mut old = command("cmd-old", "old.ns", &uid, &rv);
    old.alert_fired_at_ms = now_ms() - 3_600_000;
    assert_refused(&world, &collector, &signed(old, KEY), "expired");
}

#[test]
fn a_command_naming_a_path_instead_of_an_ip_is_refused() {
    let world = World::new("sec-names", None);
    let collector = remediating_collector(&world, "on", &[]);
    let (uid, rv) = stuck_ip(&world, "named.ns");
    let mut sneaky = command("cmd-path", "named.ns", &uid, &rv);
    sneaky.subnet = "../../../api/v1/namespaces/kube-system/secrets/x".into();
    assert_refused(
        &world,
        &collector,
        &signed(sneaky, KEY),
        "not a DNS-1123 subdomain",
    );
}

#[test]
fn a_fresh_command_signed_with_the_key_is_applied() {
    let world = World::new("sec-signed", None);
    let collector = remediating_collector(&world, "on", &[]);
    let (uid, rv) = stuck_ip(&world, "good.ns");
    // A forged command that takes the real one's id first must not use the id up.
    send(
        &world,
        &signed(command("cmd-good", "good.ns", &uid, &rv), OTHER_KEY),
    );
    send(
        &world,
        &signed(command("cmd-good", "good.ns", &uid, &rv), KEY),
    );
    let records = records_of(&world, "cmd-good", 2);
    assert_eq!(records[0].outcome, RemediationOutcome::Skipped);
    assert_eq!(
        records[1].outcome,
        RemediationOutcome::Applied,
        "{:?}; log:\n{}",
        records[1],
        collector.log_text()
    );
    assert!(
        world.sim.get(Kind::Ip, "", "good.ns").is_err(),
        "the IP is gone"
    );
}

#[test]
fn the_analyzers_signed_commands_are_applied_by_a_collector_with_the_same_key() {
    let world = World::new("sec-analyzer", None);
    let collector = remediating_collector(&world, "on", &[]);
    let commands = world.commands_topic();
    let key = key_file(&world, KEY).display().to_string();
    let analyzer = AnalyzerProcess::start(
        &world.brokers,
        &world.topic,
        &format!("ipaudit-sec-{}", std::process::id()),
        &world.dir.path().join("analyzer"),
        &[
            "--cleanup-commands",
            "--commands-topic",
            &commands,
            "--commands-key-file",
            &key,
        ],
    );
    let seed = play_kube_ovn_seed(&world.sim, false);
    let records = remediations(&world, Duration::from_secs(45), |r| !r.is_empty());
    assert_eq!(
        records.first().map(|r| r.outcome),
        Some(RemediationOutcome::Applied),
        "{records:?}; collector log:\n{}\nanalyzer log:\n{}",
        collector.log_text(),
        analyzer.log_text()
    );
    assert!(world.sim.get(Kind::Ip, "", seed.leaked_ip).is_err());
}

#[test]
fn a_dry_run_followed_by_on_applies_the_command() {
    let world = World::new("sec-dryrun", None);
    let dry = remediating_collector(&world, "dry-run", &[]);
    let (uid, rv) = stuck_ip(&world, "later.ns");
    send(
        &world,
        &signed(command("cmd-later", "later.ns", &uid, &rv), KEY),
    );
    let records = records_of(&world, "cmd-later", 1);
    assert_eq!(
        records[0].outcome,
        RemediationOutcome::DryRun,
        "{}",
        dry.log_text()
    );
    assert_eq!(
        finalizers(&world, "later.ns"),
        1,
        "a dry run changes nothing"
    );
    assert!(dry.terminate(Duration::from_secs(20)), "clean stop");
    // Same state directory, same consumer group: the command is not read again from the
    // topic; the collector re-runs what it only dry-ran.
    let on = remediating_collector(&world, "on", &[]);
    let records = records_of(&world, "cmd-later", 2);
    assert_eq!(
        records[1].outcome,
        RemediationOutcome::Applied,
        "{:?}; log:\n{}",
        records[1],
        on.log_text()
    );
    assert!(world.sim.get(Kind::Ip, "", "later.ns").is_err());
}

#[test]
fn a_404_for_a_missing_resource_type_is_not_an_absent_subnet() {
    let world = World::new("sec-crd", None);
    let collector = remediating_collector(
        &world,
        "on",
        &[
            "--remediate-max-attempts",
            "2",
            "--remediate-retry-backoff",
            "300ms",
        ],
    );
    let (uid, rv) = stuck_ip(&world, "reinstall.ns");
    // The Subnet CRD is being reinstalled: every subnet request answers 404 without
    // naming a subnet.
    world.sim.withdraw_kind(Kind::Subnet);
    send(
        &world,
        &signed(command("cmd-crd", "reinstall.ns", &uid, &rv), KEY),
    );
    let records = records_of(&world, "cmd-crd", 2);
    for record in &records {
        assert_eq!(
            record.outcome,
            RemediationOutcome::Failed,
            "{record:?}; log:\n{}",
            collector.log_text()
        );
        assert!(
            record.reason.contains("does not name subnets/gone-net"),
            "{}",
            record.reason
        );
    }
    assert!(records[0].reason.contains("attempt 1 of 2; retrying"));
    assert!(records[1].reason.contains("attempt 2 of 2; giving up"));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        records_of(&world, "cmd-crd", 2).len(),
        2,
        "no attempt after the last"
    );
    assert_eq!(finalizers(&world, "reinstall.ns"), 1, "nothing was patched");
}

#[test]
fn a_failed_command_is_retried_and_applies_once_the_api_answers() {
    let world = World::new("sec-retry", None);
    let collector = remediating_collector(&world, "on", &["--remediate-retry-backoff", "2s"]);
    let (uid, rv) = stuck_ip(&world, "retry.ns");
    world.sim.withdraw_kind(Kind::Subnet);
    send(
        &world,
        &signed(command("cmd-retry", "retry.ns", &uid, &rv), KEY),
    );
    let first = records_of(&world, "cmd-retry", 1);
    assert_eq!(first[0].outcome, RemediationOutcome::Failed);
    world.sim.restore_kind(Kind::Subnet);
    let records = records_of(&world, "cmd-retry", 2);
    assert_eq!(
        records[1].outcome,
        RemediationOutcome::Applied,
        "{records:?}; log:\n{}",
        collector.log_text()
    );
    assert!(world.sim.get(Kind::Ip, "", "retry.ns").is_err());
}

#[test]
fn help_with_secrets_in_the_environment_shows_none_of_them() {
    let secrets = [
        ("IPAUDIT_KAFKA_OPTIONS", "sasl.password=kafka-hunter2"),
        ("IPAUDIT_COMMANDS_KEY", "commands-key-hunter2-0123456789"),
        ("IPAUDIT_WEBHOOK_BEARER_TOKEN", "bearer-hunter2"),
        ("IPAUDIT_WEBHOOK_HMAC_SECRET", "hmac-hunter2"),
        (
            "IPAUDIT_WEBHOOK_URL",
            "https://hooks.example/services/T0/B0/url-hunter2",
        ),
        (
            "IPAUDIT_ALERTMANAGER_URL",
            "https://user:am-hunter2@alertmanager.example",
        ),
    ];
    for (program, args) in [
        ("collector", &["run", "--help"][..]),
        ("analyzer", &["run", "--help"][..]),
        ("collector", &["run", "-h"][..]),
        ("analyzer", &["run", "-h"][..]),
    ] {
        let output = Command::new(workspace_binary(program))
            .args(args)
            .envs(secrets)
            .output()
            .expect("runs");
        assert!(output.status.success());
        let help = String::from_utf8_lossy(&output.stdout);
        assert!(help.contains("IPAUDIT_KAFKA_OPTIONS"), "{help}");
        assert!(help.contains("IPAUDIT_COMMANDS_KEY"), "{help}");
        assert!(
            !help.contains("hunter2"),
            "{program} {args:?} shows a secret:\n{help}"
        );
    }
}

#[test]
fn a_commands_key_file_too_short_stops_the_collector_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = dir.path().join("key");
    std::fs::write(&key, "short\n").expect("key file");
    let start = Instant::now();
    let output = Command::new(workspace_binary("collector"))
        .args(["run", "--cluster-id", "lab", "--remediate", "on"])
        .args(["--state-dir", &dir.path().display().to_string()])
        .args(["--commands-key-file", &key.display().to_string()])
        .args(["--kubeconfig", "/nonexistent"])
        .output()
        .expect("runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unusable commands key") && stderr.contains("at least 16"),
        "{stderr}"
    );
    assert!(!stderr.contains("short"), "the key is not echoed: {stderr}");
    assert!(start.elapsed() < Duration::from_secs(10));
}
