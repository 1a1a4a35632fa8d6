//! Calico's cleanups, guarded as Calico itself guards its writes:
//! - a leaked allocation (its pod gone) released the way libcalico-go releases it: the
//!   block first (the ordinal back to `unallocated`, its attribute dropped when no other
//!   ordinal uses it, `sequenceNumber` bumped), with JSON-patch `test`s on the block's
//!   resourceVersion and the ordinal's `sequenceNumberForAllocation`; then its handle's
//!   count lowered, or the handle deleted at zero (uid and resourceVersion preconditions);
//! - an orphan IPAMHandle deleted with uid and resourceVersion preconditions, after
//!   re-reading every block its `spec.block` names and finding none of its addresses.
//!
//! No datastore lock is needed: each action is guarded per allocation and skipped, with
//! its reason, when anything moved.

use ipaudit_schemas::convert::from_object_of;
use ipaudit_schemas::{CalicoAllocation, EventType, KindPart, RemediationOutcome, Stream};
use kube::Client;
use serde_json::{json, Value};

use super::api::{
    delete_with_preconditions, get, json_patch, metadata, path_of, require_absent, reread_part,
    Lookup, WriteError,
};
use super::{Mode, Outcome, Target};

/// The handle and block streams of a block's or a handle's API group.
fn group_streams(stream: Stream) -> (Stream, Stream) {
    match stream {
        Stream::CalicoV3IpamBlock | Stream::CalicoV3IpamHandle => {
            (Stream::CalicoV3IpamBlock, Stream::CalicoV3IpamHandle)
        }
        _ => (Stream::CalicoIpamBlock, Stream::CalicoIpamHandle),
    }
}

/// A handle id as Calico compares it (cut at the first carriage return).
fn clean(handle_id: &str) -> &str {
    handle_id.split('\r').next().unwrap_or(handle_id)
}

/// A block's name from its CIDR, as Calico names it.
fn block_name(cidr: &str) -> String {
    cidr.replace(['.', ':', '/'], "-")
}

/// A JSON pointer token (`~` and `/` escaped).
fn token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Releases the allocation of `address` from the block `target` (still exactly the
/// target), while the pod its attribute names is absent, then lowers its handle's count.
pub(super) async fn release_allocation(
    client: &Client,
    mode: Mode,
    target: &Target,
    address: &str,
) -> Outcome {
    let rv = target.resource_version.as_str();
    let (path, live, part) = match reread_part(client, target).await {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    let allocation: Option<CalicoAllocation> = match part {
        Some(KindPart::CalicoBlock(block)) => {
            block.allocations.into_iter().find(|a| a.address == address)
        }
        _ => None,
    };
    let Some(allocation) = allocation else {
        return Outcome::skipped(format!("the IPAMBlock no longer allocates {address}"), rv);
    };
    if allocation.pod.is_empty() || allocation.released_at_ms.is_some() {
        return Outcome::skipped(
            format!("the allocation of {address} names no pod (or is cooling down)"),
            rv,
        );
    }
    let pod = format!("{}/{}", allocation.namespace, allocation.pod);
    if let Err(outcome) = require_absent(
        client,
        Stream::Pod,
        Some(&allocation.namespace),
        &allocation.pod,
        format!("pod {pod} exists now"),
        rv,
    )
    .await
    {
        return outcome;
    }
    let Some(spec) = live.get("spec") else {
        return Outcome::failed("the IPAMBlock has no spec".into(), rv);
    };
    let released = match released_spec(spec, allocation.ordinal) {
        Ok(released) => released,
        Err(why) => return Outcome::skipped(why, rv),
    };
    let handle = clean(&allocation.handle_id).to_owned();
    if mode == Mode::DryRun {
        return Outcome::new(
            RemediationOutcome::DryRun,
            format!("all checks passed; would release {address} (ordinal {}, handle {handle}, pod {pod}) at resourceVersion {rv}", allocation.ordinal),
            rv,
        );
    }
    let ordinal = allocation.ordinal.to_string();
    let mut patch = vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv})];
    if let Some(sequence) = allocation.sequence_number {
        patch.push(json!({"op": "test",
            "path": format!("/spec/sequenceNumberForAllocation/{}", token(&ordinal)),
            "value": sequence}));
        patch.push(json!({"op": "remove",
            "path": format!("/spec/sequenceNumberForAllocation/{}", token(&ordinal))}));
    }
    patch.extend([
        json!({"op": "replace", "path": "/spec/allocations", "value": released.allocations}),
        json!({"op": "replace", "path": "/spec/attributes", "value": released.attributes}),
        json!({"op": "replace", "path": "/spec/unallocated", "value": released.unallocated}),
        json!({"op": "replace", "path": "/spec/sequenceNumber", "value": released.sequence_number}),
    ]);
    if let Err(error) = json_patch(client, &path, target, &Value::Array(patch)).await {
        return match error {
            WriteError::Changed(why) => {
                Outcome::skipped(format!("the IPAMBlock changed while patching ({why})"), rv)
            }
            WriteError::Failed(why) => Outcome::failed(format!("patch failed: {why}"), rv),
        };
    }
    let cidr = spec.get("cidr").and_then(Value::as_str).unwrap_or_default();
    let handle_note = decrement_handle(client, target.stream, &handle, cidr).await;
    Outcome::new(
        RemediationOutcome::Applied,
        format!(
            "released {address} (ordinal {}, pod {pod}) at resourceVersion {rv}; {handle_note}",
            allocation.ordinal
        ),
        rv,
    )
}

/// A block's spec after releasing `ordinal`.
struct Released {
    allocations: Vec<Value>,
    attributes: Vec<Value>,
    unallocated: Vec<Value>,
    sequence_number: i64,
}

/// The ordinal freed and put at the end of `unallocated`, attributes no ordinal uses any
/// more dropped and the rest renumbered, the sequence number bumped (libcalico-go's
/// `release`, `deleteUnusedAttributes`, `updateBlock`).
fn released_spec(spec: &Value, ordinal: i64) -> Result<Released, String> {
    let mut allocations = spec
        .get("allocations")
        .and_then(Value::as_array)
        .cloned()
        .ok_or("the IPAMBlock has no allocations")?;
    let index = usize::try_from(ordinal).map_err(|_| "a negative ordinal")?;
    match allocations.get_mut(index) {
        Some(slot) if !slot.is_null() => *slot = Value::Null,
        _ => return Err(format!("ordinal {ordinal} is not allocated")),
    }
    let attributes = spec
        .get("attributes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let used: std::collections::BTreeSet<u64> =
        allocations.iter().filter_map(Value::as_u64).collect();
    let renumber: std::collections::BTreeMap<u64, u64> = used
        .iter()
        .enumerate()
        .map(|(new, old)| (*old, new as u64))
        .collect();
    let kept: Vec<Value> = used
        .iter()
        .filter_map(|old| attributes.get(usize::try_from(*old).ok()?).cloned())
        .collect();
    for slot in &mut allocations {
        if let Some(old) = slot.as_u64() {
            *slot = json!(renumber.get(&old).copied().unwrap_or(old));
        }
    }
    let mut unallocated = spec
        .get("unallocated")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    unallocated.push(json!(ordinal));
    let sequence_number = spec
        .get("sequenceNumber")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        + 1;
    Ok(Released {
        allocations,
        attributes: kept,
        unallocated,
        sequence_number,
    })
}

/// Lowers the count of `handle` for the block `cidr` (a patch testing the handle's
/// resourceVersion and the count), or deletes the handle when that was its last address
/// (uid and resourceVersion preconditions). Says what it did: the block is released
/// either way, and a handle left behind is `handle-without-ip`'s to find.
async fn decrement_handle(
    client: &Client,
    block_stream: Stream,
    handle: &str,
    cidr: &str,
) -> String {
    let (_, handle_stream) = group_streams(block_stream);
    let name = handle.to_lowercase();
    let (Some(path), Some(spec)) = (path_of(handle_stream, None, &name), handle_stream.spec())
    else {
        return format!("handle {handle}: not a Kubernetes name, left alone");
    };
    let live = match get(client, &path, spec.plural, &name).await {
        Lookup::Found(live) => live,
        Lookup::Absent => return format!("handle {handle} does not exist"),
        Lookup::Failed(e) => return format!("handle {handle} not read ({e}), left as it is"),
    };
    let target = Target {
        stream: handle_stream,
        namespace: None,
        name: name.clone(),
        uid: metadata(&live, "uid").to_owned(),
        resource_version: metadata(&live, "resourceVersion").to_owned(),
        address: None,
    };
    let blocks = live
        .pointer("/spec/block")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let count = blocks.get(cidr).and_then(Value::as_i64).unwrap_or(0);
    let last = count <= 1 && blocks.keys().all(|k| k == cidr);
    let written = if last {
        delete_with_preconditions(client, &path, &target).await
    } else {
        let entry = format!("/spec/block/{}", token(cidr));
        let mut patch = vec![
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": target.resource_version}),
            json!({"op": "test", "path": entry, "value": count}),
        ];
        patch.push(if count <= 1 {
            json!({"op": "remove", "path": entry})
        } else {
            json!({"op": "replace", "path": entry, "value": count - 1})
        });
        json_patch(client, &path, &target, &Value::Array(patch)).await
    };
    match (written, last) {
        (Ok(_), true) => format!("handle {handle} deleted (its last address)"),
        (Ok(_), false) => format!("handle {handle} counts one address fewer in {cidr}"),
        (Err(WriteError::Changed(why) | WriteError::Failed(why)), _) => {
            format!("handle {handle} left as it is ({why})")
        }
    }
}

/// Deletes the IPAMHandle `target` (still exactly the target) once every block its
/// `spec.block` names, re-read now, carries none of its addresses.
pub(super) async fn delete_orphan_handle(client: &Client, mode: Mode, target: &Target) -> Outcome {
    let rv = target.resource_version.as_str();
    let (path, _, part) = match reread_part(client, target).await {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    let Some(KindPart::CalicoHandle(handle)) = part else {
        return Outcome::failed("cannot read the IPAMHandle".into(), rv);
    };
    let id = clean(&handle.handle_id);
    let (block_stream, _) = group_streams(target.stream);
    let plural = block_stream.spec().map_or("", |s| s.plural);
    for entry in &handle.blocks {
        let name = block_name(&entry.cidr);
        let Some(block_path) = path_of(block_stream, None, &name) else {
            return Outcome::skipped(format!("block {} has no valid name", entry.cidr), rv);
        };
        match get(client, &block_path, plural, &name).await {
            Lookup::Absent => {}
            Lookup::Failed(e) => {
                return Outcome::failed(format!("cannot read block {}: {e}", entry.cidr), rv)
            }
            Lookup::Found(block) => {
                let carried = match from_object_of(block_stream, EventType::Modified, &block) {
                    Ok(converted) => match converted.event.part {
                        Some(KindPart::CalicoBlock(block)) => block
                            .allocations
                            .iter()
                            .filter(|a| clean(&a.handle_id) == id)
                            .map(|a| a.address.clone())
                            .collect::<Vec<_>>(),
                        _ => Vec::new(),
                    },
                    Err(e) => {
                        return Outcome::failed(
                            format!("cannot read block {}: {e}", entry.cidr),
                            rv,
                        )
                    }
                };
                if let Some(address) = carried.first() {
                    return Outcome::skipped(
                        format!(
                            "block {} allocates {address} under the handle now",
                            entry.cidr
                        ),
                        rv,
                    );
                }
            }
        }
    }
    if mode == Mode::DryRun {
        return Outcome::new(
            RemediationOutcome::DryRun,
            format!("all checks passed; would delete handle {id}, whose blocks carry none of its addresses, at resourceVersion {rv}"),
            rv,
        );
    }
    match delete_with_preconditions(client, &path, target).await {
        Ok(_) => Outcome::new(
            RemediationOutcome::Applied,
            format!("deleted handle {id}, whose blocks carry none of its addresses, at resourceVersion {rv}"),
            rv,
        ),
        Err(WriteError::Changed(why)) => {
            Outcome::skipped(format!("the IPAMHandle changed before the delete ({why})"), rv)
        }
        Err(WriteError::Failed(why)) => Outcome::failed(format!("delete failed: {why}"), rv),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_frees_the_ordinal_drops_its_attribute_when_unused_and_bumps_the_sequence() {
        let spec = json!({"allocations": [0, 1, 2, null], "unallocated": [3],
            "attributes": [{"handle_id": "tunnel"}, {"handle_id": "a"}, {"handle_id": "b"}],
            "sequenceNumber": 7});
        let released = released_spec(&spec, 1).unwrap();
        assert_eq!(
            released.allocations,
            [json!(0), Value::Null, json!(1), Value::Null]
        );
        assert_eq!(
            released.attributes,
            [json!({"handle_id": "tunnel"}), json!({"handle_id": "b"})]
        );
        assert_eq!(released.unallocated, [json!(3), json!(1)]);
        assert_eq!(released.sequence_number, 8);
        // An attribute two ordinals share stays while one of them uses it.
        let shared = json!({"allocations": [0, 0], "attributes": [{"handle_id": "a"}],
            "unallocated": [], "sequenceNumber": 1});
        let released = released_spec(&shared, 0).unwrap();
        assert_eq!(released.allocations, [Value::Null, json!(0)]);
        assert_eq!(released.attributes.len(), 1);
        assert!(released_spec(&shared, 5).is_err(), "not allocated");
    }
}
