//! Support for ipaudit's cross-crate scenarios: the recorded incidents, the real broker,
//! the collector as a process, and the seeds played on the simulated API server.

pub mod analyzer;
pub mod book;
pub mod broker;
pub mod browser;
pub mod collector;
pub mod interloper;
pub mod kube;
pub mod manifests;
pub mod measure;
pub mod plugin;
pub mod receiver;
pub mod reference;
pub mod scenario;
pub mod tls;
pub mod world;

use std::path::{Path, PathBuf};
use std::time::Duration;

use ipaudit_schemas::convert::from_watch_document;
use std::collections::HashMap;

use ipaudit_schemas::{ContainerWriter, EventType, Stream, WatchEvent};

/// An alert as the scenario tests compare it: rule, status, subject, subnet, and its
/// evidence as (stream, type, name, resourceVersion).
pub type SeenAlert = (
    String,
    String,
    String,
    Option<String>,
    Vec<(Stream, EventType, String, String)>,
);

/// The latest state of every alert of a replay, in firing order.
pub fn seen_alerts(outputs: &[ipaudit_analyzer::Output]) -> Vec<SeenAlert> {
    ipaudit_analyzer::present::Findings::from_outputs(outputs)
        .alerts
        .iter()
        .map(|h| {
            let a = h.latest();
            (
                a.rule.clone(),
                a.status.as_str().to_owned(),
                a.subject_name.clone(),
                a.subnet.clone(),
                a.evidence
                    .iter()
                    .map(|e| {
                        (
                            e.stream,
                            e.event_type,
                            e.name.clone(),
                            e.resource_version.clone(),
                        )
                    })
                    .collect(),
            )
        })
        .collect()
}

/// The folder of one recorded incident under `tests/fixtures/incidents/`.
pub fn incident(name: &str) -> PathBuf {
    manifest_dir().join("fixtures/incidents").join(name)
}

/// This crate's folder in the checkout the tests run from: cargo and nextest say so when
/// they run a test, and that wins over the folder it was compiled in, which a build
/// cache shared between checkouts (CI's) can carry over from another one.
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// The kubectl recording files of an incident (one per kind), sorted by name.
pub fn incident_files(name: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(incident(name))
        .expect("incident folder exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

/// Every event of a kubectl recording file, in file order.
pub fn kubectl_events(path: &Path) -> Vec<WatchEvent> {
    let text = std::fs::read(path).expect("fixture readable");
    let stream = serde_json::Deserializer::from_slice(&text).into_iter::<serde_json::Value>();
    stream
        .map(|doc| {
            let doc = doc.expect("fixture is valid JSON");
            from_watch_document(&doc).expect("fixture converts").event
        })
        .collect()
}

/// Frames each stream's leading ADDED events (the initial list) with `SYNC_START` and
/// `SYNC_END`, as a collector frames a list; the list stays in its (unsorted) order.
pub fn framed_like_a_collector(events: Vec<WatchEvent>) -> Vec<WatchEvent> {
    let mut out = Vec::with_capacity(events.len() + 6);
    let mut listing: HashMap<Stream, Option<i64>> = HashMap::new();
    for event in events {
        let state = listing.entry(event.stream).or_insert(None);
        let is_list_item = event.event_type == EventType::Added && !matches!(state, Some(-1));
        match (is_list_item, *state) {
            (true, None) => {
                out.push(marker(event.stream, EventType::SyncStart, 0));
                *state = event.resource_version_num;
            }
            (true, Some(max)) => *state = Some(max.max(event.resource_version_num.unwrap_or(0))),
            (false, Some(max)) if max >= 0 => {
                out.push(marker(event.stream, EventType::SyncEnd, max));
                *state = Some(-1);
            }
            (false, _) => *state = Some(-1),
        }
        out.push(event);
    }
    for (stream, state) in listing {
        if let Some(max) = state.filter(|m| *m >= 0) {
            out.push(marker(stream, EventType::SyncEnd, max));
        }
    }
    out
}

fn marker(stream: Stream, event_type: EventType, rv: i64) -> WatchEvent {
    WatchEvent::new(stream, event_type, &rv.to_string())
}

/// Writes events to an Avro container, as `collector record` does, stamping them as one
/// collector would: cluster id, collector id, per-stream sequence, observation time.
pub fn write_recording(path: &Path, events: &[WatchEvent]) {
    let file = std::fs::File::create(path).expect("create recording");
    let mut writer = ContainerWriter::<WatchEvent, _>::new(file).expect("container");
    let mut sequences = std::collections::HashMap::new();
    for event in events {
        let mut event = event.clone();
        let seq = sequences.entry(event.stream).or_insert(0i64);
        *seq += 1;
        event.sequence = *seq;
        if event.cluster_id.is_empty() {
            event.cluster_id = "lab".into();
        }
        if event.collector_id.is_empty() {
            event.collector_id = "collector-0".into();
        }
        event.observed_at_ms = event.observed_at_ms.or(event.event_time_ms());
        writer.append(&event).expect("append");
    }
    writer.finish().expect("finish recording");
}

/// SIGTERM to `child`, then waits for it to exit; whether it exited with success in
/// `timeout` (else it is killed).
pub fn terminate(child: &mut std::process::Child, timeout: Duration) -> bool {
    let pid = child.id().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status.success();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `found` every 50 ms until it yields a value, and fails the test naming `what`
/// when `timeout` passes first.
pub fn wait_for<T>(what: &str, timeout: Duration, found: impl FnMut() -> Option<T>) -> T {
    poll_until(timeout, found).unwrap_or_else(|| panic!("{what}: nothing after {timeout:?}"))
}

/// Polls `found` every 50 ms until it yields a value; `None` when `timeout` passes first.
pub fn poll_until<T>(timeout: Duration, mut found: impl FnMut() -> Option<T>) -> Option<T> {
    let start = std::time::Instant::now();
    loop {
        if let Some(value) = found() {
            return Some(value);
        }
        if start.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
