//! Wires the pipeline together: discovery of the kinds to watch -> one watcher per kind ->
//! one writer thread (SQLite outbox or Avro file) -> the Kafka producer, plus the health
//! endpoints; and shuts it down in order on SIGTERM: watchers stop, the writer stores what
//! they sent, the producer drains the outbox.
//!
//! Every long-running task is supervised: a watcher, the remediator, the writer, the
//! producer or the HTTP server that ends on its own stops the whole process with an error
//! (a non-zero exit, so that Kubernetes restarts it), never silently.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ipaudit_schemas::Stream;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinSet;
use tracing::{error, info};

use crate::admission::guard::{Guarded, SharedIndex};
use crate::admission::{AdmissionConfig, AdmissionError};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::observed::StreamState;
use crate::remediate::{run_remediator, RemediateConfig, RemediationMode};
use crate::ship::outbox::{Outbox, OutboxError};
use crate::ship::produce::{run_producer, KafkaConfig, ProduceError, ProducerTask};
use crate::ship::publish_schemas::SchemaPublisher;
use crate::ship::record::FileWriter;
use crate::ship::writer::{self, EventWriter, IndexingWriter, WriterError};
use crate::telemetry::{Failed, Failure};
use crate::watch::access::{self, AccessDenied};
use crate::watch::discovery::{self, DiscoveryError};
use crate::watch::event::Stamp;
use crate::watch::{WatchConfig, WatchError, WatchOutputs, Watcher};
use ipaudit_runtime::telemetry::InternalEvent as _;

/// How to reach the API server.
#[derive(Debug, Clone)]
pub enum KubeSource {
    /// This kubeconfig file (its current context).
    Kubeconfig(PathBuf),
    /// In-cluster service account, else `$KUBECONFIG`, else `~/.kube/config`.
    Infer,
}

/// What every collector mode shares.
#[derive(Debug, Clone)]
pub struct CollectorConfig {
    /// The API server.
    pub kube: KubeSource,
    /// Cluster and collector ids.
    pub stamp: Stamp,
    /// Watch settings.
    pub watch: WatchConfig,
    /// The kinds to watch (`--kinds`); `None`: every kind of the table the API server
    /// serves. Pods are watched either way.
    pub kinds: Option<Vec<Stream>>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub listen: Option<SocketAddr>,
    /// `/readyz` fails while a watch has failed, or rows have waited with nothing
    /// delivered, for longer than this.
    pub unready_after: Duration,
    /// Watches pause while the outbox holds this many payload bytes (`None`: no bound;
    /// `collector record` has none).
    pub outbox_max_bytes: Option<u64>,
    /// The admission webhook guarding deletions (`None`: not served).
    pub admission: Option<AdmissionConfig>,
}

/// The long-running collector: outbox and Kafka.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Shared settings.
    pub collector: CollectorConfig,
    /// Where the outbox lives.
    pub state_dir: PathBuf,
    /// Kafka.
    pub kafka: KafkaConfig,
    /// How long SIGTERM waits for the outbox to drain.
    pub shutdown_timeout: Duration,
    /// Cleanup commands (off unless asked for).
    pub remediate: RemediateConfig,
}

/// `collector record`: events into a file.
#[derive(Debug, Clone)]
pub struct RecordConfig {
    /// Shared settings.
    pub collector: CollectorConfig,
    /// The Avro container file to write.
    pub out: PathBuf,
}

/// Why the collector could not run.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// No usable Kubernetes configuration.
    #[error("cannot configure the Kubernetes client: {0}")]
    KubeConfig(String),
    /// The API server does not serve the kinds to watch, or could not say.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// The credentials lack permissions the collector needs.
    #[error(transparent)]
    Access(#[from] AccessDenied),
    /// The outbox failed.
    #[error(transparent)]
    Outbox(#[from] OutboxError),
    /// The writer failed.
    #[error(transparent)]
    Writer(#[from] WriterError),
    /// Kafka failed.
    #[error(transparent)]
    Produce(#[from] ProduceError),
    /// A watcher stopped.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// The admission webhook could not start.
    #[error(transparent)]
    Admission(#[from] AdmissionError),
    /// Remediation was switched on and stopped.
    #[error("remediation stopped: {0}")]
    Remediate(String),
    /// A task of the collector itself failed (a bug).
    #[error("internal failure: {0}")]
    Internal(String),
    /// A local file or socket failed.
    #[error("{context}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A client for the configured API server.
pub async fn client(source: &KubeSource) -> Result<Client, AppError> {
    Client::try_from(kube_config(source).await?).map_err(|e| AppError::KubeConfig(e.to_string()))
}

/// A client for the watchers: without kube's built-in retry of 429/503/504 (up to 15
/// attempts over minutes, inside one request), so that a failing list or watch reaches
/// the watcher at once, which backs off itself and reports it on /readyz.
pub async fn watch_client(source: &KubeSource) -> Result<Client, AppError> {
    let mut config = kube_config(source).await?;
    config.default_retry = false;
    Client::try_from(config).map_err(|e| AppError::KubeConfig(e.to_string()))
}

async fn kube_config(source: &KubeSource) -> Result<Config, AppError> {
    Ok(match source {
        KubeSource::Kubeconfig(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| AppError::KubeConfig(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| AppError::KubeConfig(format!("{}: {e}", path.display())))?
        }
        KubeSource::Infer => Config::infer()
            .await
            .map_err(|e| AppError::KubeConfig(e.to_string()))?,
    })
}

/// How each supervised task ended.
type TaskResult = Result<(), AppError>;

/// The producer's task and the signal that tells it to drain and stop (sent once the
/// writer has stored its last event).
type RunningProducer = (
    tokio::task::JoinHandle<Result<(), ProduceError>>,
    watch::Sender<bool>,
);

struct Pipeline {
    /// Watchers and the remediator: they feed the writer.
    feeders: JoinSet<(&'static str, TaskResult)>,
    /// The writer thread, awaited from a blocking task; yields the number of events stored.
    writer: tokio::task::JoinHandle<Result<u64, AppError>>,
    /// The HTTP server, when one listens.
    http: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    stored: Arc<Notify>,
    stop: watch::Sender<bool>,
    metrics: Metrics,
    health: Health,
}

async fn start(
    config: &CollectorConfig,
    mut states: std::collections::HashMap<Stream, StreamState>,
    writer: WriterKind,
    remediate: Option<(RemediateConfig, PathBuf)>,
) -> Result<Pipeline, AppError> {
    let client = client(&config.kube).await?;
    let watch_client = watch_client(&config.kube).await?;
    let kinds = discovery::discover(&client, config.kinds.as_deref()).await?;
    let mode = remediate
        .as_ref()
        .map_or(RemediationMode::Off, |(r, _)| r.mode);
    let watched: Vec<Stream> = kinds.iter().map(|k| k.stream).collect();
    let metrics = Metrics::new(&watched);
    access::require(
        &client,
        &access::needed(&kinds, mode),
        mode != RemediationMode::Off,
        &metrics,
    )
    .await?;
    let names: Vec<String> = kinds.iter().map(|k| discovery::served_name(k)).collect();
    info!(kinds = %names.join(", "), "watching");
    metrics.outbox_limit(config.outbox_max_bytes);
    let health = Health::new(&watched, config.unready_after, config.outbox_max_bytes);
    let (stop, stop_rx) = watch::channel(false);
    let http = match config.listen {
        Some(addr) => {
            let (bound, task) =
                crate::http::serve(addr, metrics.clone(), health.clone(), stop_rx.clone())
                    .await
                    .map_err(|source| AppError::Io {
                        context: format!("cannot listen on {addr}"),
                        source,
                    })?;
            info!(%bound, "serving /metrics, /healthz, /readyz");
            health.task_started("http");
            Some(task)
        }
        None => None,
    };
    let mut writer: Box<dyn EventWriter> = match writer {
        WriterKind::Outbox(outbox) => Box::new(outbox.observed_by(health.clone(), metrics.clone())),
        WriterKind::File(file) => Box::new(file),
    };
    let mut admission_task = None;
    if let Some(admission) = &config.admission {
        // The guard's index lives in memory: the streams it reads are relisted at start
        // rather than resumed, so that it learns every live object (the relist is the
        // snapshot the analyzer already handles after a 410).
        for stream in Guarded::ALL.iter().flat_map(|g| g.streams_read()) {
            if let Some(state) = states.get_mut(&stream) {
                state.resume_from = None;
            }
        }
        let index: SharedIndex = Arc::new(std::sync::RwLock::new(
            crate::admission::guard::Index::new(&watched),
        ));
        writer = Box::new(IndexingWriter::new(writer, Arc::clone(&index)));
        metrics.admission_serving();
        let (bound, task) = crate::admission::serve(
            admission,
            config.stamp.cluster_id.clone(),
            index,
            health.clone(),
            metrics.clone(),
            stop_rx.clone(),
        )
        .await?;
        info!(%bound, mode = ?admission.mode, "serving admission reviews on /validate (HTTPS)");
        admission_task = Some(task);
    }
    let (tx, rx) = mpsc::channel(16_384);
    let stored = Arc::new(Notify::new());
    let writer = writer::spawn(writer, rx, Arc::clone(&stored));
    health.task_started("writer");
    let writer = tokio::task::spawn_blocking(move || match writer.join() {
        Ok(result) => result.map_err(AppError::Writer),
        Err(_) => Err(AppError::Internal("the writer thread panicked".into())),
    });
    let mut feeders = JoinSet::new();
    for kind in kinds {
        let watcher = Watcher::new(
            watch_client.clone(),
            kind,
            config.stamp.clone(),
            config.watch.clone(),
            states.remove(&kind.stream).unwrap_or_default(),
            WatchOutputs {
                events: tx.clone(),
                metrics: metrics.clone(),
                health: health.clone(),
            },
        );
        let stop_rx = stop_rx.clone();
        feeders.spawn(async move {
            (
                "watcher",
                watcher.run(stop_rx).await.map_err(AppError::from),
            )
        });
    }
    health.task_started("watcher");
    if let Some(task) = admission_task {
        health.task_started("admission");
        // Supervised with the feeders: a webhook that stops on its own stops the process.
        feeders.spawn(async move {
            let result = match task.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(source)) => Err(AppError::Io {
                    context: "the admission server failed".into(),
                    source,
                }),
                Err(e) => Err(AppError::Internal(format!("admission task failed: {e}"))),
            };
            ("admission", result)
        });
    }
    if let Some((remediate, db)) = remediate.filter(|(r, _)| r.mode != RemediationMode::Off) {
        let (client, stamp, tx, metrics, stop_rx) = (
            client.clone(),
            config.stamp.clone(),
            tx.clone(),
            metrics.clone(),
            stop_rx.clone(),
        );
        health.task_started("remediator");
        // The remediator sends its outcomes through the same writer, so it is one of the
        // feeders the writer outlives.
        feeders.spawn(async move {
            let result = run_remediator(client, remediate, stamp, &db, tx, metrics, stop_rx)
                .await
                .map_err(|e| AppError::Remediate(error_chain(&e)));
            ("remediator", result)
        });
    }
    drop(tx);
    Ok(Pipeline {
        feeders,
        writer,
        http,
        stored,
        stop,
        metrics,
        health,
    })
}

/// An error and its sources on one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Where the pipeline stores events.
enum WriterKind {
    Outbox(Outbox),
    File(FileWriter),
}

/// The outcome of one supervised task that ended before shutdown was asked for: every
/// such end is a failure, also an `Ok` (a task that should run until shutdown stopped).
fn unexpected(task: &str, result: TaskResult) -> AppError {
    match result {
        Err(e) => e,
        Ok(()) => AppError::Internal(format!("the {task} task ended on its own")),
    }
}

impl Pipeline {
    /// Runs until `shutdown` resolves or any supervised task (a watcher, the remediator,
    /// the writer, the producer, the HTTP server) ends; then stops the feeders, waits for
    /// the writer to store everything they sent, and lets the producer drain. A task that
    /// ended on its own makes the result an error (the process exits non-zero).
    async fn run(
        mut self,
        shutdown: impl Future<Output = ()>,
        producer: Option<RunningProducer>,
    ) -> Result<u64, AppError> {
        let (mut producer, producer_stop) = match producer {
            Some((task, stop)) => (Some(task), Some(stop)),
            None => (None, None),
        };
        let mut failure: Option<AppError> = None;
        let mut writer_result: Option<Result<u64, AppError>> = None;
        let mut http_done = false;
        tokio::select! {
            _ = shutdown => info!("shutting down"),
            Some(joined) = self.feeders.join_next() => {
                let (task, result) = joined.unwrap_or_else(|e| ("feeder", Err(AppError::Internal(format!("task failed: {e}")))));
                let e = unexpected(task, result);
                self.health.task_ended(task, e.to_string());
                failure = Some(e);
            }
            joined = &mut self.writer => {
                let result = joined.unwrap_or_else(|e| Err(AppError::Internal(format!("writer task failed: {e}"))));
                let e = match result {
                    Err(e) => e,
                    Ok(_) => AppError::Internal("the writer ended on its own".into()),
                };
                self.health.task_ended("writer", e.to_string());
                failure = Some(e);
                writer_result = Some(Ok(0));
            }
            joined = async { producer.as_mut().expect("guarded").await }, if producer.is_some() => {
                producer = None;
                let e = match joined {
                    Ok(Err(e)) => AppError::Produce(e),
                    Ok(Ok(())) => AppError::Internal("the producer ended on its own".into()),
                    Err(e) => AppError::Internal(format!("producer task failed: {e}")),
                };
                self.health.task_ended("producer", e.to_string());
                failure = Some(e);
            }
            joined = async { self.http.as_mut().expect("guarded").await }, if self.http.is_some() => {
                http_done = true;
                let e = match joined {
                    Ok(Err(source)) => AppError::Io { context: "the HTTP server failed".into(), source },
                    Ok(Ok(())) => AppError::Internal("the HTTP server ended on its own".into()),
                    Err(e) => AppError::Internal(format!("HTTP task failed: {e}")),
                };
                self.health.task_ended("http", e.to_string());
                failure = Some(e);
            }
        }
        if let Some(e) = &failure {
            error!(error = %error_chain(e), "a task of the collector stopped; shutting down");
        }
        let _ = self.stop.send(true);
        while let Some(joined) = self.feeders.join_next().await {
            match joined {
                Ok((task, Err(e))) => {
                    Failed::new(Failure::TaskStopped, &error_chain(&e))
                        .about(&task)
                        .emit(&self.metrics);
                    // A remediator that failed during shutdown is still a failure.
                    if failure.is_none() && matches!(e, AppError::Remediate(_)) {
                        failure = Some(e);
                    }
                }
                Ok((_, Ok(()))) => {}
                Err(e) => Failed::new(Failure::TaskStopped, &e).emit(&self.metrics),
            }
        }
        let stored = match writer_result {
            Some(_) => 0,
            None => match (&mut self.writer).await {
                Ok(Ok(n)) => n,
                Ok(Err(e)) => {
                    failure.get_or_insert(e);
                    0
                }
                Err(e) => {
                    failure.get_or_insert(AppError::Internal(format!("writer task failed: {e}")));
                    0
                }
            },
        };
        info!(events = stored, "all observed events stored");
        if let Some(stop) = producer_stop {
            let _ = stop.send(true);
        }
        if let Some(task) = producer {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    error!(error = %error_chain(&e), "producer failed");
                    failure.get_or_insert(AppError::Produce(e));
                }
                Err(e) => {
                    failure.get_or_insert(AppError::Internal(format!("producer task failed: {e}")));
                }
            }
        }
        if let (Some(task), false) = (self.http, http_done) {
            let _ = task.await;
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(stored),
        }
    }
}

/// The long-running collector: watch -> outbox -> Kafka, until `shutdown` resolves or a
/// task fails.
pub async fn run(config: RunConfig, shutdown: impl Future<Output = ()>) -> Result<(), AppError> {
    std::fs::create_dir_all(&config.state_dir).map_err(|source| AppError::Io {
        context: format!(
            "cannot create state directory {}",
            config.state_dir.display()
        ),
        source,
    })?;
    // A configuration librdkafka refuses fails here, before anything is watched.
    let producer = crate::ship::produce::producer(&config.kafka)?;
    let path = config.state_dir.join("outbox.db");
    let outbox = Outbox::open(&path, &config.collector.stamp.cluster_id)?;
    let states = outbox.load()?;
    let pipeline = start(
        &config.collector,
        states,
        WriterKind::Outbox(outbox),
        Some((config.remediate.clone(), path.clone())),
    )
    .await?;
    let (producer_stop, producer_stop_rx) = watch::channel(false);
    pipeline.health.task_started("producer");
    let producer = tokio::spawn(run_producer(ProducerTask {
        producer,
        outbox_path: path,
        config: config.kafka.clone(),
        metrics: pipeline.metrics.clone(),
        health: pipeline.health.clone(),
        stored: Arc::clone(&pipeline.stored),
        shutdown: producer_stop_rx,
        drain_timeout: config.shutdown_timeout,
        schemas: SchemaPublisher::new(config.kafka.schemas_topic.clone()),
    }));
    pipeline
        .run(shutdown, Some((producer, producer_stop)))
        .await
        .map(drop)
}

/// `collector record`: watch -> Avro file, until `shutdown` resolves. Returns the number
/// of events written.
pub async fn record(
    config: RecordConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<u64, AppError> {
    let writer = FileWriter::create(&config.out)?;
    let pipeline = start(
        &config.collector,
        Default::default(),
        WriterKind::File(writer),
        None,
    )
    .await?;
    pipeline.run(shutdown, None).await
}
