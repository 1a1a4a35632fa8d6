//! A Kafka endpoint over TLS for the tests: the test broker (tansu) listening on a plain
//! port and advertising a second port, where a TLS terminator (Debian's `stunnel4`) accepts
//! TLS and forwards to the broker, so that clients bootstrap and reconnect over TLS only.
//! The certificates are made for the test with the `openssl` command: a throwaway CA, a
//! server certificate for 127.0.0.1 signed by it, a client certificate, and a second CA
//! that signed nothing (the wrong CA). Optionally the terminator requires client
//! certificates (mutual TLS), and the broker requires SASL SCRAM (tansu 0.6.0 implements
//! SCRAM-SHA-256/512 with credentials kept in its storage; its PLAIN accepts any password,
//! so PLAIN proves nothing there and is not tested against it).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rdkafka::config::ClientConfig;

use crate::broker::{free_port, tansu_binary, Broker};

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

    /// Their directory (scratch space for the terminator's configuration too).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// SASL SCRAM credentials the broker requires.
#[derive(Debug, Clone)]
pub struct Scram {
    /// `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: &'static str,
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
}

/// What the TLS endpoint demands of clients.
#[derive(Debug, Clone, Default)]
pub struct TlsSetup {
    /// Require a client certificate signed by the test CA (mutual TLS).
    pub client_certificates: bool,
    /// Require SASL SCRAM with these credentials.
    pub scram: Option<Scram>,
}

/// The test broker behind a TLS terminator.
pub struct TlsBroker {
    /// `127.0.0.1:PORT` of the TLS endpoint: the only address clients are given.
    pub addr: String,
    /// The certificates.
    pub certs: Certs,
    /// What clients must present.
    pub setup: TlsSetup,
    stunnel: Child,
    broker: Broker,
}

/// The TLS terminator's binary: `stunnel4` or `stunnel` on `PATH`.
fn stunnel_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .flat_map(|dir| [dir.join("stunnel4"), dir.join("stunnel")])
        .find(|p| p.is_file())
        .expect("stunnel not found: install Debian's stunnel4 (scripts/test does)")
}

impl TlsBroker {
    /// Starts a broker (data in a SQLite file, so that SCRAM users survive the restart
    /// that switches authentication on) and a TLS terminator in front of it.
    pub fn start(setup: TlsSetup) -> TlsBroker {
        let certs = Certs::generate();
        let tls_port = free_port();
        let mut broker = Broker::configured("sqlite://broker.db".into());
        if let Some(scram) = &setup.scram {
            // tansu refuses every request but the handshake until a client authenticated,
            // its own CLI included: create the user first, then switch authentication on.
            broker.restart();
            let mechanism = match scram.mechanism {
                "SCRAM-SHA-256" => "scram256",
                _ => "scram512",
            };
            let status = Command::new(tansu_binary())
                .args(["user", "create", "--broker"])
                .arg(format!("tcp://127.0.0.1:{}", broker.port()))
                .args(["--mechanism", mechanism, &scram.username, &scram.password])
                .current_dir(broker.dir())
                .stdout(Stdio::null())
                .status()
                .expect("tansu user create");
            assert!(status.success(), "tansu user create failed");
            broker.advertise(tls_port, &["--authentication"]);
        } else {
            broker.advertise(tls_port, &[]);
        }
        broker.restart();

        let conf = certs.dir().join("stunnel.conf");
        let verify = if setup.client_certificates {
            format!(
                "CAfile = {}\nverifyChain = yes\nrequireCert = yes\n",
                certs.ca.display()
            )
        } else {
            String::new()
        };
        std::fs::write(
            &conf,
            format!(
                "foreground = yes\npid =\ndebug = notice\n\n[kafka]\naccept = 127.0.0.1:{tls_port}\nconnect = 127.0.0.1:{}\ncert = {}\nkey = {}\n{verify}",
                broker.port(),
                certs.server_cert.display(),
                certs.server_key.display(),
            ),
        )
        .expect("stunnel configuration");
        let log = std::fs::File::create(certs.dir().join("stunnel.log")).expect("stunnel log");
        let stunnel = Command::new(stunnel_binary())
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start stunnel");
        let endpoint = TlsBroker {
            addr: format!("127.0.0.1:{tls_port}"),
            certs,
            setup,
            stunnel,
            broker,
        };
        if !crate::broker::port_opens(tls_port, Duration::from_secs(20)) {
            panic!("stunnel did not listen; log:\n{}", endpoint.stunnel_log());
        }
        endpoint
    }

    /// The terminator's log.
    pub fn stunnel_log(&self) -> String {
        std::fs::read_to_string(self.certs.dir().join("stunnel.log")).unwrap_or_default()
    }

    /// The broker's log.
    pub fn broker_log(&self) -> String {
        std::fs::read_to_string(self.broker.dir().join("broker.log")).unwrap_or_default()
    }

    /// A client configuration for the test's own clients: TLS with the test CA, the
    /// client certificate and the SCRAM credentials when required.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.addr)
            .set("ssl.ca.location", self.certs.ca.display().to_string());
        if self.setup.client_certificates {
            config
                .set(
                    "ssl.certificate.location",
                    self.certs.client_cert.display().to_string(),
                )
                .set(
                    "ssl.key.location",
                    self.certs.client_key.display().to_string(),
                );
        }
        match &self.setup.scram {
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
                self.certs.client_cert.display().to_string(),
                "--kafka-key-file".to_owned(),
                self.certs.client_key.display().to_string(),
            ]);
        }
        if let Some(scram) = &self.setup.scram {
            let file = self.certs.dir().join("sasl-password");
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
        self.flags_trusting(&self.certs.ca)
    }
}

impl Drop for TlsBroker {
    fn drop(&mut self) {
        let _ = self.stunnel.kill();
        let _ = self.stunnel.wait();
        self.broker.stop();
    }
}
