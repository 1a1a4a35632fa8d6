//! kube-ovn's cleanups: an IP whose subnet is gone can never lose kube-ovn's finalizer by
//! kube-ovn's own hand (its controller needs the subnet to release the address), so
//! ipaudit removes it, once the subnet is proven absent.

use ipaudit_schemas::{is_kube_ovn_finalizer, RemediationOutcome, Stream};
use kube::Client;
use serde_json::Value;

use super::api::{
    delete_with_preconditions, is_terminating, metadata, remove_finalizer, require_absent, reread,
    FinalizerOf, WriteError,
};
use super::{Mode, Outcome, Target};

/// Removes kube-ovn's finalizer from the IP `target`: it must still be exactly the target,
/// terminating, naming `subnet`, and `subnet` must be absent (a 404 that names it).
pub(super) async fn release_stuck_ip(
    client: &Client,
    mode: Mode,
    target: &Target,
    subnet: &str,
) -> Outcome {
    let (path, ip) = match reread(client, target).await {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    let rv = metadata(&ip, "resourceVersion").to_owned();
    if !is_terminating(&ip) {
        return Outcome::skipped("the IP is not terminating".into(), &rv);
    }
    let named = ip
        .pointer("/spec/subnet")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if named != subnet {
        return Outcome::skipped(
            format!("the IP names subnet {named:?}, not {subnet:?}"),
            &rv,
        );
    }
    if let Err(outcome) = require_absent(
        client,
        Stream::Subnet,
        None,
        subnet,
        format!("subnet {subnet} exists: kube-ovn can finish the deletion itself"),
        &rv,
    )
    .await
    {
        return outcome;
    }
    remove_finalizer(
        client,
        mode,
        &FinalizerOf {
            path: &path,
            target,
            object: &ip,
        },
        is_kube_ovn_finalizer,
    )
    .await
}

/// Deletes the IP `target` (uid and resourceVersion preconditions) while its subnet is
/// absent; if kube-ovn's finalizer then holds it, releases it as [`release_stuck_ip`] does,
/// at the version the delete made.
pub(super) async fn delete_orphaned_ip(client: &Client, mode: Mode, target: &Target) -> Outcome {
    let rv = target.resource_version.as_str();
    let (path, live) = match reread(client, target).await {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    if is_terminating(&live) {
        return Outcome::skipped("the IP is terminating already".into(), rv);
    }
    let subnet = live
        .pointer("/spec/subnet")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if let Err(outcome) = require_absent(
        client,
        Stream::Subnet,
        None,
        &subnet,
        format!("subnet {subnet} exists now: the IP is not orphaned"),
        rv,
    )
    .await
    {
        return outcome;
    }
    if mode == Mode::DryRun {
        return Outcome::new(
            RemediationOutcome::DryRun,
            format!("all checks passed; would delete it (uid {}, resourceVersion {rv}) and release kube-ovn's finalizer if it holds it", target.uid),
            rv,
        );
    }
    let answer = match delete_with_preconditions(client, &path, target).await {
        Ok(answer) => answer,
        Err(WriteError::Changed(why)) => {
            return Outcome::skipped(format!("the IP changed while deleting ({why})"), rv)
        }
        Err(WriteError::Failed(why)) => {
            return Outcome::failed(format!("delete failed: {why}"), rv)
        }
    };
    // With kube-ovn's finalizer the IP is only marked; its subnet is gone, so kube-ovn
    // cannot release it: do what the stuck-IP cleanup does, at the version the delete made.
    let holds_finalizer = answer
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| {
            f.iter()
                .filter_map(Value::as_str)
                .any(is_kube_ovn_finalizer)
        });
    if !(holds_finalizer && is_terminating(&answer)) {
        return Outcome::new(
            RemediationOutcome::Applied,
            format!("deleted (uid {}, resourceVersion {rv})", target.uid),
            rv,
        );
    }
    let marked = Target {
        resource_version: metadata(&answer, "resourceVersion").to_owned(),
        ..target.clone()
    };
    let mut then = release_stuck_ip(client, Mode::Apply, &marked, &subnet).await;
    then.reason = format!("deleted at resourceVersion {rv}; then {}", then.reason);
    then
}
