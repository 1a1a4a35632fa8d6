//! The HTTP client of the webhook and Alertmanager sinks, and how their URLs show in logs,
//! metrics and delivery keys. A client always has a timeout (a failed build is an error,
//! never a fallback to a client without one), never follows a redirect (a redirect would
//! carry the body and credentials to another place), and trusts the bundled roots plus an
//! operator's private CA (`--ca-file`).
//!
//! For Slack-style hooks the URL itself is the secret, so a URL is only ever shown as
//! `scheme://host[:port]`, with `/…` when it had a path or query, and keyed with a short
//! hash of the whole URL so that two hooks on one host keep apart.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

/// How the HTTP sinks connect.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Whole-request timeout (connect, send, answer).
    pub timeout: Duration,
    /// PEM file of extra CA certificates to trust (a private CA), beside the bundled roots.
    pub ca_file: Option<PathBuf>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            timeout: Duration::from_secs(10),
            ca_file: None,
        }
    }
}

/// Why an HTTP sink could not be set up (a configuration error: retrying does not help).
#[derive(Debug, thiserror::Error)]
pub enum SinkBuildError {
    /// The CA file cannot be read.
    #[error("cannot read the CA file {path}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The CA file holds no usable PEM certificate.
    #[error("the CA file {path} holds no PEM certificate")]
    Certificate {
        /// The file.
        path: PathBuf,
        /// What reqwest said, if it said anything.
        #[source]
        source: Option<reqwest::Error>,
    },
    /// The TLS or HTTP client could not be built.
    #[error("cannot build the HTTP client")]
    Client(#[source] reqwest::Error),
    /// The URL is not an absolute http(s) URL.
    #[error("sink URL {url} is not an absolute http:// or https:// URL")]
    Url {
        /// The URL, redacted.
        url: String,
    },
}

/// Builds the client every HTTP sink uses.
pub fn build_client(options: &HttpOptions) -> Result<reqwest::Client, SinkBuildError> {
    let mut builder = reqwest::Client::builder()
        .timeout(options.timeout)
        .connect_timeout(options.timeout.min(Duration::from_secs(5)))
        .redirect(reqwest::redirect::Policy::none());
    if let Some(path) = &options.ca_file {
        for certificate in read_certificates(path)? {
            builder = builder.add_root_certificate(certificate);
        }
    }
    builder.build().map_err(SinkBuildError::Client)
}

fn read_certificates(path: &Path) -> Result<Vec<reqwest::Certificate>, SinkBuildError> {
    let pem = std::fs::read(path).map_err(|source| SinkBuildError::CaFile {
        path: path.to_owned(),
        source,
    })?;
    let certificates =
        reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| SinkBuildError::Certificate {
            path: path.to_owned(),
            source: Some(e),
        })?;
    if certificates.is_empty() {
        return Err(SinkBuildError::Certificate {
            path: path.to_owned(),
            source: None,
        });
    }
    Ok(certificates)
}

/// Checks that `url` is an absolute http(s) URL.
pub(super) fn parse_url(url: &str) -> Result<reqwest::Url, SinkBuildError> {
    reqwest::Url::parse(url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
        .ok_or_else(|| SinkBuildError::Url { url: redact(url) })
}

/// `scheme://host[:port]`, plus `/…` when the URL had a path, query or credentials: what
/// may be logged of a URL.
pub fn redact(url: &str) -> String {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return "<unparsable URL>".into();
    };
    let host = parsed.host_str().unwrap_or("");
    let port = parsed.port().map(|p| format!(":{p}")).unwrap_or_default();
    let hidden = parsed.path() != "/"
        || parsed.query().is_some()
        || parsed.fragment().is_some()
        || !parsed.username().is_empty()
        || parsed.password().is_some();
    format!(
        "{}://{host}{port}{}",
        parsed.scheme(),
        if hidden { "/…" } else { "" }
    )
}

/// The name of an HTTP sink in logs, metrics and its delivery key: `kind:` and the
/// redacted URL, and a hash of the whole URL (no secret can be read back from it).
pub fn sink_name(kind: &str, url: &str) -> String {
    let digest = Sha256::digest(url.as_bytes());
    let short: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("{kind}:{}#{short}", redact(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_shows_only_its_scheme_host_and_port() {
        assert_eq!(
            redact("https://hooks.slack.com/services/T000/B000/XXXXSECRET"),
            "https://hooks.slack.com/…"
        );
        assert_eq!(
            redact("http://user:pw@alertmanager:9093/api/v2/alerts?token=s"),
            "http://alertmanager:9093/…"
        );
        assert_eq!(
            redact("http://alertmanager:9093"),
            "http://alertmanager:9093"
        );
        assert_eq!(redact("not a url SECRET"), "<unparsable URL>");
    }

    #[test]
    fn two_hooks_on_one_host_get_two_names_without_their_secret() {
        let a = sink_name("webhook", "https://hooks.example/T/B/secret-a");
        let b = sink_name("webhook", "https://hooks.example/T/B/secret-b");
        assert_ne!(a, b);
        assert!(a.starts_with("webhook:https://hooks.example/…#"), "{a}");
        assert!(!a.contains("secret"), "{a}");
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_an_error_not_a_default_client() {
        let dir = tempfile::tempdir().unwrap();
        let missing = HttpOptions {
            ca_file: Some(dir.path().join("nope.pem")),
            ..HttpOptions::default()
        };
        assert!(matches!(
            build_client(&missing),
            Err(SinkBuildError::CaFile { .. })
        ));
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        let empty = HttpOptions {
            ca_file: Some(empty),
            ..HttpOptions::default()
        };
        assert!(matches!(
            build_client(&empty),
            Err(SinkBuildError::Certificate { .. })
        ));
    }

    #[test]
    fn only_absolute_http_urls_are_accepted() {
        assert!(parse_url("https://h/x").is_ok());
        assert!(parse_url("ftp://h/x").is_err());
        assert!(parse_url("/relative").is_err());
    }
}
