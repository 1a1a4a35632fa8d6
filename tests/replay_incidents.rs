//! The recorded incidents of `fixtures/incidents/`, replayed: the exact alerts each one
//! must raise, whatever the input format and arrival order.

use std::path::PathBuf;

use ipaudit_analyzer::offline::replay::{replay, ReplayOptions, ReplayOutcome};
use ipaudit_analyzer::present::Findings;
use ipaudit_analyzer::Output;
use ipaudit_schemas::kubernetes::parse_timestamp_ms;
use ipaudit_schemas::{EventType, Stream, WatchEvent};
use ipaudit_tests::{
    framed_like_a_collector, incident_files, kubectl_events, seen_alerts, write_recording,
    SeenAlert,
};

const LEAKED_IP: &str =
    "test-vm-1.kube-ovn-dangling-ips.kube-ovn-dangling-ips-control-net.kube-ovn-dangling-ips.ovn";
const SUBNET: &str = "kube-ovn-dangling-ips-control-net";

type Seen = SeenAlert;

fn alerts(outcome: &ReplayOutcome) -> Vec<Seen> {
    seen_alerts(&outcome.outputs)
}

fn run(files: &[PathBuf]) -> ReplayOutcome {
    replay(files, &ReplayOptions::default()).expect("replay")
}

fn ev(
    stream: Stream,
    event_type: EventType,
    name: &str,
    rv: &str,
) -> (Stream, EventType, String, String) {
    (stream, event_type, name.to_owned(), rv.to_owned())
}

fn seed_alerts() -> Vec<Seen> {
    vec![
        (
            "subnet-deleted-before-ip".into(),
            "firing".into(),
            LEAKED_IP.into(),
            Some(SUBNET.into()),
            vec![
                ev(Stream::Ip, EventType::Added, LEAKED_IP, "1032"),
                // The deletion request, then the deletion: an audit log names who did each.
                ev(Stream::Subnet, EventType::Modified, SUBNET, "1100"),
                ev(Stream::Subnet, EventType::Deleted, SUBNET, "1101"),
            ],
        ),
        (
            "ip-stuck-terminating".into(),
            "firing".into(),
            LEAKED_IP.into(),
            Some(SUBNET.into()),
            vec![
                ev(Stream::Subnet, EventType::Deleted, SUBNET, "1101"),
                ev(Stream::Ip, EventType::Modified, LEAKED_IP, "1120"),
            ],
        ),
    ]
}

#[test]
fn kube_ovn_seed_raises_rule_1_at_the_subnet_deletion_and_rule_2_when_the_ip_hangs() {
    let outcome = run(&incident_files("kube-ovn-seed"));
    assert_eq!(alerts(&outcome), seed_alerts());
    let findings = Findings::from_outputs(&outcome.outputs);
    assert_eq!(findings.alerts[0].fired.fired_resource_version, "1101");
    assert_eq!(findings.alerts[1].fired.fired_resource_version, "1120");
    let fix = findings.alerts[1].fired.fix.as_deref().unwrap_or_default();
    assert!(
        fix.starts_with(&format!("kubectl patch ip {LEAKED_IP} --type=json")),
        "{fix}"
    );
    assert!(
        fix.contains(r#""value":"1120""#)
            && fix.contains(r#""op":"remove","path":"/metadata/finalizers/0""#)
    );
    assert!(outcome.problems.is_empty());
}

#[test]
fn the_healthy_teardown_raises_nothing() {
    let outcome = run(&incident_files("healthy-teardown"));
    assert_eq!(alerts(&outcome), Vec::<Seen>::new());
    assert!(outcome.stats.events_in > 10);
}

#[test]
fn concatenated_kubectl_files_give_the_same_alerts_in_either_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = incident_files("kube-ovn-seed");
    for (i, order) in [files.clone(), {
        files.reverse();
        files
    }]
    .iter()
    .enumerate()
    {
        let joined = dir.path().join(format!("all-{i}.json"));
        let text: Vec<u8> = order
            .iter()
            .flat_map(|f| std::fs::read(f).unwrap())
            .collect();
        std::fs::write(&joined, text).unwrap();
        assert_eq!(alerts(&run(&[joined])), seed_alerts(), "order {i}");
    }
}

/// Stamps events as one collector observed them, in this arrival order, 10 ms apart.
fn arriving(events: Vec<WatchEvent>) -> Vec<WatchEvent> {
    let start = parse_timestamp_ms("2025-06-02T09:00:00Z").unwrap();
    events
        .into_iter()
        .enumerate()
        .map(|(i, mut e)| {
            e.observed_at_ms = Some(start + 10 * i as i64);
            e
        })
        .collect()
}

fn events_of(incident: &str, kind: &str) -> Vec<WatchEvent> {
    let file = incident_files(incident)
        .into_iter()
        .find(|f| f.file_name().is_some_and(|n| n == kind))
        .expect("kind recorded");
    kubectl_events(&file)
}

fn replay_recording(events: Vec<WatchEvent>) -> ReplayOutcome {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("recording.avro");
    write_recording(&path, &arriving(framed_like_a_collector(events)));
    run(&[path])
}

#[test]
fn a_subnet_deletion_arriving_first_but_versioned_after_the_ip_deletion_is_healthy() {
    // The subnet stream's events, deletion included, arrive before the IP stream's.
    let mut events = events_of("healthy-teardown", "subnets.json");
    events.extend(events_of("healthy-teardown", "ips.json"));
    events.extend(events_of("healthy-teardown", "pods.json"));
    let outcome = replay_recording(events);
    assert_eq!(alerts(&outcome), Vec::<Seen>::new());
}

#[test]
fn an_ip_deletion_arriving_first_but_versioned_after_the_subnet_deletion_is_a_leak() {
    // The IP stream arrives first and ends with the IP finally deleted (someone stripped
    // the finalizer); by version the subnet went before it.
    let mut ips = events_of("kube-ovn-seed", "ips.json");
    let mut gone = ips.last().unwrap().clone();
    gone.event_type = EventType::Deleted;
    gone.resource_version = "1130".into();
    gone.resource_version_num = Some(1130);
    ips.push(gone);
    let mut events = ips;
    events.extend(events_of("kube-ovn-seed", "subnets.json"));
    events.extend(events_of("kube-ovn-seed", "pods.json"));
    let outcome = replay_recording(events);
    let healed = ev(Stream::Ip, EventType::Deleted, LEAKED_IP, "1130");
    let mut expected = seed_alerts();
    for alert in &mut expected {
        alert.1 = "resolved".into();
        alert.4.push(healed.clone());
    }
    assert_eq!(alerts(&outcome), expected);
}

#[test]
fn an_avro_recording_gives_the_same_findings_as_the_kubectl_recording() {
    let mut events: Vec<WatchEvent> = incident_files("kube-ovn-seed")
        .iter()
        .flat_map(|f| kubectl_events(f))
        .collect();
    events.sort_by_key(|e| e.resource_version_num);
    assert_eq!(alerts(&replay_recording(events)), seed_alerts());
}

#[test]
fn the_same_events_from_two_collectors_are_counted_once() {
    let mut events: Vec<WatchEvent> = incident_files("kube-ovn-seed")
        .iter()
        .flat_map(|f| kubectl_events(f))
        .collect();
    events.sort_by_key(|e| e.resource_version_num);
    let twice: Vec<WatchEvent> = events
        .iter()
        .flat_map(|e| {
            let mut other = e.clone();
            other.collector_id = "collector-1".into();
            let mut first = e.clone();
            first.collector_id = "collector-0".into();
            [first, other]
        })
        .collect();
    let outcome = replay_recording(twice);
    assert_eq!(alerts(&outcome), seed_alerts());
    assert_eq!(outcome.stats.duplicates, events.len() as u64);
}

#[test]
fn a_malformed_document_is_reported_with_its_line_and_the_rest_is_analysed() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for file in incident_files("kube-ovn-seed") {
        let mut text = std::fs::read_to_string(&file).unwrap();
        if file.ends_with("ips.json") {
            text.insert_str(0, "{\"type\": \"ADDED\", \"object\": {\"kind\": \"IP\", \"metadata\": {\"name\": \"cut-off\n");
            text.push_str("{\"type\": \"MODIFIED\", \"object\": {\"kind\": \"Gateway\"}}\n");
        }
        let copy = dir.path().join(file.file_name().unwrap());
        std::fs::write(&copy, text).unwrap();
        files.push(copy);
    }
    let outcome = run(&files);
    assert_eq!(alerts(&outcome), seed_alerts());
    let problems: Vec<String> = outcome.problems.iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].contains("line 1, column 1") && problems[0].contains("truncated"),
        "{problems:?}"
    );
    assert!(problems[1].contains("\"Gateway\""), "{problems:?}");
}

fn stuck_subnet(grace_minutes: i64, now: Option<&str>) -> Vec<Seen> {
    let mut options = ReplayOptions::default();
    options.analyzer.rules.subnet_terminating_grace_ms = grace_minutes * 60_000;
    options.now_ms = now.and_then(parse_timestamp_ms);
    alerts(&replay(&incident_files("subnet-stuck-terminating"), &options).unwrap())
}

#[test]
fn a_subnet_terminating_past_the_grace_period_raises_rule_3() {
    let expected: Vec<Seen> = vec![(
        "subnet-stuck-terminating".into(),
        "firing".into(),
        "tenant-a-net".into(),
        Some("tenant-a-net".into()),
        vec![
            ev(Stream::Subnet, EventType::Modified, "tenant-a-net", "2010"),
            ev(Stream::Subnet, EventType::Modified, "tenant-a-net", "2050"),
        ],
    )];
    // Marked at 09:01, the recording runs to 09:21.
    assert_eq!(stuck_subnet(10, None), expected);
    assert_eq!(stuck_subnet(30, None), Vec::<Seen>::new());
    assert_eq!(stuck_subnet(30, Some("2025-06-02T09:40:00Z")), expected);
}

#[test]
fn versions_going_backwards_are_reported_as_a_new_epoch() {
    let mut events: Vec<WatchEvent> = events_of("healthy-teardown", "ips.json");
    events.sort_by_key(|e| e.resource_version_num);
    let mut restored = events[0].clone();
    restored.resource_version = "5".into();
    restored.resource_version_num = Some(5);
    restored.event_type = EventType::Modified;
    events.push(restored);
    let outcome = replay_recording(events);
    let epochs: Vec<_> = outcome
        .outputs
        .iter()
        .filter_map(|o| match o {
            Output::NewEpoch(change) => Some((change.epoch, change.stream, change.rv)),
            Output::Alert(_) => None,
        })
        .collect();
    assert_eq!(epochs, [(1, Stream::Ip, 5)]);
}
