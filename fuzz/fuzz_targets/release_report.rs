//! `release --from-report` report parsing (`CheckReport::read`) and what a release does
//! with a report before it touches a cluster (`vet`: another cluster, too old; each
//! finding's cleanup and target): a report or a typed error, never a panic; a report
//! older than the age limit is refused whatever its time says; a report read writes back
//! to a report that reads as the same.
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use ipaudit_analyzer::{Analyzer, AnalyzerConfig, Output};
use ipaudit_cleanup::{Cleanup, Target};
use ipaudit_kubectl::cluster::ClusterIdentity;
use ipaudit_kubectl::release::vet;
use ipaudit_kubectl::report::{CheckReport, ReportFinding};
use ipaudit_kubectl::snapshot::ListedKind;
use ipaudit_schemas::Stream;
use libfuzzer_sys::fuzz_target;

/// Reports of the alerts an analysis of the sample events raises, with and without
/// targets.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut analyzer = Analyzer::new(AnalyzerConfig::default());
    let mut out = Vec::new();
    for event in common::sample_events() {
        analyzer.step(event, &mut out);
    }
    analyzer.finish(Some(10_000_000), &mut out);
    let findings: Vec<ReportFinding> = out
        .into_iter()
        .filter_map(|o| match o {
            Output::Alert(alert) => Some(alert),
            Output::NewEpoch(_) => None,
        })
        .enumerate()
        .map(|(i, alert)| ReportFinding {
            target: (i % 2 == 0).then(|| Target {
                stream: Stream::IpPool,
                namespace: Some("kube-system".into()),
                name: alert.subject_name.clone(),
                uid: "w1".into(),
                resource_version: "14".into(),
                address: Some("10.9.0.1".into()),
            }),
            alert,
        })
        .collect();
    let cluster = ClusterIdentity {
        server: "https://a:6443".into(),
        kube_system_uid: Some("u1".into()),
    };
    let lists = vec![ListedKind {
        resource: "ips.kubeovn.io/v1".into(),
        resource_version: "42".into(),
        objects: 3,
    }];
    let mut seeds = Vec::new();
    for (name, findings) in [("empty", Vec::new()), ("findings", findings)] {
        let report = CheckReport::new(cluster.clone(), 1_790_000_000_000, lists.clone(), findings);
        let path = common::scratch("seed.json");
        report.write(&path).expect("a report is written");
        seeds.push((
            format!("{name}.json"),
            std::fs::read(&path).expect("read back"),
        ));
    }
    seeds
}

fuzz_target!(|bytes: &[u8]| {
    common::write_seeds_if_asked(seeds);
    let path = common::written("report.json", bytes);
    let Ok(report) = CheckReport::read(&path) else {
        return;
    };
    let others = ClusterIdentity {
        server: "https://other:6443".into(),
        kube_system_uid: Some("other".into()),
    };
    // What the time of a release can be: now (a report of a day ago is fresh), or when
    // the report was taken.
    const NOW_MS: i64 = 1_790_000_000_000;
    const DAY: Duration = Duration::from_secs(86_400);
    for live in [&report.cluster, &others] {
        for now in [report.taken_at_ms, NOW_MS] {
            for max_age in [Duration::ZERO, DAY, Duration::MAX] {
                let _ = vet(&report, live, max_age, now);
            }
        }
    }
    // A report taken more than a day before now is too old, however it says so.
    if vet(&report, &report.cluster, DAY, NOW_MS).is_ok() {
        assert!(
            i128::from(report.taken_at_ms) >= i128::from(NOW_MS) - 86_400_000,
            "a report taken at {} ms passed the one-day age check at {NOW_MS} ms",
            report.taken_at_ms
        );
    }
    for finding in &report.findings {
        if let Some(cleanup) = &finding.alert.cleanup {
            if let Some(cleanup) = Cleanup::of_alert(cleanup) {
                let _ = cleanup.name();
            }
        }
        if let Some(target) = &finding.target {
            let _ = target.describe();
        }
    }
    let again = common::scratch("again.json");
    report.write(&again).expect("a report is written");
    let back = CheckReport::read(&again).expect("a written report reads");
    assert_eq!(
        serde_json::to_value(&back).expect("a report serialises"),
        serde_json::to_value(&report).expect("a report serialises"),
        "a report reads back otherwise than written"
    );
});
