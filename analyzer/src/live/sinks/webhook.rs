//! POST each transition as JSON to a URL, with the transition id as `Idempotency-Key`, and
//! optionally a bearer token or an HMAC-SHA256 signature over a timestamp and the body:
//! `X-Ipaudit-Timestamp: <unix seconds>` and
//! `X-Ipaudit-Signature: sha256=<hex HMAC of "<timestamp>.<body>">`. Signing the timestamp
//! with the body lets a receiver refuse a captured request replayed later (check that the
//! timestamp is recent, then the signature).

use hmac::{Hmac, Mac};
use ipaudit_schemas::Alert;
use sha2::Sha256;

use super::client::{build_client, parse_url, redact, HttpOptions, SinkBuildError};
use super::{check, SinkError};

/// How the webhook authenticates.
#[derive(Clone)]
pub enum WebhookAuth {
    /// No authentication.
    None,
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// `X-Ipaudit-Timestamp` and `X-Ipaudit-Signature: sha256=<hex HMAC>` of
    /// `<timestamp>.<body>`.
    Hmac(String),
}

impl std::fmt::Debug for WebhookAuth {
    // Secrets never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WebhookAuth::None => "None",
            WebhookAuth::Bearer(_) => "Bearer(<redacted>)",
            WebhookAuth::Hmac(_) => "Hmac(<redacted>)",
        })
    }
}

/// A webhook receiver.
pub struct WebhookSink {
    url: String,
    shown: String,
    auth: WebhookAuth,
    client: reqwest::Client,
}

impl WebhookSink {
    /// A sink posting to `url` (an absolute http(s) URL).
    pub fn new(
        url: String,
        auth: WebhookAuth,
        options: &HttpOptions,
    ) -> Result<Self, SinkBuildError> {
        parse_url(&url)?;
        Ok(WebhookSink {
            shown: redact(&url),
            url,
            auth,
            client: build_client(options)?,
        })
    }

    /// Where it posts (the secret form: never log it, see [`redact`]).
    pub fn url(&self) -> &str {
        &self.url
    }

    pub(super) async fn deliver(
        &self,
        transition_id: &str,
        alert: &Alert,
    ) -> Result<(), SinkError> {
        let mut body = serde_json::to_value(alert).unwrap_or_default();
        if let Some(map) = body.as_object_mut() {
            map.insert("transition_id".into(), transition_id.into());
        }
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let mut request = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("idempotency-key", transition_id);
        match &self.auth {
            WebhookAuth::None => {}
            WebhookAuth::Bearer(token) => request = request.bearer_auth(token),
            WebhookAuth::Hmac(secret) => {
                let timestamp = (ipaudit_runtime::clock::now_ms() / 1000).to_string();
                request = request
                    .header("x-ipaudit-timestamp", &timestamp)
                    .header("x-ipaudit-signature", signature(secret, &timestamp, &bytes));
            }
        }
        check(&self.shown, request.body(bytes).send().await)
    }
}

/// `sha256=<hex>` of `<timestamp>.<body>` under `secret`.
pub fn signature(secret: &str, timestamp: &str, body: &[u8]) -> String {
    // HMAC takes keys of any length.
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC accepts any key length");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hex_hmac_sha256_of_the_timestamp_a_dot_and_the_body() {
        // Known answer from Python: hmac.new(b"key", b'1700000000.{"a":1}', sha256).
        assert_eq!(
            signature("key", "1700000000", b"{\"a\":1}"),
            "sha256=a438e398bfafc57e4396bb7fc2304422f0f768e965d073ca313cb52e22e6ad03"
        );
        assert_ne!(
            signature("key", "1700000001", b"{\"a\":1}"),
            signature("key", "1700000000", b"{\"a\":1}"),
            "another timestamp, another signature"
        );
    }

    #[test]
    fn a_secret_never_shows_in_debug_output() {
        let shown = format!("{:?}", WebhookAuth::Hmac("s3cr3t".into()));
        assert!(!shown.contains("s3cr3t"), "{shown}");
    }
}
