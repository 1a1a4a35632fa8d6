//! Wires the pipeline together: discovery of the kinds to watch -> one watcher per kind ->
//! one sink thread (SQLite outbox or Avro file) -> the Kafka producer, plus the health
//! endpoints; and shuts it down in order on SIGTERM: watchers stop, the sink stores what
//! they sent, the producer drains the outbox.

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
use tracing::{error, info, warn};

use crate::discovery::{self, DiscoveryError};
use crate::event::Stamp;
use crate::metrics::Metrics;
use crate::outbox::{Outbox, OutboxError};
use crate::produce::{ensure_topic, run_producer, KafkaConfig, ProduceError};
use crate::record::FileSink;
use crate::remediate::{run_remediator, RemediateConfig, RemediationMode};
use crate::sink::{self, EventSink, SinkError};
use crate::watch::{StreamState, WatchConfig, WatchError, Watcher};

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
    /// The outbox failed.
    #[error(transparent)]
    Outbox(#[from] OutboxError),
    /// The sink failed.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// Kafka failed.
    #[error(transparent)]
    Produce(#[from] ProduceError),
    /// A watcher stopped.
    #[error(transparent)]
    Watch(#[from] WatchError),
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
    let config = match source {
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
    };
    Client::try_from(config).map_err(|e| AppError::KubeConfig(e.to_string()))
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

struct Pipeline {
    watchers: JoinSet<Result<(), WatchError>>,
    sink: std::thread::JoinHandle<Result<u64, SinkError>>,
    stored: Arc<Notify>,
    stop: watch::Sender<bool>,
    metrics: Metrics,
}

async fn start(
    config: &CollectorConfig,
    mut states: std::collections::HashMap<Stream, StreamState>,
    sink: Box<dyn EventSink>,
    remediate: Option<(RemediateConfig, PathBuf)>,
) -> Result<Pipeline, AppError> {
    let client = client(&config.kube).await?;
    let kinds = discovery::discover(&client, config.kinds.as_deref()).await?;
    let watched: Vec<Stream> = kinds.iter().map(|k| k.stream).collect();
    let names: Vec<String> = kinds.iter().map(|k| discovery::served_name(k)).collect();
    info!(kinds = %names.join(", "), "watching");
    let metrics = Metrics::new(&watched);
    let (stop, stop_rx) = watch::channel(false);
    if let Some(addr) = config.listen {
        let bound = crate::http::serve(addr, metrics.clone(), stop_rx.clone())
            .await
            .map_err(|source| AppError::Io {
                context: format!("cannot listen on {addr}"),
                source,
            })?;
        info!(%bound, "serving /metrics, /healthz, /readyz");
    }
    let (tx, rx) = mpsc::channel(16_384);
    let stored = Arc::new(Notify::new());
    let sink = sink::spawn(sink, rx, Arc::clone(&stored));
    let mut watchers = JoinSet::new();
    for kind in kinds {
        let watcher = Watcher::new(
            client.clone(),
            kind,
            config.stamp.clone(),
            config.watch.clone(),
            states.remove(&kind.stream).unwrap_or_default(),
            tx.clone(),
            metrics.clone(),
        );
        watchers.spawn(watcher.run(stop_rx.clone()));
    }
    if let Some((remediate, db)) = remediate.filter(|(r, _)| r.mode != RemediationMode::Off) {
        let (client, stamp, tx, stop_rx) = (
            client.clone(),
            config.stamp.clone(),
            tx.clone(),
            stop_rx.clone(),
        );
        // The remediator sends its outcomes through the same sink; it is joined with the
        // watchers so that the sink outlives it.
        watchers.spawn(async move {
            if let Err(e) = run_remediator(client, remediate, stamp, &db, tx, stop_rx).await {
                error!(error = %e, "remediation stopped");
            }
            Ok(())
        });
    }
    Ok(Pipeline {
        watchers,
        sink,
        stored,
        stop,
        metrics,
    })
}

impl Pipeline {
    /// Runs until `shutdown` resolves or a watcher fails; then stops the watchers and
    /// waits for the sink to store everything they sent.
    async fn run_until(
        mut self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(u64, watch::Sender<bool>), AppError> {
        let mut failure = None;
        tokio::select! {
            _ = shutdown => info!("shutting down"),
            Some(result) = self.watchers.join_next() => {
                failure = Some(match result {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(AppError::Watch(e)),
                    Err(join) => Some(AppError::Internal(format!("watcher task failed: {join}"))),
                });
            }
        }
        let _ = self.stop.send(true);
        while let Some(result) = self.watchers.join_next().await {
            if let Ok(Err(e)) = result {
                warn!(error = %e, "watcher stopped with an error");
            }
        }
        let sink = self.sink;
        let stored = tokio::task::spawn_blocking(move || sink.join())
            .await
            .map_err(|e| AppError::Internal(format!("sink task failed: {e}")))?
            .map_err(|_| AppError::Internal("the sink thread panicked".into()))??;
        info!(events = stored, "all observed events stored");
        match failure.flatten() {
            Some(e) => Err(e),
            None => Ok((stored, self.stop)),
        }
    }
}

/// The long-running collector: watch -> outbox -> Kafka, until `shutdown` resolves.
pub async fn run(config: RunConfig, shutdown: impl Future<Output = ()>) -> Result<(), AppError> {
    std::fs::create_dir_all(&config.state_dir).map_err(|source| AppError::Io {
        context: format!(
            "cannot create state directory {}",
            config.state_dir.display()
        ),
        source,
    })?;
    let path = config.state_dir.join("outbox.db");
    let outbox = Outbox::open(&path, &config.collector.stamp.cluster_id)?;
    let states = outbox.load()?;
    if let Some(partitions) = config.kafka.create_topic_partitions {
        if let Err(e) = ensure_topic(&config.kafka, partitions).await {
            warn!(error = %e, "cannot create the topic now; events wait in the outbox");
        }
    }
    let pipeline = start(
        &config.collector,
        states,
        Box::new(outbox),
        Some((config.remediate.clone(), path.clone())),
    )
    .await?;
    let producer = tokio::spawn(run_producer(
        path,
        config.kafka.clone(),
        pipeline.metrics.clone(),
        Arc::clone(&pipeline.stored),
        pipeline.stop.subscribe(),
        config.shutdown_timeout,
    ));
    let result = pipeline.run_until(shutdown).await;
    match producer.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => error!(error = %e, "producer failed"),
        Err(e) => error!(error = %e, "producer task failed"),
    }
    result.map(drop)
}

/// `collector record`: watch -> Avro file, until `shutdown` resolves. Returns the number
/// of events written.
pub async fn record(
    config: RecordConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<u64, AppError> {
    let sink = FileSink::create(&config.out)?;
    let pipeline = start(&config.collector, Default::default(), Box::new(sink), None).await?;
    let (written, _stop) = pipeline.run_until(shutdown).await?;
    Ok(written)
}
