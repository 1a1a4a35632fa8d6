//! `analyzer`: finds IPAM leaks in kube-ovn event histories.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use ipaudit_analyzer::analysis::reorder::ReorderConfig;
use ipaudit_analyzer::cli::RuleArgs;
use ipaudit_analyzer::offline::replay::{replay, ReplayOptions};
use ipaudit_analyzer::offline::report::html::render_html;
use ipaudit_analyzer::offline::report::{render_text, skipped_text, write_jsonl};
use ipaudit_analyzer::present::Findings;
use ipaudit_analyzer::AnalyzerConfig;
use ipaudit_runtime::generate::{self, GenerateArgs};
use ipaudit_runtime::parse::{self, millis};
use ipaudit_runtime::secret;
use ipaudit_schemas::kubernetes::parse_timestamp_ms;

ipaudit_analyzer::global_allocator!();

/// Finds IP address leaks of the IPAMs ipaudit watches from their clusters' watch-event
/// history: live from Kafka, or offline from recordings (`about`: the crate's description).
#[derive(Debug, Parser)]
#[command(name = "analyzer", version, about, long_about = None)]
struct Cli {
    /// Log as JSON lines (with the current span's fields), for log collectors.
    #[arg(long, global = true, env = "IPAUDIT_LOG_JSON")]
    log_json: bool,
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
    /// What `analyzer run` set aside, and re-driving it after an upgrade.
    ///
    /// Two kinds are kept in the store under --state-dir: messages of the events topic
    /// the analyzer could not decode, and alert transitions a sink refused for good (a
    /// 4xx answer other than 408/429, a record too large).
    #[command(name = "dead-letters", subcommand)]
    DeadLetters(DeadLettersCommand),
    /// Shell completions, man pages and the flag reference of this program.
    Generate(GenerateArgs),
}

#[derive(Debug, Subcommand)]
enum DeadLettersCommand {
    /// List every dead letter (one line each).
    List(DeadLettersArgs),
    /// Re-drive dead letters: messages that decode with this build are published to
    /// their topic again (--republish); refused transitions are queued for their sink again
    /// (delivered by the running, or the next, `analyzer run`).
    Replay(DeadLettersArgs),
}

#[derive(Debug, Args)]
struct DeadLettersArgs {
    /// Directory of the analyzer's SQLite store.
    #[arg(
        long,
        env = "IPAUDIT_STATE_DIR",
        default_value = "/var/lib/ipaudit-analyzer"
    )]
    state_dir: PathBuf,
    /// Only this sink's transitions (its name as `list` shows it).
    #[arg(long)]
    sink: Option<String>,
    /// Publish messages that decode with this build to their topic again (replay), through
    /// the Kafka connection below; without it, messages stay set aside.
    #[arg(long)]
    republish: bool,
    /// With --republish: the compacted topic of the collectors' writer schemas, read for
    /// messages of a schema this build does not carry ("" reads none).
    #[arg(long, env = "IPAUDIT_SCHEMAS_TOPIC", default_value = ipaudit_schemas::writer_schemas::DEFAULT_TOPIC)]
    schemas_topic: String,
    #[command(flatten)]
    kafka: ipaudit_runtime::kafka::KafkaArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum StartFrom {
    /// A complete snapshot in the topic: the latest one at or before the group's committed
    /// offset, or the latest one when the group never consumed the partition.
    Snapshot,
    /// The start of the topic.
    Beginning,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    kafka: ipaudit_runtime::kafka::KafkaArgs,
    #[command(flatten)]
    topics: ipaudit_runtime::kafka::TopicCreationArgs,
    /// Topic of watch events.
    #[arg(long, env = "IPAUDIT_TOPIC", default_value = "ipaudit.events")]
    topic: String,
    /// Compacted topic of the collectors' writer schemas, read when an event names a schema
    /// this build does not carry (a newer collector's); "" reads none, and such events are
    /// kept as dead letters.
    #[arg(long, env = "IPAUDIT_SCHEMAS_TOPIC", default_value = ipaudit_schemas::writer_schemas::DEFAULT_TOPIC)]
    schemas_topic: String,
    /// Consumer group.
    #[arg(long, env = "IPAUDIT_GROUP", default_value = "ipaudit-analyzer")]
    group: String,
    /// Directory of the SQLite store (checkpoints, alert outbox); keep it on a persistent volume.
    #[arg(
        long,
        env = "IPAUDIT_STATE_DIR",
        default_value = "/var/lib/ipaudit-analyzer"
    )]
    state_dir: PathBuf,
    /// How often the analysis and offsets are checkpointed.
    #[arg(long, env = "IPAUDIT_CHECKPOINT_INTERVAL", default_value = "5s", value_parser = parse::duration)]
    checkpoint_interval: Duration,
    /// POST every alert transition as JSON to this URL (its value is never shown in
    /// --help: chat webhooks carry their token in the URL).
    #[arg(long, env = "IPAUDIT_WEBHOOK_URL", hide_env_values = true)]
    webhook_url: Option<String>,
    /// Send `Authorization: Bearer TOKEN` to the webhook (prefer --webhook-bearer-token-file).
    #[arg(
        long,
        env = "IPAUDIT_WEBHOOK_BEARER_TOKEN",
        hide_env_values = true,
        conflicts_with_all = ["webhook_bearer_token_file", "webhook_hmac_secret", "webhook_hmac_secret_file"]
    )]
    webhook_bearer_token: Option<String>,
    /// File holding the webhook's bearer token (one trailing newline is ignored).
    #[arg(
        long,
        env = "IPAUDIT_WEBHOOK_BEARER_TOKEN_FILE",
        conflicts_with_all = ["webhook_hmac_secret", "webhook_hmac_secret_file"]
    )]
    webhook_bearer_token_file: Option<PathBuf>,
    /// Sign webhook requests: `X-Ipaudit-Timestamp: <unix seconds>` and
    /// `X-Ipaudit-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">` (prefer
    /// --webhook-hmac-secret-file).
    #[arg(
        long,
        env = "IPAUDIT_WEBHOOK_HMAC_SECRET",
        hide_env_values = true,
        conflicts_with = "webhook_hmac_secret_file"
    )]
    webhook_hmac_secret: Option<String>,
    /// File holding the webhook HMAC secret (one trailing newline is ignored).
    #[arg(long, env = "IPAUDIT_WEBHOOK_HMAC_SECRET_FILE")]
    webhook_hmac_secret_file: Option<PathBuf>,
    /// PEM file of CA certificates the webhook and Alertmanager are trusted by, beside
    /// the bundled roots (a private CA).
    #[arg(long = "ca-file", env = "IPAUDIT_CA_FILE")]
    http_ca_file: Option<PathBuf>,
    /// Timeout of one webhook or Alertmanager request.
    #[arg(long, env = "IPAUDIT_HTTP_TIMEOUT", default_value = "10s", value_parser = parse::duration)]
    http_timeout: Duration,
    /// A sink seen for the first time (new, or its URL changed) gets every stored
    /// transition; by default it starts with what happens after it was added.
    #[arg(long, env = "IPAUDIT_SINK_FROM_BEGINNING")]
    sink_from_beginning: bool,
    /// Send alerts to this Alertmanager (API v2), e.g. http://alertmanager:9093 (its value
    /// is never shown in --help: it may carry credentials).
    #[arg(long, env = "IPAUDIT_ALERTMANAGER_URL", hide_env_values = true)]
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
    /// File holding the key that signs cleanup commands (HMAC-SHA256; at least 16 bytes,
    /// e.g. `openssl rand -hex 32`; surrounding whitespace ignored). Collectors given the
    /// same key refuse unsigned and wrongly signed commands. Default: commands unsigned.
    #[arg(long, env = "IPAUDIT_COMMANDS_KEY_FILE")]
    commands_key_file: Option<PathBuf>,
    /// The commands key itself (prefer --commands-key-file: a flag shows in `ps`).
    #[arg(
        long,
        env = "IPAUDIT_COMMANDS_KEY",
        hide_env_values = true,
        conflicts_with = "commands_key_file"
    )]
    commands_key: Option<String>,
    /// Exit once every assigned partition is read to its end (a catch-up run), after a
    /// last checkpoint and after the sinks delivered what it found.
    #[arg(long)]
    exit_at_end: bool,
    /// Without local state, where to start reading: `snapshot` (a complete relist snapshot
    /// in the topic, found by scanning back from the group's committed offset, or from the
    /// end when the group never consumed the partition) or `beginning`.
    #[arg(
        long,
        env = "IPAUDIT_START_FROM",
        value_enum,
        default_value = "snapshot"
    )]
    start_from: StartFrom,
    /// Compacted topic through which the owner of a partition hands its analysis to the
    /// member that takes the partition over (after a rebalance or the owner's death), so
    /// that it resumes exactly there instead of rebuilding from a snapshot; give it the
    /// events topic's partition count. Default: the events topic's name and
    /// `.checkpoints`; "" hands nothing over.
    #[arg(long, env = "IPAUDIT_CHECKPOINTS_TOPIC")]
    checkpoints_topic: Option<String>,
    /// How often each owned partition's handover is written to the checkpoints topic (only
    /// when its analysis moved; also when a partition is revoked and at shutdown); at least
    /// ten times what the last write took, so that writes take at most a tenth of the time.
    #[arg(long, env = "IPAUDIT_HANDOVER_INTERVAL", default_value = "10s", value_parser = parse::duration)]
    handover_interval: Duration,
    /// This instance's static group membership id (`group.instance.id`): a restarted
    /// instance gets its partitions back at once. Default: the host name (a StatefulSet's
    /// pod name); an empty value means dynamic membership.
    #[arg(long, env = "IPAUDIT_INSTANCE_ID")]
    instance_id: Option<String>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    #[arg(long, env = "IPAUDIT_LISTEN", default_value = "0.0.0.0:9090")]
    listen: std::net::SocketAddr,
    /// Serve the incident pages (`/`, `/incidents/<alert id>`) and their JSON API
    /// (`/api/v1/incidents`) here. Loopback by default: the pages name objects and
    /// addresses; expose them on purpose (0.0.0.0 behind a NetworkPolicy or an ingress).
    /// "" serves none.
    #[arg(long, env = "IPAUDIT_UI_LISTEN", default_value = "127.0.0.1:9091")]
    ui_listen: String,
    /// The path prefix the pages live under, when an ingress routes them by path (e.g.
    /// /ipaudit); every link the pages make starts with it.
    #[arg(long, env = "IPAUDIT_UI_BASE_PATH", default_value = "")]
    ui_base_path: String,
    /// The pages' external address, with its path prefix (e.g.
    /// https://ops.example.com/ipaudit): every delivered alert links to its incident page
    /// there (Alertmanager generatorURL and annotation `incident_url`, webhook `url`, log
    /// line `url`). Default: alerts carry no link.
    #[arg(long, env = "IPAUDIT_UI_URL")]
    ui_url: Option<String>,
    /// File holding a token the JSON API asks for (`Authorization: Bearer <token>`);
    /// default: the API is open to whoever reaches --ui-listen, like the pages.
    #[arg(long, env = "IPAUDIT_UI_API_TOKEN_FILE")]
    ui_api_token_file: Option<PathBuf>,
    /// The other analyzers' pages (comma-separated addresses with their path prefix, e.g.
    /// http://ipaudit-analyzer-1.ipaudit-analyzer:9091): an incident this one does not
    /// hold (recorded by another member, before a takeover) is read from them.
    #[arg(long, env = "IPAUDIT_UI_PEERS", value_delimiter = ',')]
    ui_peers: Vec<String>,
    /// How long a resolved incident stays on the pages (firing ones stay while they fire).
    #[arg(long, env = "IPAUDIT_INCIDENT_RETENTION", default_value = "14d", value_parser = parse::duration)]
    incident_retention: Duration,
    /// Do not log alerts (they are logged by default).
    #[arg(long, env = "IPAUDIT_NO_LOG_ALERTS")]
    no_log_alerts: bool,
    /// How long a quiet stream may hold back the others in the reorder buffer.
    #[arg(long, default_value = "1s", value_parser = parse::duration, env = "IPAUDIT_IDLE_DELAY")]
    idle_delay: Duration,
    #[command(flatten)]
    rules: RuleArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    /// A report for an incident review.
    Text,
    /// One JSON object per alert.
    Jsonl,
    /// One self-contained HTML page: an index of incidents and a timeline picture of each.
    Html,
}

#[derive(Debug, Args)]
struct ReplayArgs {
    /// Recorded files: Avro containers, kubectl watch JSON and/or API server audit logs
    /// (JSON lines, plain or .gz; alone they give the events, beside recordings the actors).
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
    #[arg(long, default_value = "1s", value_parser = parse::duration, env = "IPAUDIT_IDLE_DELAY")]
    idle_delay: Duration,

    #[command(flatten)]
    rules: RuleArgs,

    /// Never show a progress bar (it only shows when stderr is a terminal).
    #[arg(long)]
    no_progress: bool,

    /// Exit 2 when any input had to be skipped (default: skip, report, and analyse the rest).
    #[arg(long, env = "IPAUDIT_STRICT")]
    strict: bool,

    /// A running analyzer's incident pages (its --ui-url): each alert of the text and JSON
    /// reports names its page there (the replayed cluster must be the one it analyses).
    #[arg(long, env = "IPAUDIT_UI_URL")]
    ui_url: Option<String>,
}

fn parse_time(text: &str) -> Result<i64, String> {
    parse_timestamp_ms(text)
        .ok_or_else(|| "expected an RFC 3339 time such as 2025-06-01T10:00:00Z".into())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Generate(args) = &cli.command {
        return generate::main(args, Cli::command());
    }
    // Before anything decodes Avro: a corrupt length in a file may not allocate more.
    ipaudit_schemas::container::limit_allocations();
    // Replay prints a report: only warnings go to stderr. Live analysis logs its work.
    let default_level = match cli.command {
        Command::Replay(_) => "warn",
        Command::Run(_) | Command::DeadLetters(_) | Command::Generate(_) => "info",
    };
    ipaudit_runtime::telemetry::init(
        ipaudit_runtime::telemetry::LogFormat::json_if(cli.log_json),
        ipaudit_runtime::telemetry::LogFilter::FromEnv {
            default: default_level,
        },
    );
    let result = match cli.command {
        Command::Replay(args) => run_replay(args),
        Command::Run(args) => run_live(*args),
        Command::DeadLetters(command) => run_dead_letters(command),
        Command::Generate(_) => unreachable!("generate returned before telemetry started"),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// How long the start-up check waits for a broker before going on without one.
const KAFKA_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The Kafka options checked and the connection probed: a TLS or authentication failure
/// stops the analyzer with that error; an unreachable broker is an outage the consumer
/// waits out.
fn kafka_connection(
    args: &ipaudit_runtime::kafka::KafkaArgs,
) -> Result<ipaudit_runtime::kafka::Connection, ipaudit_runtime::kafka::StartError> {
    args.probed_connection(KAFKA_PROBE_TIMEOUT, "waiting for it")
}

fn run_live(args: RunArgs) -> anyhow::Result<ExitCode> {
    use ipaudit_analyzer::live::sinks::{
        AlertSink, AlertmanagerSink, CommandSink, HttpOptions, KafkaSink, LogSink, WebhookAuth,
        WebhookSink,
    };
    let http = HttpOptions {
        timeout: args.http_timeout,
        ca_file: args.http_ca_file.clone(),
    };
    let mut sinks = Vec::new();
    if !args.no_log_alerts {
        sinks.push(AlertSink::Log(LogSink));
    }
    // An empty value (e.g. an unset variable in docker compose) means "not configured".
    let bearer = secret::named(
        args.webhook_bearer_token,
        args.webhook_bearer_token_file.as_deref(),
        "webhook bearer token",
    )?;
    let hmac = secret::named(
        args.webhook_hmac_secret,
        args.webhook_hmac_secret_file.as_deref(),
        "webhook HMAC secret",
    )?;
    let commands_key = if args.cleanup_commands {
        secret::named(
            args.commands_key,
            args.commands_key_file.as_deref(),
            "commands key",
        )?
        .map(|text| ipaudit_schemas::CommandKey::from_secret(&text))
        .transpose()
        .context("unusable commands key")?
    } else {
        None
    };
    let ui = if args.ui_listen.is_empty() {
        None
    } else {
        Some(ipaudit_analyzer::live::ui::UiConfig {
            listen: args.ui_listen.parse().with_context(|| {
                format!("--ui-listen {:?} is not an address:port", args.ui_listen)
            })?,
            base_path: ipaudit_analyzer::live::ui::normalise_base_path(&args.ui_base_path),
            api_token: secret::named(None, args.ui_api_token_file.as_deref(), "UI API token")?,
            peers: args
                .ui_peers
                .into_iter()
                .filter(|p| !p.is_empty())
                .collect(),
            member: args
                .instance_id
                .clone()
                .filter(|id| !id.is_empty())
                .or_else(ipaudit_analyzer::live::group::default_instance_id)
                .unwrap_or_default(),
        })
    };
    let ui_url = args.ui_url.filter(|u| !u.is_empty());
    if let Some(url) = &ui_url {
        reqwest::Url::parse(url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .with_context(|| format!("--ui-url {url:?} is not an absolute http(s) URL"))?;
    }
    // Everything local is checked before the broker probe, which may wait for Kafka.
    let connection = kafka_connection(&args.kafka)?;
    if let Some(url) = args.webhook_url.filter(|u| !u.is_empty()) {
        let auth = match (bearer, hmac) {
            (Some(token), _) => WebhookAuth::Bearer(token),
            (None, Some(secret)) => WebhookAuth::Hmac(secret),
            (None, None) => WebhookAuth::None,
        };
        let sink = WebhookSink::new(url, auth, &http).context("cannot set up the webhook sink")?;
        sinks.push(AlertSink::Webhook(sink));
    }
    if let Some(url) = args.alertmanager_url.filter(|u| !u.is_empty()) {
        let sink =
            AlertmanagerSink::new(&url, &http).context("cannot set up the Alertmanager sink")?;
        sinks.push(AlertSink::Alertmanager(sink));
    }
    if let Some(topic) = args.alerts_topic.as_ref().filter(|t| !t.is_empty()) {
        let sink =
            KafkaSink::new(&connection, topic).context("cannot create the alerts producer")?;
        sinks.push(AlertSink::Kafka(sink));
    }
    if args.cleanup_commands {
        if commands_key.is_none() {
            tracing::warn!("cleanup commands are sent unsigned: collectors with a commands key refuse them (--commands-key-file)");
        }
        let sink = CommandSink::new(&connection, &args.commands_topic, commands_key)
            .context("cannot create the commands producer")?;
        sinks.push(AlertSink::Commands(sink));
    }
    let checkpoints_topic = match args.checkpoints_topic {
        Some(topic) if topic.is_empty() => None,
        Some(topic) => Some(topic),
        None => Some(format!("{}.checkpoints", args.topic)),
    };
    let output_topics = ipaudit_analyzer::live::output_topics::OutputTopics::of(
        args.alerts_topic.as_deref().filter(|t| !t.is_empty()),
        args.cleanup_commands
            .then_some(args.commands_topic.as_str()),
        checkpoints_topic.as_deref(),
        args.topics.creation(),
    );
    let config = ipaudit_analyzer::live::consume::LiveConfig {
        output_topics,
        connection,
        topic: args.topic,
        schemas_topic: Some(args.schemas_topic).filter(|t| !t.is_empty()),
        group_id: args.group,
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
        handover_topic: checkpoints_topic,
        handover_interval: args.handover_interval,
        start_at_snapshot: matches!(args.start_from, StartFrom::Snapshot),
        instance_id: args
            .instance_id
            .or_else(ipaudit_analyzer::live::group::default_instance_id),
        listen: Some(args.listen),
        sink_from_beginning: args.sink_from_beginning,
        metrics: ipaudit_analyzer::live::metrics::Metrics::new(),
        ui,
        incident_retention: args.incident_retention,
        ui_url,
    };
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime
        .block_on(async {
            // Inside the runtime, so that SIGTERM is handled from here on.
            let stop = ipaudit_runtime::shutdown::signal();
            ipaudit_analyzer::live::consume::run(config, stop).await
        })
        .context("live analysis failed")?;
    Ok(ExitCode::SUCCESS)
}

fn run_dead_letters(command: DeadLettersCommand) -> anyhow::Result<ExitCode> {
    use ipaudit_analyzer::live::deadletters;
    let (replay, args) = match command {
        DeadLettersCommand::List(args) => (false, args),
        DeadLettersCommand::Replay(args) => (true, args),
    };
    let path = args.state_dir.join("analyzer.db");
    anyhow::ensure!(path.is_file(), "no analyzer store at {}", path.display());
    if replay {
        let republish = if args.republish {
            Some(deadletters::Republish {
                connection: kafka_connection(&args.kafka)?,
                schemas_topic: Some(args.schemas_topic.clone()).filter(|t| !t.is_empty()),
            })
        } else {
            None
        };
        let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
        let done = runtime
            .block_on(deadletters::replay(
                &path,
                republish.as_ref(),
                args.sink.as_deref(),
            ))
            .context("re-drive failed")?;
        println!(
            "republished {} message(s), {} still undecodable, requeued {} transition(s)",
            done.republished, done.still_undecodable, done.requeued
        );
    } else {
        let listed = deadletters::list(&path, args.sink.as_deref()).context("cannot list")?;
        for m in &listed.messages {
            println!(
                "message\t{}/{}@{}\t{} bytes\t{}",
                m.topic, m.partition, m.offset, m.bytes, m.error
            );
        }
        for t in &listed.transitions {
            println!(
                "transition\t{}\t{}\tseq {}\t{}",
                t.sink, t.transition_id, t.seq, t.error
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the report to stdout. A reader that closed the pipe early (`| head`) has all it
/// wants: that is not an error, and the exit status still says whether leaks were found.
fn emit(report: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    emit_with(|stdout| stdout.write_all(report.as_bytes()))
}

/// [`emit`] for a report written piece by piece (through a buffer: stdout's own is a line).
fn emit_with(
    write: impl FnOnce(&mut std::io::BufWriter<std::io::StdoutLock<'static>>) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    match write(&mut stdout).and_then(|()| stdout.flush()) {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(error).context("cannot write the report to stdout")
        }
        _ => Ok(()),
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
    let mut outcome = replay(&args.files, &options).context("replay failed")?;
    // The process exits next: freeing the whole state object by object would only cost time.
    std::mem::forget(outcome.analyzer.take());
    let mut findings = Findings::take(std::mem::take(&mut outcome.outputs));
    if let Some(url) = args.ui_url.as_deref().filter(|u| !u.is_empty()) {
        findings.link_pages(url);
    }
    match args.format {
        Format::Text => emit(&render_text(&findings, &outcome))?,
        Format::Jsonl => {
            for problem in &outcome.problems {
                eprintln!("warning: {problem}");
            }
            emit_with(|stdout| write_jsonl(stdout, &findings, &outcome))?;
        }
        Format::Html => {
            for problem in &outcome.problems {
                eprintln!("warning: {problem}");
            }
            emit(&render_html(&findings, &outcome))?;
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
