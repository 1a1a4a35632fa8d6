//! `CleanupCommand`: a request from the analyzer to a collector to clean one object up, and
//! what makes it safe to obey: an HMAC-SHA256 signature with a key shared by the analyzer
//! and the collectors ([`CommandKey`]), the time its alert fired (a collector refuses old
//! commands, so a new consumer group cannot replay history), and names that are
//! DNS-1123 subdomains (they go into a URL path).
//!
//! Where the signature lives: in the record itself (field `signature`, schema v2), not in a
//! Kafka header, so that the command stays verifiable wherever the record is copied
//! (mirrored topics, exported files, the audit log). It covers the command's *signing
//! bytes* ([`CleanupCommand::signing_bytes`]): a fixed, length-prefixed layout of every
//! other field, independent of the Avro schema version, so that a collector of another
//! schema version verifies exactly what the analyzer signed.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// What the collector is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CleanupAction {
    /// Strip kube-ovn's finalizer from the target.
    RemoveFinalizer,
    /// Patch a harmless annotation so that the controller handles the object again.
    Nudge,
    /// Remove the allocation of one address from a whereabouts IPPool (command v3, alert
    /// v4).
    RemoveAllocation,
    /// Delete the target, with uid and resourceVersion preconditions: a whereabouts
    /// OverlappingRangeIPReservation whose pod is gone (command v3, alert v4).
    Delete,
}

impl CleanupAction {
    /// The Avro symbol.
    pub fn as_str(self) -> &'static str {
        match self {
            CleanupAction::RemoveFinalizer => "REMOVE_FINALIZER",
            CleanupAction::Nudge => "NUDGE",
            CleanupAction::RemoveAllocation => "REMOVE_ALLOCATION",
            CleanupAction::Delete => "DELETE",
        }
    }
}

/// A cleanup command (the Avro record `io.ipaudit.CleanupCommand`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupCommand {
    /// Stable id; a collector applies a command id at most once.
    pub command_id: String,
    /// Only the collector of this cluster acts on it.
    pub cluster_id: String,
    /// What to do.
    pub action: CleanupAction,
    /// Kind of the target.
    pub target_kind: String,
    /// Name of the target.
    pub target_name: String,
    /// uid the target must still have.
    pub target_uid: String,
    /// resourceVersion the target must still have.
    pub expected_resource_version: String,
    /// The finalizer to remove.
    pub finalizer: Option<String>,
    /// The subnet that must still be absent.
    pub subnet: String,
    /// The alert that asked for it.
    pub reason_alert_id: String,
    /// When the analyzer issued it, Unix ms.
    pub issued_at_ms: i64,
    /// When the alert that asked for it fired, Unix ms (schema v2; 0 in older commands).
    #[serde(default)]
    pub alert_fired_at_ms: i64,
    /// Namespace of the target; `None` for cluster-scoped kinds (schema v3).
    #[serde(default)]
    pub target_namespace: Option<String>,
    /// The address whose allocation to remove (REMOVE_ALLOCATION, schema v3).
    #[serde(default)]
    pub address: Option<String>,
    /// `hmac-sha256=<hex>` over [`CleanupCommand::signing_bytes`] (schema v2); `None`:
    /// unsigned.
    #[serde(default)]
    pub signature: Option<String>,
}

/// Opens the signing bytes; a new layout gets a new tag, so that bytes of one layout can
/// never verify as another.
const SIGNING_TAG: &[u8] = b"ipaudit.CleanupCommand.hmac-sha256.v1\0";
/// The layout of a command with a namespace or an address (schema v3): v1's fields with
/// both appended. A command without them keeps v1's layout, so that commands signed before
/// v3 still verify.
const SIGNING_TAG_V2: &[u8] = b"ipaudit.CleanupCommand.hmac-sha256.v2\0";
/// The prefix of [`CleanupCommand::signature`].
pub const SIGNATURE_PREFIX: &str = "hmac-sha256=";

impl CleanupCommand {
    /// The bytes the signature covers: a tag, then every field but the signature in schema
    /// order, each string as its length (u32, big-endian) and UTF-8 bytes, the optional
    /// finalizer as a presence byte (0/1) before it, times as i64 big-endian. Length
    /// prefixes make the layout unambiguous: no two commands share signing bytes.
    pub fn signing_bytes(&self) -> Vec<u8> {
        fn text(out: &mut Vec<u8>, s: &str) {
            out.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        fn optional(out: &mut Vec<u8>, value: &Option<String>) {
            match value {
                Some(v) => {
                    out.push(1);
                    text(out, v);
                }
                None => out.push(0),
            }
        }
        let v3 = self.target_namespace.is_some() || self.address.is_some();
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(if v3 { SIGNING_TAG_V2 } else { SIGNING_TAG });
        text(&mut out, &self.command_id);
        text(&mut out, &self.cluster_id);
        text(&mut out, self.action.as_str());
        text(&mut out, &self.target_kind);
        text(&mut out, &self.target_name);
        text(&mut out, &self.target_uid);
        text(&mut out, &self.expected_resource_version);
        match &self.finalizer {
            Some(f) => {
                out.push(1);
                text(&mut out, f);
            }
            None => out.push(0),
        }
        text(&mut out, &self.subnet);
        text(&mut out, &self.reason_alert_id);
        out.extend_from_slice(&self.issued_at_ms.to_be_bytes());
        out.extend_from_slice(&self.alert_fired_at_ms.to_be_bytes());
        if v3 {
            optional(&mut out, &self.target_namespace);
            optional(&mut out, &self.address);
        }
        out
    }

    /// The time its age is measured from: when its alert fired, or for a command written
    /// before schema v2 (which does not say), when it was issued.
    pub fn age_reference_ms(&self) -> i64 {
        if self.alert_fired_at_ms > 0 {
            self.alert_fired_at_ms
        } else {
            self.issued_at_ms
        }
    }

    /// Checks that the names the collector would put into a URL path are DNS-1123
    /// subdomains, as Kubernetes requires of the names of IPs and Subnets.
    pub fn check_names(&self) -> Result<(), NameError> {
        for (field, value) in [("target_name", &self.target_name), ("subnet", &self.subnet)] {
            // A cleanup that names no subnet (a SpiderEndpoint's) leaves it empty.
            let optional = field == "subnet" && value.is_empty();
            if !optional && !is_dns1123_subdomain(value) {
                return Err(NameError {
                    field,
                    value: value.clone(),
                });
            }
        }
        if let Some(namespace) = &self.target_namespace {
            if !is_dns1123_subdomain(namespace) || namespace.contains('.') || namespace.len() > 63 {
                return Err(NameError {
                    field: "target_namespace",
                    value: namespace.clone(),
                });
            }
        }
        if let Some(address) = &self.address {
            if address.parse::<std::net::IpAddr>().is_err() {
                return Err(NameError {
                    field: "address",
                    value: address.clone(),
                });
            }
        }
        Ok(())
    }
}

/// A name in a command that is not a DNS-1123 subdomain. Not retryable: the command is
/// refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {value:?} is not {}", match *field {
    "address" => "an IP address",
    "target_namespace" => "a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters, starting and ending with a letter or digit)",
    _ => "a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', at most 253 characters, starting and ending with a letter or digit)",
})]
pub struct NameError {
    /// The field.
    pub field: &'static str,
    /// Its value.
    pub value: String,
}

/// Whether `name` is a DNS-1123 subdomain: at most 253 characters, dot-separated labels of
/// lower-case letters, digits and '-', each starting and ending with a letter or digit.
pub fn is_dns1123_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            let bytes = label.as_bytes();
            let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
            bytes.first().is_some_and(alnum)
                && bytes.last().is_some_and(alnum)
                && bytes.iter().all(|b| alnum(b) || *b == b'-')
        })
}

/// The shared key that signs and verifies commands. Its value never appears in `Debug`
/// output or logs.
#[derive(Clone)]
pub struct CommandKey(Vec<u8>);

impl std::fmt::Debug for CommandKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CommandKey(<{} bytes, redacted>)", self.0.len())
    }
}

/// The shortest key accepted: shorter keys can be guessed.
pub const MIN_KEY_BYTES: usize = 16;

/// Why a command's signature does not hold. None is retryable: the command is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The command carries no signature.
    #[error(
        "unsigned command (this collector accepts only commands signed with its commands key)"
    )]
    Unsigned,
    /// The signature is not `hmac-sha256=<64 hex digits>`.
    #[error("malformed signature (expected hmac-sha256=<64 hex digits>)")]
    Malformed,
    /// The signature does not match: another key, or a changed command.
    #[error("wrong signature (signed with another key, or changed after signing)")]
    Mismatch,
}

/// Why a key cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the commands key has {len} bytes; use at least {MIN_KEY_BYTES} (e.g. `openssl rand -hex 32`)"
)]
pub struct KeyError {
    /// Its length.
    pub len: usize,
}

impl CommandKey {
    /// A key from its bytes; refuses keys shorter than [`MIN_KEY_BYTES`].
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, KeyError> {
        let bytes = bytes.into();
        if bytes.len() < MIN_KEY_BYTES {
            return Err(KeyError { len: bytes.len() });
        }
        Ok(CommandKey(bytes))
    }

    /// A key from the text of a secret (a file or a variable): surrounding whitespace, such
    /// as the newline `openssl rand -hex 32 > key` leaves, is not part of it.
    pub fn from_secret(text: &str) -> Result<Self, KeyError> {
        Self::new(text.trim().as_bytes().to_vec())
    }

    fn mac(&self, command: &CleanupCommand) -> Hmac<Sha256> {
        // HMAC takes keys of any length; new_from_slice cannot fail for it.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        mac.update(&command.signing_bytes());
        mac
    }

    /// The signature of `command` (whatever its `signature` field holds).
    pub fn signature(&self, command: &CleanupCommand) -> String {
        let tag = self.mac(command).finalize().into_bytes();
        let mut out = String::with_capacity(SIGNATURE_PREFIX.len() + 64);
        out.push_str(SIGNATURE_PREFIX);
        for b in tag {
            out.push_str(&format!("{b:02x}"));
        }
        out
    }

    /// Sets `command.signature`.
    pub fn sign(&self, command: &mut CleanupCommand) {
        command.signature = Some(self.signature(command));
    }

    /// Checks `command.signature`, in constant time.
    pub fn verify(&self, command: &CleanupCommand) -> Result<(), SignatureError> {
        let signature = command
            .signature
            .as_deref()
            .ok_or(SignatureError::Unsigned)?;
        let hex = signature
            .strip_prefix(SIGNATURE_PREFIX)
            .filter(|h| h.len() == 64)
            .ok_or(SignatureError::Malformed)?;
        let mut tag = [0u8; 32];
        for (i, byte) in tag.iter_mut().enumerate() {
            // Hex digits only: from_str_radix also takes a sign ("+e" for 0e), which would
            // let one signature be written several ways.
            *byte = hex
                .get(2 * i..2 * i + 2)
                .filter(|pair| pair.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or(SignatureError::Malformed)?;
        }
        self.mac(command)
            .verify_slice(&tag)
            .map_err(|_| SignatureError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> CleanupCommand {
        CleanupCommand {
            command_id: "a1/120".into(),
            cluster_id: "prod".into(),
            action: CleanupAction::RemoveFinalizer,
            target_kind: "IP".into(),
            target_name: "vm-1.ns".into(),
            target_uid: "u1".into(),
            expected_resource_version: "118".into(),
            finalizer: Some("kubeovn.io/kube-ovn-controller".into()),
            subnet: "net-1".into(),
            reason_alert_id: "a1".into(),
            issued_at_ms: 1_700_000_000_500,
            alert_fired_at_ms: 1_700_000_000_000,
            target_namespace: None,
            address: None,
            signature: None,
        }
    }

    fn key(text: &str) -> CommandKey {
        CommandKey::from_secret(text).unwrap()
    }

    #[test]
    fn a_signature_with_a_sign_in_place_of_a_hex_digit_is_malformed_not_another_spelling() {
        let mut c = command();
        let k = key("0123456789abcdef0123");
        k.sign(&mut c);
        let signature = c.signature.clone().unwrap();
        // A tag byte below 0x10, "0d", could also be written "+d" (found by the
        // cleanup_command fuzz target, issue 32).
        let at = (SIGNATURE_PREFIX.len()..signature.len())
            .step_by(2)
            .find(|&i| signature.as_bytes()[i] == b'0')
            .expect("this command's tag has a byte below 0x10");
        let mut other_spelling = signature.clone().into_bytes();
        other_spelling[at] = b'+';
        c.signature = Some(String::from_utf8(other_spelling).unwrap());
        assert_eq!(k.verify(&c), Err(SignatureError::Malformed));
        // Upper-case hex digits are digits: the same signature.
        c.signature = Some(format!(
            "{SIGNATURE_PREFIX}{}",
            signature[SIGNATURE_PREFIX.len()..].to_ascii_uppercase()
        ));
        assert_eq!(k.verify(&c), Ok(()));
    }

    #[test]
    fn a_signed_command_verifies_with_the_same_key_only() {
        let mut c = command();
        key("0123456789abcdef0123").sign(&mut c);
        assert!(c.signature.as_deref().unwrap().starts_with("hmac-sha256="));
        assert_eq!(key("0123456789abcdef0123\n").verify(&c), Ok(()));
        assert_eq!(
            key("another-key-of-20-bytes").verify(&c),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn changing_any_signed_field_breaks_the_signature() {
        let k = key("0123456789abcdef0123");
        let mut signed = command();
        k.sign(&mut signed);
        let changes: [fn(&mut CleanupCommand); 14] = [
            |c| c.command_id.push('x'),
            |c| c.cluster_id = "other".into(),
            |c| c.action = CleanupAction::Nudge,
            |c| c.target_kind = "Subnet".into(),
            |c| c.target_name = "vm-2.ns".into(),
            |c| c.target_uid = "u2".into(),
            |c| c.expected_resource_version = "119".into(),
            |c| c.finalizer = None,
            |c| c.subnet = "net-2".into(),
            |c| c.reason_alert_id = "a2".into(),
            |c| c.issued_at_ms += 1,
            |c| c.alert_fired_at_ms += 1,
            |c| c.target_namespace = Some("ns".into()),
            |c| c.address = Some("10.0.0.1".into()),
        ];
        for change in changes {
            let mut c = signed.clone();
            change(&mut c);
            assert_eq!(k.verify(&c), Err(SignatureError::Mismatch), "{c:?}");
        }
        // A v3 command's namespace and address are signed too.
        let mut v3 = command();
        v3.target_namespace = Some("kube-system".into());
        v3.address = Some("10.200.5.12".into());
        k.sign(&mut v3);
        for change in [
            |c: &mut CleanupCommand| c.target_namespace = Some("default".into()),
            |c: &mut CleanupCommand| c.address = Some("10.200.5.13".into()),
            |c: &mut CleanupCommand| c.target_namespace = None,
        ] {
            let mut c = v3.clone();
            change(&mut c);
            assert_eq!(k.verify(&c), Err(SignatureError::Mismatch), "{c:?}");
        }
    }

    #[test]
    fn a_command_without_namespace_or_address_keeps_the_layout_collectors_before_v3_verify() {
        let mut bytes = command().signing_bytes();
        assert!(bytes.starts_with(SIGNING_TAG));
        let mut v3 = command();
        v3.address = Some("10.200.5.12".into());
        assert!(v3.signing_bytes().starts_with(SIGNING_TAG_V2));
        // v1's layout is exactly what it was: the tag, then the fields, nothing appended.
        bytes.drain(..SIGNING_TAG.len());
        assert_eq!(
            bytes.len(),
            (4 + 6)
                + (4 + 4)
                + (4 + 16)
                + (4 + 2)
                + (4 + 7)
                + (4 + 2)
                + (4 + 3)
                + (1 + 4 + 30)
                + (4 + 5)
                + (4 + 2)
                + 8
                + 8
        );
    }

    #[test]
    fn moving_bytes_between_fields_changes_the_signing_bytes() {
        let mut a = command();
        a.target_uid = "ab".into();
        a.expected_resource_version = "c".into();
        let mut b = command();
        b.target_uid = "a".into();
        b.expected_resource_version = "bc".into();
        assert_ne!(a.signing_bytes(), b.signing_bytes());
    }

    #[test]
    fn unsigned_and_malformed_signatures_are_told_apart() {
        let k = key("0123456789abcdef0123");
        assert_eq!(k.verify(&command()), Err(SignatureError::Unsigned));
        for bad in [
            "sha1=00",
            "hmac-sha256=zz",
            &format!("hmac-sha256={}", "g".repeat(64)),
        ] {
            let mut c = command();
            c.signature = Some(bad.to_owned());
            assert_eq!(k.verify(&c), Err(SignatureError::Malformed), "{bad}");
        }
    }

    #[test]
    fn short_keys_are_refused_and_keys_never_print() {
        assert_eq!(
            CommandKey::from_secret("short\n").unwrap_err(),
            KeyError { len: 5 }
        );
        let k = key("a-secret-key-value-here");
        assert!(!format!("{k:?}").contains("secret"));
    }

    #[test]
    fn names_must_be_dns_1123_subdomains() {
        for good in ["vm-1.ns", "a", "10-16-0-9.net1", &"a".repeat(253)] {
            assert!(is_dns1123_subdomain(good), "{good}");
        }
        for bad in [
            "",
            "../subnets/x",
            "a/b",
            "A",
            "-a",
            "a-",
            "a..b",
            "a?watch=1",
            "a%2f",
            &"a".repeat(254),
        ] {
            assert!(!is_dns1123_subdomain(bad), "{bad}");
        }
        let mut c = command();
        c.subnet = "x/../../api".into();
        assert_eq!(c.check_names().unwrap_err().field, "subnet");
        assert!(command().check_names().is_ok());
    }

    #[test]
    fn the_age_of_an_old_command_counts_from_its_issue() {
        let mut c = command();
        assert_eq!(c.age_reference_ms(), 1_700_000_000_000);
        c.alert_fired_at_ms = 0;
        assert_eq!(c.age_reference_ms(), 1_700_000_000_500);
    }
}
