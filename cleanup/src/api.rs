//! The API server calls every cleanup makes: read one object telling "absent" from "cannot
//! tell", re-read a target and check it is still the one the finding named, require an
//! object's absence, and write with the API server's own preconditions (a JSON patch whose
//! `test` operations must hold, a DELETE with uid and resourceVersion preconditions).

use ipaudit_schemas::{is_dns1123_subdomain, RemediationOutcome, Stream};
use kube::Client;
use serde_json::{json, Value};

use super::{Mode, Outcome, Target};

/// What a GET of one object found.
#[derive(Debug)]
pub enum Lookup {
    /// The object.
    Found(Value),
    /// A 404 whose Status names exactly this object: it does not exist.
    Absent,
    /// Anything else, including a 404 that does not name the object (its resource type is
    /// missing, e.g. while its CRD is reinstalled): worth retrying.
    Failed(String),
}

/// Whether `status` is the API server's "object not found" for `plural`/`name`: a 404 with
/// reason NotFound whose details name the object. A 404 for a missing resource type says
/// "the server could not find the requested resource" and names nothing.
pub fn names_missing(status: &kube::core::Status, plural: &str, name: &str) -> bool {
    status.code == 404
        && status.reason == "NotFound"
        && status
            .details
            .as_ref()
            .is_some_and(|d| d.name == name && (d.kind.is_empty() || d.kind == plural))
}

/// GETs an object at `path` (its collection is `plural`), telling an absent object from
/// a missing resource type.
pub async fn get(client: &Client, path: &str, plural: &str, name: &str) -> Lookup {
    let request = match http::Request::get(path).body(Vec::new()) {
        Ok(request) => request,
        Err(e) => return Lookup::Failed(e.to_string()),
    };
    match client.request::<Value>(request).await {
        Ok(object) => Lookup::Found(object),
        Err(kube::Error::Api(status)) if names_missing(&status, plural, name) => Lookup::Absent,
        Err(kube::Error::Api(status)) if status.code == 404 => Lookup::Failed(format!(
            "404 that does not name {plural}/{name} (the resource type may be missing, e.g. its CRD is being reinstalled): {}",
            status.message
        )),
        Err(e) => Lookup::Failed(e.to_string()),
    }
}

/// Whether `name` is a DNS-1123 label (a namespace): a subdomain of at most 63 bytes, no dot.
fn is_dns1123_label(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && is_dns1123_subdomain(name)
}

/// The API path of one object of `stream`; `None` when a name is not a Kubernetes name
/// (names come from commands and report files, and go into the URL path).
pub fn path_of(stream: Stream, namespace: Option<&str>, name: &str) -> Option<String> {
    let spec = stream.spec()?;
    let valid = is_dns1123_subdomain(name)
        && namespace.is_none_or(is_dns1123_label)
        && namespace.is_some() == spec.namespaced;
    if !valid {
        return None;
    }
    let collection = spec.collection_path();
    Some(match namespace {
        Some(ns) => {
            let (prefix, plural) = collection.rsplit_once('/')?;
            format!("{prefix}/namespaces/{ns}/{plural}/{name}")
        }
        None => format!("{collection}/{name}"),
    })
}

/// A string field of an object's metadata ("" when absent).
pub fn metadata<'a>(object: &'a Value, field: &str) -> &'a str {
    object
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Whether the object is terminating (it has a deletionTimestamp).
pub fn is_terminating(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// The target's API path and its live object, if it is still exactly the target: same
/// uid (not recreated) and same resourceVersion (not changed since the finding). Else the
/// outcome that says why not.
pub async fn reread(client: &Client, target: &Target) -> Result<(String, Value), Outcome> {
    let kind = target.stream.kind();
    let Some(path) = path_of(target.stream, target.namespace.as_deref(), &target.name) else {
        return Err(Outcome::skipped(
            format!("refused: {:?} is not a Kubernetes name", target.name),
            &target.resource_version,
        ));
    };
    let plural = target.stream.spec().map_or("", |s| s.plural);
    let live = match get(client, &path, plural, &target.name).await {
        Lookup::Found(object) => object,
        Lookup::Absent => {
            return Err(Outcome::skipped(
                format!("the {kind} no longer exists"),
                &target.resource_version,
            ))
        }
        Lookup::Failed(e) => {
            return Err(Outcome::failed(
                format!("cannot read the {kind}: {e}"),
                &target.resource_version,
            ))
        }
    };
    let (uid, rv) = (metadata(&live, "uid"), metadata(&live, "resourceVersion"));
    if uid != target.uid {
        return Err(Outcome::skipped(
            format!(
                "uid changed: the {kind} was recreated ({uid} is not {})",
                target.uid
            ),
            rv,
        ));
    }
    if rv != target.resource_version {
        return Err(Outcome::skipped(
            format!(
                "resourceVersion changed ({rv} is not {}): the {kind} was updated since the finding",
                target.resource_version
            ),
            rv,
        ));
    }
    Ok((path, live))
}

/// [`reread`], and the live object's kind part read by the same converter as every event
/// (so that an address or a handle means here what it meant in the finding); `None` when
/// the object has no part of its kind.
pub async fn reread_part(
    client: &Client,
    target: &Target,
) -> Result<(String, Value, Option<ipaudit_schemas::KindPart>), Outcome> {
    let (path, live) = reread(client, target).await?;
    match ipaudit_schemas::convert::from_object_of(
        target.stream,
        ipaudit_schemas::EventType::Modified,
        &live,
    ) {
        Ok(converted) => Ok((path, live, converted.event.part)),
        Err(e) => Err(Outcome::failed(
            format!("cannot read the {}: {e}", target.stream.kind()),
            &target.resource_version,
        )),
    }
}

/// Ok when the object of `stream` named `name` is absent; else the outcome, with `present`
/// as the reason when it exists. `rv` is the target's, for the outcome.
pub async fn require_absent(
    client: &Client,
    stream: Stream,
    namespace: Option<&str>,
    name: &str,
    present: String,
    rv: &str,
) -> Result<(), Outcome> {
    let (Some(path), Some(spec)) = (path_of(stream, namespace, name), stream.spec()) else {
        return Err(Outcome::skipped(
            format!("refused: {name:?} is not a Kubernetes name"),
            rv,
        ));
    };
    match get(client, &path, spec.plural, name).await {
        Lookup::Absent => Ok(()),
        Lookup::Found(_) => Err(Outcome::skipped(present, rv)),
        Lookup::Failed(e) => Err(Outcome::failed(
            format!("cannot read {} {name}: {e}", spec.plural),
            rv,
        )),
    }
}

/// How a write the API server refused reads: `Changed` when a precondition failed (the
/// object changed or went in between: nothing was written), else a failure.
pub enum WriteError {
    /// A precondition did not hold (409, 422 from a failed `test`, the object gone).
    Changed(String),
    /// Anything else.
    Failed(String),
}

/// Sends a JSON patch (`application/json-patch+json`) to `path`, the target's (or its
/// status subresource's).
pub async fn json_patch(
    client: &Client,
    path: &str,
    target: &Target,
    patch: &Value,
) -> Result<Value, WriteError> {
    let request = http::Request::patch(path)
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        .body(serde_json::to_vec(patch).unwrap_or_default())
        .map_err(|e| WriteError::Failed(format!("cannot build the patch: {e}")))?;
    send(client, request, target).await
}

/// DELETEs the target at `path` with its uid and resourceVersion as preconditions.
pub async fn delete_with_preconditions(
    client: &Client,
    path: &str,
    target: &Target,
) -> Result<Value, WriteError> {
    let options = serde_json::json!({"apiVersion": "v1", "kind": "DeleteOptions",
        "preconditions": {"uid": target.uid, "resourceVersion": target.resource_version}});
    let request = http::Request::delete(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&options).unwrap_or_default())
        .map_err(|e| WriteError::Failed(format!("cannot build the delete: {e}")))?;
    send(client, request, target).await
}

/// Sends a write to the target; a 404 that names it means it went in between.
async fn send(
    client: &Client,
    request: http::Request<Vec<u8>>,
    target: &Target,
) -> Result<Value, WriteError> {
    let plural = target.stream.spec().map_or("", |s| s.plural);
    match client.request::<Value>(request).await {
        Ok(answer) => Ok(answer),
        // A real kube-apiserver answers a failed JSON-patch `test` with a bare 422 ("the
        // server rejected our request due to an error in our request", no causes): say
        // what it means here.
        Err(kube::Error::Api(status)) if status.code == 422 => Err(WriteError::Changed(format!(
            "422: a test of the patch no longer holds; the server said: {}",
            status.message
        ))),
        Err(kube::Error::Api(status))
            if status.code == 409 || names_missing(&status, plural, &target.name) =>
        {
            Err(WriteError::Changed(format!(
                "{}: {}",
                status.code, status.message
            )))
        }
        Err(e) => Err(WriteError::Failed(e.to_string())),
    }
}

/// An object whose finalizer is to be removed, as [`reread`] found it.
pub struct FinalizerOf<'a> {
    /// Its API path.
    pub path: &'a str,
    /// The target it is.
    pub target: &'a Target,
    /// The live object.
    pub object: &'a Value,
}

/// Removes the first finalizer `wanted` accepts from `of.object`, with a JSON patch that
/// tests the resourceVersion and the finalizer at its index: it cannot remove another
/// finalizer, nor touch a changed object. The caller has checked everything else.
pub async fn remove_finalizer(
    client: &Client,
    mode: Mode,
    of: &FinalizerOf<'_>,
    wanted: impl Fn(&str) -> bool,
) -> Outcome {
    let kind = of.target.stream.kind();
    let rv = metadata(of.object, "resourceVersion").to_owned();
    let found = of
        .object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .and_then(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .enumerate()
                .find(|(_, f)| wanted(f))
        });
    let Some((index, finalizer)) = found else {
        return Outcome::skipped(format!("the {kind} has no such finalizer"), &rv);
    };
    let finalizer = finalizer.to_owned();
    let with_finalizer = |outcome: RemediationOutcome, reason: String| Outcome {
        outcome,
        reason,
        finalizer: Some(finalizer.clone()),
        resource_version: rv.clone(),
    };
    if mode == Mode::DryRun {
        return with_finalizer(
            RemediationOutcome::DryRun,
            format!("all checks passed; would remove {finalizer}"),
        );
    }
    let patch = json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": finalizer},
        {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
    ]);
    match json_patch(client, of.path, of.target, &patch).await {
        Ok(_) => with_finalizer(
            RemediationOutcome::Applied,
            format!("removed {finalizer} at resourceVersion {rv}"),
        ),
        Err(WriteError::Changed(why)) => with_finalizer(
            RemediationOutcome::Skipped,
            format!("the {kind} changed while patching ({why})"),
        ),
        Err(WriteError::Failed(why)) => {
            with_finalizer(RemediationOutcome::Failed, format!("patch failed: {why}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::StatusDetails;

    fn not_found(details: Option<StatusDetails>) -> kube::core::Status {
        let mut status = kube::core::Status::failure("not found", "NotFound").with_code(404);
        status.details = details;
        status
    }

    #[test]
    fn only_a_404_naming_the_subnet_means_it_is_absent() {
        let named = StatusDetails {
            name: "net-1".into(),
            group: "kubeovn.io".into(),
            kind: "subnets".into(),
            uid: String::new(),
            causes: Vec::new(),
            retry_after_seconds: 0,
        };
        assert!(names_missing(
            &not_found(Some(named.clone())),
            "subnets",
            "net-1"
        ));
        assert!(!names_missing(
            &not_found(Some(named.clone())),
            "subnets",
            "net-2"
        ));
        assert!(!names_missing(&not_found(Some(named)), "ips", "net-1"));
        // The 404 of a resource type that is not served names nothing.
        assert!(!names_missing(&not_found(None), "subnets", "net-1"));
        let mut other = not_found(None);
        other.reason = "Failed to parse error data".into();
        assert!(!names_missing(&other, "subnets", "net-1"));
    }

    #[test]
    fn paths_are_made_only_of_kubernetes_names_in_the_kinds_scope() {
        assert_eq!(
            path_of(Stream::IpPool, Some("kube-system"), "10.200.0.0-16").as_deref(),
            Some("/apis/whereabouts.cni.cncf.io/v1alpha1/namespaces/kube-system/ippools/10.200.0.0-16")
        );
        assert_eq!(
            path_of(Stream::Ip, None, "vm-1.ns").as_deref(),
            Some("/apis/kubeovn.io/v1/ips/vm-1.ns")
        );
        assert!(path_of(Stream::Ip, None, "../secrets").is_none());
        assert!(
            path_of(Stream::Ip, Some("ns"), "a").is_none(),
            "IPs are cluster-scoped"
        );
        assert!(
            path_of(Stream::IpPool, None, "a").is_none(),
            "pools are namespaced"
        );
        assert!(
            path_of(Stream::IpPool, Some("a.b"), "a").is_none(),
            "a namespace has no dot"
        );
    }
}
