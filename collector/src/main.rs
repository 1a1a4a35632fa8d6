//! `collector`: records every watch event of Pods and the IPAM kinds the API server serves.

// jemalloc for the whole process (librdkafka and SQLite included): glibc's malloc and free
// were about a tenth of an outbox drain's samples, and the drain runs about 10 % faster
// without them (BENCHMARKS.md, "Collector outbox backlog drain").
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, CommandFactory, Parser, Subcommand};
use ipaudit_collector::admission::guard::GuardMode;
use ipaudit_collector::admission::AdmissionConfig;
use ipaudit_collector::app::{self, CollectorConfig, KubeSource, RecordConfig, RunConfig};
use ipaudit_collector::remediate::{RemediateConfig, RemediationMode};
use ipaudit_collector::ship::outbox::Outbox;
use ipaudit_collector::ship::produce::KafkaConfig;
use ipaudit_collector::watch::event::Stamp;
use ipaudit_collector::watch::WatchConfig;
use ipaudit_runtime::generate::{self, GenerateArgs};
use ipaudit_runtime::kafka::Connection;
use ipaudit_runtime::parse;
use ipaudit_runtime::telemetry::{self, LogFilter, LogFormat};
use ipaudit_schemas::{kinds, Stream, KINDS};

/// Records every watch event of Pods and of the IPAM kinds the API server serves
/// (kube-ovn, whereabouts, spiderpool, Calico, Cilium), for ipaudit's analyzer.
#[derive(Debug, Parser)]
#[command(name = "collector", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log as JSON lines.
    #[arg(long, global = true, env = "IPAUDIT_LOG_JSON")]
    log_json: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Watch and ship every event to Kafka through a SQLite outbox (the in-cluster mode).
    Run(Box<RunArgs>),
    /// Watch and write every event to an Avro container file (for `analyzer replay`).
    /// Stops on SIGINT/SIGTERM or after --duration.
    Record(Box<RecordArgs>),
    /// Inspect and repair the outbox of a state directory (works while `run` runs).
    Outbox(OutboxArgs),
    /// Shell completions, man pages and the flag reference of this program.
    Generate(GenerateArgs),
}

#[derive(Debug, Args)]
struct OutboxArgs {
    /// The state directory of `collector run` (holds outbox.db).
    #[arg(long, env = "IPAUDIT_STATE_DIR", default_value = "/var/lib/ipaudit")]
    state_dir: PathBuf,
    #[command(subcommand)]
    command: OutboxCommand,
}

#[derive(Debug, Subcommand)]
enum OutboxCommand {
    /// Rows Kafka refused for good (too large, invalid), kept aside so the rest flows on.
    #[command(subcommand)]
    Quarantine(QuarantineCommand),
}

#[derive(Debug, Subcommand)]
enum QuarantineCommand {
    /// One line per quarantined row: id, when, reason, stream, object, resourceVersion,
    /// size, error.
    List,
    /// Move quarantined rows back to the end of the outbox (after raising the limit that
    /// refused them, e.g. the topic's max.message.bytes).
    Resend {
        /// Ids from `list`.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        ids: Vec<i64>,
        /// Every quarantined row.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Debug, Args)]
struct WatchArgs {
    /// kubeconfig file; without it: in-cluster service account, then $KUBECONFIG, then ~/.kube/config.
    #[arg(long, env = "IPAUDIT_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Id of the watched cluster; the Kafka message key.
    #[arg(long, env = "IPAUDIT_CLUSTER_ID")]
    cluster_id: String,
    /// Id of this collector (default: the host name, i.e. the pod name in a cluster).
    #[arg(long, env = "IPAUDIT_COLLECTOR_ID")]
    collector_id: Option<String>,
    /// Also write a complete snapshot of every stream this often, so that a new analyzer can
    /// rebuild from the latest one (e.g. 1h). Taken beside the running watch, at the version
    /// it has reached: no watch event is lost to it. Default: only on start and on 410 Gone.
    #[arg(long, env = "IPAUDIT_SNAPSHOT_INTERVAL", value_parser = parse::duration)]
    snapshot_interval: Option<Duration>,
    /// Attach every object's JSON to its event (malformed objects always carry it).
    #[arg(long, env = "IPAUDIT_RAW_OBJECTS")]
    raw_objects: bool,
    /// Server-side timeout of each watch request.
    #[arg(long, env = "IPAUDIT_WATCH_TIMEOUT", default_value = "290s", value_parser = parse::duration)]
    watch_timeout: Duration,
    /// An event larger than this (encoded) is recorded without its raw JSON, with a
    /// warning naming the object; keep it below the topic's message.max.bytes (1000000
    /// by default). Accepts B, KiB, MiB, GiB, KB, MB, GB.
    #[arg(long, env = "IPAUDIT_MAX_EVENT_BYTES", default_value = "900KiB", value_parser = parse::byte_size)]
    max_event_bytes: u64,
    /// /readyz answers 503 while a watch has failed, or rows have waited with nothing
    /// delivered to Kafka, for longer than this.
    #[arg(long, env = "IPAUDIT_UNREADY_AFTER", default_value = "60s", value_parser = parse::duration)]
    unready_after: Duration,
    #[arg(
        long,
        env = "IPAUDIT_KINDS",
        value_delimiter = ',',
        value_parser = kind_name,
        help = "Watch only these kinds, comma-separated (Pods are always watched) [default: every kind the API server serves]",
        long_help = kinds_long_help()
    )]
    kinds: Vec<KindArg>,
    #[command(flatten)]
    admission: AdmissionArgs,
}

/// The validating admission webhook that guards the deletion of Subnets and pools.
#[derive(Debug, Args)]
struct AdmissionArgs {
    /// Serve the validating admission webhook (HTTPS, POST /validate) on this address,
    /// e.g. 0.0.0.0:8443; see the Helm chart's collector.admissionGuard. Default: not served.
    #[arg(long, env = "IPAUDIT_ADMISSION_LISTEN")]
    admission_listen: Option<SocketAddr>,
    /// PEM certificate chain of the webhook (re-read when the file changes).
    #[arg(
        long,
        env = "IPAUDIT_ADMISSION_CERT",
        default_value = "/etc/ipaudit/admission/tls.crt"
    )]
    admission_cert: PathBuf,
    /// PEM private key of the webhook.
    #[arg(
        long,
        env = "IPAUDIT_ADMISSION_KEY",
        default_value = "/etc/ipaudit/admission/tls.key"
    )]
    admission_key: PathBuf,
    /// What the webhook does with the DELETE of a Subnet, IPPool or SpiderIPPool that live
    /// IPs or allocations still name: warn (allow, with warnings naming them) or deny.
    /// Either way it allows while its view is not synced.
    #[arg(long, env = "IPAUDIT_GUARD", value_enum, default_value = "warn")]
    guard: Guard,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Guard {
    /// Allow, with warnings naming what still holds addresses.
    Warn,
    /// Refuse, naming what still holds addresses.
    Deny,
}

/// One entry of `--kinds`; blank entries (`IPAUDIT_KINDS=""`, a trailing comma) name nothing.
#[derive(Debug, Clone, Copy)]
struct KindArg(Option<Stream>);

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    watch: WatchArgs,
    #[command(flatten)]
    kafka: ipaudit_runtime::kafka::KafkaArgs,
    /// Topic for watch events.
    #[arg(long, env = "IPAUDIT_TOPIC", default_value = "ipaudit.events")]
    topic: String,
    /// Compacted topic each writer schema is published to before the first event written
    /// with it, so that analyzers older than this collector can read its events; "" when
    /// every analyzer is as new as the collector.
    #[arg(long, env = "IPAUDIT_SCHEMAS_TOPIC", default_value = ipaudit_schemas::writer_schemas::DEFAULT_TOPIC)]
    schemas_topic: String,
    #[command(flatten)]
    topics: ipaudit_runtime::kafka::TopicCreationArgs,
    /// Bound of the outbox (payload bytes): when Kafka is away this long, the watches
    /// pause, and resume (from where they stopped, or with a relist) once the producer
    /// has freed a tenth of it. The bound is soft: events already observed are stored.
    #[arg(long, env = "IPAUDIT_OUTBOX_MAX_BYTES", default_value = "1GiB", value_parser = parse::byte_size)]
    outbox_max_bytes: u64,
    /// Directory for the SQLite outbox and resume state (keep it on a persistent volume).
    #[arg(long, env = "IPAUDIT_STATE_DIR", default_value = "/var/lib/ipaudit")]
    state_dir: PathBuf,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "IPAUDIT_LISTEN", default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Execute cleanup commands for this cluster: off (default), dry-run (check and record
    /// only) or on (remove the finalizer of a stuck kube-ovn IP or SpiderEndpoint, remove a
    /// whereabouts allocation or reservation of a gone pod; needs
    /// the Helm chart's remediation ClusterRole, collector.remediation: on).
    #[arg(long, env = "IPAUDIT_REMEDIATE", value_enum, default_value = "off")]
    remediate: Remediate,
    /// Topic of cleanup commands.
    #[arg(
        long,
        env = "IPAUDIT_COMMANDS_TOPIC",
        default_value = "ipaudit.commands"
    )]
    commands_topic: String,
    /// Consumer group for commands (default: ipaudit-remediator-CLUSTER_ID, the cluster id
    /// after the prefix).
    #[arg(long, env = "IPAUDIT_REMEDIATE_GROUP")]
    remediate_group: Option<String>,
    /// At most this many finalizers removed per minute.
    #[arg(long, env = "IPAUDIT_REMEDIATE_MAX_PER_MINUTE", default_value_t = 10)]
    remediate_max_per_minute: usize,
    /// Refuse commands whose alert fired longer ago than this (a replay of old commands,
    /// e.g. by a new consumer group, changes nothing).
    #[arg(long, env = "IPAUDIT_REMEDIATE_MAX_AGE", default_value = "10m", value_parser = parse::duration)]
    remediate_max_age: Duration,
    /// Try a command that FAILED (the API server did not answer as expected) at most this
    /// many times in all, with exponential backoff.
    #[arg(long, env = "IPAUDIT_REMEDIATE_MAX_ATTEMPTS", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    remediate_max_attempts: u32,
    /// Wait before the first retry of a FAILED command; doubles with each retry (at most 5m).
    #[arg(long, env = "IPAUDIT_REMEDIATE_RETRY_BACKOFF", default_value = "5s", value_parser = parse::duration)]
    remediate_retry_backoff: Duration,
    /// File holding the key that signs cleanup commands (HMAC-SHA256, the analyzer's
    /// --commands-key-file; at least 16 bytes; surrounding whitespace ignored). With a key,
    /// unsigned and wrongly signed commands are refused. Default: no key, every command for
    /// this cluster is considered (a warning says so).
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
    /// How long SIGTERM waits for the outbox to drain into Kafka.
    #[arg(long, env = "IPAUDIT_SHUTDOWN_TIMEOUT", default_value = "20s", value_parser = parse::duration)]
    shutdown_timeout: Duration,
}

#[derive(Debug, Args)]
struct RecordArgs {
    #[command(flatten)]
    watch: WatchArgs,
    /// The Avro container file to write (replaced if it exists).
    #[arg(long)]
    out: PathBuf,
    /// Stop after this long (e.g. 10m); default: until SIGINT/SIGTERM.
    #[arg(long, value_parser = parse::duration)]
    duration: Option<Duration>,
    /// Address of /metrics, /healthz and /readyz (default: not served).
    #[arg(long, env = "IPAUDIT_LISTEN")]
    listen: Option<SocketAddr>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Remediate {
    /// Do not read commands.
    Off,
    /// Check and record what would be done; change nothing.
    DryRun,
    /// Act.
    On,
}

/// A kind of the table as `--kinds` names it: plural, plural.group, kind or label.
fn kind_name(text: &str) -> Result<KindArg, String> {
    if text.trim().is_empty() {
        return Ok(KindArg(None));
    }
    kinds::named(text)
        .map(|k| KindArg(Some(k.stream)))
        .ok_or_else(|| {
            let valid: Vec<String> = KINDS.iter().map(|k| k.resource()).collect();
            format!(
                "unknown kind {text:?}; valid: {} (or a kind's plural, Kind or label)",
                valid.join(", ")
            )
        })
}

/// `--kinds --help`, written from the table so that it lists exactly the kinds known.
fn kinds_long_help() -> String {
    let mut help = String::from(
        "Watch only these kinds, comma-separated. Pods are always watched (every IPAM's \
         rules read them). Default: every kind below that the API server serves, found by \
         discovery at start; at least one IPAM kind must be served. A kind named here that \
         the API server does not serve is an error naming its CRD. A kind is named by its \
         plural, plural.group, Kind or label, case-insensitively:\n",
    );
    for kind in KINDS {
        let api_version = kind.api_version();
        let ipam = kind.ipam.map_or("every IPAM", |i| i.as_str());
        let scope = if kind.namespaced {
            "namespaced"
        } else {
            "cluster"
        };
        help.push_str(&format!(
            "  {} ({}, {api_version}, {scope}; {ipam})\n",
            kind.resource(),
            kind.kind
        ));
    }
    help.truncate(help.trim_end().len());
    help
}

/// The collector's settings from its command line.
fn collector_config(
    args: WatchArgs,
    listen: Option<SocketAddr>,
    outbox_max_bytes: Option<u64>,
) -> CollectorConfig {
    let collector_id = args.collector_id.unwrap_or_else(|| {
        std::env::var("HOSTNAME")
            .ok()
            .or_else(|| {
                std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|h| h.trim().to_owned())
            })
            .unwrap_or_else(|| "collector".into())
    });
    CollectorConfig {
        kube: args
            .kubeconfig
            .map_or(KubeSource::Infer, KubeSource::Kubeconfig),
        stamp: Stamp {
            cluster_id: args.cluster_id,
            collector_id,
            raw_objects: args.raw_objects,
        },
        watch: WatchConfig {
            watch_timeout: args.watch_timeout,
            snapshot_interval: args.snapshot_interval,
            max_event_bytes: usize::try_from(args.max_event_bytes).unwrap_or(usize::MAX),
            ..WatchConfig::default()
        },
        kinds: {
            let named: Vec<Stream> = args.kinds.iter().filter_map(|k| k.0).collect();
            (!named.is_empty()).then_some(named)
        },
        listen,
        unready_after: args.unready_after,
        outbox_max_bytes,
        admission: args
            .admission
            .admission_listen
            .map(|listen| AdmissionConfig {
                listen,
                cert: args.admission.admission_cert,
                key: args.admission.admission_key,
                mode: match args.admission.guard {
                    Guard::Warn => GuardMode::Warn,
                    Guard::Deny => GuardMode::Deny,
                },
            }),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Generate(args) = &cli.command {
        return generate::main(args, Cli::command());
    }
    telemetry::init(
        LogFormat::json_if(cli.log_json),
        LogFilter::FromEnv { default: "info" },
    );
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// How long the start-up check waits for a broker before going on without one.
const KAFKA_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Checks the Kafka options and the connection: a TLS or authentication failure stops the
/// collector with that error; an unreachable broker is an outage the outbox rides out.
/// The Kafka options checked and the connection probed, off the runtime's threads: a TLS
/// or authentication failure stops the collector; an unreachable broker is an outage the
/// outbox waits out.
async fn kafka_connection(args: &ipaudit_runtime::kafka::KafkaArgs) -> anyhow::Result<Connection> {
    let args = args.clone();
    let connection = tokio::task::spawn_blocking(move || {
        args.probed_connection(KAFKA_PROBE_TIMEOUT, "events wait in the outbox")
    })
    .await
    .context("Kafka start-up check")??;
    Ok(connection)
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run(args) => {
            let args = *args;
            // Everything local is checked before the broker probe, which may wait for Kafka.
            let key = ipaudit_runtime::secret::named(
                args.commands_key,
                args.commands_key_file.as_deref(),
                "commands key",
            )?
            .map(|text| ipaudit_schemas::CommandKey::from_secret(&text))
            .transpose()
            .context("unusable commands key")?;
            let connection = kafka_connection(&args.kafka).await?;
            let kafka = KafkaConfig {
                connection,
                topic: args.topic,
                schemas_topic: Some(args.schemas_topic).filter(|t| !t.is_empty()),
                cluster_id: args.watch.cluster_id.clone(),
                create_topic: args.topics.creation(),
                commands_topic: (args.remediate != Remediate::Off)
                    .then(|| args.commands_topic.clone()),
            };
            let remediate = RemediateConfig {
                mode: match args.remediate {
                    Remediate::Off => RemediationMode::Off,
                    Remediate::DryRun => RemediationMode::DryRun,
                    Remediate::On => RemediationMode::On,
                },
                connection: kafka.connection.clone(),
                topic: args.commands_topic,
                max_per_minute: args.remediate_max_per_minute,
                group: args.remediate_group,
                key,
                max_age: args.remediate_max_age,
                max_attempts: args.remediate_max_attempts,
                retry_backoff: args.remediate_retry_backoff,
            };
            let config = RunConfig {
                remediate,
                collector: collector_config(
                    args.watch,
                    Some(args.listen),
                    Some(args.outbox_max_bytes),
                ),
                state_dir: args.state_dir,
                kafka,
                shutdown_timeout: args.shutdown_timeout,
            };
            app::run(config, ipaudit_runtime::shutdown::signal())
                .await
                .context("collector failed")
        }
        Command::Record(args) => {
            let args = *args;
            let out = args.out.clone();
            let config = RecordConfig {
                collector: collector_config(args.watch, args.listen, None),
                out: args.out,
            };
            let stop_after = args.duration;
            let signal = ipaudit_runtime::shutdown::signal();
            let shutdown = async move {
                match stop_after {
                    Some(d) => tokio::select! {
                        _ = tokio::time::sleep(d) => {}
                        _ = signal => {}
                    },
                    None => signal.await,
                }
            };
            let written = app::record(config, shutdown)
                .await
                .context("recording failed")?;
            eprintln!("wrote {written} events to {}", out.display());
            Ok(())
        }
        Command::Outbox(args) => outbox_command(args),
        Command::Generate(_) => unreachable!("generate returned before the runtime started"),
    }
}

fn outbox_command(args: OutboxArgs) -> anyhow::Result<()> {
    let path = args.state_dir.join("outbox.db");
    let mut outbox = Outbox::open_existing(&path)?;
    match args.command {
        OutboxCommand::Quarantine(QuarantineCommand::List) => {
            let rows = outbox.quarantined().context("cannot list the quarantine")?;
            println!("ID\tQUARANTINED\tREASON\tSTREAM\tOBJECT\tRESOURCE_VERSION\tBYTES\tERROR");
            for row in rows {
                let when = time::OffsetDateTime::from_unix_timestamp_nanos(
                    i128::from(row.quarantined_at_ms) * 1_000_000,
                )
                .ok()
                .and_then(|t| {
                    t.format(&time::format_description::well_known::Rfc3339)
                        .ok()
                })
                .unwrap_or_else(|| row.quarantined_at_ms.to_string());
                println!(
                    "{}\t{when}\t{}\t{}\t{}\t{}\t{}\t{}",
                    row.id,
                    row.reason,
                    row.stream.as_deref().unwrap_or("-"),
                    row.object.as_deref().unwrap_or("-"),
                    row.resource_version.as_deref().unwrap_or("-"),
                    row.bytes,
                    row.error
                );
            }
            Ok(())
        }
        OutboxCommand::Quarantine(QuarantineCommand::Resend { ids, all }) => {
            let moved = outbox
                .resend(if all { None } else { Some(&ids) })
                .context("cannot move rows back to the outbox")?;
            eprintln!(
                "moved {moved} rows back to the outbox of {}",
                path.display()
            );
            Ok(())
        }
    }
}
