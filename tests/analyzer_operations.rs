//! Operating `analyzer run`, end to end on the real broker with a real HTTP receiver: a
//! receiver that refuses one transition for good (413) does not hold back the next, the
//! refused one is a counted dead letter that `analyzer dead-letters replay` re-drives, and
//! `/metrics` shows the consumer lag and the firing alerts; a topic it writes that does not
//! exist makes `/readyz` name it, and `--create-topic` creates it.

use std::process::Command;
use std::time::Duration;

use axum::http::StatusCode;
use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::broker::topic_setting;
use ipaudit_tests::collector::{http_get, workspace_binary};
use ipaudit_tests::receiver::Receiver;
use ipaudit_tests::scenario::{play_subnet_deleted_under_live_ip, subnet_leak_alert};
use ipaudit_tests::wait_for;
use ipaudit_tests::world::World;

fn analyzer(world: &World, receiver: &Receiver, name: &str) -> AnalyzerProcess {
    let process = AnalyzerProcess::start(
        &world.brokers,
        &world.topic,
        &format!("ipaudit-{name}-{}", std::process::id()),
        &world.dir.path().join("analyzer"),
        &["--webhook-url", &format!("{}/hook", receiver.url)],
    );
    wait_for(
        "the analyzer joins its group",
        Duration::from_secs(30),
        || {
            process
                .log_text()
                .contains("partitions assigned")
                .then_some(())
        },
    );
    process
}

fn dead_letters(world: &World, command: &str) -> String {
    let output = Command::new(workspace_binary("analyzer"))
        .args(["dead-letters", command, "--state-dir"])
        .arg(world.dir.path().join("analyzer"))
        .output()
        .expect("run analyzer dead-letters");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn a_receiver_answering_413_does_not_hold_back_the_next_transition_and_the_refused_one_can_be_redriven(
) {
    let world = World::new("sink-413", None);
    let receiver = Receiver::start(&world.runtime);
    receiver.set_refusing(Some(|body: &serde_json::Value| {
        (body["subnet"] == "huge").then_some(StatusCode::PAYLOAD_TOO_LARGE)
    }));
    let _collector = world.collector();
    let analyzer = analyzer(&world, &receiver, "sink-413");
    play_subnet_deleted_under_live_ip(&world.sim, "huge", 31);
    wait_for("the refused attempt", Duration::from_secs(15), || {
        (!receiver.refused().is_empty()).then_some(())
    });
    play_subnet_deleted_under_live_ip(&world.sim, "next", 32);
    wait_for(
        "the next transition, past the refused one",
        Duration::from_secs(15),
        || subnet_leak_alert(&receiver, "next"),
    );
    assert_eq!(
        receiver.refused().len(),
        1,
        "a permanent refusal is not retried"
    );
    let failures = wait_for("the refusal counted", Duration::from_secs(5), || {
        let text = analyzer.metrics();
        text.lines()
            .find(|l| {
                // Every sink has its series from the start: the webhook's is the one.
                l.starts_with("ipaudit_analyzer_sink_failures_total{sink=\"webhook:")
                    && l.contains("kind=\"permanent\"")
            })
            .map(str::to_owned)
    });
    assert!(failures.ends_with(" 1"), "{failures}");
    assert!(
        failures.contains(&format!("sink=\"webhook:{}/…#", receiver.url)),
        "the sink is named by its redacted URL: {failures}"
    );
    assert_eq!(
        analyzer.value("ipaudit_analyzer_dead_letters_total{kind=\"transition\"}"),
        1.0
    );
    let listed = dead_letters(&world, "list");
    assert!(listed.contains("413"), "{listed}");
    assert!(
        !listed.contains("/hook"),
        "no URL path in the listing: {listed}"
    );
    // After the receiver is fixed, re-driving delivers it to the running analyzer's sink.
    receiver.set_refusing(None::<fn(&serde_json::Value) -> Option<StatusCode>>);
    let redriven = dead_letters(&world, "replay");
    assert!(redriven.contains("requeued 1 transition"), "{redriven}");
    wait_for("the re-driven transition", Duration::from_secs(15), || {
        subnet_leak_alert(&receiver, "huge")
    });
    assert!(dead_letters(&world, "list").trim().is_empty());
}

#[test]
fn metrics_show_the_consumer_lag_and_the_firing_alerts_and_readyz_answers() {
    let world = World::new("metrics", None);
    let receiver = Receiver::start(&world.runtime);
    let _collector = world.collector();
    let analyzer = analyzer(&world, &receiver, "metrics");
    play_subnet_deleted_under_live_ip(&world.sim, "watched", 41);
    wait_for("the alert", Duration::from_secs(15), || {
        subnet_leak_alert(&receiver, "watched")
    });
    // Each sink refreshes its backlog gauge when its loop turns after a delivery; on a
    // loaded machine the log sink's turn can come after the webhook's delivery (a loaded
    // run of 4 December read 1 here).
    let text = wait_for(
        "the firing gauge, the lag and the log sink's empty backlog",
        Duration::from_secs(10),
        || {
            let text = analyzer.metrics();
            (text.contains("ipaudit_analyzer_firing_alerts{rule=\"subnet-deleted-before-ip\"} 1")
                && text.contains("ipaudit_analyzer_consumer_lag_messages{partition=\"0\"}")
                && text.contains("ipaudit_analyzer_sink_backlog_transitions{sink=\"log\"} 0"))
            .then_some(text)
        },
    );
    assert!(
        text.contains("ipaudit_analyzer_events_total{stream=\"subnet\",type=\"DELETED\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("ipaudit_analyzer_assigned_partitions 1"),
        "{text}"
    );
    // Read to its end: the catch-up estimate says 0 once a rate window closed (5 s).
    wait_for(
        "a catch-up estimate of 0 at the end of the partition",
        Duration::from_secs(20),
        || {
            analyzer
                .metrics()
                .contains("ipaudit_analyzer_catch_up_estimate_seconds 0.0")
                .then_some(())
        },
    );
    assert_eq!(
        http_get(analyzer.metrics_port, "/readyz").map(|(code, _)| code),
        Some(200)
    );
    assert_eq!(
        http_get(analyzer.metrics_port, "/healthz").map(|(code, _)| code),
        Some(200)
    );
}

#[test]
fn a_missing_commands_topic_makes_readyz_name_it_and_create_topic_creates_it() {
    let world = World::new("output-topics", None);
    let commands = format!("ipaudit.commands.absent.{}", std::process::id());
    let flags = ["--cleanup-commands", "--commands-topic", commands.as_str()];
    let readyz = |analyzer: &AnalyzerProcess| http_get(analyzer.metrics_port, "/readyz");
    let first = AnalyzerProcess::start(
        &world.brokers,
        &world.topic,
        &format!("group-{commands}"),
        &world.dir.path().join("first"),
        &flags,
    );
    wait_for(
        "readyz names the missing topic",
        Duration::from_secs(30),
        || {
            readyz(&first)
                .filter(|(code, body)| *code == 503 && body.contains(&commands))
                .map(|_| ())
        },
    );
    assert!(
        first.log_text().contains("topic does not exist"),
        "{}",
        first.log_text()
    );
    first.kill();

    let created_flags: Vec<&str> = flags.iter().copied().chain(["--create-topic"]).collect();
    let second = AnalyzerProcess::start(
        &world.brokers,
        &world.topic,
        &format!("group-{commands}"),
        &world.dir.path().join("second"),
        &created_flags,
    );
    wait_for("ready", Duration::from_secs(30), || {
        readyz(&second).filter(|(code, _)| *code == 200).map(|_| ())
    });
    let retention =
        world
            .runtime
            .block_on(topic_setting(&world.brokers, &commands, "retention.ms"));
    assert_eq!(retention.as_deref(), Some("86400000"));
}
