//! POST each transition as JSON to a URL, with the transition id as `Idempotency-Key`, and
//! optionally a bearer token or an HMAC-SHA256 signature of the body
//! (`X-Ipaudit-Signature: sha256=<hex>`).

use hmac::{Hmac, Mac};
use ipaudit_schemas::Alert;
use sha2::Sha256;

use super::{check, SinkError};

/// How the webhook authenticates.
#[derive(Debug, Clone)]
pub enum WebhookAuth {
    /// No authentication.
    None,
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// `X-Ipaudit-Signature: sha256=<hex HMAC of the body>`.
    Hmac(String),
}

/// A webhook receiver.
pub struct WebhookSink {
    url: String,
    auth: WebhookAuth,
    client: reqwest::Client,
}

impl WebhookSink {
    /// A sink posting to `url`.
    pub fn new(url: String, auth: WebhookAuth) -> Self {
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        WebhookSink { url, auth, client }
    }

    /// Where it posts.
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
                request = request.header("x-ipaudit-signature", signature(secret, &bytes))
            }
        }
        check(&self.url, request.body(bytes).send().await)
    }
}

/// `sha256=<hex>` of the body under `secret`.
pub fn signature(secret: &str, body: &[u8]) -> String {
    // HMAC takes keys of any length.
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC accepts any key length");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hex_hmac_sha256_of_the_body() {
        // RFC 4231-style known answer (the classic "quick brown fox" vector).
        assert_eq!(
            signature("key", b"The quick brown fox jumps over the lazy dog"),
            "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
        );
    }
}
