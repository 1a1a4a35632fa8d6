//! What the collector may do, asked before it starts: one SelfSubjectAccessReview per
//! permission it needs (list and watch of every kind it watches; with remediation, get of
//! those kinds and the writes of the cleanup table, [`ipaudit_cleanup::WRITES`]). Missing
//! permissions stop the start with one error that names each of them and the chart's
//! roles, where the watchers would otherwise retry a 403 for ever. A server that cannot
//! answer (no SelfSubjectAccessReview, a network failure) does not stop the start: the
//! watchers then meet the same answers themselves.

use futures::future::join_all;
use ipaudit_schemas::KindSpec;
use kube::Client;
use serde_json::{json, Value};
use tracing::info;

use crate::remediate::RemediationMode;
use ipaudit_cleanup::WRITES;

/// One thing the collector does through the API: a verb on a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    /// `list`, `watch`, `get`, `patch`, `delete`.
    pub verb: &'static str,
    /// The API group (`""` for the core group).
    pub group: &'static str,
    /// The plural.
    pub resource: &'static str,
    /// `status` for a write to the status subresource.
    pub subresource: Option<&'static str>,
}

impl std::fmt::Display for Permission {
    /// `list ips.kubeovn.io`, `patch spiderippools.spiderpool.spidernet.io/status`, `watch pods`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(sub) = self.subresource {
            write!(f, "/{sub}")?;
        }
        Ok(())
    }
}

/// The credentials lack permissions the collector needs: an operator must grant them,
/// retrying does not help.
#[derive(Debug, thiserror::Error)]
#[error(
    "{} may not {}: grant them (the chart's ClusterRoles ipaudit-collector{} and their bindings, deploy/rbac.yaml)",
    .user.as_deref().map_or_else(|| "the collector's credentials".to_owned(), |u| format!("the collector's credentials ({u})")),
    .missing.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
    if *.remediating { ", ipaudit-collector-remediate" } else { "" }
)]
pub struct AccessDenied {
    /// Who the API server says the credentials are, when it says.
    pub user: Option<String>,
    /// What they may not do, in the order needed.
    pub missing: Vec<Permission>,
    /// Whether remediation asked for writes.
    pub remediating: bool,
}

/// The permissions a collector watching `kinds` needs with remediation `mode`: list and
/// watch of each kind; with remediation (dry run too: it rereads), get of each kind; with
/// remediation on, the cleanup writes on the kinds watched.
pub fn needed(kinds: &[&'static KindSpec], mode: RemediationMode) -> Vec<Permission> {
    let on = |kind: &'static KindSpec, verb: &'static str, subresource| Permission {
        verb,
        group: kind.group,
        resource: kind.plural,
        subresource,
    };
    let mut needed = Vec::new();
    for kind in kinds {
        needed.push(on(kind, "list", None));
        needed.push(on(kind, "watch", None));
    }
    if mode != RemediationMode::Off {
        needed.extend(kinds.iter().map(|kind| on(kind, "get", None)));
    }
    if mode == RemediationMode::On {
        for write in WRITES {
            if let Some(kind) = kinds.iter().find(|k| k.stream == write.stream) {
                needed.push(on(kind, write.verb, write.subresource));
            }
        }
    }
    needed
}

/// Asks the API server whether the credentials of `client` have every permission of
/// `needed`; Err names those they lack. Ok when all are granted, and also when the server
/// could not say (logged).
pub async fn require(
    client: &Client,
    needed: &[Permission],
    remediating: bool,
    metrics: &crate::metrics::Metrics,
) -> Result<(), AccessDenied> {
    let answers = join_all(needed.iter().map(|p| allowed(client, p))).await;
    let mut missing = Vec::new();
    for (permission, answer) in needed.iter().zip(answers) {
        match answer {
            Ok(true) => {}
            Ok(false) => missing.push(permission.clone()),
            // A server without authorization (a simulator, a proxy) does not serve it.
            Err(kube::Error::Api(status)) if status.code == 404 => {
                info!("the API server does not serve SelfSubjectAccessReview: permissions are not checked ahead");
                return Ok(());
            }
            Err(e) => {
                use ipaudit_runtime::telemetry::InternalEvent as _;
                crate::telemetry::Failed::new(crate::telemetry::Failure::PermissionCheck, &e)
                    .about(permission)
                    .emit(metrics);
                return Ok(());
            }
        }
    }
    if missing.is_empty() {
        info!(
            permissions = needed.len(),
            "the API server grants every permission the collector needs"
        );
        return Ok(());
    }
    Err(AccessDenied {
        user: user(client).await,
        missing,
        remediating,
    })
}

/// One SelfSubjectAccessReview.
async fn allowed(client: &Client, permission: &Permission) -> Result<bool, kube::Error> {
    let mut attributes = json!({"verb": permission.verb, "group": permission.group,
        "resource": permission.resource});
    if let Some(sub) = permission.subresource {
        attributes["subresource"] = json!(sub);
    }
    let review = json!({"apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": attributes}});
    let answer = post(
        client,
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        &review,
    )
    .await?;
    Ok(answer.pointer("/status/allowed") == Some(&Value::Bool(true)))
}

/// The user name of the credentials (SelfSubjectReview), when the server says.
async fn user(client: &Client) -> Option<String> {
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let answer = post(
        client,
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &review,
    )
    .await
    .ok()?;
    answer
        .pointer("/status/userInfo/username")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

async fn post(client: &Client, path: &str, body: &Value) -> Result<Value, kube::Error> {
    let request = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(body).unwrap_or_default())
        .map_err(kube::Error::HttpError)?;
    client.request::<Value>(request).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_schemas::{Stream, KINDS};

    fn kinds(streams: &[Stream]) -> Vec<&'static KindSpec> {
        KINDS
            .iter()
            .filter(|k| streams.contains(&k.stream))
            .collect()
    }

    fn names(permissions: &[Permission]) -> Vec<String> {
        permissions.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn watching_needs_list_and_watch_of_each_kind_and_nothing_else() {
        let needed = needed(&kinds(&[Stream::Pod, Stream::Ip]), RemediationMode::Off);
        assert_eq!(
            names(&needed),
            [
                "list pods",
                "watch pods",
                "list ips.kubeovn.io",
                "watch ips.kubeovn.io"
            ]
        );
    }

    #[test]
    fn remediation_on_adds_gets_and_the_cleanup_writes_of_the_kinds_watched_only() {
        let needed = needed(
            &kinds(&[Stream::Pod, Stream::SpiderIpPool, Stream::SpiderEndpoint]),
            RemediationMode::On,
        );
        let writes: Vec<String> = names(&needed)
            .into_iter()
            .filter(|p| !p.starts_with("list") && !p.starts_with("watch") && !p.starts_with("get"))
            .collect();
        assert_eq!(
            writes,
            [
                "patch spiderendpoints.spiderpool.spidernet.io",
                "patch spiderippools.spiderpool.spidernet.io/status"
            ]
        );
        assert!(names(&needed).contains(&"get pods".to_owned()));
    }

    #[test]
    fn a_dry_run_rereads_but_writes_nothing() {
        let needed = needed(&kinds(&[Stream::Ip]), RemediationMode::DryRun);
        assert_eq!(
            names(&needed),
            [
                "list ips.kubeovn.io",
                "watch ips.kubeovn.io",
                "get ips.kubeovn.io"
            ]
        );
    }

    #[test]
    fn the_denial_names_who_what_and_the_roles_to_grant() {
        let denied = AccessDenied {
            user: Some("system:serviceaccount:ipaudit:nobody".into()),
            missing: needed(&kinds(&[Stream::Ip]), RemediationMode::Off),
            remediating: true,
        };
        assert_eq!(
            denied.to_string(),
            "the collector's credentials (system:serviceaccount:ipaudit:nobody) may not list ips.kubeovn.io, watch ips.kubeovn.io: grant them (the chart's ClusterRoles ipaudit-collector, ipaudit-collector-remediate and their bindings, deploy/rbac.yaml)"
        );
    }
}
