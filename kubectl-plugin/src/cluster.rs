//! Which cluster: a client from the kubeconfig (`--kubeconfig`, `--context`, else kube's
//! inference: in-cluster service account, `$KUBECONFIG`, `~/.kube/config`), and the
//! cluster's identity as a report records it: the API server's URL and the uid of the
//! `kube-system` Namespace, which a cluster keeps for its whole life whatever its URL.

use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::warn;

/// Where the kubeconfig comes from.
#[derive(Debug, Clone, Default)]
pub struct KubeOptions {
    /// This kubeconfig file instead of kube's inference.
    pub kubeconfig: Option<PathBuf>,
    /// This context of it instead of its current one.
    pub context: Option<String>,
}

/// Why no client could be made, or the cluster not named. Only [`ClusterError::Identity`]
/// may pass on a retry (the API server was unreachable or failed); the others need a
/// different kubeconfig or context.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The kubeconfig file could not be read or used.
    #[error("cannot use kubeconfig {path}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No configuration could be inferred (no service account, no kubeconfig).
    #[error("no cluster configuration found (in-cluster, $KUBECONFIG, ~/.kube/config)")]
    Infer(#[source] kube::config::InferConfigError),
    /// The context named is not usable.
    #[error("cannot use context {context:?} of the kubeconfig")]
    Context {
        /// The context.
        context: String,
        /// What failed.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The client could not be built from the configuration (TLS, proxy settings).
    #[error("cannot build a Kubernetes client")]
    Client(#[source] kube::Error),
    /// Reading the `kube-system` Namespace failed (network, authentication, a 5xx):
    /// retryable.
    #[error("cannot read the kube-system Namespace (the cluster's identity)")]
    Identity(#[source] kube::Error),
}

impl ClusterError {
    /// Whether the same call may succeed later.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ClusterError::Identity(_))
    }
}

/// A cluster as a report names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterIdentity {
    /// The API server's URL, as the kubeconfig names it.
    pub server: String,
    /// The uid of the `kube-system` Namespace; `None` when the credentials may not read it.
    pub kube_system_uid: Option<String>,
}

impl ClusterIdentity {
    /// The cluster id alerts carry: the kube-system uid, else the server URL.
    pub fn cluster_id(&self) -> String {
        self.kube_system_uid
            .clone()
            .unwrap_or_else(|| self.server.clone())
    }

    /// Why `live` is not the cluster this identity names; `None` when it is. The uid
    /// decides when both have one (a cluster keeps it behind any URL); else the URLs must
    /// be equal.
    pub fn mismatch(&self, live: &ClusterIdentity) -> Option<String> {
        match (&self.kube_system_uid, &live.kube_system_uid) {
            (Some(report), Some(now)) if report != now => Some(format!(
                "the report is of the cluster whose kube-system uid is {report}; this cluster's is {now}"
            )),
            (Some(_), Some(_)) => None,
            _ if self.server != live.server => Some(format!(
                "the report is of the API server {}; this kubeconfig points at {} (and the kube-system uid cannot be compared)",
                self.server, live.server
            )),
            _ => None,
        }
    }
}

/// The configuration the options select.
pub async fn config(options: &KubeOptions) -> Result<Config, ClusterError> {
    let kube_options = KubeConfigOptions {
        context: options.context.clone(),
        ..KubeConfigOptions::default()
    };
    match (&options.kubeconfig, &options.context) {
        (Some(path), _) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| ClusterError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?;
            Config::from_custom_kubeconfig(kubeconfig, &kube_options)
                .await
                .map_err(|source| ClusterError::Kubeconfig {
                    path: path.clone(),
                    source,
                })
        }
        (None, Some(context)) => Config::from_kubeconfig(&kube_options)
            .await
            .map_err(|source| ClusterError::Context {
                context: context.clone(),
                source,
            }),
        (None, None) => Config::infer().await.map_err(ClusterError::Infer),
    }
}

/// A client and the identity of its cluster.
pub async fn connect(options: &KubeOptions) -> Result<(Client, ClusterIdentity), ClusterError> {
    let config = config(options).await?;
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(ClusterError::Client)?;
    let kube_system_uid = kube_system_uid(&client).await?;
    Ok((
        client,
        ClusterIdentity {
            server: server.trim_end_matches('/').to_owned(),
            kube_system_uid,
        },
    ))
}

/// The uid of `kube-system`; `None` (with a warning) when the credentials may not read it.
async fn kube_system_uid(client: &Client) -> Result<Option<String>, ClusterError> {
    let request = http::Request::get("/api/v1/namespaces/kube-system")
        .body(Vec::new())
        .map_err(|e| ClusterError::Identity(kube::Error::HttpError(e)))?;
    match client.request::<Value>(request).await {
        Ok(namespace) => Ok(namespace
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_owned)),
        Err(kube::Error::Api(status)) if status.code == 403 || status.code == 404 => {
            warn!(code = status.code, message = %status.message,
                "cannot read the kube-system Namespace: the cluster is named by its API server URL only");
            Ok(None)
        }
        Err(error) => Err(ClusterError::Identity(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(server: &str, uid: Option<&str>) -> ClusterIdentity {
        ClusterIdentity {
            server: server.into(),
            kube_system_uid: uid.map(str::to_owned),
        }
    }

    #[test]
    fn the_kube_system_uid_decides_whatever_the_url() {
        let report = identity("https://a:6443", Some("u1"));
        assert_eq!(
            report.mismatch(&identity("https://lb:443", Some("u1"))),
            None
        );
        let other = report
            .mismatch(&identity("https://a:6443", Some("u2")))
            .unwrap();
        assert!(other.contains("u1") && other.contains("u2"), "{other}");
    }

    #[test]
    fn without_a_uid_the_urls_must_match() {
        let report = identity("https://a:6443", None);
        assert_eq!(
            report.mismatch(&identity("https://a:6443", Some("u1"))),
            None
        );
        assert!(report
            .mismatch(&identity("https://b:6443", Some("u1")))
            .is_some());
    }
}
