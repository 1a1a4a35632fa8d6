//! spiderpool's cleanups: a SpiderEndpoint stuck terminating after its pod is gone keeps
//! its addresses until spiderpool's finalizer goes; when spiderpool-controller did not
//! remove it (the field report), ipaudit does, once the pod is proven absent.

use ipaudit_schemas::{Stream, SPIDERPOOL_FINALIZER};
use kube::Client;

use super::api::{is_terminating, metadata, remove_finalizer, require_absent, reread, FinalizerOf};
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
            plural: "spiderendpoints",
            target,
            object: &endpoint,
        },
        |f| f == SPIDERPOOL_FINALIZER,
    )
    .await
}
