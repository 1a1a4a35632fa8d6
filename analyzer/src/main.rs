//! `analyzer`: finds IPAM leaks in kube-ovn event histories.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand, ValueEnum};
use ipaudit_analyzer::reorder::ReorderConfig;
use ipaudit_analyzer::replay::{replay, ReplayOptions};
use ipaudit_analyzer::report::{render_jsonl, render_text, skipped_text, Findings};
use ipaudit_analyzer::rules::RuleConfig;
use ipaudit_analyzer::AnalyzerConfig;
use ipaudit_schemas::kubernetes::parse_timestamp_ms;

/// Finds IP address leaks in kube-ovn clusters from their watch-event history.
#[derive(Debug, Parser)]
#[command(name = "analyzer", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay recorded events offline and report the leaks they show.
    ///
    /// Reads Avro container files written by `collector record` and kubectl watch output
    /// (`kubectl get ips -A --watch --output-watch-events -o json > ips.json`, one file
    /// per kind, run side by side); the format is detected. All files are merged by
    /// resourceVersion. Unusable input (broken documents, corrupt Avro blocks, events
    /// without a numeric resourceVersion) is skipped, counted and reported. Exit code: 0 no
    /// alert fired, 1 an alert fired, 2 usage error, unreadable input, no event readable at
    /// all, or (with --strict) any input skipped.
    Replay(ReplayArgs),
    /// Analyse live: a consumer group on the events topic, alerts to the configured sinks.
    ///
    /// The analysis and the consumed offsets are checkpointed in SQLite under --state-dir;
    /// a restart resumes there, and each alert firing and resolution reaches each sink once
    /// (at least once, with its transition id as Idempotency-Key).
    Run(Box<RunArgs>),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum StartFrom {
    /// The latest complete snapshot in the topic.
    Snapshot,
    /// The start of the topic.
    Beginning,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Kafka bootstrap servers.
    #[arg(long, env = "IPAUDIT_BROKERS", default_value = "localhost:9092")]
    brokers: String,
    /// Topic of watch events.
    #[arg(long, env = "IPAUDIT_TOPIC", default_value = "ipaudit.events")]
    topic: String,
    /// Consumer group.
    #[arg(long, env = "IPAUDIT_GROUP", default_value = "ipaudit-analyzer")]
    group: String,
    /// Extra librdkafka consumer setting, KEY=VALUE (repeatable).
    #[arg(long = "kafka-option", env = "IPAUDIT_KAFKA_OPTIONS", value_delimiter = ',', value_parser = key_value)]
    kafka_options: Vec<(String, String)>,
    /// Directory of the SQLite store (checkpoints, alert outbox); keep it on a persistent volume.
    #[arg(
        long,
        env = "IPAUDIT_STATE_DIR",
        default_value = "/var/lib/ipaudit-analyzer"
    )]
    state_dir: PathBuf,
    /// How often the analysis and offsets are checkpointed.
    #[arg(long, env = "IPAUDIT_CHECKPOINT_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    checkpoint_interval: Duration,
    /// POST every alert transition as JSON to this URL.
    #[arg(long, env = "IPAUDIT_WEBHOOK_URL")]
    webhook_url: Option<String>,
    /// Send `Authorization: Bearer TOKEN` to the webhook.
    #[arg(
        long,
        env = "IPAUDIT_WEBHOOK_BEARER_TOKEN",
        conflicts_with = "webhook_hmac_secret"
    )]
    webhook_bearer_token: Option<String>,
    /// Sign webhook bodies: `X-Ipaudit-Signature: sha256=<hex HMAC-SHA256 of the body>`.
    #[arg(long, env = "IPAUDIT_WEBHOOK_HMAC_SECRET")]
    webhook_hmac_secret: Option<String>,
    /// Send alerts to this Alertmanager (API v2), e.g. http://alertmanager:9093.
    #[arg(long, env = "IPAUDIT_ALERTMANAGER_URL")]
    alertmanager_url: Option<String>,
    /// Also publish alerts as Avro `Alert` records to this topic (e.g. ipaudit.alerts).
    #[arg(long, env = "IPAUDIT_ALERTS_TOPIC")]
    alerts_topic: Option<String>,
    /// Send a cleanup command (remove kube-ovn's finalizer) for every stuck IP to the
    /// commands topic; collectors act on it only with --remediate.
    #[arg(long, env = "IPAUDIT_CLEANUP_COMMANDS")]
    cleanup_commands: bool,
    /// Topic of cleanup commands.
    #[arg(
        long,
        env = "IPAUDIT_COMMANDS_TOPIC",
        default_value = "ipaudit.commands"
    )]
    commands_topic: String,
    /// Exit once every assigned partition is read to its end (a catch-up run), after a
    /// last checkpoint and after the sinks delivered what it found.
    #[arg(long)]
    exit_at_end: bool,
    /// Without local state, where to start reading: `snapshot` (the latest complete relist
    /// snapshot in the topic, found by scanning back from its end) or `beginning`.
    #[arg(
        long,
        env = "IPAUDIT_START_FROM",
        value_enum,
        default_value = "snapshot"
    )]
    start_from: StartFrom,
    /// Do not log alerts (they are logged by default).
    #[arg(long, env = "IPAUDIT_NO_LOG_ALERTS")]
    no_log_alerts: bool,
    /// How long a quiet stream may hold back the others in the reorder buffer.
    #[arg(long, default_value = "1s", value_parser = parse_duration, env = "IPAUDIT_IDLE_DELAY")]
    idle_delay: Duration,
    #[command(flatten)]
    rules: RuleArgs,
}

/// Grace periods of the rules, all on event time (the recording's or the events' clock,
/// never the analyzer's wall clock).
#[derive(Debug, Args)]
struct RuleArgs {
    /// How long a Subnet or pool (SpiderIPPool, IPPool) may be terminating before
    /// `subnet-stuck-terminating` fires.
    #[arg(long, default_value = "10m", value_parser = parse_duration, env = "IPAUDIT_SUBNET_GRACE")]
    subnet_grace: Duration,
    /// How long an allocation may outlive its pod before `ip-without-pod` fires, and a
    /// SpiderEndpoint stay terminating without its pod before `ip-stuck-terminating`.
    #[arg(long, default_value = "10m", value_parser = parse_duration, env = "IPAUDIT_OWNER_GRACE")]
    owner_grace: Duration,
    /// How long the two records of one allocation (whereabouts pool allocation and
    /// reservation; spiderpool pool entry and SpiderEndpoint) may disagree before
    /// `allocation-records-disagree` fires.
    #[arg(long, default_value = "5m", value_parser = parse_duration, env = "IPAUDIT_RECORDS_GRACE")]
    records_grace: Duration,
}

impl RuleArgs {
    fn config(&self) -> RuleConfig {
        RuleConfig {
            subnet_terminating_grace_ms: millis(self.subnet_grace),
            owner_grace_ms: millis(self.owner_grace),
            records_grace_ms: millis(self.records_grace),
        }
    }
}

fn key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    /// A report for an incident review.
    Text,
    /// One JSON object per alert.
    Jsonl,
}

#[derive(Debug, Args)]
struct ReplayArgs {
    /// Recorded files: Avro containers and/or kubectl watch JSON.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,

    /// Output format.
    #[arg(long, value_enum, default_value = "text", env = "IPAUDIT_FORMAT")]
    format: Format,

    /// Cluster id for recordings that carry none (kubectl output).
    #[arg(long, default_value = "replay", env = "IPAUDIT_CLUSTER_ID")]
    cluster_id: String,

    /// "Now" for grace periods at the end of the replay, RFC 3339
    /// (default: the latest time found in the recording).
    #[arg(long, value_name = "TIME", value_parser = parse_time, env = "IPAUDIT_NOW")]
    now: Option<i64>,

    /// How long a quiet stream may hold back the others in the reorder buffer.
    #[arg(long, default_value = "1s", value_parser = parse_duration, env = "IPAUDIT_IDLE_DELAY")]
    idle_delay: Duration,

    #[command(flatten)]
    rules: RuleArgs,

    /// Never show a progress bar (it only shows when stderr is a terminal).
    #[arg(long)]
    no_progress: bool,

    /// Exit 2 when any input had to be skipped (default: skip, report, and analyse the rest).
    #[arg(long, env = "IPAUDIT_STRICT")]
    strict: bool,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (examples: 500ms, 1s, 10m)"))
}

fn parse_time(text: &str) -> Result<i64, String> {
    parse_timestamp_ms(text)
        .ok_or_else(|| "expected an RFC 3339 time such as 2025-06-01T10:00:00Z".into())
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before anything decodes Avro: a corrupt length in a file may not allocate more.
    ipaudit_schemas::container::limit_allocations();
    // Replay prints a report: only warnings go to stderr. Live analysis logs its work.
    let default_level = match cli.command {
        Command::Replay(_) => "warn",
        Command::Run(_) => "info",
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .init();
    let result = match cli.command {
        Command::Replay(args) => run_replay(args),
        Command::Run(args) => run_live(*args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}

fn run_live(args: RunArgs) -> anyhow::Result<ExitCode> {
    use ipaudit_analyzer::sinks::{
        AlertSink, AlertmanagerSink, CommandSink, KafkaSink, LogSink, WebhookAuth, WebhookSink,
    };
    let mut sinks = Vec::new();
    if !args.no_log_alerts {
        sinks.push(AlertSink::Log(LogSink));
    }
    // An empty value (e.g. an unset variable in docker compose) means "not configured".
    if let Some(url) = args.webhook_url.filter(|u| !u.is_empty()) {
        let auth = match (args.webhook_bearer_token, args.webhook_hmac_secret) {
            (Some(token), _) => WebhookAuth::Bearer(token),
            (None, Some(secret)) => WebhookAuth::Hmac(secret),
            (None, None) => WebhookAuth::None,
        };
        sinks.push(AlertSink::Webhook(WebhookSink::new(url, auth)));
    }
    if let Some(url) = args.alertmanager_url.filter(|u| !u.is_empty()) {
        sinks.push(AlertSink::Alertmanager(AlertmanagerSink::new(&url)));
    }
    if let Some(topic) = args.alerts_topic.as_ref().filter(|t| !t.is_empty()) {
        let sink = KafkaSink::new(&args.brokers, topic, &args.kafka_options)
            .context("cannot create the alerts producer")?;
        sinks.push(AlertSink::Kafka(sink));
    }
    if args.cleanup_commands {
        let sink = CommandSink::new(&args.brokers, &args.commands_topic, &args.kafka_options)
            .context("cannot create the commands producer")?;
        sinks.push(AlertSink::Commands(sink));
    }
    let config = ipaudit_analyzer::live::LiveConfig {
        brokers: args.brokers,
        topic: args.topic,
        group_id: args.group,
        kafka_options: args.kafka_options,
        state_dir: args.state_dir,
        analyzer: AnalyzerConfig {
            reorder: ReorderConfig {
                idle_delay_ms: millis(args.idle_delay),
            },
            rules: args.rules.config(),
            ..AnalyzerConfig::default()
        },
        checkpoint_interval: args.checkpoint_interval,
        sinks,
        exit_at_end: args.exit_at_end,
        start_at_snapshot: matches!(args.start_from, StartFrom::Snapshot),
    };
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime
        .block_on(ipaudit_analyzer::live::run(config, shutdown_signal()))
        .context("live analysis failed")?;
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
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

fn run_replay(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let options = ReplayOptions {
        analyzer: AnalyzerConfig {
            default_cluster_id: args.cluster_id,
            reorder: ReorderConfig {
                idle_delay_ms: millis(args.idle_delay),
            },
            rules: args.rules.config(),
            ..AnalyzerConfig::default()
        },
        now_ms: args.now,
        progress: !args.no_progress,
    };
    let outcome = replay(&args.files, &options).context("replay failed")?;
    let findings = Findings::from_outputs(&outcome.outputs);
    match args.format {
        Format::Text => print!("{}", render_text(&findings, &outcome)),
        Format::Jsonl => {
            for problem in &outcome.problems {
                eprintln!("warning: {problem}");
            }
            print!("{}", render_jsonl(&findings, &outcome));
        }
    }
    if outcome.nothing_read() {
        eprintln!("error: no event could be read from the input");
        return Ok(ExitCode::from(2));
    }
    if args.strict && outcome.skipped > 0 {
        if let Some(text) = skipped_text(&outcome) {
            eprintln!("error: --strict: {text}");
        }
        return Ok(ExitCode::from(2));
    }
    Ok(if findings.alerts.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
