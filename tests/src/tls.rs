//! Kafka over TLS for the tests: the broker's own listeners (`scripts/broker` opens them on
//! every node) — SSL with the server's certificate only, MTLS (SSL requiring a client
//! certificate) and SASL_SSL with SCRAM-SHA-256 and SCRAM-SHA-512 — so that clients
//! bootstrap and reconnect over TLS only. The script makes the certificates with the
//! `openssl` command: a throwaway CA, the broker's certificate for 127.0.0.1 signed by it,
//! and a client certificate (CN=admin, which the broker maps to the super user
//! `User:admin`); this module adds a second CA that signed nothing (the wrong CA). SCRAM
//! users are created when the broker's storage is formatted; these tests use `admin`, a
//! super user, since Kafka's authorizer refuses every principal without ACLs.
//! The endpoint is on the run's shared broker (`scripts/test` exports its listeners) or,
//! outside `scripts/test`, on a broker of the test's own.
//!
//! [`Certs`] makes a set of certificates of the same kind for the tests' own TLS servers
//! (the collector's admission webhook).

use std::path::{Path, PathBuf};
use std::process::Command;

use rdkafka::config::ClientConfig;

use crate::broker::{Broker, BrokerEnv};

/// SASL SCRAM credentials for the broker.
#[derive(Debug, Clone)]
pub struct Scram {
    /// `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: &'static str,
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
}

/// Which TLS listener a test talks to.
#[derive(Debug, Clone, Copy, Default)]
pub struct TlsSetup {
    /// The listener that requires a client certificate signed by the test CA (mutual
    /// TLS); else the one that asks for none.
    pub client_certificates: bool,
    /// The SASL_SSL listener with this SCRAM mechanism (`SCRAM-SHA-256` or
    /// `SCRAM-SHA-512`), as the super user `admin`.
    pub scram: Option<&'static str>,
}

/// One TLS listener of a Kafka broker, with the files and credentials to reach it.
pub struct TlsEndpoint {
    /// Its bootstrap addresses: the only ones clients are given.
    pub addr: String,
    /// The CA that signed the broker's certificate and the client certificate (PEM).
    pub ca: PathBuf,
    /// A CA that signed nothing here: trusting only it must fail verification.
    pub other_ca: PathBuf,
    /// A client certificate signed by `ca` (CN=admin), and its key.
    client_cert: PathBuf,
    client_key: PathBuf,
    /// What clients must present.
    pub setup: TlsSetup,
    scram: Option<Scram>,
    /// What the broker's start printed (the other SCRAM users among it).
    env: BrokerEnv,
    /// The broker's directory (its nodes' logs).
    broker_dir: PathBuf,
    scratch: tempfile::TempDir,
    _own: Option<Broker>,
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl command (Debian package openssl; scripts/test installs it)");
    assert!(
        output.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Throwaway certificates in a directory of their own.
pub struct Certs {
    dir: tempfile::TempDir,
    /// The CA that signed the server and client certificates (PEM).
    pub ca: PathBuf,
    /// A CA that signed nothing here: trusting only it must fail verification.
    pub other_ca: PathBuf,
    /// The server certificate, for 127.0.0.1 and localhost.
    pub server_cert: PathBuf,
    /// Its key.
    pub server_key: PathBuf,
    /// A client certificate signed by `ca`.
    pub client_cert: PathBuf,
    /// Its key.
    pub client_key: PathBuf,
}

impl Certs {
    /// Makes a CA, a second CA, and a server and a client certificate signed by the first.
    pub fn generate() -> Certs {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        for (name, subject) in [("ca", "/CN=ipaudit test CA"), ("other-ca", "/CN=other CA")] {
            let (key, cert) = (format!("{name}.key"), format!("{name}.pem"));
            let mut args = vec!["req", "-x509", "-nodes", "-days", "2"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &cert, "-subj", subject]);
            args.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
            args.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
            openssl(d, &args);
        }
        for (name, usage) in [("server", "serverAuth"), ("client", "clientAuth")] {
            let ext = format!("{name}.ext");
            std::fs::write(
                d.join(&ext),
                format!(
                    "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage={usage}\n"
                ),
            )
            .expect("extensions file");
            let (key, csr, cert) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.pem"),
            );
            let mut args = vec!["req", "-nodes"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &csr, "-subj"]);
            args.push(if name == "server" {
                "/CN=127.0.0.1"
            } else {
                "/CN=ipaudit"
            });
            openssl(d, &args);
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-out",
                    &cert,
                    "-extfile",
                    &ext,
                ],
            );
        }
        Certs {
            ca: d.join("ca.pem"),
            other_ca: d.join("other-ca.pem"),
            server_cert: d.join("server.pem"),
            server_key: d.join("server.key"),
            client_cert: d.join("client.pem"),
            client_key: d.join("client.key"),
            dir,
        }
    }

    /// Their directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl TlsEndpoint {
    /// The listener `setup` names, on the run's shared broker or on one of this test's.
    pub fn open(setup: TlsSetup) -> TlsEndpoint {
        assert!(
            !(setup.client_certificates && setup.scram.is_some()),
            "the broker's SASL_SSL listener asks for no client certificate"
        );
        let (env, own) = match BrokerEnv::from_process_env() {
            Some(env) => (env, None),
            None => {
                let broker = Broker::start();
                (broker.env.clone(), Some(broker))
            }
        };
        let key = match (setup.client_certificates, setup.scram) {
            (true, _) => "IPAUDIT_TEST_BROKERS_MTLS",
            (false, Some(_)) => "IPAUDIT_TEST_BROKERS_SASL_SSL",
            (false, None) => "IPAUDIT_TEST_BROKERS_SSL",
        };
        let user = env.get("IPAUDIT_TEST_KAFKA_SUPER_USER").to_owned();
        let scram = setup.scram.map(|mechanism| Scram {
            mechanism,
            password: env.scram_password(&user),
            username: user,
        });
        let scratch = tempfile::tempdir().expect("temp dir");
        openssl(
            scratch.path(),
            &[
                "req",
                "-x509",
                "-nodes",
                "-days",
                "2",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-keyout",
                "other-ca.key",
                "-out",
                "other-ca.pem",
                "-subj",
                "/CN=other CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
            ],
        );
        TlsEndpoint {
            addr: env.get(key).to_owned(),
            ca: env.get("IPAUDIT_TEST_KAFKA_CA").into(),
            other_ca: scratch.path().join("other-ca.pem"),
            client_cert: env.get("IPAUDIT_TEST_KAFKA_CLIENT_CERT").into(),
            client_key: env.get("IPAUDIT_TEST_KAFKA_CLIENT_KEY").into(),
            setup,
            scram,
            broker_dir: env.get("IPAUDIT_TEST_KAFKA_DIR").into(),
            env,
            scratch,
            _own: own,
        }
    }

    /// The SCRAM credentials clients use, when the listener wants them.
    pub fn scram(&self) -> Option<&Scram> {
        self.scram.as_ref()
    }

    /// The broker's log (its first node's).
    pub fn broker_log(&self) -> String {
        std::fs::read_to_string(self.broker_dir.join("node-1/broker.log")).unwrap_or_default()
    }

    /// A client configuration for the test's own clients: TLS with the test CA, the
    /// client certificate and the SCRAM credentials when required.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.addr)
            .set("ssl.ca.location", self.ca.display().to_string());
        if self.setup.client_certificates {
            config
                .set(
                    "ssl.certificate.location",
                    self.client_cert.display().to_string(),
                )
                .set("ssl.key.location", self.client_key.display().to_string());
        }
        match &self.scram {
            Some(scram) => config
                .set("security.protocol", "sasl_ssl")
                .set("sasl.mechanisms", scram.mechanism)
                .set("sasl.username", &scram.username)
                .set("sasl.password", &scram.password),
            None => config.set("security.protocol", "ssl"),
        };
        config
    }

    /// The collector's and analyzer's flags for this endpoint, trusting `ca`; the SCRAM
    /// password goes through a file.
    pub fn flags_trusting(&self, ca: &Path) -> Vec<String> {
        let mut flags = vec!["--kafka-ca-file".to_owned(), ca.display().to_string()];
        if self.setup.client_certificates {
            flags.extend([
                "--kafka-cert-file".to_owned(),
                self.client_cert.display().to_string(),
                "--kafka-key-file".to_owned(),
                self.client_key.display().to_string(),
            ]);
        }
        if let Some(scram) = &self.scram {
            let file = self.scratch.path().join("sasl-password");
            std::fs::write(&file, format!("{}\n", scram.password)).expect("password file");
            flags.extend([
                "--kafka-sasl-mechanism".to_owned(),
                scram.mechanism.to_owned(),
                "--kafka-sasl-username".to_owned(),
                scram.username.clone(),
                "--kafka-sasl-password-file".to_owned(),
                file.display().to_string(),
            ]);
        }
        flags
    }

    /// The flags trusting the right CA.
    pub fn flags(&self) -> Vec<String> {
        self.flags_trusting(&self.ca)
    }

    /// [`TlsEndpoint::client_config`] as SCRAM user `user` (one of the broker's), for a
    /// test's own client that may do only what ACLs allow that user.
    pub fn client_config_as(&self, user: &str) -> ClientConfig {
        assert!(
            self.scram.is_some(),
            "a SASL_SSL endpoint (TlsSetup::scram)"
        );
        let mut config = self.client_config();
        config
            .set("sasl.username", user)
            .set("sasl.password", self.env.scram_password(user));
        config
    }

    /// A Java client's properties file (`--command-config` of Kafka's tools) for this
    /// SASL_SSL endpoint as its super user, trusting the test CA.
    pub fn java_client_properties(&self) -> PathBuf {
        let scram = self
            .scram
            .as_ref()
            .expect("a SASL_SSL endpoint (TlsSetup::scram)");
        let file = self.scratch.path().join("admin-client.properties");
        std::fs::write(
            &file,
            format!(
                "security.protocol=SASL_SSL\nsasl.mechanism={}\nsasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{}\" password=\"{}\";\nssl.truststore.type=PEM\nssl.truststore.location={}\n",
                scram.mechanism,
                scram.username,
                scram.password,
                self.ca.display()
            ),
        )
        .expect("client properties");
        file
    }

    /// The flags of the SASL_SSL listener as SCRAM user `user` (one of the broker's:
    /// `collector`, `analyzer`, `intruder`), who may do only what ACLs allow it.
    pub fn flags_as(&self, user: &str) -> Vec<String> {
        let scram = self
            .scram
            .as_ref()
            .expect("a SASL_SSL endpoint (TlsSetup::scram)");
        let file = self.scratch.path().join(format!("sasl-password-{user}"));
        std::fs::write(&file, format!("{}\n", self.env.scram_password(user)))
            .expect("password file");
        vec![
            "--kafka-ca-file".to_owned(),
            self.ca.display().to_string(),
            "--kafka-sasl-mechanism".to_owned(),
            scram.mechanism.to_owned(),
            "--kafka-sasl-username".to_owned(),
            user.to_owned(),
            "--kafka-sasl-password-file".to_owned(),
            file.display().to_string(),
        ]
    }
}
