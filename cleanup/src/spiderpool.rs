//! spiderpool's cleanups: a SpiderEndpoint stuck terminating after its pod is gone keeps
//! its addresses until spiderpool's finalizer goes, and a SpiderIPPool entry of a gone pod
//! keeps its address until spiderpool's garbage collector runs; when spiderpool-controller
//! did not release them (the field reports), ipaudit does, once the pod is proven absent.

use ipaudit_schemas::{RemediationOutcome, Stream, SPIDERPOOL_FINALIZER};
use kube::Client;
use serde_json::{json, Map, Value};

use super::api::{
    is_terminating, json_patch, metadata, remove_finalizer, require_absent, reread, FinalizerOf,
    WriteError,
};
use super::{Mode, Outcome, Target};

/// Removes spiderpool's finalizer from the SpiderEndpoint `target`: still exactly the
/// target, terminating, and its pod (same namespace and name) absent.
pub(super) async fn release_stuck_endpoint(
    client: &Client,
    mode: Mode,
    target: &Target,
) -> Outcome {
    let (path, endpoint) = match reread(client, target).await {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    let rv = metadata(&endpoint, "resourceVersion").to_owned();
    if !is_terminating(&endpoint) {
        return Outcome::skipped("the SpiderEndpoint is not terminating".into(), &rv);
    }
    let namespace = target.namespace.as_deref();
    if let Err(outcome) = require_absent(
        client,
        Stream::Pod,
        namespace,
        &target.name,
        format!(
            "pod {}/{} exists: spiderpool can release its endpoint itself",
            namespace.unwrap_or_default(),
            target.name
        ),
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
            object: &endpoint,
        },
        |f| f == SPIDERPOOL_FINALIZER,
    )
    .await
}

/// Removes the entry of `address` from the SpiderIPPool `target`'s `status.allocatedIPs`
/// (a JSON string of `IP -> {pod, podUid}`), while its pod is absent: a status patch that
/// tests the pool's resourceVersion and the string as read, and writes it back with every
/// other entry as it was and `allocatedIPCount` one less, as spiderpool's own release does.
pub(super) async fn remove_pool_entry(
    client: &Client,
    mode: Mode,
    target: &Target,
    address: &str,
) -> Outcome {
    let rv = target.resource_version.as_str();
    let (path, pool) = match reread(client, target).await {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    let Some(text) = pool.pointer("/status/allocatedIPs").and_then(Value::as_str) else {
        return Outcome::skipped(
            format!("the SpiderIPPool no longer allocates {address}"),
            rv,
        );
    };
    let mut entries: Map<String, Value> = match serde_json::from_str(text) {
        Ok(Value::Object(entries)) => entries,
        _ => {
            return Outcome::failed(
                "the SpiderIPPool's status.allocatedIPs is not a JSON object".into(),
                rv,
            )
        }
    };
    let Some(entry) = entries.remove(address) else {
        return Outcome::skipped(
            format!("the SpiderIPPool no longer allocates {address}"),
            rv,
        );
    };
    let pod = entry.get("pod").and_then(Value::as_str).unwrap_or_default();
    let Some((namespace, name)) = pod.split_once('/') else {
        return Outcome::skipped(format!("the entry of {address} names no pod"), rv);
    };
    if let Err(outcome) = require_absent(
        client,
        Stream::Pod,
        Some(namespace),
        name,
        format!("pod {pod} exists now"),
        rv,
    )
    .await
    {
        return outcome;
    }
    if mode == Mode::DryRun {
        return Outcome::new(
            RemediationOutcome::DryRun,
            format!("all checks passed; would remove the entry of {address} for {pod} at resourceVersion {rv}"),
            rv,
        );
    }
    let mut patch = vec![
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}),
        json!({"op": "test", "path": "/status/allocatedIPs", "value": text}),
        json!({"op": "replace", "path": "/status/allocatedIPs", "value": Value::Object(entries).to_string()}),
    ];
    if let Some(count) = pool
        .pointer("/status/allocatedIPCount")
        .and_then(Value::as_i64)
    {
        patch.push(json!({"op": "replace", "path": "/status/allocatedIPCount", "value": (count - 1).max(0)}));
    }
    let status = format!("{path}/status");
    match json_patch(client, &status, target, &Value::Array(patch)).await {
        Ok(_) => Outcome::new(
            RemediationOutcome::Applied,
            format!("removed the entry of {address} for {pod} at resourceVersion {rv}"),
            rv,
        ),
        Err(WriteError::Changed(why)) => Outcome::skipped(
            format!("the SpiderIPPool changed while patching ({why})"),
            rv,
        ),
        Err(WriteError::Failed(why)) => Outcome::failed(format!("patch failed: {why}"), rv),
    }
}
