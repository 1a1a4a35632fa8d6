//! Kafka over TLS and SASL end to end: the collector (against the simulated API server)
//! and `analyzer run` reach Apache Kafka only through one of its TLS listeners (SSL,
//! SSL with client certificates, SASL_SSL with SCRAM; certificates made by
//! `scripts/broker`), with the broker's certificate verified against the CA given by
//! `--kafka-ca-file`; a wrong CA or a wrong password stops either program with a clear
//! error instead of a silent retry loop. With the broker's authorizer, each program runs
//! as its own SCRAM user with the ACLs `deploy/kafka-acls.sh` grants; a principal without
//! them is refused, and the programs say so.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ipaudit_schemas::{decode, Alert, WatchEvent};
use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::broker::{
    create_checkpoints_topic_via, create_schemas_topic_via, create_topic_via, free_port,
    read_topic_via, schemas_topic_of,
};
use ipaudit_tests::collector::{workspace_binary, CollectorProcess, CollectorSetup};
use ipaudit_tests::receiver::Receiver;
use ipaudit_tests::scenario::{play_kube_ovn_seed, Seed};
use ipaudit_tests::tls::{TlsEndpoint, TlsSetup};
use ipaudit_tests::{manifest_dir, poll_until};
use kube_sim::{Kind, KubeSim, SimConfig};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};

/// A simulated API server and a broker reachable only over TLS.
struct TlsWorld {
    sim: KubeSim,
    dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
    endpoint: TlsEndpoint,
    topic: String,
    runtime: tokio::runtime::Runtime,
}

/// The topics of the seed's alerts and cleanup commands.
struct SeedTopics {
    alerts: String,
    commands: String,
}

impl TlsWorld {
    fn new(name: &str, setup: TlsSetup) -> TlsWorld {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let sim = runtime
            .block_on(KubeSim::start(SimConfig {
                bookmark_interval: Duration::from_millis(500),
                ..SimConfig::default()
            }))
            .expect("simulated API server");
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        let endpoint = TlsEndpoint::open(setup);
        let world = TlsWorld {
            sim,
            dir,
            kubeconfig,
            endpoint,
            topic: format!("ipaudit.events.{name}.{}", std::process::id()),
            runtime,
        };
        world.create_topic(&world.topic);
        world.runtime.block_on(create_schemas_topic_via(
            world.endpoint.client_config(),
            &world.topic,
            1,
        ));
        world.runtime.block_on(create_checkpoints_topic_via(
            world.endpoint.client_config(),
            &world.topic,
            1,
            1,
        ));
        world
    }

    fn create_topic(&self, topic: &str) {
        self.runtime
            .block_on(create_topic_via(self.endpoint.client_config(), topic));
    }

    fn setup(&self) -> CollectorSetup<'_> {
        CollectorSetup {
            kubeconfig: &self.kubeconfig,
            brokers: &self.endpoint.addr,
            topic: &self.topic,
            state_dir: self.dir.path(),
            cluster_id: "lab",
        }
    }

    /// `collector run` with the endpoint's TLS (and SASL) flags plus `extra`.
    fn collector(&self, extra: &[&str]) -> CollectorProcess {
        self.collector_with(&self.endpoint.flags(), extra)
    }

    /// `collector run` with Kafka flags `flags` plus `extra`, once it is ready.
    fn collector_with(&self, flags: &[String], extra: &[&str]) -> CollectorProcess {
        let args: Vec<&str> = flags
            .iter()
            .map(String::as_str)
            .chain(extra.iter().copied())
            .collect();
        CollectorProcess::start(&self.setup(), &args)
    }

    /// This world's alerts and cleanup-commands topics, created.
    fn alert_and_command_topics(&self) -> SeedTopics {
        let topics = SeedTopics {
            alerts: format!("{}.alerts", self.topic),
            commands: format!("{}.commands", self.topic),
        };
        self.create_topic(&topics.alerts);
        self.create_topic(&topics.commands);
        topics
    }

    /// The kube-ovn seed end to end: a remediating collector (Kafka flags
    /// `collector_flags`, commands read in `remediate_group`) and an analyzer sending
    /// cleanup commands (`analyzer_flags`, group `ipaudit-<name>`). The alert reaches a
    /// webhook and the alerts topic, and the command comes back and the collector releases
    /// the stuck IP. Returns the seed's names.
    fn seed_from_alert_to_released_ip(
        &self,
        collector_flags: &[String],
        analyzer_flags: &[String],
        name: &str,
        remediate_group: &str,
        topics: &SeedTopics,
    ) -> Seed {
        let receiver = Receiver::start(&self.runtime);
        let collector = self.collector_with(
            collector_flags,
            &[
                "--remediate",
                "on",
                "--commands-topic",
                &topics.commands,
                "--remediate-group",
                remediate_group,
            ],
        );
        let analyzer = self.analyzer_with(
            analyzer_flags,
            name,
            &[
                "--webhook-url",
                &format!("{}/hook", receiver.url),
                "--alerts-topic",
                &topics.alerts,
                "--cleanup-commands",
                "--commands-topic",
                &topics.commands,
            ],
        );
        let seed = play_kube_ovn_seed(&self.sim, false);
        let logs = || {
            format!(
                "collector log:\n{}\nanalyzer log:\n{}",
                collector.log_text(),
                analyzer.log_text()
            )
        };
        let hook = poll_until(Duration::from_secs(30), || {
            receiver
                .received("/hook")
                .into_iter()
                .find(|r| r.body["rule"] == "subnet-deleted-before-ip")
        })
        .unwrap_or_else(|| panic!("no alert; {}", logs()));
        assert_eq!(hook.body["subject_name"], seed.leaked_ip);
        assert_eq!(hook.body["subnet"], seed.subnet);
        let records = read_topic_via(
            self.endpoint.client_config(),
            &topics.alerts,
            Duration::from_secs(20),
            |p| !p.is_empty(),
        );
        let first = decode::<Alert>(records.first().expect("an alert record over TLS"))
            .expect("an Avro Alert");
        assert_eq!(first.rule, "subnet-deleted-before-ip");
        // The analyzer's command, read by the collector through its group: the IP is released.
        poll_until(Duration::from_secs(30), || {
            self.sim
                .get(Kind::Ip, "", seed.leaked_ip)
                .is_err()
                .then_some(())
        })
        .unwrap_or_else(|| panic!("the stuck IP is still there; {}", logs()));
        seed
    }

    /// `analyzer run` with the endpoint's flags plus `extra`, once it has joined its group.
    fn analyzer(&self, name: &str, extra: &[&str]) -> AnalyzerProcess {
        self.analyzer_with(&self.endpoint.flags(), name, extra)
    }

    /// `analyzer run` in group `ipaudit-<name>` with Kafka flags `flags` plus `extra`,
    /// once it has joined its group.
    fn analyzer_with(&self, flags: &[String], name: &str, extra: &[&str]) -> AnalyzerProcess {
        let args: Vec<&str> = flags
            .iter()
            .map(String::as_str)
            .chain(extra.iter().copied())
            .collect();
        let process = AnalyzerProcess::start(
            &self.endpoint.addr,
            &self.topic,
            &format!("ipaudit-{name}"),
            &self.dir.path().join(format!("analyzer-{name}")),
            &args,
        );
        poll_until(Duration::from_secs(30), || {
            process
                .log_text()
                .contains("partitions assigned")
                .then_some(())
        })
        .unwrap_or_else(|| panic!("analyzer log:\n{}", process.log_text()));
        process
    }

    fn events(&self, done: impl Fn(&[WatchEvent]) -> bool) -> Vec<WatchEvent> {
        let decode_all = |payloads: &[Vec<u8>]| -> Vec<WatchEvent> {
            payloads
                .iter()
                .filter_map(|p| decode::<WatchEvent>(p).ok())
                .collect()
        };
        let payloads = read_topic_via(
            self.endpoint.client_config(),
            &self.topic,
            Duration::from_secs(20),
            |p| done(&decode_all(p)),
        );
        decode_all(&payloads)
    }
}

impl Drop for TlsWorld {
    fn drop(&mut self) {
        self.sim.cut_watches();
    }
}

/// Runs a program to its end (at most `timeout`); `(exited with success, stderr)`.
fn run_to_end(mut command: Command, log: &Path, timeout: Duration) -> (Option<bool>, String) {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log"))
        .spawn()
        .expect("start");
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status.success());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status, std::fs::read_to_string(log).unwrap_or_default())
}

fn collector_command(world: &TlsWorld, kafka_flags: &[String]) -> Command {
    let mut command = Command::new(workspace_binary("collector"));
    command
        .arg("run")
        .args(["--kubeconfig", &world.kubeconfig.display().to_string()])
        .args(["--cluster-id", "lab", "--collector-id", "refused"])
        .args(["--brokers", &world.endpoint.addr, "--topic", &world.topic])
        .args(["--schemas-topic", &schemas_topic_of(&world.topic)])
        .args([
            "--state-dir",
            &world.dir.path().join("refused").display().to_string(),
        ])
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(kafka_flags)
        .env("RUST_LOG", "info");
    command
}

fn analyzer_command(world: &TlsWorld, kafka_flags: &[String]) -> Command {
    let mut command = Command::new(workspace_binary("analyzer"));
    command
        .arg("run")
        .args(["--brokers", &world.endpoint.addr, "--topic", &world.topic])
        .args(["--schemas-topic", &schemas_topic_of(&world.topic)])
        .args(["--group", "refused"])
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--ui-listen", ""])
        .args([
            "--state-dir",
            &world
                .dir
                .path()
                .join("refused-analyzer")
                .display()
                .to_string(),
        ])
        .args(kafka_flags)
        .env("RUST_LOG", "info");
    command
}

/// The kube-ovn seed through mutual TLS: events in, an alert to the webhook and to the
/// alerts topic, a cleanup command back, and the stuck IP released by the collector.
#[test]
fn the_seed_goes_through_mutual_tls_from_collector_to_alert_and_cleanup() {
    let world = TlsWorld::new(
        "mtls",
        TlsSetup {
            client_certificates: true,
            scram: None,
        },
    );
    let topics = world.alert_and_command_topics();
    let flags = world.endpoint.flags();
    let seed =
        world.seed_from_alert_to_released_ip(&flags, &flags, "mtls", "remediator-mtls", &topics);
    let events = world.events(|e| e.iter().any(|e| e.object_key() == seed.leaked_ip));
    assert!(events.iter().any(|e| e.object_key() == seed.leaked_ip));

    // The endpoint really demands the client certificate: without it, no connection.
    let without_certificate = world.endpoint.flags()[..2].to_vec();
    let log = world.dir.path().join("collector-no-cert.log");
    let (success, stderr) = run_to_end(
        collector_command(&world, &without_certificate),
        &log,
        Duration::from_secs(30),
    );
    assert_eq!(success, Some(false), "{stderr}");
    // Kafka on Java 17 refuses the empty certificate with the TLS alert bad_certificate
    // (OpenSSL servers send certificate_required).
    assert!(
        stderr.contains("TLS with the Kafka brokers")
            && (stderr.contains("alert bad certificate")
                || stderr.contains("certificate required")),
        "{stderr}"
    );
}

/// SASL SCRAM-SHA-256 over TLS: the collector's events arrive.
#[test]
fn with_scram_sha_256_over_tls_the_collector_delivers_its_events() {
    let world = TlsWorld::new(
        "scram256",
        TlsSetup {
            client_certificates: false,
            scram: Some("SCRAM-SHA-256"),
        },
    );
    let collector = world.collector(&[]);
    let seed = play_kube_ovn_seed(&world.sim, false);
    let events = world.events(|e| e.iter().any(|e| e.object_key() == seed.subnet));
    assert!(
        events.iter().any(|e| e.object_key() == seed.subnet),
        "{} events; collector log:\n{}",
        events.len(),
        collector.log_text()
    );
}

/// A CA that did not sign the broker's certificate: both programs stop at start with an
/// error naming the failed verification, instead of retrying in their logs for ever.
#[test]
fn with_a_wrong_ca_both_programs_exit_non_zero_naming_the_certificate_failure() {
    let world = TlsWorld::new("wrong-ca", TlsSetup::default());
    let flags = world.endpoint.flags_trusting(&world.endpoint.other_ca);
    for (name, command) in [
        ("collector", collector_command(&world, &flags)),
        ("analyzer", analyzer_command(&world, &flags)),
    ] {
        let started = Instant::now();
        let log = world.dir.path().join(format!("{name}-wrong-ca.log"));
        let (success, stderr) = run_to_end(command, &log, Duration::from_secs(30));
        assert_eq!(
            success,
            Some(false),
            "{name} did not exit non-zero within 30s; log:\n{stderr}"
        );
        assert!(
            stderr.contains("TLS with the Kafka brokers")
                && stderr.contains("certificate verify failed"),
            "{name}: {stderr}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{name} took {:?}",
            started.elapsed()
        );
    }
    // The same flags with the right CA work: the failure was the CA, nothing else.
    let _collector = world.collector(&[]);
}

/// SASL SCRAM-SHA-512 over TLS: the events reach the analyzer with the password from a
/// file; the same user with a wrong password is refused at start with a clear error.
#[test]
fn with_scram_over_tls_the_alert_fires_and_a_wrong_password_is_refused() {
    let world = TlsWorld::new(
        "scram",
        TlsSetup {
            client_certificates: false,
            scram: Some("SCRAM-SHA-512"),
        },
    );
    let receiver = Receiver::start(&world.runtime);
    let _collector = world.collector(&[]);
    let analyzer = world.analyzer(
        "scram",
        &["--webhook-url", &format!("{}/hook", receiver.url)],
    );
    let seed = play_kube_ovn_seed(&world.sim, false);
    poll_until(Duration::from_secs(30), || {
        receiver.received("/hook").into_iter().find(|r| {
            r.body["rule"] == "subnet-deleted-before-ip" && r.body["subnet"] == seed.subnet
        })
    })
    .unwrap_or_else(|| panic!("no alert; analyzer log:\n{}", analyzer.log_text()));

    let right_password = world.endpoint.scram().expect("SCRAM").password.clone();
    let wrong = world.dir.path().join("wrong-password");
    std::fs::write(&wrong, "tr0ub4dor&3\n").expect("password file");
    let mut flags = world.endpoint.flags();
    let at = flags
        .iter()
        .position(|f| f == "--kafka-sasl-password-file")
        .expect("a password file flag");
    flags[at + 1] = wrong.display().to_string();
    for (name, command) in [
        ("collector", collector_command(&world, &flags)),
        ("analyzer", analyzer_command(&world, &flags)),
    ] {
        let log = world.dir.path().join(format!("{name}-wrong-password.log"));
        let (success, stderr) = run_to_end(command, &log, Duration::from_secs(30));
        assert_eq!(success, Some(false), "{name}; log:\n{stderr}");
        assert!(
            stderr.contains("SASL authentication with the Kafka brokers"),
            "{name}: {stderr}"
        );
        assert!(
            !stderr.contains("tr0ub4dor") && !stderr.contains(&right_password),
            "{name} printed a password: {stderr}"
        );
    }
}

/// `--help` of both programs with every Kafka secret in the environment shows none.
#[test]
fn help_with_kafka_secrets_in_the_environment_shows_none() {
    for program in ["collector", "analyzer"] {
        let output = Command::new(workspace_binary(program))
            .args(["run", "--help"])
            .env("IPAUDIT_KAFKA_SASL_PASSWORD", "pw-from-env-1")
            .env("IPAUDIT_KAFKA_OPTIONS", "sasl.password=pw-from-env-2")
            .output()
            .expect("run --help");
        let help = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{program}: {help}");
        assert!(
            help.contains("--kafka-sasl-password-file") && help.contains("--kafka-ca-file"),
            "{program} lacks the Kafka security options:\n{help}"
        );
        assert!(!help.contains("pw-from-env"), "{program}:\n{help}");
    }
}

/// A principal no ACL allows anything (the StandardAuthorizer denies what no ACL allows):
/// an analyzer running as it stops non-zero with a message naming what it was denied,
/// instead of retrying in silence as if the cluster were quiet.
#[test]
fn an_analyzer_whose_principal_may_not_read_the_events_stops_naming_what_is_denied() {
    let world = TlsWorld::new(
        "denied",
        TlsSetup {
            client_certificates: false,
            scram: Some("SCRAM-SHA-512"),
        },
    );
    let flags = world.endpoint.flags_as("intruder");
    let log = world.dir.path().join("analyzer-denied.log");
    let (success, stderr) = run_to_end(
        analyzer_command(&world, &flags),
        &log,
        Duration::from_secs(60),
    );
    assert_eq!(success, Some(false), "{stderr}");
    assert!(
        stderr.contains("Kafka denies this analyzer's principal")
            && (stderr.contains(&format!("read on topic {}", world.topic))
                || stderr.contains("the consumer group refused")),
        "{stderr}"
    );
}

/// `deploy/kafka-acls.sh` against the broker's authorizer (the StandardAuthorizer denies
/// what no ACL allows): with only the ACLs it grants, the collector and the analyzer, each
/// as its own SCRAM user, carry the kube-ovn seed from the API server to the webhook and
/// the alerts topic, and back to the collector as a cleanup command that releases the
/// stuck IP. A collector as a principal without ACLs stops non-zero naming the events
/// topic, and that principal cannot put a command on the commands topic: Kafka refuses it
/// (TOPIC_AUTHORIZATION_FAILED) before any collector could check its signature. A
/// collector remediating in a consumer group its principal may not use stops naming it.
#[test]
fn with_the_deploy_acls_each_principal_does_its_part_and_an_intruder_is_refused() {
    let started = Instant::now();
    let world = TlsWorld::new(
        "acls",
        TlsSetup {
            client_certificates: false,
            scram: Some("SCRAM-SHA-512"),
        },
    );
    let topics = world.alert_and_command_topics();
    let (alerts, commands) = (&topics.alerts, &topics.commands);
    let remediate_group = format!("remediator-acls-{}", std::process::id());
    // TlsWorld::analyzer_with's group for the name "acls".
    let analyzer_group = "ipaudit-acls";
    let properties = world.endpoint.java_client_properties();
    let output = Command::new(manifest_dir().join("../deploy/kafka-acls.sh"))
        .args(["--bootstrap-server", &world.endpoint.addr])
        .args(["--command-config", &properties.display().to_string()])
        .args(["--collector-principal", "User:collector"])
        .args(["--analyzer-principal", "User:analyzer"])
        .args(["--remediate-group", &remediate_group])
        .args(["--analyzer-group", analyzer_group])
        .args(["--events-topic", &world.topic])
        .args(["--schemas-topic", &schemas_topic_of(&world.topic)])
        .args(["--alerts-topic", alerts, "--commands-topic", commands])
        .output()
        .expect("deploy/kafka-acls.sh");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let acls_took = started.elapsed();

    world.seed_from_alert_to_released_ip(
        &world.endpoint.flags_as("collector"),
        &world.endpoint.flags_as("analyzer"),
        "acls",
        &remediate_group,
        &topics,
    );
    let allowed_took = started.elapsed();

    // A principal without ACLs: the collector stops, naming the topic it may not write.
    let log = world.dir.path().join("collector-intruder.log");
    let (success, stderr) = run_to_end(
        collector_command(&world, &world.endpoint.flags_as("intruder")),
        &log,
        Duration::from_secs(30),
    );
    assert_eq!(success, Some(false), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "Kafka denies this collector's principal write on topic {}",
            world.topic
        )),
        "{stderr}"
    );

    // ... and cannot inject a command: Kafka refuses the record itself.
    let producer: FutureProducer = world
        .endpoint
        .client_config_as("intruder")
        .set("message.timeout.ms", "10000")
        .create()
        .expect("producer");
    let sent = world.runtime.block_on(
        producer.send(
            FutureRecord::to(commands)
                .key("lab")
                .payload(&b"a command nobody signed"[..]),
            Duration::from_secs(10),
        ),
    );
    match sent {
        Err((KafkaError::MessageProduction(code), _)) => {
            assert_eq!(code, RDKafkaErrorCode::TopicAuthorizationFailed)
        }
        other => panic!("the intruder's command was not refused by Kafka: {other:?}"),
    }

    // The collector's own principal, remediating in a group the ACLs do not name: it stops
    // naming the group, rather than waiting for commands that can never come.
    let log = world.dir.path().join("collector-other-group.log");
    let mut flags = world.endpoint.flags_as("collector");
    flags.extend(
        [
            "--remediate",
            "dry-run",
            "--commands-topic",
            commands,
            "--remediate-group",
            "not-granted",
        ]
        .map(str::to_owned),
    );
    let (success, stderr) = run_to_end(
        collector_command(&world, &flags),
        &log,
        Duration::from_secs(60),
    );
    assert_eq!(success, Some(false), "{stderr}");
    assert!(
        stderr.contains("Kafka denies this collector's principal the consumer group not-granted"),
        "{stderr}"
    );
    eprintln!(
        "acls: script {acls_took:?}, seed to released IP by {allowed_took:?}, all {:?}",
        started.elapsed()
    );
}
