//! The Kafka options of both programs' command lines (flattened with
//! `#[command(flatten)]`), with environment fallbacks. Secret values never show: not in
//! `--help` (environment values of secret options are hidden) and not in `Debug` output.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use clap::{Args, ValueEnum};

/// How ipaudit reaches Kafka: bootstrap servers, TLS, SASL, extra librdkafka settings.
#[derive(Clone, Args)]
pub struct KafkaArgs {
    /// Kafka bootstrap servers, comma-separated HOST:PORT.
    #[arg(long, env = "IPAUDIT_BROKERS", default_value = "localhost:9092")]
    pub brokers: String,

    /// How to talk to the brokers [default: sasl_ssl with a SASL mechanism, ssl with a CA,
    /// certificate or key file, else plaintext].
    #[arg(
        long = "kafka-security-protocol",
        value_name = "PROTOCOL",
        env = "IPAUDIT_KAFKA_SECURITY_PROTOCOL",
        value_enum,
        ignore_case = true
    )]
    pub security_protocol: Option<SecurityProtocol>,

    /// PEM file of the CA certificates that sign the brokers' certificates (TLS); without
    /// it the system's trust store is used. The brokers' host names are verified.
    #[arg(
        long = "kafka-ca-file",
        value_name = "FILE",
        env = "IPAUDIT_KAFKA_CA_FILE"
    )]
    pub ca_file: Option<PathBuf>,

    /// PEM file of this client's certificate, for brokers that require client
    /// certificates (mutual TLS); needs --kafka-key-file.
    #[arg(
        long = "kafka-cert-file",
        value_name = "FILE",
        env = "IPAUDIT_KAFKA_CERT_FILE",
        requires = "key_file"
    )]
    pub cert_file: Option<PathBuf>,

    /// PEM file of this client's private key (unencrypted); needs --kafka-cert-file.
    #[arg(
        long = "kafka-key-file",
        value_name = "FILE",
        env = "IPAUDIT_KAFKA_KEY_FILE",
        requires = "cert_file"
    )]
    pub key_file: Option<PathBuf>,

    /// SASL mechanism; needs --kafka-sasl-username and a password.
    #[arg(
        long = "kafka-sasl-mechanism",
        value_name = "MECHANISM",
        env = "IPAUDIT_KAFKA_SASL_MECHANISM",
        value_enum,
        ignore_case = true
    )]
    pub sasl_mechanism: Option<SaslMechanism>,

    /// SASL user name.
    #[arg(
        long = "kafka-sasl-username",
        value_name = "USER",
        env = "IPAUDIT_KAFKA_SASL_USERNAME"
    )]
    pub sasl_username: Option<String>,

    /// File holding the SASL password (one line; a trailing newline is ignored), e.g. a
    /// mounted Kubernetes Secret. Preferred over --kafka-sasl-password.
    #[arg(
        long = "kafka-sasl-password-file",
        value_name = "FILE",
        env = "IPAUDIT_KAFKA_SASL_PASSWORD_FILE",
        conflicts_with = "sasl_password"
    )]
    pub sasl_password_file: Option<PathBuf>,

    /// The SASL password itself (visible to other users of the machine as a flag; use the
    /// environment variable or --kafka-sasl-password-file).
    #[arg(
        long = "kafka-sasl-password",
        value_name = "PASSWORD",
        env = "IPAUDIT_KAFKA_SASL_PASSWORD",
        hide_env_values = true
    )]
    pub sasl_password: Option<Secret>,

    /// Extra librdkafka setting for every Kafka client, KEY=VALUE (repeatable, or
    /// comma-separated in the environment variable); applied last, so it overrides
    /// ipaudit's own settings.
    #[arg(
        long = "kafka-option",
        value_name = "KEY=VALUE",
        env = "IPAUDIT_KAFKA_OPTIONS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub options: Vec<KafkaOption>,
}

impl fmt::Debug for KafkaArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaArgs")
            .field("brokers", &self.brokers)
            .field("security_protocol", &self.security_protocol)
            .field("ca_file", &self.ca_file)
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("sasl_mechanism", &self.sasl_mechanism)
            .field("sasl_username", &self.sasl_username)
            .field("sasl_password_file", &self.sasl_password_file)
            .field("sasl_password", &self.sasl_password)
            .field("options", &self.options)
            .finish()
    }
}

impl KafkaArgs {
    /// Options for `brokers` with nothing else set (plaintext, librdkafka's defaults).
    pub fn plaintext(brokers: &str) -> KafkaArgs {
        KafkaArgs {
            brokers: brokers.to_owned(),
            security_protocol: None,
            ca_file: None,
            cert_file: None,
            key_file: None,
            sasl_mechanism: None,
            sasl_username: None,
            sasl_password_file: None,
            sasl_password: None,
            options: Vec::new(),
        }
    }
}

/// librdkafka's `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SecurityProtocol {
    /// No TLS, no authentication.
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL without TLS: the password (PLAIN) or its proof (SCRAM) travels in clear text.
    #[value(name = "sasl_plaintext", alias = "sasl-plaintext")]
    SaslPlaintext,
    /// SASL over TLS.
    #[value(name = "sasl_ssl", alias = "sasl-ssl")]
    SaslSsl,
}

impl SecurityProtocol {
    /// The value librdkafka expects.
    pub fn as_str(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "plaintext",
            SecurityProtocol::Ssl => "ssl",
            SecurityProtocol::SaslPlaintext => "sasl_plaintext",
            SecurityProtocol::SaslSsl => "sasl_ssl",
        }
    }

    /// Whether the connection is encrypted.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether the client authenticates with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// A SASL mechanism librdkafka supports without Kerberos or OAuth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SaslMechanism {
    /// User name and password sent as they are (use it over TLS only).
    #[value(name = "PLAIN")]
    Plain,
    /// Salted challenge-response with SHA-256; the password never crosses the wire.
    #[value(name = "SCRAM-SHA-256")]
    ScramSha256,
    /// Salted challenge-response with SHA-512.
    #[value(name = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    /// The value librdkafka expects in `sasl.mechanisms`.
    pub fn as_str(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// One `--kafka-option KEY=VALUE`. Its `Debug` hides the value of secret keys
/// (`sasl.password`, `ssl.key.password`, ...).
#[derive(Clone, PartialEq, Eq)]
pub struct KafkaOption {
    /// The librdkafka property.
    pub key: String,
    /// Its value.
    pub value: String,
    /// Not of the form KEY=VALUE: refused by [`KafkaArgs::connection`], whose error does
    /// not repeat the text (a parse error would, and it may hold a password).
    pub(crate) malformed: bool,
}

impl KafkaOption {
    /// `key=value`.
    pub fn new(key: &str, value: &str) -> KafkaOption {
        KafkaOption {
            key: key.to_owned(),
            value: value.to_owned(),
            malformed: false,
        }
    }
}

impl FromStr for KafkaOption {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(text
            .split_once('=')
            .map(|(k, v)| KafkaOption::new(k.trim(), v.trim()))
            .filter(|o| !o.key.is_empty())
            .unwrap_or(KafkaOption {
                key: String::new(),
                value: String::new(),
                malformed: true,
            }))
    }
}

impl fmt::Debug for KafkaOption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if is_secret_key(&self.key) {
            write!(f, "{}=<redacted>", self.key)
        } else {
            write!(f, "{}={}", self.key, self.value)
        }
    }
}

/// A secret value: kept as given, shown as `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the one place that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// librdkafka properties whose values are secrets.
pub(crate) fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.contains("password")
        || key.contains("secret")
        || key == "ssl.key.pem"
        || key == "ssl_key"
        || key == "sasl.oauthbearer.config"
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        kafka: KafkaArgs,
    }

    #[test]
    fn mechanisms_and_protocols_parse_as_kafka_spells_them_in_any_case() {
        let cli = Cli::try_parse_from([
            "x",
            "--kafka-sasl-mechanism",
            "scram-sha-256",
            "--kafka-security-protocol",
            "SASL_SSL",
            "--kafka-option",
            "linger.ms=5",
            "--kafka-option",
            "acks = all",
        ])
        .unwrap();
        assert_eq!(cli.kafka.sasl_mechanism, Some(SaslMechanism::ScramSha256));
        assert_eq!(cli.kafka.security_protocol, Some(SecurityProtocol::SaslSsl));
        assert_eq!(
            cli.kafka.options,
            [
                KafkaOption::new("linger.ms", "5"),
                KafkaOption::new("acks", "all")
            ]
        );
    }

    #[test]
    fn a_certificate_without_its_key_is_a_usage_error() {
        assert!(Cli::try_parse_from(["x", "--kafka-cert-file", "c.pem"]).is_err());
        assert!(Cli::try_parse_from(["x", "--kafka-key-file", "k.pem"]).is_err());
    }

    #[test]
    fn a_malformed_option_is_not_repeated_in_any_error() {
        let cli = Cli::try_parse_from(["x", "--kafka-option", "sasl.password:s3cret"]).unwrap();
        let error = cli.kafka.connection().unwrap_err().to_string();
        assert!(!error.contains("s3cret"), "{error}");
    }
}
