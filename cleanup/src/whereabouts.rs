//! whereabouts' cleanups: an IPPool allocation whose pod is gone holds its address until
//! whereabouts' reconciler runs (and a reconciler that released too early is the field
//! report's bug), so ipaudit removes exactly that allocation, once the pod is proven
//! absent.

use ipaudit_schemas::convert::from_object_of;
use ipaudit_schemas::{EventType, KindPart, RemediationOutcome, Stream};
use kube::Client;
use serde_json::json;

use super::api::{
    delete_with_preconditions, get, json_patch, require_absent, reread, reread_part, Lookup,
    WriteError,
};
use super::{Mode, Outcome, Planned, Target};

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
    let (path, _, part) = match reread_part(client, target).await {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    let allocation = match part {
        Some(KindPart::IpPool(pool)) => pool.allocations.into_iter().find(|a| a.address == address),
        _ => None,
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
    match json_patch(client, &path, target, &patch).await {
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

/// Deletes the OverlappingRangeIPReservation `target` (uid and resourceVersion
/// preconditions) while its pod is absent and no IPPool of its namespace allocates its
/// address: a reservation that an allocation still backs is whereabouts' to settle (the
/// pool's own cleanup removes a gone pod's allocation first; in a dry run, an allocation
/// that an earlier step of the plan would remove no longer backs it).
pub(super) async fn delete_reservation(
    client: &Client,
    mode: Mode,
    target: &Target,
    earlier: &Planned,
) -> Outcome {
    let rv = target.resource_version.as_str();
    let (path, live) = match reread(client, target).await {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    let reservation = match from_object_of(
        Stream::OverlappingRangeIpReservation,
        EventType::Modified,
        &live,
    ) {
        Ok(converted) => match converted.event.part {
            Some(KindPart::IpReservation(reservation)) => reservation,
            _ => return Outcome::failed("cannot read the reservation".into(), rv),
        },
        Err(e) => return Outcome::failed(format!("cannot read the reservation: {e}"), rv),
    };
    if reservation.address.is_empty() {
        return Outcome::skipped("the reservation's name holds no address".into(), rv);
    }
    let (namespace, pod) = reservation
        .podref
        .split_once('/')
        .unwrap_or(("", &reservation.podref));
    if let Err(outcome) = require_absent(
        client,
        Stream::Pod,
        Some(namespace),
        pod,
        format!("pod {} exists now", reservation.podref),
        rv,
    )
    .await
    {
        return outcome;
    }
    if let Err(outcome) = no_pool_allocates(client, target, &reservation.address, earlier, rv).await
    {
        return outcome;
    }
    if mode == Mode::DryRun {
        return Outcome::new(
            RemediationOutcome::DryRun,
            format!(
                "all checks passed; would delete the reservation of {} for {} (uid {}, resourceVersion {rv})",
                reservation.address, reservation.podref, target.uid
            ),
            rv,
        );
    }
    match delete_with_preconditions(client, &path, target).await {
        Ok(_) => Outcome::new(
            RemediationOutcome::Applied,
            format!(
                "deleted the reservation of {} for {} at resourceVersion {rv}",
                reservation.address, reservation.podref
            ),
            rv,
        ),
        Err(WriteError::Changed(why)) => Outcome::skipped(
            format!("the reservation changed while deleting ({why})"),
            rv,
        ),
        Err(WriteError::Failed(why)) => Outcome::failed(format!("delete failed: {why}"), rv),
    }
}

/// Ok when no IPPool in the reservation's namespace allocates `address` (but for an
/// allocation `earlier` steps of the plan remove); a backed reservation is a failure to
/// retry, not a skip.
async fn no_pool_allocates(
    client: &Client,
    target: &Target,
    address: &str,
    earlier: &Planned,
    rv: &str,
) -> Result<(), Outcome> {
    let Some(namespace) = target.namespace.as_deref() else {
        return Err(Outcome::skipped(
            "the reservation has no namespace".into(),
            rv,
        ));
    };
    let Some(spec) = Stream::IpPool.spec() else {
        return Err(Outcome::failed("IPPools are not known".into(), rv));
    };
    let collection = spec.collection_path();
    let Some((prefix, plural)) = collection.rsplit_once('/') else {
        return Err(Outcome::failed("IPPools are not known".into(), rv));
    };
    let path = format!("{prefix}/namespaces/{namespace}/{plural}");
    let pools = match get(client, &path, plural, "").await {
        Lookup::Found(list) => list,
        Lookup::Absent | Lookup::Failed(_) => {
            return Err(Outcome::failed(
                format!("cannot list the IPPools of {namespace}"),
                rv,
            ))
        }
    };
    let items = pools["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for pool in items {
        if let Ok(converted) = from_object_of(Stream::IpPool, EventType::Modified, pool) {
            if let Some(KindPart::IpPool(info)) = converted.event.part {
                let pool_name = super::api::metadata(pool, "name");
                if earlier.allocation_removed(namespace, pool_name, address) {
                    continue;
                }
                if let Some(backing) = info.allocations.iter().find(|a| a.address == address) {
                    // Retried: the allocation may be a gone pod's whose own cleanup is
                    // about to remove it.
                    return Err(Outcome::failed(
                        format!(
                            "IPPool {pool_name} allocates {address} (to {}): the reservation is backed",
                            backing.podref
                        ),
                        rv,
                    ));
                }
            }
        }
    }
    Ok(())
}
