//! The report file `check -o` writes and `release --from-report` reads: which cluster
//! (API server URL, kube-system uid), when, the resourceVersion of every list, and each
//! finding still firing with the object a release would act on, as the snapshot showed it.
//! A release refuses a report of another cluster or of another format.

use std::path::Path;

use ipaudit_schemas::kubernetes::format_timestamp_ms;
use ipaudit_schemas::Alert;
use serde::{Deserialize, Serialize};

use ipaudit_cleanup::Target;

use crate::cluster::ClusterIdentity;
use crate::snapshot::ListedKind;

/// The format this build writes and reads.
pub const REPORT_FORMAT: u32 = 1;

/// The report of one check.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckReport {
    /// [`REPORT_FORMAT`].
    pub format: u32,
    /// `kubectl-ipaudit <version>`.
    pub generator: String,
    /// The cluster checked.
    pub cluster: ClusterIdentity,
    /// When the snapshot was complete, RFC 3339 (for a person).
    pub taken_at: String,
    /// The same, Unix ms (for the age check).
    pub taken_at_ms: i64,
    /// Every list of the snapshot.
    pub lists: Vec<ListedKind>,
    /// What was still firing at `taken_at`.
    pub findings: Vec<ReportFinding>,
}

/// One finding: the alert as the analyzer raised it, and its target.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReportFinding {
    /// The alert.
    pub alert: Alert,
    /// The object a cleanup would change; `None` when the snapshot has no such object.
    pub target: Option<Target>,
}

/// Why a report cannot be used. None is retryable with the same file.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The file could not be read or written.
    #[error("cannot access report {path}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a report.
    #[error("{path} is not a kubectl-ipaudit report")]
    Parse {
        /// The file.
        path: String,
        /// What failed.
        #[source]
        source: serde_json::Error,
    },
    /// A report of another format.
    #[error("{path} is a report of format {found}; this build reads format {REPORT_FORMAT}: run check again with this build")]
    Format {
        /// The file.
        path: String,
        /// Its format.
        found: u32,
    },
}

impl CheckReport {
    /// A report of a snapshot taken at `taken_at_ms`.
    pub fn new(
        cluster: ClusterIdentity,
        taken_at_ms: i64,
        lists: Vec<ListedKind>,
        findings: Vec<ReportFinding>,
    ) -> Self {
        CheckReport {
            format: REPORT_FORMAT,
            generator: format!("kubectl-ipaudit {}", env!("CARGO_PKG_VERSION")),
            cluster,
            taken_at: format_timestamp_ms(taken_at_ms),
            taken_at_ms,
            lists,
            findings,
        }
    }

    /// Writes the report as pretty JSON.
    pub fn write(&self, path: &Path) -> Result<(), ReportError> {
        let io = |source| ReportError::Io {
            path: path.display().to_string(),
            source,
        };
        let text = serde_json::to_string_pretty(self)
            .map_err(std::io::Error::other)
            .map_err(io)?;
        std::fs::write(path, text + "\n").map_err(io)
    }

    /// Reads a report of this build's format.
    pub fn read(path: &Path) -> Result<CheckReport, ReportError> {
        let name = path.display().to_string();
        let text = std::fs::read(path).map_err(|source| ReportError::Io {
            path: name.clone(),
            source,
        })?;
        // The format first, so that another format is named as such, not as garbage.
        #[derive(Deserialize)]
        struct Head {
            format: u32,
        }
        let head: Head = serde_json::from_slice(&text).map_err(|source| ReportError::Parse {
            path: name.clone(),
            source,
        })?;
        if head.format != REPORT_FORMAT {
            return Err(ReportError::Format {
                path: name,
                found: head.format,
            });
        }
        serde_json::from_slice(&text).map_err(|source| ReportError::Parse { path: name, source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> CheckReport {
        CheckReport::new(
            ClusterIdentity {
                server: "https://a:6443".into(),
                kube_system_uid: Some("u1".into()),
            },
            1_790_000_000_000,
            vec![ListedKind {
                resource: "ips.kubeovn.io/v1".into(),
                resource_version: "42".into(),
                objects: 3,
            }],
            Vec::new(),
        )
    }

    #[test]
    fn a_report_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        report().write(&path).unwrap();
        let read = CheckReport::read(&path).unwrap();
        assert_eq!(read.cluster, report().cluster);
        assert_eq!(read.lists, report().lists);
        assert_eq!(read.taken_at, "2026-09-21T14:13:20Z");
    }

    #[test]
    fn a_report_of_another_format_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        std::fs::write(&path, r#"{"format": 2, "something": "new"}"#).unwrap();
        let error = CheckReport::read(&path).unwrap_err();
        assert!(
            matches!(error, ReportError::Format { found: 2, .. }),
            "{error}"
        );
        std::fs::write(&path, "not json").unwrap();
        assert!(matches!(
            CheckReport::read(&path).unwrap_err(),
            ReportError::Parse { .. }
        ));
    }
}
