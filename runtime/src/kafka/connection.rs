//! A validated way to reach Kafka, and the one function that turns it into librdkafka
//! settings for any client.

use std::fmt;
use std::path::{Path, PathBuf};

use std::time::Duration;

use rdkafka::config::ClientConfig;

use crate::kafka::args::{is_secret_key, KafkaArgs, SecurityProtocol};
use crate::kafka::probe::ProbeError;

/// Bootstrap servers plus every security and operator setting, checked at start. `Debug`
/// shows secret values as `<redacted>`.
#[derive(Clone)]
pub struct Connection {
    brokers: String,
    protocol: SecurityProtocol,
    /// ipaudit's security settings, then the operator's `--kafka-option`s (applied last).
    settings: Vec<(String, String)>,
}

/// Why the Kafka options cannot be used. Every variant is a configuration mistake:
/// retrying does not help; fix the flags or the files.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// A file named by an option is missing or unreadable.
    #[error("{option} {}: cannot read the file", path.display())]
    File {
        /// The option that names it.
        option: &'static str,
        /// The path given.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// The password file holds no password.
    #[error("--kafka-sasl-password-file {}: the file is empty", path.display())]
    EmptyPassword {
        /// The path given.
        path: PathBuf,
    },
    /// Options that do not fit together.
    #[error("{0}")]
    Conflict(String),
}

impl ConnectionError {
    /// Always false: a configuration mistake stays one.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

impl KafkaArgs {
    /// Checks the options (files readable, SASL complete, protocol consistent), reads the
    /// password file, and returns the connection every client is built from.
    pub fn connection(&self) -> Result<Connection, ConnectionError> {
        if let Some(at) = self.options.iter().position(|o| o.malformed) {
            return Err(ConnectionError::Conflict(format!(
                "--kafka-option number {} is not KEY=VALUE",
                at + 1
            )));
        }
        let tls_files = self.ca_file.is_some() || self.cert_file.is_some();
        let protocol = match (self.security_protocol, self.sasl_mechanism) {
            (Some(p), _) => p,
            // SASL without TLS must be asked for: PLAIN would send the password in clear.
            (None, Some(_)) => SecurityProtocol::SaslSsl,
            (None, None) if tls_files => SecurityProtocol::Ssl,
            (None, None) => SecurityProtocol::Plaintext,
        };
        if tls_files && !protocol.uses_tls() {
            return Err(ConnectionError::Conflict(format!(
                "--kafka-ca-file and --kafka-cert-file need TLS, but --kafka-security-protocol is {}",
                protocol.as_str()
            )));
        }
        let sasl_given = self.sasl_username.is_some()
            || self.sasl_password_file.is_some()
            || self.sasl_password.is_some();
        match (protocol.uses_sasl(), self.sasl_mechanism) {
            (true, None) => {
                return Err(ConnectionError::Conflict(format!(
                    "--kafka-security-protocol {} needs --kafka-sasl-mechanism",
                    protocol.as_str()
                )))
            }
            (false, Some(_)) => {
                return Err(ConnectionError::Conflict(format!(
                "--kafka-sasl-mechanism needs a SASL protocol, but --kafka-security-protocol is {}",
                protocol.as_str()
            )))
            }
            (false, None) if sasl_given => {
                return Err(ConnectionError::Conflict(
                    "a SASL user name or password needs --kafka-sasl-mechanism".into(),
                ))
            }
            _ => {}
        }

        let mut settings = Vec::new();
        settings.push(("security.protocol".into(), protocol.as_str().into()));
        if let Some(path) = &self.ca_file {
            readable("--kafka-ca-file", path)?;
            settings.push(("ssl.ca.location".into(), path.display().to_string()));
        }
        if let (Some(cert), Some(key)) = (&self.cert_file, &self.key_file) {
            readable("--kafka-cert-file", cert)?;
            readable("--kafka-key-file", key)?;
            settings.push((
                "ssl.certificate.location".into(),
                cert.display().to_string(),
            ));
            settings.push(("ssl.key.location".into(), key.display().to_string()));
        }
        if let Some(mechanism) = self.sasl_mechanism {
            let username = self.sasl_username.clone().ok_or_else(|| {
                ConnectionError::Conflict(
                    "--kafka-sasl-mechanism needs --kafka-sasl-username".into(),
                )
            })?;
            let password = match (&self.sasl_password_file, &self.sasl_password) {
                (Some(path), _) => read_password(path)?,
                (None, Some(secret)) => secret.expose().to_owned(),
                (None, None) => {
                    return Err(ConnectionError::Conflict(
                        "--kafka-sasl-mechanism needs --kafka-sasl-password-file (or IPAUDIT_KAFKA_SASL_PASSWORD)"
                            .into(),
                    ))
                }
            };
            settings.push(("sasl.mechanisms".into(), mechanism.as_str().into()));
            settings.push(("sasl.username".into(), username));
            settings.push(("sasl.password".into(), password));
        }
        for option in &self.options {
            settings.push((option.key.clone(), option.value.clone()));
        }
        Ok(Connection {
            brokers: self.brokers.clone(),
            protocol,
            settings,
        })
    }
}

fn readable(option: &'static str, path: &Path) -> Result<(), ConnectionError> {
    std::fs::File::open(path)
        .and_then(|f| f.metadata())
        .and_then(|m| {
            if m.is_file() {
                Ok(())
            } else {
                Err(std::io::Error::other("not a regular file"))
            }
        })
        .map_err(|source| ConnectionError::File {
            option,
            path: path.to_owned(),
            source,
        })
}

fn read_password(path: &Path) -> Result<String, ConnectionError> {
    crate::secret::read_secret_file(path).map_err(|error| match error {
        crate::secret::SecretFileError::Read { path, source } => ConnectionError::File {
            option: "--kafka-sasl-password-file",
            path,
            source,
        },
        crate::secret::SecretFileError::Empty { path } => ConnectionError::EmptyPassword { path },
    })
}

impl Connection {
    /// `brokers` over plaintext with librdkafka's defaults (tests, tools).
    pub fn plaintext(brokers: &str) -> Connection {
        Connection {
            brokers: brokers.to_owned(),
            protocol: SecurityProtocol::Plaintext,
            settings: Vec::new(),
        }
    }

    /// The bootstrap servers.
    pub fn brokers(&self) -> &str {
        &self.brokers
    }

    /// The security protocol in force.
    pub fn security_protocol(&self) -> SecurityProtocol {
        self.protocol
    }

    /// Sets `bootstrap.servers`, the security settings and the operator's options on a
    /// client's configuration. Call it after the client's own settings, so that an
    /// operator's `--kafka-option` overrides them.
    pub fn apply(&self, config: &mut ClientConfig) {
        config.set("bootstrap.servers", &self.brokers);
        for (key, value) in &self.settings {
            config.set(key, value);
        }
    }

    /// A client configuration with only this connection's settings.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        self.apply(&mut config);
        config
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Settings<'a>(&'a [(String, String)]);
        impl fmt::Debug for Settings<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map()
                    .entries(self.0.iter().map(|(k, v)| {
                        let shown = if is_secret_key(k) { "<redacted>" } else { v };
                        (k, shown)
                    }))
                    .finish()
            }
        }
        f.debug_struct("Connection")
            .field("brokers", &self.brokers)
            .field("settings", &Settings(&self.settings))
            .finish()
    }
}

/// Why a program cannot start on its Kafka flags; retrying does not help.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The flags or their files are wrong.
    #[error("invalid Kafka options")]
    Options(#[source] ConnectionError),
    /// The brokers answer but refuse this connection (TLS verification, authentication).
    #[error("cannot use Kafka")]
    Refused(#[source] ProbeError),
}

impl KafkaArgs {
    /// The connection of these flags, probed once within `timeout`. Brokers that cannot be
    /// reached yet are no error (a program starts before Kafka does): that is logged with
    /// `meanwhile`, what the program does while it waits. Blocks up to `timeout`.
    pub fn probed_connection(
        &self,
        timeout: Duration,
        meanwhile: &str,
    ) -> Result<Connection, StartError> {
        let connection = self.connection().map_err(StartError::Options)?;
        match connection.probe(timeout) {
            Ok(()) => {}
            Err(error) if error.is_retryable() => {
                tracing::warn!(%error, "Kafka is not reachable yet; {meanwhile}");
            }
            Err(error) => return Err(StartError::Refused(error)),
        }
        Ok(connection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::args::{KafkaOption, SaslMechanism};

    fn args() -> KafkaArgs {
        KafkaArgs::plaintext("k:9093")
    }

    fn setting<'a>(c: &'a Connection, key: &str) -> Option<&'a str> {
        c.settings
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn file(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_ca_file_alone_means_tls() {
        let dir = tempfile::tempdir().unwrap();
        let c = KafkaArgs {
            ca_file: Some(file(&dir, "ca.pem", "x")),
            ..args()
        }
        .connection()
        .unwrap();
        assert_eq!(c.security_protocol(), SecurityProtocol::Ssl);
        assert_eq!(setting(&c, "security.protocol"), Some("ssl"));
        assert!(setting(&c, "ssl.ca.location").is_some_and(|p| p.ends_with("ca.pem")));
    }

    #[test]
    fn sasl_defaults_to_tls_and_reads_the_password_file_without_its_newline() {
        let dir = tempfile::tempdir().unwrap();
        let c = KafkaArgs {
            sasl_mechanism: Some(SaslMechanism::ScramSha512),
            sasl_username: Some("ipaudit".into()),
            sasl_password_file: Some(file(&dir, "pw", "s3cret\n")),
            ..args()
        }
        .connection()
        .unwrap();
        assert_eq!(setting(&c, "security.protocol"), Some("sasl_ssl"));
        assert_eq!(setting(&c, "sasl.mechanisms"), Some("SCRAM-SHA-512"));
        assert_eq!(setting(&c, "sasl.username"), Some("ipaudit"));
        assert_eq!(setting(&c, "sasl.password"), Some("s3cret"));
    }

    #[test]
    fn debug_output_never_shows_a_password() {
        let dir = tempfile::tempdir().unwrap();
        let args = KafkaArgs {
            sasl_mechanism: Some(SaslMechanism::Plain),
            sasl_username: Some("ipaudit".into()),
            sasl_password_file: Some(file(&dir, "pw", "s3cret")),
            options: vec![
                "ssl.key.password=k3y".parse().unwrap(),
                "linger.ms=5".parse().unwrap(),
            ],
            ..args()
        };
        let with_env_password = KafkaArgs {
            sasl_password_file: None,
            sasl_password: Some("s3cret".to_owned().into()),
            ..args.clone()
        };
        let shown = format!(
            "{:?} {:?} {:?}",
            args,
            args.connection().unwrap(),
            with_env_password
        );
        assert!(
            !shown.contains("s3cret") && !shown.contains("k3y"),
            "{shown}"
        );
        assert!(shown.contains("linger.ms=5") && shown.contains("ipaudit"));
    }

    #[test]
    fn a_missing_file_is_an_error_naming_the_option_and_path() {
        let error = KafkaArgs {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..args()
        }
        .connection()
        .unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("--kafka-ca-file") && text.contains("/nonexistent/ca.pem"),
            "{text}"
        );
        assert!(!error.is_retryable());
    }

    #[test]
    fn inconsistent_options_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = file(&dir, "ca.pem", "x");
        let cases = [
            KafkaArgs {
                ca_file: Some(ca.clone()),
                security_protocol: Some(SecurityProtocol::Plaintext),
                ..args()
            },
            KafkaArgs {
                security_protocol: Some(SecurityProtocol::SaslSsl),
                ..args()
            },
            KafkaArgs {
                sasl_mechanism: Some(SaslMechanism::Plain),
                security_protocol: Some(SecurityProtocol::Ssl),
                ..args()
            },
            KafkaArgs {
                sasl_username: Some("u".into()),
                ..args()
            },
            KafkaArgs {
                sasl_mechanism: Some(SaslMechanism::Plain),
                sasl_username: Some("u".into()),
                ..args()
            },
            KafkaArgs {
                sasl_mechanism: Some(SaslMechanism::Plain),
                sasl_username: Some("u".into()),
                sasl_password_file: Some(file(&dir, "empty", "\n")),
                ..args()
            },
            KafkaArgs {
                options: vec!["sasl.password:s3cret".parse().unwrap()],
                ..args()
            },
        ];
        for case in cases {
            let error = case.connection().expect_err("accepted");
            assert!(!error.to_string().contains("s3cret"), "{error}");
        }
    }

    #[test]
    fn operator_options_come_last_and_override() {
        let c = KafkaArgs {
            options: vec![KafkaOption::new("security.protocol", "ssl")],
            ..args()
        }
        .connection()
        .unwrap();
        let mut config = ClientConfig::new();
        config.set("linger.ms", "5");
        c.apply(&mut config);
        assert_eq!(config.get("security.protocol"), Some("ssl"));
        assert_eq!(config.get("bootstrap.servers"), Some("k:9093"));
        assert_eq!(config.get("linger.ms"), Some("5"));
    }
}
