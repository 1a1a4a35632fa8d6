//! `ip-without-pod`: an allocation whose pod is gone (by namespace/name, and by uid where
//! the record carries one) for longer than the owner grace: a kube-ovn IP of a plain pod,
//! a whereabouts pool allocation or reservation, a spiderpool pool entry or (not
//! terminating) SpiderEndpoint, a Calico block's allocation (after Calico's 15-minute leak
//! grace), a CiliumNode's used address (after 11 minutes: Cilium's IPAM expiration and its
//! write lag) or a CiliumEndpoint. Addresses kept on purpose (StatefulSet, VM) and
//! addresses that belong to no pod (node, U2O, multicast, reserved IPs; Calico's tunnel
//! and LoadBalancer addresses and those cooling down after release; Cilium's router,
//! health and ingress addresses) are never reported. A pod is
//! gone once deleted, replaced by a pod of another uid, or absent from a complete list of
//! pods; the grace runs on event time from then (or from the allocation's first sighting,
//! if later). Resolved when the allocation is gone or its pod is back.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashSet};

use ipaudit_schemas::{Cleanup, CleanupAction, NetworkStatus, Severity, Stream};
use serde::{Deserialize, Serialize};

use super::{duration_text, evidence, Change, Context, Deadlines, Rule};
use crate::analysis::alerts::Finding;
use crate::analysis::state::holdings::{self, Holding};
use crate::analysis::state::{EventRef, ObjectRecord, Part, RecordKey};

const NAME: &str = "ip-without-pod";

/// The kinds whose records hold addresses for pods.
const HOLDING_STREAMS: [Stream; 9] = [
    Stream::Ip,
    Stream::IpPool,
    Stream::OverlappingRangeIpReservation,
    Stream::SpiderIpPool,
    Stream::SpiderEndpoint,
    Stream::CalicoIpamBlock,
    Stream::CalicoV3IpamBlock,
    Stream::CiliumNode,
    Stream::CiliumEndpoint,
];

/// Whether each address a record of `stream` holds is a subject of its own: a pool's
/// entries, a Calico block's allocations, a CiliumNode's used addresses, a CiliumEndpoint's
/// addresses (whose alerts are named after the address).
fn per_address(stream: Stream) -> bool {
    matches!(
        stream,
        Stream::IpPool
            | Stream::SpiderIpPool
            | Stream::CalicoIpamBlock
            | Stream::CalicoV3IpamBlock
            | Stream::CiliumNode
            | Stream::CiliumEndpoint
    )
}

/// Rule 5.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct IpWithoutPod {
    /// Allocations whose pod is gone, due at gone-since + grace; keys from [`unit`].
    deadlines: Deadlines,
    /// The records that have an allocation in `deadlines`, so that a healthy allocation
    /// costs no key to look for.
    waiting: HashSet<RecordKey>,
}

/// One allocation: a record and one address it holds.
fn unit(key: &RecordKey, address: &str) -> String {
    format!("{}|{}|{}", key.0.as_str(), key.1, address)
}

fn parse_unit(unit: &str) -> Option<(RecordKey, String)> {
    let mut parts = unit.splitn(3, '|');
    let stream = ipaudit_schemas::kinds::stream_labelled(parts.next()?)?;
    let key = parts.next()?.to_owned();
    let address = parts.next()?.to_owned();
    Some(((stream, key.into()), address))
}

/// The alert subject of an allocation: a pool entry is its own subject (`pool/address`),
/// and so is a Calico or Cilium allocation (named by its address, as Calico's and Cilium's
/// own tools name them); other records are one subject each, whatever addresses they hold.
/// (kind, name, uid.)
fn subject(key: &RecordKey, record_uid: &str, address: &str) -> (&'static str, String, String) {
    (
        match key.0 {
            Stream::IpPool | Stream::SpiderIpPool => "Allocation",
            stream if per_address(stream) => "Address",
            stream => stream.kind(),
        },
        match key.0 {
            Stream::IpPool | Stream::SpiderIpPool => format!("{}/{address}", key.1),
            stream if per_address(stream) => address.to_owned(),
            _ => key.1.to_string(),
        },
        subject_uid(key, record_uid, address).into_owned(),
    )
}

/// The uid of an allocation's alert subject (see [`subject`]); allocates only for
/// per-address subjects. A Calico block of either API group gives the same uid to one
/// allocation (the block's name and the address), so that a block seen in both groups
/// during a migration fires once.
fn subject_uid<'a>(key: &RecordKey, record_uid: &'a str, address: &str) -> Cow<'a, str> {
    match key.0 {
        Stream::CalicoIpamBlock | Stream::CalicoV3IpamBlock => {
            Cow::Owned(format!("calico/{}/{address}", key.1))
        }
        stream if per_address(stream) => Cow::Owned(format!("{record_uid}/{address}")),
        _ => Cow::Borrowed(record_uid),
    }
}

impl Rule for IpWithoutPod {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_change(&mut self, ctx: &mut Context<'_>, change: &Change<'_>) {
        let stream = change.stream();
        if HOLDING_STREAMS.contains(&stream) && !change.is_list_end() {
            let key = change.key();
            if let Some(removed) = change.removed() {
                for holding in change.held_before() {
                    self.forget(
                        ctx,
                        &key,
                        &removed.uid.text(),
                        holding.address,
                        change.event,
                    );
                }
            }
            if let (Some(after), None) = (change.after, change.removed()) {
                for released in change.released {
                    self.forget(
                        ctx,
                        &key,
                        &after.uid.text(),
                        &released.address,
                        change.event,
                    );
                }
            }
            if let Some(after) = change.after {
                let termination_changed =
                    change.before.map(|b| b.is_terminating()) != Some(after.is_terminating());
                if change.reindexed || termination_changed {
                    for holding in change.held_after() {
                        self.evaluate_holding(ctx, &key, after, holding, change.event);
                    }
                }
            }
            if stream == Stream::SpiderEndpoint && change.reindexed {
                // An endpoint says whether its pod's pool entries are kept on purpose.
                self.evaluate_owner(ctx, &change.event.name, change.event);
            }
            return;
        }
        if stream != Stream::Pod {
            return;
        }
        if change.is_list_end() {
            self.evaluate_all_without_pod(ctx, change.event);
            return;
        }
        // A pod appeared, went, or changed the addresses it shows (its network-status can
        // give a whereabouts allocation back to it); a phase change alone changes nothing.
        let appeared = change.before.is_none() || change.removed().is_some();
        if appeared || change.after.is_none() || shown_addresses_changed(change) {
            self.evaluate_owner(ctx, &change.event.name, change.event);
        }
    }

    fn on_time(&mut self, ctx: &mut Context<'_>, now_ms: i64) {
        for (_, unit) in self.deadlines.take_due(now_ms) {
            if let Some((key, address)) = parse_unit(&unit) {
                if !self.deadlines.has_key_prefix(&self::unit(&key, "")) {
                    self.waiting.remove(&key);
                }
                let cause = match ctx.state.get(key.0, &key.1) {
                    Some(record) => record.last.clone(),
                    None => continue,
                };
                self.evaluate(ctx, &key, &address, &cause);
            }
        }
    }

    fn has_due(&self, now_ms: i64) -> bool {
        self.deadlines.any_due(now_ms)
    }

    state_is_self!();
}

/// Whether the block of the same name in Calico's other API group still holds `address`
/// (during a migration a block is in both: one object, whose allocation is not gone).
fn held_in_the_other_group(ctx: &Context<'_>, key: &RecordKey, address: &str) -> bool {
    let other = match key.0 {
        Stream::CalicoIpamBlock => Stream::CalicoV3IpamBlock,
        Stream::CalicoV3IpamBlock => Stream::CalicoIpamBlock,
        _ => return false,
    };
    ctx.state
        .holdings_of(&(other, key.1.clone()))
        .iter()
        .any(|h| h.address == address)
}

/// Whether a pod's network-status changed.
fn shown_addresses_changed(change: &Change<'_>) -> bool {
    fn shown(record: Option<&ObjectRecord>) -> Option<&[NetworkStatus]> {
        match record.map(ObjectRecord::part) {
            Some(Part::Pod(pod)) => Some(pod.network_status()),
            _ => None,
        }
    }
    change.reindexed && shown(change.before) != shown(change.after)
}

impl IpWithoutPod {
    /// The allocation is gone: stop its timer, resolve its alert.
    fn forget(
        &mut self,
        ctx: &mut Context<'_>,
        key: &RecordKey,
        record_uid: &str,
        address: &str,
        by: &EventRef,
    ) {
        self.cancel(key, address);
        let uid = subject_uid(key, record_uid, address);
        if ctx.firing_about(NAME, &uid).is_empty() || held_in_the_other_group(ctx, key, address) {
            return;
        }
        let (_, name, _) = subject(key, record_uid, address);
        ctx.resolve_all_about(NAME, &uid, || {
            evidence(
                by,
                format!("{name} no longer holds {address} ({})", by.event_type),
            )
        });
    }

    /// Stops the allocation's timer, if it has one.
    fn cancel(&mut self, key: &RecordKey, address: &str) {
        if self.waiting.contains(key) {
            self.deadlines.cancel(&unit(key, address));
            if !self.deadlines.has_key_prefix(&unit(key, "")) {
                self.waiting.remove(key);
            }
        }
    }

    /// Sets the allocation's timer.
    fn schedule(&mut self, key: &RecordKey, address: &str, due: i64) {
        self.deadlines.set(&unit(key, address), due);
        self.waiting.insert(key.clone());
    }

    /// Every allocation held for the pod `owner` (it appeared, changed uid or went).
    fn evaluate_owner(&mut self, ctx: &mut Context<'_>, owner: &str, cause: &EventRef) {
        let state = ctx.state;
        for (key, record) in state.records_held_for(owner) {
            for holding in holdings::holdings(&key.1, record) {
                if holding.owner == owner {
                    self.evaluate_holding(ctx, &key, record, &holding, cause);
                }
            }
        }
    }

    /// After a complete list of pods: every allocation whose pod it lacked.
    fn evaluate_all_without_pod(&mut self, ctx: &mut Context<'_>, cause: &EventRef) {
        let mut units: BTreeSet<(RecordKey, String)> = BTreeSet::new();
        for stream in HOLDING_STREAMS {
            for (name, record) in ctx.state.records(stream) {
                for holding in holdings::holdings(name, record) {
                    if ctx.state.pod(&holding.owner).is_none() {
                        units.insert(((stream, name.clone()), holding.address.to_owned()));
                    }
                }
            }
        }
        for (key, address) in units {
            self.evaluate(ctx, &key, &address, cause);
        }
    }

    /// Fires, schedules or resolves the rule for one allocation.
    fn evaluate(
        &mut self,
        ctx: &mut Context<'_>,
        key: &RecordKey,
        address: &str,
        cause: &EventRef,
    ) {
        let state = ctx.state;
        let Some(record) = state.get(key.0, &key.1) else {
            self.cancel(key, address);
            return;
        };
        let held = state.holdings_of(key);
        match held.iter().find(|h| h.address == address) {
            Some(holding) => self.evaluate_holding(ctx, key, record, holding, cause),
            None => self.forget(ctx, key, &record.uid.text(), address, cause),
        }
    }

    /// Fires, schedules or resolves the rule for one holding of a live record.
    fn evaluate_holding(
        &mut self,
        ctx: &mut Context<'_>,
        key: &RecordKey,
        record: &ObjectRecord,
        holding: &Holding<'_>,
        cause: &EventRef,
    ) {
        let state = ctx.state;
        let address = holding.address;
        let excluded =
            state.is_kept(holding) || (key.0 == Stream::SpiderEndpoint && record.is_terminating());
        let uid = match holding.owner_uid {
            Some(uid) => Some(uid),
            None => state.owner_uid(key, holding),
        };
        let gone = if excluded {
            None
        } else {
            state.owner_gone_since(&holding.owner, uid)
        };
        let Some(gone) = gone else {
            // The common case: its pod is there.
            self.cancel(key, address);
            let record_uid = record.uid.text();
            let subject_uid = subject_uid(key, &record_uid, address);
            if !ctx.firing_about(NAME, &subject_uid).is_empty() {
                let what = if excluded {
                    format!("{address} of {} is kept on purpose", holding.owner)
                } else {
                    format!("pod {} exists", holding.owner)
                };
                ctx.resolve_all_about(NAME, &subject_uid, || evidence(cause, what));
            }
            return;
        };
        let since = gone
            .time_ms()
            .unwrap_or(0)
            .max(record.first_ms().unwrap_or(0));
        let grace_ms = ctx.config.owner_grace_of(key.0);
        let due = since.saturating_add(grace_ms);
        if ctx.now_ms <= due {
            self.schedule(key, address, due);
            return;
        }
        self.cancel(key, address);
        let finding = finding(grace_ms, key, record, holding, uid, gone);
        ctx.fire_at(finding, due);
    }
}

fn finding(
    grace_ms: i64,
    key: &RecordKey,
    record: &ObjectRecord,
    holding: &Holding<'_>,
    owner_uid: Option<&str>,
    gone: &EventRef,
) -> Finding {
    let (subject_kind, subject_name, subject_uid) =
        subject(key, &record.uid.text(), holding.address);
    let address = &holding.address;
    let owner = &holding.owner;
    let pod = match owner_uid {
        Some(uid) => format!("{owner} (uid {uid})"),
        None => owner.to_string(),
    };
    let record_text = format!("{} {}", key.0.kind(), key.1);
    let pool = holding.scope.place().to_owned();
    Finding {
        rule: NAME,
        severity: Severity::Warning,
        subject_kind,
        subject_name,
        subject_uid,
        scope: None,
        subnet: Some(pool),
        namespace: super::owner_namespace(owner),
        summary: format!(
            "{record_text} still holds {address} for pod {pod}, which has been gone for more than {}: the address is lost until it is released",
            duration_text(grace_ms)
        ),
        fix: Some(fix(key, record, holding)),
        cleanup: cleanup(key, record, holding),
        evidence: vec![
            evidence(gone, format!("Pod {pod} is gone ({})", gone.event_type)),
            evidence(&record.last, format!("{record_text} holds {address} for {owner}")),
        ],
    }
}

/// The typed cleanup the collector can run, at this uid and resourceVersion: for a
/// whereabouts pool, removing exactly this allocation (its pod gone); for a whereabouts
/// reservation, deleting it (the collector checks that no pool allocation backs it); for a
/// SpiderIPPool, removing this entry; for a Calico block, releasing this allocation (and
/// lowering its handle's count); for a CiliumEndpoint, deleting it. A kube-ovn IP of a
/// gone pod has none: kube-ovn releases it when the IP is deleted, and the fix says how;
/// nor has a CiliumNode's used address: its agent owns it.
fn cleanup(key: &RecordKey, record: &ObjectRecord, holding: &Holding<'_>) -> Option<Cleanup> {
    let (action, stream, address) = match record.part() {
        Part::IpPool(_) => (
            CleanupAction::RemoveAllocation,
            Stream::IpPool,
            Some(holding.address.to_string()),
        ),
        Part::IpReservation(_) => (
            CleanupAction::Delete,
            Stream::OverlappingRangeIpReservation,
            None,
        ),
        Part::SpiderIpPool(_) => (
            CleanupAction::RemoveAllocation,
            Stream::SpiderIpPool,
            Some(holding.address.to_string()),
        ),
        Part::CalicoBlock(_) => (
            CleanupAction::RemoveAllocation,
            key.0,
            Some(holding.address.to_string()),
        ),
        Part::CiliumEndpoint(_) => (CleanupAction::Delete, Stream::CiliumEndpoint, None),
        _ => return None,
    };
    let (namespace, name) = match key.1.split_once('/') {
        Some((namespace, name)) => (Some(namespace.to_owned()), name),
        None => (None, &*key.1),
    };
    Some(Cleanup {
        action,
        target_stream: stream,
        target_name: name.to_owned(),
        target_namespace: namespace,
        target_uid: record.uid.text().to_string(),
        resource_version: record.resource_version().to_string(),
        finalizer: String::new(),
        pool: if action == CleanupAction::RemoveAllocation {
            name.to_owned()
        } else {
            String::new()
        },
        address,
    })
}

/// How to release the address by hand, for each kind of record.
fn fix(key: &RecordKey, record: &ObjectRecord, holding: &Holding<'_>) -> String {
    let resource = key.0.spec().map_or_else(String::new, |k| k.resource());
    match record.part() {
        Part::Ip(_) => format!(
            "Delete the IP so that kube-ovn releases the address: {}",
            crate::analysis::fix::delete("ip", &key.1)
        ),
        Part::IpPool(pool) => {
            let offset = pool
                .allocations
                .iter()
                .find(|a| a.address == holding.address)
                .map_or("<offset>", |a| a.offset.as_str());
            let command = match offset.parse::<u64>() {
                Ok(offset) => crate::analysis::fix::json_patch(
                    &resource,
                    &key.1,
                    &record.resource_version(),
                    vec![serde_json::json!({"op": "remove", "path": format!("/spec/allocations/{offset}")})],
                ),
                Err(_) => crate::analysis::fix::NO_COMMAND.to_owned(),
            };
            format!(
                "whereabouts' ip-reconciler releases it on its next run; to release it now: {command}"
            )
        }
        Part::SpiderIpPool(_) => format!(
            "spiderpool's garbage collector releases entries of gone pods (every 10 min by default); if it does not, check spiderpool-controller's logs for pool {}; a collector with --remediate on removes this entry (a status patch that tests the pool's resourceVersion)",
            key.1
        ),
        Part::CalicoBlock(_) => format!(
            "Calico's kube-controllers releases allocations of gone pods after its leak grace period; if it does not (is kube-controllers running? its logs name the handle it is stuck on), release it with its sequence number checked: a collector with --remediate on does (a block patch testing the block's resourceVersion and the ordinal's sequence number, then the handle's count), as does kubectl ipaudit release or calicoctl ipam release --ip={}",
            holding.address
        ),
        Part::CiliumNode(_) => format!(
            "The Cilium agent on node {} releases it when it restarts or garbage-collects its endpoints; check that agent's logs (cilium-dbg status --all-addresses there lists its owner)",
            key.1
        ),
        _ => format!("Delete it: {}", crate::analysis::fix::delete(&resource, &key.1)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{t, transitions, transitions_of, MIN};
    use super::NAME;
    use ipaudit_schemas::builders::EventBuilder;

    fn ip(pod_type: &str) -> EventBuilder {
        EventBuilder::ip("web-0.default", "ovn-default").ip_of(
            "default",
            "web-0",
            "10.16.0.9",
            pod_type,
        )
    }

    fn pod() -> EventBuilder {
        EventBuilder::pod("default", "web-0").uid("p1")
    }

    #[test]
    fn a_plain_pods_ip_outliving_its_pod_past_the_grace_is_reported_at_the_deadline() {
        let got = transitions(vec![
            pod().rv(1).at(0).added(),
            ip("").rv(2).at(1).added(),
            pod().rv(3).at(MIN).deleted(),
            EventBuilder::pod("default", "other")
                .rv(4)
                .at(12 * MIN)
                .added(),
        ]);
        assert_eq!(got, [t(NAME, "firing", "web-0.default")]);
    }

    #[test]
    fn an_ip_released_within_the_grace_or_kept_on_purpose_is_not_reported() {
        let released = transitions(vec![
            pod().rv(1).at(0).added(),
            ip("").rv(2).at(1).added(),
            pod().rv(3).at(MIN).deleted(),
            ip("").rv(4).at(2 * MIN).deleted(),
            EventBuilder::pod("default", "other")
                .rv(5)
                .at(30 * MIN)
                .added(),
        ]);
        assert!(released.is_empty(), "{released:?}");
        for kept in ["StatefulSet", "VirtualMachine"] {
            let got = transitions(vec![
                pod().rv(1).at(0).added(),
                ip(kept).rv(2).at(1).added(),
                pod().rv(3).at(MIN).deleted(),
                EventBuilder::pod("default", "other")
                    .rv(4)
                    .at(30 * MIN)
                    .added(),
            ]);
            assert!(got.is_empty(), "{kept}: {got:?}");
        }
    }

    #[test]
    fn a_whereabouts_allocation_of_a_gone_pod_comes_with_its_guarded_patch() {
        use crate::analysis::engine::{Analyzer, AnalyzerConfig, Output};
        let pool = || EventBuilder::ip_pool("kube-system", "10.200.0.0-16", "10.200.0.0/16");
        let mut analyzer = Analyzer::new(AnalyzerConfig::default());
        let mut out = Vec::new();
        for event in [
            EventBuilder::pod("default", "web-0").rv(1).at(0).added(),
            pool()
                .allocation(1292, "10.200.5.12", "default/web-0")
                .rv(2)
                .at(1)
                .added(),
            EventBuilder::pod("default", "web-0")
                .rv(3)
                .at(MIN)
                .deleted(),
            EventBuilder::pod("default", "other")
                .rv(4)
                .at(12 * MIN)
                .added(),
        ] {
            analyzer.step(event, &mut out);
        }
        analyzer.finish(None, &mut out);
        let alert = out
            .iter()
            .find_map(|o| match o {
                Output::Alert(a) if a.rule == NAME => Some(a),
                _ => None,
            })
            .expect("the allocation is reported");
        assert_eq!(alert.subject_name, "kube-system/10.200.0.0-16/10.200.5.12");
        assert!(
            !alert.summary.contains("no fix command"),
            "{}",
            alert.summary
        );
        let fix = alert.fix.as_deref().unwrap_or_default();
        assert!(
            fix.contains("kubectl patch ippools.whereabouts.cni.cncf.io -n kube-system 10.200.0.0-16 --type=json")
                && fix.contains(r#""op":"remove","path":"/spec/allocations/1292""#),
            "{fix}"
        );
        let cleanup = alert
            .cleanup
            .as_ref()
            .expect("a typed cleanup for the collector");
        assert_eq!(
            cleanup.action,
            ipaudit_schemas::CleanupAction::RemoveAllocation
        );
        assert_eq!(cleanup.target_stream, ipaudit_schemas::Stream::IpPool);
        assert_eq!(
            (
                cleanup.target_namespace.as_deref(),
                cleanup.target_name.as_str()
            ),
            (Some("kube-system"), "10.200.0.0-16")
        );
        assert_eq!(cleanup.address.as_deref(), Some("10.200.5.12"));
        assert_eq!(
            cleanup.resource_version, "2",
            "the pool's version the alert saw"
        );
    }

    #[test]
    fn a_spiderpool_entry_of_a_replaced_pod_uid_is_reported_but_not_a_vm_kept_one() {
        let pool = || EventBuilder::spider_pool("pool-a", "172.18.0.0/16");
        let got = transitions(vec![
            EventBuilder::pod("default", "api")
                .uid("old")
                .rv(1)
                .at(0)
                .added(),
            pool()
                .entry("172.18.40.10", "default/api", "old")
                .rv(2)
                .at(1)
                .added(),
            EventBuilder::pod("default", "api")
                .uid("new")
                .rv(3)
                .at(MIN)
                .added(),
            EventBuilder::pod("default", "other")
                .rv(4)
                .at(12 * MIN)
                .added(),
        ]);
        assert_eq!(got, [t(NAME, "firing", "pool-a/172.18.40.10")]);
        let got = transitions(vec![
            EventBuilder::pod("vms", "virt-launcher-vm1-a")
                .uid("l1")
                .rv(1)
                .at(0)
                .added(),
            EventBuilder::spider_endpoint("vms", "vm1", "l1")
                .endpoint_ip("172.18.40.11/16", "pool-a")
                .owner_controller("VirtualMachineInstance")
                .rv(2)
                .at(1)
                .added(),
            pool()
                .entry("172.18.40.11", "vms/vm1", "l1")
                .rv(3)
                .at(2)
                .added(),
            EventBuilder::pod("vms", "virt-launcher-vm1-a")
                .uid("l1")
                .rv(4)
                .at(MIN)
                .deleted(),
            EventBuilder::pod("default", "other")
                .rv(5)
                .at(30 * MIN)
                .added(),
        ]);
        assert!(got.is_empty(), "{got:?}");
    }

    fn calico_pod() -> EventBuilder {
        EventBuilder::pod("default", "web-0")
            .uid("p1")
            .on_calico("c0ffee", "10.244.1.1")
    }

    fn block() -> EventBuilder {
        EventBuilder::calico_block("10.244.1.0/26", "node-a")
    }

    /// A pod on Calico's network, its allocation (ordinal 1) and a tunnel address (0), the
    /// pod deleted at one minute; then the clock at `until`.
    fn calico_leak(block: EventBuilder, until: i64) -> Vec<(String, String, String)> {
        let mut tunnel = block
            .clone()
            .calico_allocation(0, "", "vxlan-tunnel-addr-node-a");
        if let Some(ipaudit_schemas::KindPart::CalicoBlock(b)) = tunnel.clone().added().part {
            assert_eq!(b.allocations[0].address, "10.244.1.0");
        }
        tunnel = tunnel.calico_allocation(1, "default/web-0", "k8s-pod-network.c0ffee");
        transitions_of(
            NAME,
            vec![
                calico_pod().rv(1).at(0).added(),
                tunnel.rv(2).at(1).added(),
                calico_pod().rv(3).at(MIN).deleted(),
                EventBuilder::pod("default", "other")
                    .rv(4)
                    .at(until)
                    .added(),
            ],
        )
    }

    #[test]
    fn a_calico_allocation_of_a_gone_pod_is_reported_after_calicos_grace_and_its_tunnel_never() {
        assert_eq!(
            calico_leak(block(), 12 * MIN),
            [],
            "within Calico's 15 minutes"
        );
        assert_eq!(
            calico_leak(block(), 17 * MIN),
            [t(NAME, "firing", "10.244.1.1")],
            "the address is the subject; the tunnel address is nobody's pod"
        );
    }

    #[test]
    fn a_calico_block_seen_in_both_api_groups_fires_once_and_stays_firing_when_one_copy_goes() {
        let allocated =
            |b: EventBuilder| b.calico_allocation(1, "default/web-0", "k8s-pod-network.c0ffee");
        let got = transitions_of(
            NAME,
            vec![
                calico_pod().rv(1).at(0).added(),
                allocated(block()).rv(2).at(1).added(),
                allocated(block().in_calico_v3()).rv(3).at(2).added(),
                calico_pod().rv(4).at(MIN).deleted(),
                EventBuilder::pod("default", "other")
                    .rv(5)
                    .at(17 * MIN)
                    .added(),
                // The migration deletes the v1 copy: the allocation is still the v3 block's.
                allocated(block()).rv(6).at(18 * MIN).deleted(),
                EventBuilder::pod("default", "other-2")
                    .rv(7)
                    .at(19 * MIN)
                    .added(),
            ],
        );
        assert_eq!(got, [t(NAME, "firing", "10.244.1.1")]);
    }

    #[test]
    fn a_cilium_used_address_of_a_gone_pod_is_reported_after_eleven_minutes_restored_or_not() {
        let node = || {
            EventBuilder::cilium_node("node-a", &["10.0.1.0/24"])
                .cilium_used("10.0.1.1", "router")
                .cilium_used("10.0.1.9", "default/web-0 [restored]")
        };
        let run = |until: i64| {
            transitions(vec![
                pod().rv(1).at(0).added(),
                node().rv(2).at(1).added(),
                pod().rv(3).at(MIN).deleted(),
                EventBuilder::pod("default", "other")
                    .rv(4)
                    .at(until)
                    .added(),
            ])
        };
        assert_eq!(run(11 * MIN), []);
        assert_eq!(run(13 * MIN), [t(NAME, "firing", "10.0.1.9")]);
    }

    #[test]
    fn a_cilium_endpoint_of_a_gone_pod_is_reported_and_resolved_when_it_goes() {
        let endpoint = || EventBuilder::cilium_endpoint("default", "web-0", &["10.0.1.9"]);
        let got = transitions(vec![
            pod().rv(1).at(0).added(),
            endpoint().rv(2).at(1).added(),
            pod().rv(3).at(MIN).deleted(),
            EventBuilder::pod("default", "other")
                .rv(4)
                .at(12 * MIN)
                .added(),
            endpoint().rv(5).at(13 * MIN).deleted(),
        ]);
        assert_eq!(
            got,
            [
                t(NAME, "firing", "10.0.1.9"),
                t(NAME, "resolved", "10.0.1.9")
            ]
        );
    }
}
