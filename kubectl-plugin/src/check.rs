//! The rules on a snapshot: the snapshot's events through the analyzer's engine, exactly
//! as `analyzer replay` runs a recording, then history's clock moved to the snapshot's time
//! so that grace periods measured from what the objects show can end. What fired and did
//! not resolve is the finding list, each with the object a release would act on (its uid
//! and resourceVersion in the snapshot).
//!
//! Rules that need history (`subnet-deleted-before-ip`, `ip-released-while-pod-alive`)
//! cannot fire from one snapshot; their state counterparts do: `ip-orphaned`,
//! `duplicate-ip`, `ip-stuck-terminating`, `subnet-stuck-terminating` and `ip-without-pod`
//! (a pod absent from the complete list of pods is gone).

use ipaudit_analyzer::analysis::engine::{Analyzer, AnalyzerConfig};
use ipaudit_analyzer::analysis::state::ClusterState;
use ipaudit_analyzer::offline::replay::ReplayOutcome;
use ipaudit_analyzer::present::Findings;
use ipaudit_schemas::{Alert, Stream, WatchEvent, KINDS};

use ipaudit_cleanup::Target;

use crate::report::ReportFinding;

/// What the rules found in a snapshot.
#[derive(Debug)]
pub struct CheckResult {
    /// In the shape `analyzer replay` reports, for its text and JSON lines renderers (its
    /// alert transitions moved into `findings`).
    pub outcome: ReplayOutcome,
    /// Alerts folded into histories.
    pub findings: Findings,
    /// The alerts still firing at the snapshot's time, each with its target.
    pub firing: Vec<ReportFinding>,
    /// The Calico findings in `calicoctl ipam check`'s categories (none without Calico).
    pub calico: Vec<crate::calicoctl::Category>,
}

/// Runs the analyzer over the snapshot's events; `now_ms` is the snapshot's time.
pub fn analyze(events: Vec<WatchEvent>, now_ms: i64, config: AnalyzerConfig) -> CheckResult {
    let mut analyzer = Analyzer::new(config);
    let mut outcome = ReplayOutcome::default();
    for event in events {
        if let Some(rv) = event.resource_version_num {
            let (lo, hi) = outcome.rv_range.unwrap_or((rv, rv));
            outcome.rv_range = Some((lo.min(rv), hi.max(rv)));
        }
        analyzer.step(event, &mut outcome.outputs);
    }
    analyzer.finish(Some(now_ms), &mut outcome.outputs);
    outcome.stats = analyzer.stats();
    // The transitions move into the findings (as `analyzer replay` does): held once.
    let findings = Findings::take(std::mem::take(&mut outcome.outputs));
    let firing: Vec<ReportFinding> = findings
        .alerts
        .iter()
        .filter(|h| h.resolved.is_none())
        .map(|h| ReportFinding {
            target: target(analyzer.state(), &h.fired),
            alert: h.fired.clone(),
        })
        .collect();
    let calico = crate::calicoctl::categories(analyzer.state(), &firing);
    CheckResult {
        outcome,
        findings,
        firing,
        calico,
    }
}

/// The object an alert is about, as the snapshot showed it. A pool allocation's subject
/// (`<pool>/<address>`) is its pool, with the address.
fn target(state: &ClusterState, alert: &Alert) -> Option<Target> {
    let of = |stream: Stream, key: &str, address: Option<&str>| {
        let record = state.get(stream, key)?;
        let spec = stream.spec()?;
        let (namespace, name) = match key.split_once('/') {
            Some((ns, name)) if spec.namespaced => (Some(ns.to_owned()), name.to_owned()),
            _ => (None, key.to_owned()),
        };
        Some(Target {
            stream,
            namespace,
            name,
            uid: record.uid.to_string(),
            resource_version: record.resource_version().to_string(),
            address: address.map(str::to_owned),
        })
    };
    if alert.subject_kind == "Allocation" {
        let (pool, address) = alert.subject_name.rsplit_once('/')?;
        return [Stream::IpPool, Stream::SpiderIpPool]
            .into_iter()
            .find_map(|stream| of(stream, pool, Some(address)));
    }
    let spec = KINDS.iter().find(|k| k.kind == alert.subject_kind)?;
    of(spec.stream, &alert.subject_name, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_analyzer::analysis::rules::RuleConfig;
    use ipaudit_collector::watch::event::Stamp;
    use ipaudit_schemas::kubernetes::format_timestamp_ms;
    use ipaudit_schemas::EventType;
    use serde_json::{json, Value};

    const NOW: i64 = 1_790_000_000_000;
    const HOUR: i64 = 3_600_000;

    /// A snapshot of these lists, framed as [`crate::snapshot`] frames them, at `NOW`.
    fn snapshot(lists: &[(Stream, Vec<Value>)]) -> Vec<WatchEvent> {
        let stamp = Stamp {
            cluster_id: "c".into(),
            collector_id: "kubectl-ipaudit".into(),
            raw_objects: false,
        };
        let mut rv = 100;
        let mut events = Vec::new();
        for (stream, objects) in lists {
            let mut push = |mut e: WatchEvent| {
                e.observed_at_ms = None;
                events.push(e);
            };
            push(stamp.marker(*stream, EventType::SyncStart, "0", 0));
            for object in objects {
                rv += 1;
                let mut object = object.clone();
                object["metadata"]["resourceVersion"] = json!(rv.to_string());
                push(
                    stamp
                        .object_event(*stream, EventType::Added, &object, 0)
                        .unwrap()
                        .0,
                );
            }
            rv += 1;
            push(stamp.marker(*stream, EventType::SyncEnd, &rv.to_string(), 0));
        }
        events
    }

    fn meta(name: &str, age_ms: i64) -> Value {
        json!({"name": name, "uid": format!("uid-{name}"),
            "creationTimestamp": format_timestamp_ms(NOW - age_ms)})
    }

    fn subnet(name: &str) -> Value {
        json!({"metadata": meta(name, 24 * HOUR), "spec": {"cidrBlock": "10.16.0.0/16", "provider": "ovn"}})
    }

    fn ip(pod: &str, subnet: &str, address: &str, age_ms: i64) -> Value {
        json!({"metadata": meta(&format!("{pod}.default"), age_ms),
            "spec": {"podName": pod, "namespace": "default", "subnet": subnet,
                "ipAddress": address, "v4IpAddress": address, "podType": ""}})
    }

    fn pod(name: &str, address: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default", "uid": format!("uid-pod-{name}"),
                "creationTimestamp": format_timestamp_ms(NOW - 24 * HOUR),
                "annotations": {"ovn.kubernetes.io/allocated": "true",
                    "ovn.kubernetes.io/ip_address": address,
                    "ovn.kubernetes.io/logical_switch": "net-1"}},
            "status": {"phase": "Running", "podIP": address, "podIPs": [{"ip": address}]}})
    }

    fn terminating(mut object: Value, since_ms: i64, finalizer: &str) -> Value {
        object["metadata"]["deletionTimestamp"] = json!(format_timestamp_ms(NOW - since_ms));
        object["metadata"]["finalizers"] = json!([finalizer]);
        object
    }

    fn rules_fired(lists: &[(Stream, Vec<Value>)]) -> Vec<(String, String)> {
        let config = AnalyzerConfig {
            rules: RuleConfig::default(),
            ..AnalyzerConfig::default()
        };
        let result = analyze(snapshot(lists), NOW, config);
        let mut fired: Vec<(String, String)> = result
            .firing
            .iter()
            .map(|f| (f.alert.rule.clone(), f.alert.subject_name.clone()))
            .collect();
        fired.sort();
        fired
    }

    fn fired(rule: &str, subject: &str) -> (String, String) {
        (rule.to_owned(), subject.to_owned())
    }

    fn handle(id: &str, cidr: &str, age_ms: i64) -> Value {
        json!({"metadata": meta(id, age_ms),
            "spec": {"handleID": id, "block": {cidr: 1}, "deleted": false}})
    }

    fn empty_block(cidr: &str, age_ms: i64) -> Value {
        json!({"metadata": meta(&cidr.replace(['.', '/'], "-"), age_ms),
            "spec": {"cidr": cidr, "allocations": [null, null], "attributes": [],
                "unallocated": [0, 1], "sequenceNumber": 2}})
    }

    #[test]
    fn a_snapshot_measures_the_handle_grace_from_the_objects_own_last_change() {
        // An orphan handle an hour old is reported; one whose block was written 10 s ago
        // may still be in Calico's handle-after-block window.
        let found = rules_fired(&[
            (
                Stream::CalicoIpamHandle,
                vec![
                    handle("k8s-pod-network.old", "10.244.1.0/26", HOUR),
                    handle("k8s-pod-network.new", "10.244.2.0/26", HOUR),
                ],
            ),
            (
                Stream::CalicoIpamBlock,
                vec![
                    empty_block("10.244.1.0/26", HOUR),
                    empty_block("10.244.2.0/26", 10_000),
                ],
            ),
        ]);
        assert_eq!(found, [fired("handle-without-ip", "k8s-pod-network.old")]);
    }

    #[test]
    fn a_healthy_snapshot_finds_nothing() {
        let found = rules_fired(&[
            (Stream::Ip, vec![ip("a", "net-1", "10.16.0.5", HOUR)]),
            (Stream::Pod, vec![pod("a", "10.16.0.5")]),
            (Stream::Subnet, vec![subnet("net-1")]),
        ]);
        assert_eq!(found, []);
    }

    #[test]
    fn an_ip_naming_an_absent_subnet_is_orphaned() {
        let found = rules_fired(&[
            (Stream::Ip, vec![ip("a", "gone", "10.16.0.5", HOUR)]),
            (Stream::Pod, vec![pod("a", "10.16.0.5")]),
            (Stream::Subnet, vec![subnet("net-1")]),
        ]);
        assert_eq!(found, [fired("ip-orphaned", "a.default")]);
    }

    #[test]
    fn a_terminating_ip_of_an_absent_subnet_is_stuck() {
        let stuck = terminating(
            ip("a", "gone", "10.16.0.5", HOUR),
            60_000,
            "kubeovn.io/kube-ovn-controller",
        );
        let found = rules_fired(&[
            (Stream::Ip, vec![stuck]),
            (Stream::Pod, vec![pod("a", "10.16.0.5")]),
            (Stream::Subnet, vec![subnet("net-1")]),
        ]);
        assert_eq!(found, [fired("ip-stuck-terminating", "a.default")]);
    }

    #[test]
    fn a_subnet_terminating_longer_than_the_grace_is_stuck() {
        let stuck = terminating(subnet("old"), HOUR, "kubeovn.io/kube-ovn-controller");
        let found = rules_fired(&[
            (Stream::Ip, vec![]),
            (Stream::Pod, vec![]),
            (Stream::Subnet, vec![subnet("net-1"), stuck]),
        ]);
        assert_eq!(found, [fired("subnet-stuck-terminating", "old")]);
    }

    #[test]
    fn a_subnet_terminating_for_less_than_the_grace_is_not_reported() {
        let recent = terminating(subnet("old"), 60_000, "kubeovn.io/kube-ovn-controller");
        let found = rules_fired(&[(Stream::Pod, vec![]), (Stream::Subnet, vec![recent])]);
        assert_eq!(found, []);
    }

    #[test]
    fn an_ip_whose_pod_is_absent_from_the_list_of_pods_is_without_pod() {
        let found = rules_fired(&[
            (Stream::Ip, vec![ip("a", "net-1", "10.16.0.5", HOUR)]),
            (Stream::Pod, vec![]),
            (Stream::Subnet, vec![subnet("net-1")]),
        ]);
        assert_eq!(found, [fired("ip-without-pod", "a.default")]);
    }

    #[test]
    fn an_ip_younger_than_the_owner_grace_is_not_yet_without_pod() {
        let found = rules_fired(&[
            (Stream::Ip, vec![ip("a", "net-1", "10.16.0.5", 60_000)]),
            (Stream::Pod, vec![]),
            (Stream::Subnet, vec![subnet("net-1")]),
        ]);
        assert_eq!(found, []);
    }

    #[test]
    fn two_live_ips_holding_one_address_are_a_duplicate() {
        let found = rules_fired(&[
            (
                Stream::Ip,
                vec![
                    ip("a", "net-1", "10.16.0.5", HOUR),
                    ip("b", "net-1", "10.16.0.5", HOUR),
                ],
            ),
            (
                Stream::Pod,
                vec![pod("a", "10.16.0.5"), pod("b", "10.16.0.5")],
            ),
            (Stream::Subnet, vec![subnet("net-1")]),
        ]);
        assert_eq!(
            found.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(),
            ["duplicate-ip"],
            "{found:?}"
        );
    }

    #[test]
    fn a_finding_names_its_target_as_the_snapshot_showed_it() {
        let result = analyze(
            snapshot(&[
                (Stream::Ip, vec![ip("a", "gone", "10.16.0.5", HOUR)]),
                (Stream::Pod, vec![pod("a", "10.16.0.5")]),
                (Stream::Subnet, vec![]),
            ]),
            NOW,
            AnalyzerConfig::default(),
        );
        let target = result.firing[0].target.as_ref().unwrap();
        assert_eq!(
            (
                target.stream,
                target.name.as_str(),
                target.uid.as_str(),
                target.resource_version.as_str()
            ),
            (Stream::Ip, "a.default", "uid-a.default", "101")
        );
    }
}
