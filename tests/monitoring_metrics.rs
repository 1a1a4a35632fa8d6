//! The Prometheus rules (charts/ipaudit/files/prometheus-rules.yaml) and the Grafana
//! dashboard (files/grafana-dashboard.json) read only what the programs export: a real
//! collector (remediating, with the admission guard) and a real analyzer, just started,
//! export every metric name they use, and every series they select by a label value
//! (`rule="ip-orphaned"`, `outcome="failed"`...) exists from the start, at 0.

use std::collections::BTreeSet;
use std::time::Duration;

use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::broker::free_port;
use ipaudit_tests::tls::Certs;
use ipaudit_tests::wait_for;
use ipaudit_tests::world::World;

fn repo_file(path: &str) -> String {
    let path = ipaudit_tests::manifest_dir().join("..").join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The PromQL expressions of the rules and the dashboard's panels.
fn expressions() -> Vec<String> {
    let rules: serde_json::Value =
        serde_yaml_ng::from_str(&repo_file("charts/ipaudit/files/prometheus-rules.yaml"))
            .expect("rules YAML");
    let mut found = Vec::new();
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            found.push(rule["expr"].as_str().expect("expr").to_owned());
        }
    }
    let dashboard: serde_json::Value =
        serde_json::from_str(&repo_file("charts/ipaudit/files/grafana-dashboard.json"))
            .expect("dashboard JSON");
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            found.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    found
}

/// Each `ipaudit_...` metric an expression reads, with the `label="value"` matchers of its
/// selector.
fn selectors(expr: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("ipaudit_") {
        rest = &rest[at..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = rest[..end].to_owned();
        rest = &rest[end..];
        let mut matchers = Vec::new();
        if let Some(inside) = rest.strip_prefix('{') {
            let close = inside.find('}').expect("selector closes");
            for matcher in inside[..close].split(',') {
                let (label, value) = matcher.split_once('=').expect("label=value");
                let value = value.trim().trim_matches('"');
                assert!(!label.ends_with('!') && !value.starts_with('~'), "{expr}");
                matchers.push((label.trim().to_owned(), value.to_owned()));
            }
        }
        found.push((name, matchers));
    }
    found
}

#[test]
fn every_metric_and_series_the_rules_and_the_dashboard_read_is_exported_from_the_start() {
    let world = World::new("monitoring-metrics", None);
    let certs = Certs::generate();
    let admission = format!("127.0.0.1:{}", free_port());
    let (cert, key) = (
        certs.server_cert.display().to_string(),
        certs.server_key.display().to_string(),
    );
    let collector = world.remediating_collector(
        "dry-run",
        &[
            "--admission-listen",
            &admission,
            "--admission-cert",
            &cert,
            "--admission-key",
            &key,
        ],
    );
    let analyzer = AnalyzerProcess::start(
        &world.brokers,
        &world.topic,
        &format!("monitoring-{}", world.topic),
        &world.dir.path().join("analyzer"),
        &[],
    );
    analyzer.wait_joined(Duration::from_secs(60));
    // A partition's lag has a series once the partition is assigned and its end known (the
    // topic is empty: at once).
    wait_for("the analyzer's lag series", Duration::from_secs(30), || {
        analyzer
            .metrics()
            .contains("ipaudit_analyzer_consumer_lag_messages{")
            .then_some(())
    });
    // Nothing has happened yet: no alert, no failure, no dead letter, no cleanup.
    let exported = format!("{}\n{}", collector.metrics(), analyzer.metrics());
    let series: Vec<&str> = exported
        .lines()
        .filter(|l| l.starts_with("ipaudit_"))
        .collect();
    let names: BTreeSet<&str> = series
        .iter()
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default())
        .collect();

    let expressions = expressions();
    assert!(expressions.len() >= 20, "{}", expressions.len());
    let mut checked = BTreeSet::new();
    for expr in &expressions {
        for (name, matchers) in selectors(expr) {
            assert!(
                names.contains(name.as_str()),
                "{name} (in `{expr}`) is not exported; exported: {names:?}"
            );
            // The selected series exists now, before anything happened.
            let wanted: Vec<String> = matchers
                .iter()
                .map(|(label, value)| format!("{label}=\"{value}\""))
                .collect();
            assert!(
                series.iter().any(|line| {
                    line.split(['{', ' ']).next() == Some(name.as_str())
                        && wanted.iter().all(|w| line.contains(w.as_str()))
                }),
                "no {name} series with {wanted:?} at start (in `{expr}`)"
            );
            checked.insert(format!("{name}{wanted:?}"));
        }
    }
    // Every finding rule's series is there, so a panel shows 0 rather than "no data".
    for rule in [
        "subnet-deleted-before-ip",
        "ip-stuck-terminating",
        "subnet-stuck-terminating",
        "ip-orphaned",
        "ip-without-pod",
        "duplicate-ip",
        "ip-released-while-pod-alive",
        "allocation-records-disagree",
        "ip-without-handle",
        "handle-without-ip",
        "block-of-missing-node",
    ] {
        let line = format!("ipaudit_analyzer_firing_alerts{{rule=\"{rule}\"}} 0");
        assert!(exported.contains(&line), "{line} missing");
        assert!(
            checked.iter().any(|c| c.contains(rule)),
            "no rule reads the firing alerts of {rule}"
        );
    }
    analyzer.kill();
    collector.kill();
}
