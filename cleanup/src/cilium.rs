//! Cilium's cleanup: a CiliumEndpoint left behind by a pod that is gone, deleted with uid
//! and resourceVersion preconditions once the pod is proven absent (Cilium's operator does
//! the same with a uid precondition, when its endpoint garbage collection runs).

use ipaudit_schemas::{RemediationOutcome, Stream};
use kube::Client;

use super::api::{delete_with_preconditions, require_absent, reread, WriteError};
use super::{Mode, Outcome, Target};

/// Deletes the CiliumEndpoint `target` (still exactly the target) while the pod of its
/// name is absent.
pub(super) async fn delete_stale_endpoint(client: &Client, mode: Mode, target: &Target) -> Outcome {
    let rv = target.resource_version.as_str();
    let (path, _) = match reread(client, target).await {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    let namespace = target.namespace.as_deref().unwrap_or_default();
    let pod = format!("{namespace}/{}", target.name);
    if let Err(outcome) = require_absent(
        client,
        Stream::Pod,
        Some(namespace),
        &target.name,
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
            format!("all checks passed; would delete the CiliumEndpoint of gone pod {pod} at resourceVersion {rv}"),
            rv,
        );
    }
    match delete_with_preconditions(client, &path, target).await {
        Ok(_) => Outcome::new(
            RemediationOutcome::Applied,
            format!("deleted the CiliumEndpoint of gone pod {pod} at resourceVersion {rv}"),
            rv,
        ),
        Err(WriteError::Changed(why)) => Outcome::skipped(
            format!("the CiliumEndpoint changed before the delete ({why})"),
            rv,
        ),
        Err(WriteError::Failed(why)) => Outcome::failed(format!("delete failed: {why}"), rv),
    }
}
