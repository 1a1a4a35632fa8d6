//! `block-of-missing-node`: addresses kept for a node that is gone. Calico: a block
//! affine to the node (`affinity: host:<node>`) or a confirmed BlockAffinity of it, whose
//! Node has been gone longer than the node grace (15 minutes, Calico's leak grace); Calico's
//! kube-controllers releases them only when every allocation of the node is invalid, so one
//! it cannot classify keeps the blocks forever (calico#2713: thousands of blocks of gone
//! hosts; #5218, #8643, #9618). Cilium: a CiliumNode whose Node has been gone as long that
//! still holds pod CIDRs or used addresses (cilium#17837: dangling CiliumNodes exhausting
//! the cluster pool). A `virtual` affinity (`virtual:load-balancer`) is not a node; pending
//! and soft-deleted affinities count as absent. A Node is gone once deleted, or absent from
//! a complete list of Nodes. Resolved when the node is back or nothing holds its addresses.

use std::collections::BTreeMap;

use ipaudit_schemas::{Severity, Stream};
use serde::{Deserialize, Serialize};

use super::{duration_text, evidence, Change, Context, Deadlines, Rule};
use crate::analysis::alerts::Finding;
use crate::analysis::state::calico::{self, AFFINITY_STREAMS, BLOCK_STREAMS};
use crate::analysis::state::{ClusterState, EventRef, ObjectRecord, Part};

const NAME: &str = "block-of-missing-node";

/// Rule 11.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct BlockOfMissingNode {
    /// Nodes gone while something holds their addresses, due at gone + grace.
    deadlines: Deadlines,
    /// The deletion of each node something still holds addresses for, and when it was
    /// noticed: a Node's DELETED carries no deletion time (its last change may be hours
    /// old), so it went no earlier than history had reached.
    deleted: BTreeMap<String, (EventRef, i64)>,
}

/// What holds addresses for a node: (record, what it holds, for a person).
fn holders<'a>(state: &'a ClusterState, node: &str) -> Vec<(&'a ObjectRecord, String)> {
    let mut found = Vec::new();
    for stream in BLOCK_STREAMS {
        for (_, record) in state.records(stream) {
            if let Part::CalicoBlock(block) = record.part() {
                if !block.deleted && calico::block_host(block) == Some(node) {
                    found.push((
                        record,
                        format!(
                            "IPAMBlock {} is affine to host {node} ({} addresses allocated)",
                            block.cidr,
                            block.allocations.len()
                        ),
                    ));
                }
            }
        }
    }
    for stream in AFFINITY_STREAMS {
        for (_, record) in state.records(stream) {
            if let Part::CalicoAffinity(affinity) = record.part() {
                if affinity_of(affinity) == Some(node) {
                    found.push((
                        record,
                        format!("BlockAffinity of {} to {node} is confirmed", affinity.cidr),
                    ));
                }
            }
        }
    }
    if let Some(record) = state.get(Stream::CiliumNode, node) {
        if let Part::CiliumNode(cilium) = record.part() {
            let cidrs = cilium.pod_cidrs.len() + cilium.allocated_cidrs.len();
            if cidrs > 0 || !cilium.used.is_empty() {
                found.push((
                    record,
                    format!(
                        "CiliumNode {node} holds {cidrs} pod CIDR(s) and {} used address(es)",
                        cilium.used.len()
                    ),
                ));
            }
        }
    }
    found
}

/// The node a confirmed host affinity is for.
fn affinity_of(affinity: &ipaudit_schemas::CalicoAffinityInfo) -> Option<&str> {
    let host = affinity.r#type.is_empty() || affinity.r#type == "host";
    (host && !affinity.deleted && affinity.state == "confirmed" && !affinity.node.is_empty())
        .then_some(affinity.node.as_str())
}

/// The nodes a record of a holding kind names.
fn nodes_named(stream: Stream, name: &str, record: &ObjectRecord) -> Vec<String> {
    match record.part() {
        Part::CalicoBlock(block) => calico::block_host(block)
            .map(str::to_owned)
            .into_iter()
            .collect(),
        Part::CalicoAffinity(affinity) if !affinity.node.is_empty() => {
            vec![affinity.node.clone()]
        }
        Part::CiliumNode(_) if stream == Stream::CiliumNode => vec![name.to_owned()],
        _ => Vec::new(),
    }
}

impl Rule for BlockOfMissingNode {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_change(&mut self, ctx: &mut Context<'_>, change: &Change<'_>) {
        let stream = change.stream();
        if stream == Stream::Node {
            if change.is_list_end() {
                self.evaluate_all(ctx, change.event);
                return;
            }
            let node = change.event.name.to_string();
            if change.removed().is_some() && change.after.is_none() {
                let noticed = change.event.time_ms().unwrap_or(ctx.now_ms).max(ctx.now_ms);
                self.deleted
                    .insert(node.clone(), (change.event.clone(), noticed));
            } else if change.after.is_some() {
                self.deleted.remove(&node);
            }
            self.evaluate(ctx, &node, change.event);
            return;
        }
        let holding = matches!(
            stream.canonical(),
            Stream::CalicoIpamBlock | Stream::CalicoBlockAffinity
        ) || stream == Stream::CiliumNode;
        if !holding {
            return;
        }
        if change.is_list_end() {
            self.evaluate_all(ctx, change.event);
            return;
        }
        let mut nodes: Vec<String> = [change.before, change.after]
            .into_iter()
            .flatten()
            .flat_map(|record| nodes_named(stream, &change.event.name, record))
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        for node in nodes {
            self.evaluate(ctx, &node, change.event);
        }
    }

    fn on_time(&mut self, ctx: &mut Context<'_>, now_ms: i64) {
        for (due, node) in self.deadlines.take_due(now_ms) {
            let Some((gone, _)) = self.gone_since(ctx, &node) else {
                continue;
            };
            let holders = holders(ctx.state, &node);
            if !holders.is_empty() {
                let finding = finding(ctx, &node, &gone, &holders);
                ctx.fire_at(finding, due);
            }
        }
    }

    fn has_due(&self, now_ms: i64) -> bool {
        self.deadlines.any_due(now_ms)
    }

    state_is_self!();
}

impl BlockOfMissingNode {
    /// Since when the Node is gone (the event that says so, and its time): its deletion,
    /// or a complete list of Nodes without it; `None` while it exists or nothing says it
    /// is gone.
    fn gone_since(&self, ctx: &Context<'_>, node: &str) -> Option<(EventRef, i64)> {
        if ctx.state.get(Stream::Node, node).is_some() {
            return None;
        }
        if let Some(deleted) = self.deleted.get(node) {
            return Some(deleted.clone());
        }
        let listed = ctx.state.listed(Stream::Node)?;
        Some((listed.clone(), listed.time_ms().unwrap_or(ctx.now_ms)))
    }

    /// After a complete list of Nodes or of a holding kind: every node something holds
    /// addresses for.
    fn evaluate_all(&mut self, ctx: &mut Context<'_>, cause: &EventRef) {
        let mut nodes: Vec<String> = Vec::new();
        for stream in BLOCK_STREAMS
            .into_iter()
            .chain(AFFINITY_STREAMS)
            .chain([Stream::CiliumNode])
        {
            for (name, record) in ctx.state.records(stream) {
                nodes.extend(nodes_named(stream, name, record));
            }
        }
        nodes.extend(self.deleted.keys().cloned());
        nodes.sort_unstable();
        nodes.dedup();
        for node in nodes {
            self.evaluate(ctx, &node, cause);
        }
    }

    /// Schedules, fires, or stops and resolves, the rule for one node.
    fn evaluate(&mut self, ctx: &mut Context<'_>, node: &str, cause: &EventRef) {
        let state = ctx.state;
        let holders = holders(state, node);
        let gone = if holders.is_empty() {
            None
        } else {
            self.gone_since(ctx, node)
        };
        let Some((gone, gone_ms)) = gone else {
            self.deadlines.cancel(node);
            if holders.is_empty() {
                self.deleted.remove(node);
            }
            ctx.resolve_all_about(NAME, &subject_uid(node), || {
                let what = if holders.is_empty() {
                    format!("nothing holds addresses for node {node} any more")
                } else {
                    format!("Node {node} exists")
                };
                evidence(cause, what)
            });
            return;
        };
        let id = ctx.alert_id(NAME, &subject_uid(node), None);
        if ctx.is_firing(&id) {
            return;
        }
        let due = gone_ms.saturating_add(ctx.config.calico_grace_ms);
        if ctx.now_ms <= due {
            self.deadlines.set(node, due);
            return;
        }
        self.deadlines.cancel(node);
        let finding = finding(ctx, node, &gone, &holders);
        ctx.fire_at(finding, due);
    }
}

/// One node, by name.
fn subject_uid(node: &str) -> String {
    format!("node/{node}")
}

fn finding(
    ctx: &Context<'_>,
    node: &str,
    gone: &EventRef,
    holders: &[(&ObjectRecord, String)],
) -> Finding {
    let calico = holders
        .iter()
        .any(|(record, _)| record.last.stream != Stream::CiliumNode);
    let mut proof = vec![evidence(
        gone,
        format!("Node {node} is gone ({})", gone.event_type),
    )];
    proof.extend(
        holders
            .iter()
            .map(|(record, what)| evidence(&record.last, what.clone())),
    );
    Finding {
        rule: NAME,
        severity: Severity::Warning,
        subject_kind: "Node",
        subject_name: node.to_owned(),
        subject_uid: subject_uid(node),
        scope: None,
        subnet: None,
        namespace: None,
        summary: format!(
            "Node {node} has been gone for more than {} while {} still hold its addresses: {}",
            duration_text(ctx.config.calico_grace_ms),
            holders.len(),
            holders
                .iter()
                .map(|(_, what)| what.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ),
        fix: Some(if calico {
            format!(
                "Calico's kube-controllers releases a gone node's blocks only once every allocation of the node is invalid: find the allocations of node {node} it cannot classify (calicoctl ipam check --show-problem-ips; tunnel addresses and pods stuck Pending are the usual ones), release them, then its affinities go with them"
            )
        } else {
            format!(
                "Cilium's operator deletes CiliumNodes without a Node and without ownerReferences after two --nodes-gc-interval runs (unless annotated cilium.io/do-not-gc); check the operator, or delete it: {}",
                crate::analysis::fix::delete("ciliumnodes.cilium.io", node)
            )
        }),
        cleanup: None,
        evidence: proof,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{t, tick, transitions_of, MIN};
    use super::NAME;
    use ipaudit_schemas::builders::EventBuilder;
    use ipaudit_schemas::{EventType, Stream};

    #[test]
    fn blocks_and_an_affinity_of_a_deleted_node_are_reported_after_fifteen_minutes() {
        let got = transitions_of(
            NAME,
            vec![
                EventBuilder::node("node-a").rv(1).at(0).added(),
                EventBuilder::calico_block("10.244.1.0/26", "node-a")
                    .calico_allocation(0, "", "ipip-tunnel-addr-node-a")
                    .rv(2)
                    .at(1)
                    .added(),
                EventBuilder::calico_affinity("node-a", "10.244.1.0/26")
                    .rv(3)
                    .at(2)
                    .added(),
                EventBuilder::node("node-a").rv(4).at(MIN).deleted(),
                tick(5, 10 * MIN),
                tick(6, 17 * MIN),
                // The block and its affinity are released: resolved.
                EventBuilder::calico_block("10.244.1.0/26", "node-a")
                    .rv(7)
                    .at(18 * MIN)
                    .deleted(),
                EventBuilder::calico_affinity("node-a", "10.244.1.0/26")
                    .rv(8)
                    .at(18 * MIN)
                    .deleted(),
            ],
        );
        assert_eq!(
            got,
            [t(NAME, "firing", "node-a"), t(NAME, "resolved", "node-a")]
        );
    }

    #[test]
    fn a_virtual_or_pending_affinity_and_a_node_that_exists_are_no_finding() {
        let mut pending = EventBuilder::calico_affinity("node-b", "10.244.2.0/26")
            .rv(3)
            .at(2)
            .added();
        if let Some(ipaudit_schemas::KindPart::CalicoAffinity(a)) = pending.part.as_mut() {
            a.state = "pending".into();
        }
        let mut end = EventBuilder::marker(Stream::Node, EventType::SyncEnd, 4);
        end.observed_at_ms = Some(3);
        let got = transitions_of(
            NAME,
            vec![
                EventBuilder::node("node-a").rv(1).at(0).added(),
                EventBuilder::calico_block("10.244.1.0/26", "node-a")
                    .rv(2)
                    .at(1)
                    .added(),
                pending,
                end,
                EventBuilder::calico_block("10.244.9.0/26", "")
                    .rv(5)
                    .at(4)
                    .added(),
                tick(6, 30 * MIN),
            ],
        );
        assert_eq!(got, []);
    }

    #[test]
    fn a_cilium_node_of_a_node_missing_from_a_complete_list_is_reported() {
        let mut end = EventBuilder::marker(Stream::Node, EventType::SyncEnd, 2);
        end.observed_at_ms = Some(MIN);
        let got = transitions_of(
            NAME,
            vec![
                EventBuilder::cilium_node("node-gone", &["10.0.7.0/24"])
                    .rv(1)
                    .at(0)
                    .added(),
                end,
                tick(3, 17 * MIN),
            ],
        );
        assert_eq!(got, [t(NAME, "firing", "node-gone")]);
    }
}
