//! `ip-without-handle`: a Calico allocation whose handle has no IPAMHandle (handles are
//! found by their id, cut at the first `\r` and in lower case, as Calico finds them) for
//! longer than the handle grace (60 s: Calico writes the handle before the block on
//! allocation, and after it on release). Calico releases addresses by handle: without it,
//! the address is lost (`calicoctl ipam check`: "handles mentioned in blocks with no
//! matching handle resource"; calico#3940, #10759). Allocations cooling down after their
//! release and those under Windows' reserved handle (which has no IPAMHandle by design)
//! are never reported; a block or handle seen in both API groups is one. Judged once
//! blocks and handles were both listed completely. Resolved when the handle appears or the
//! allocation goes.

use std::collections::BTreeMap;

use ipaudit_schemas::{Severity, Stream};
use serde::{Deserialize, Serialize};

use super::{duration_text, evidence, Change, Context, Deadlines, Rule};
use crate::analysis::alerts::Finding;
use crate::analysis::state::calico::{self, BLOCK_STREAMS};
use crate::analysis::state::{ClusterState, EventRef, ObjectRecord, Part};

const NAME: &str = "ip-without-handle";

/// Rule 9.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct IpWithoutHandle {
    /// Allocations whose handle is missing, due at noticed + grace; keys from [`unit`].
    deadlines: Deadlines,
    /// The allocations waiting or firing, and the handle (object name) each lacks, so that
    /// the handle's appearance finds them.
    waiting: BTreeMap<String, String>,
}

/// One allocation, in whichever API group its block is: `<block name>|<address>`.
fn unit(block: &str, address: &str) -> String {
    format!("{block}|{address}")
}

/// An allocation whose handle is missing: its block (the first copy that shows it), the
/// allocation's handle and pod.
struct Missing<'a> {
    block: &'a ObjectRecord,
    cidr: &'a str,
    handle: &'a str,
    pod: Option<String>,
}

fn missing<'a>(state: &'a ClusterState, block_name: &str, address: &str) -> Option<Missing<'a>> {
    calico::blocks_named(state, block_name).find_map(|(record, block)| {
        let allocation = block.allocations.iter().find(|a| a.address == address)?;
        let handle = calico::handle_needed(allocation)?;
        if calico::handle(state, handle).is_some() {
            return None;
        }
        Some(Missing {
            block: record,
            cidr: &block.cidr,
            handle,
            pod: (!allocation.pod.is_empty())
                .then(|| format!("{}/{}", allocation.namespace, allocation.pod)),
        })
    })
}

impl Rule for IpWithoutHandle {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_change(&mut self, ctx: &mut Context<'_>, change: &Change<'_>) {
        match change.stream().canonical() {
            Stream::CalicoIpamBlock if change.is_list_end() => self.evaluate_all(ctx, change.event),
            Stream::CalicoIpamBlock => {
                let mut addresses: Vec<&str> =
                    calico::allocations_had_and_has(change.before, change.after)
                        .map(|a| a.address.as_str())
                        .collect();
                addresses.sort_unstable();
                addresses.dedup();
                for address in addresses {
                    self.evaluate(ctx, &unit(&change.event.name, address), change.event);
                }
            }
            Stream::CalicoIpamHandle if change.is_list_end() => {
                self.evaluate_all(ctx, change.event)
            }
            Stream::CalicoIpamHandle => {
                let name: &str = &change.event.name;
                let mut units: Vec<String> = self
                    .waiting
                    .iter()
                    .filter(|(_, handle)| handle.as_str() == name)
                    .map(|(unit, _)| unit.clone())
                    .collect();
                // A handle that went: the allocations of the blocks it counted.
                if let Some(Part::CalicoHandle(before)) = change.before.map(ObjectRecord::part) {
                    let id = calico::clean_handle(&before.handle_id);
                    for entry in &before.blocks {
                        let block_name = calico::block_object_name(&entry.cidr);
                        for (_, block) in calico::blocks_named(ctx.state, &block_name) {
                            units.extend(
                                block
                                    .allocations
                                    .iter()
                                    .filter(|a| calico::handle_needed(a) == Some(id))
                                    .map(|a| unit(&block_name, &a.address)),
                            );
                        }
                    }
                }
                units.sort_unstable();
                units.dedup();
                for unit in units {
                    self.evaluate(ctx, &unit, change.event);
                }
            }
            _ => {}
        }
    }

    fn on_time(&mut self, ctx: &mut Context<'_>, now_ms: i64) {
        for (due, unit) in self.deadlines.take_due(now_ms) {
            let Some((block_name, address)) = unit.split_once('|') else {
                continue;
            };
            match missing(ctx.state, block_name, address) {
                Some(missing) => {
                    let finding = finding(ctx, &unit, address, &missing);
                    ctx.fire_at(finding, due);
                }
                None => {
                    self.waiting.remove(&unit);
                }
            }
        }
    }

    fn has_due(&self, now_ms: i64) -> bool {
        self.deadlines.any_due(now_ms)
    }

    state_is_self!();
}

impl IpWithoutHandle {
    /// After a complete list of blocks or handles: every allocation of every block.
    fn evaluate_all(&mut self, ctx: &mut Context<'_>, cause: &EventRef) {
        let mut units: Vec<String> = Vec::new();
        for stream in BLOCK_STREAMS {
            for (name, record) in ctx.state.records(stream) {
                if let Part::CalicoBlock(block) = record.part() {
                    units.extend(block.allocations.iter().map(|a| unit(name, &a.address)));
                }
            }
        }
        units.sort_unstable();
        units.dedup();
        for unit in units {
            self.evaluate(ctx, &unit, cause);
        }
    }

    /// Schedules, or stops and resolves, the rule for one allocation.
    fn evaluate(&mut self, ctx: &mut Context<'_>, unit: &str, cause: &EventRef) {
        let Some((block_name, address)) = unit.split_once('|') else {
            return;
        };
        if !calico::blocks_and_handles_listed(ctx.state) {
            return;
        }
        match missing(ctx.state, block_name, address) {
            Some(missing) => {
                let id = ctx.alert_id(NAME, &subject_uid(unit), None);
                if !ctx.is_firing(&id) {
                    let since =
                        calico::mismatch_since(cause, std::iter::once(missing.block), ctx.now_ms);
                    let due = since.saturating_add(ctx.config.handle_grace_ms);
                    self.deadlines.set_if_absent(unit, due);
                }
                self.waiting
                    .insert(unit.to_owned(), calico::handle_object_name(missing.handle));
            }
            None => {
                self.deadlines.cancel(unit);
                if self.waiting.remove(unit).is_some() {
                    ctx.resolve_all_about(NAME, &subject_uid(unit), || {
                        evidence(
                            cause,
                            format!("the allocation of {address} has its handle, or is gone"),
                        )
                    });
                }
            }
        }
    }
}

/// The alert subject's uid: one allocation of a block, whichever API group shows it.
fn subject_uid(unit: &str) -> String {
    format!("calico/{}", unit.replacen('|', "/", 1))
}

fn finding(ctx: &Context<'_>, unit: &str, address: &str, missing: &Missing<'_>) -> Finding {
    let handle = missing.handle;
    let owner = missing
        .pod
        .as_ref()
        .map_or_else(String::new, |pod| format!(" (pod {pod})"));
    Finding {
        rule: NAME,
        severity: Severity::Warning,
        subject_kind: "Address",
        subject_name: address.to_owned(),
        subject_uid: subject_uid(unit),
        scope: None,
        subnet: Some(missing.cidr.to_owned()),
        namespace: missing.pod.as_deref().and_then(super::owner_namespace),
        summary: format!(
            "Calico block {} allocates {address} under handle {handle}{owner}, but no IPAMHandle {handle} has existed for {}: Calico releases addresses by handle, so this one is never released (calicoctl ipam check: handles mentioned in blocks with no matching handle resource)",
            missing.cidr,
            duration_text(ctx.config.handle_grace_ms)
        ),
        fix: Some(format!(
            "If the pod it names is gone, release {address} with its handle and sequence number checked (kubectl ipaudit release, or calicoctl ipam release --ip={address}); if the pod still runs, recreate the IPAMHandle {} counting its addresses",
            calico::handle_object_name(handle)
        )),
        cleanup: None,
        evidence: vec![evidence(
            &missing.block.last,
            format!(
                "IPAMBlock {} allocates {address} under handle {handle}{owner}; no IPAMHandle {} exists",
                missing.cidr,
                calico::handle_object_name(handle)
            ),
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{after_calico_lists, t, tick, transitions, MIN};
    use super::NAME;
    use ipaudit_schemas::builders::EventBuilder;

    fn block() -> EventBuilder {
        EventBuilder::calico_block("10.244.1.0/26", "node-a")
    }

    #[test]
    fn an_allocation_whose_handle_is_missing_past_the_grace_is_reported_by_its_address() {
        let got = transitions(after_calico_lists(vec![
            block()
                .calico_allocation(1, "default/web-0", "k8s-pod-network.c0ffee\r\neth0")
                .calico_allocation(2, "", "windows-reserved-ipam-handle")
                .rv(1)
                .at(0)
                .added(),
            tick(2, 2 * MIN),
            // The handle appears: resolved.
            EventBuilder::calico_handle("K8S-pod-network.c0ffee", &[("10.244.1.0/26", 1)])
                .rv(3)
                .at(3 * MIN)
                .added(),
        ]));
        assert_eq!(
            got,
            [
                t(NAME, "firing", "10.244.1.1"),
                t(NAME, "resolved", "10.244.1.1")
            ]
        );
    }

    #[test]
    fn the_handle_written_seconds_after_the_block_is_no_finding() {
        let got = transitions(after_calico_lists(vec![
            block()
                .calico_allocation(1, "default/web-0", "k8s-pod-network.c0ffee")
                .rv(1)
                .at(0)
                .added(),
            EventBuilder::calico_handle("k8s-pod-network.c0ffee", &[("10.244.1.0/26", 1)])
                .in_calico_v3()
                .rv(2)
                .at(5_000)
                .added(),
            tick(3, 5 * MIN),
        ]));
        assert_eq!(got, []);
    }

    #[test]
    fn a_handle_deleted_while_its_block_still_allocates_under_it_is_reported() {
        let handle =
            || EventBuilder::calico_handle("k8s-pod-network.c0ffee", &[("10.244.1.0/26", 1)]);
        let got = transitions(after_calico_lists(vec![
            handle().rv(1).at(0).added(),
            block()
                .calico_allocation(1, "default/web-0", "k8s-pod-network.c0ffee")
                .rv(2)
                .at(1)
                .added(),
            handle().soft_deleted().rv(3).at(MIN).modified(),
            handle().rv(4).at(MIN + 1).deleted(),
            tick(5, 3 * MIN),
        ]));
        assert_eq!(got, [t(NAME, "firing", "10.244.1.1")]);
    }
}
