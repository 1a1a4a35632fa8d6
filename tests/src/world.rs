//! One end-to-end test's world: a simulated API server, a broker (the run's shared one,
//! or a private one), a topic of its own, and a scratch directory.

use std::path::PathBuf;
use std::time::Duration;

use ipaudit_schemas::{decode, WatchEvent};
use kube_sim::{Kind, KubeSim, SimConfig};

use crate::broker::{
    create_checkpoints_topic, create_partitioned_topic, create_replicated_topic,
    create_schemas_topic, read_topic, shared_or_start, Broker,
};
use crate::collector::{CollectorProcess, CollectorSetup};

/// One test's world: a simulated API server, a broker, a topic, a state directory.
pub struct World {
    /// The simulated API server.
    pub sim: KubeSim,
    /// Scratch space: state directories, logs, recordings.
    pub dir: tempfile::TempDir,
    /// kubeconfig of the simulated API server.
    pub kubeconfig: PathBuf,
    /// Kafka bootstrap servers.
    pub brokers: String,
    /// This test's events topic.
    pub topic: String,
    broker: Option<Broker>,
    /// The runtime the simulated server (and test servers) run on.
    pub runtime: tokio::runtime::Runtime,
}

impl World {
    /// A world on the run's shared broker (or a private one), or on `brokers`, whose API
    /// server serves every kind ipaudit knows.
    pub fn new(name: &str, brokers: Option<String>) -> World {
        Self::with_sim(name, brokers, SimConfig::default(), 1)
    }

    /// A world whose API server serves only `kinds` (a cluster with only whereabouts...).
    pub fn serving(name: &str, kinds: &[Kind]) -> World {
        Self::with_sim(name, None, SimConfig::serving(kinds), 1)
    }

    /// A world whose events topic has `partitions` partitions (a consumer group of several
    /// analyzers); the collector's cluster `lab` is in one of them.
    pub fn partitioned(name: &str, partitions: i32) -> World {
        Self::with_sim(name, None, SimConfig::default(), partitions)
    }

    /// A world on the brokers at `brokers` whose events topic has `partitions` partitions.
    pub fn partitioned_on(name: &str, brokers: &str, partitions: i32) -> World {
        Self::with_sim(
            name,
            Some(brokers.to_owned()),
            SimConfig::default(),
            partitions,
        )
    }

    /// A world on the cluster at `brokers` whose events topic is held by `replicas` nodes
    /// (`min.insync.replicas` one less).
    pub fn replicated(name: &str, brokers: &str, replicas: i32) -> World {
        let world = Self::with_sim(name, Some(brokers.to_owned()), SimConfig::default(), 0);
        world
            .runtime
            .block_on(create_replicated_topic(brokers, &world.topic, replicas));
        world
            .runtime
            .block_on(create_schemas_topic(brokers, &world.topic, replicas));
        world
            .runtime
            .block_on(create_checkpoints_topic(brokers, &world.topic, 1, replicas));
        world
    }

    /// `partitions`: of the events topic, created here with its schemas topic; 0: the
    /// caller creates both.
    fn with_sim(name: &str, brokers: Option<String>, config: SimConfig, partitions: i32) -> World {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let config = SimConfig {
            bookmark_interval: Duration::from_millis(500),
            ..config
        };
        let sim = runtime
            .block_on(KubeSim::start(config))
            .expect("simulated API server");
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        let (brokers, broker) = match brokers {
            Some(addr) => (addr, None),
            None => shared_or_start(),
        };
        let topic = format!("ipaudit.events.{name}.{}", std::process::id());
        if partitions > 0 {
            runtime.block_on(create_partitioned_topic(&brokers, &topic, partitions));
            runtime.block_on(create_schemas_topic(&brokers, &topic, 1));
            runtime.block_on(create_checkpoints_topic(&brokers, &topic, partitions, 1));
        }
        World {
            sim,
            dir,
            kubeconfig,
            brokers,
            topic,
            broker,
            runtime,
        }
    }

    /// How a collector of this world is started.
    pub fn setup(&self) -> CollectorSetup<'_> {
        CollectorSetup {
            kubeconfig: &self.kubeconfig,
            brokers: &self.brokers,
            topic: &self.topic,
            state_dir: self.dir.path(),
            cluster_id: "lab",
        }
    }

    /// Starts a collector.
    pub fn collector(&self) -> CollectorProcess {
        CollectorProcess::start(&self.setup(), &[])
    }

    /// This world's cleanup-commands topic.
    pub fn commands_topic(&self) -> String {
        format!("{}.commands", self.topic)
    }

    /// Creates the commands topic and starts a collector that executes its commands with
    /// `--remediate mode` (`on` or `dry-run`), in a consumer group of its own (tests run
    /// side by side on one broker with the same cluster id), plus `extra` flags.
    pub fn remediating_collector(&self, mode: &str, extra: &[&str]) -> CollectorProcess {
        self.remediating_collector_on(&self.setup(), mode, extra)
    }

    /// [`World::remediating_collector`] started as `setup` says (another API server).
    pub fn remediating_collector_on(
        &self,
        setup: &CollectorSetup<'_>,
        mode: &str,
        extra: &[&str],
    ) -> CollectorProcess {
        let commands = self.commands_topic();
        self.runtime
            .block_on(crate::broker::create_topic(&self.brokers, &commands));
        let group = format!("remediator-{commands}");
        let flags: Vec<&str> = [
            "--remediate",
            mode,
            "--commands-topic",
            &commands,
            "--remediate-group",
            &group,
        ]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
        CollectorProcess::start(setup, &flags)
    }

    /// The whole cleanup loop against the API server of `kubeconfig` (a real one, with the
    /// chart's roles): a collector with remediation on, and an analyzer member that sends
    /// its alerts to `webhook_url` and its cleanup commands to this world's commands topic,
    /// plus `analyzer_extra` flags; returned once the member has joined its group.
    pub fn cleanup_loop_on(
        &self,
        kubeconfig: &std::path::Path,
        webhook_url: &str,
        analyzer_extra: &[&str],
    ) -> (CollectorProcess, crate::analyzer::AnalyzerProcess) {
        let setup = CollectorSetup {
            kubeconfig,
            ..self.setup()
        };
        let collector = self.remediating_collector_on(&setup, "on", &[]);
        let commands = self.commands_topic();
        let flags: Vec<&str> = [
            "--webhook-url",
            webhook_url,
            "--cleanup-commands",
            "--commands-topic",
            &commands,
        ]
        .into_iter()
        .chain(analyzer_extra.iter().copied())
        .collect();
        let analyzer = crate::analyzer::AnalyzerProcess::start(
            &self.brokers,
            &self.topic,
            &format!("analyzer-{commands}"),
            &self.dir.path().join("analyzer"),
            &flags,
        );
        analyzer.wait_joined(Duration::from_secs(30));
        (collector, analyzer)
    }

    /// Reads the topic until `done` holds for the events read (or the timeout).
    pub fn events_until(
        &self,
        timeout: Duration,
        done: impl Fn(&[WatchEvent]) -> bool,
    ) -> Vec<WatchEvent> {
        let decode_all = |payloads: &[Vec<u8>]| -> Vec<WatchEvent> {
            payloads
                .iter()
                .map(|p| decode::<WatchEvent>(p).expect("every message decodes"))
                .collect()
        };
        let payloads = read_topic(&self.brokers, &self.topic, timeout, |p| {
            done(&decode_all(p))
        });
        decode_all(&payloads)
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.sim.cut_watches();
        let _ = self.broker.take();
        let _ = &self.runtime;
    }
}
