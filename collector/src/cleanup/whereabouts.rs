//! whereabouts' cleanups: an IPPool allocation whose pod is gone holds its address until
//! whereabouts' reconciler runs (and a reconciler that released too early is the field
//! report's bug), so ipaudit removes exactly that allocation, once the pod is proven
//! absent.

use ipaudit_schemas::convert::from_object_of;
use ipaudit_schemas::{EventType, KindPart, RemediationOutcome, Stream};
use kube::Client;
use serde_json::json;

use super::api::{json_patch, require_absent, reread, WriteError};
use super::{Mode, Outcome, Target};

/// Removes the allocation of `address` from the IPPool `target` (still exactly the
/// target), while the allocation's pod is absent: a JSON patch that tests the pool's
/// resourceVersion and the allocation's podref, so no other allocation is touched.
pub(super) async fn remove_pool_allocation(
    client: &Client,
    mode: Mode,
    target: &Target,
    address: &str,
) -> Outcome {
    let rv = target.resource_version.as_str();
    let (path, live) = match reread(client, target).await {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    // The pool read by the same converter as every event, so the address means the same.
    let allocation = match from_object_of(Stream::IpPool, EventType::Modified, &live) {
        Ok(converted) => match converted.event.part {
            Some(KindPart::IpPool(pool)) => {
                pool.allocations.into_iter().find(|a| a.address == address)
            }
            _ => None,
        },
        Err(e) => return Outcome::failed(format!("cannot read the IPPool: {e}"), rv),
    };
    let Some(allocation) = allocation else {
        return Outcome::skipped(format!("the IPPool no longer allocates {address}"), rv);
    };
    let (namespace, pod) = allocation
        .podref
        .split_once('/')
        .unwrap_or(("", &allocation.podref));
    if let Err(outcome) = require_absent(
        client,
        Stream::Pod,
        Some(namespace),
        pod,
        format!("pod {} exists now", allocation.podref),
        rv,
    )
    .await
    {
        return outcome;
    }
    let offset = allocation.offset.replace('~', "~0").replace('/', "~1");
    if mode == Mode::DryRun {
        return Outcome::new(
            RemediationOutcome::DryRun,
            format!("all checks passed; would remove allocation {} ({address} for {}) at resourceVersion {rv}", allocation.offset, allocation.podref),
            rv,
        );
    }
    let patch = json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "test", "path": format!("/spec/allocations/{offset}/podref"), "value": allocation.podref},
        {"op": "remove", "path": format!("/spec/allocations/{offset}")},
    ]);
    match json_patch(client, &path, "ippools", &target.name, &patch).await {
        Ok(_) => Outcome::new(
            RemediationOutcome::Applied,
            format!(
                "removed allocation {} ({address} for {}) at resourceVersion {rv}",
                allocation.offset, allocation.podref
            ),
            rv,
        ),
        Err(WriteError::Changed(why)) => {
            Outcome::skipped(format!("the IPPool changed while patching ({why})"), rv)
        }
        Err(WriteError::Failed(why)) => Outcome::failed(format!("patch failed: {why}"), rv),
    }
}
