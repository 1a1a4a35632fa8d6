//! `kubectl-ipaudit`: `kubectl ipaudit check` (the analyzer's rules on one snapshot of the
//! cluster), `kubectl ipaudit release --from-report` (a guarded cleanup of what a check
//! found) and `kubectl ipaudit incidents` (a running analyzer's incidents). kubectl finds it as a plugin when it is on PATH; it also runs by itself.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use ipaudit_analyzer::cli::RuleArgs;
use ipaudit_analyzer::incidents_api::IncidentFilter;
use ipaudit_analyzer::offline::report::{render_text, write_jsonl};
use ipaudit_analyzer::AnalyzerConfig;
use ipaudit_collector::watch::discovery;
use ipaudit_collector::watch::event::Stamp;
use ipaudit_kubectl::calicoctl;
use ipaudit_kubectl::check::analyze;
use ipaudit_kubectl::cluster::{connect, KubeOptions};
use ipaudit_kubectl::release::{release, Rate, ReleaseOptions, Verdict};
use ipaudit_kubectl::report::CheckReport;
use ipaudit_kubectl::snapshot;
use ipaudit_runtime::generate::{self, GenerateArgs};
use ipaudit_runtime::parse;

#[derive(Debug, Parser)]
#[command(
    name = "kubectl-ipaudit",
    version,
    about = "ipaudit's one-shot IP leak check of a live cluster (kube-ovn, whereabouts, spiderpool, Calico, Cilium), a guarded release from its report, and a running analyzer's incidents"
)]
struct Cli {
    /// kubeconfig file (default: in-cluster service account, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, env = "IPAUDIT_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// kubeconfig context (default: its current context).
    #[arg(long, global = true, env = "IPAUDIT_CONTEXT")]
    context: Option<String>,
    /// Log level and filters for stderr (tracing's EnvFilter syntax).
    #[arg(long, global = true, default_value = "warn", env = "IPAUDIT_LOG")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Lists every IPAM kind the API server serves (read-only, paged), runs the analyzer's
    /// rules on that snapshot and prints the report. Exit 0: no finding; 1: findings; 2: error.
    Check(CheckArgs),
    /// Releases what a check's report found, guarded: dry run unless --apply; refuses a
    /// report of another cluster or older than --max-report-age; acts only where uid and
    /// resourceVersion still match. Exit 0: done; 1: some action failed; 2: refused or error.
    Release(ReleaseArgs),
    /// Lists the incidents a running analyzer holds (its JSON API; reach it with
    /// `kubectl port-forward`), with the pages' filters. Exit 0: none firing among those
    /// listed; 1: some firing; 2: error.
    Incidents(IncidentsArgs),
    /// Shell completions, man pages and the flag reference of this program.
    Generate(GenerateArgs),
}

#[derive(Debug, Args)]
struct IncidentsArgs {
    /// The analyzer's pages, with their path prefix (its --ui-url, or
    /// http://localhost:9091 after `kubectl -n ipaudit port-forward statefulset/ipaudit-analyzer 9091`).
    #[arg(long, env = "IPAUDIT_UI_URL", default_value = "http://localhost:9091")]
    url: String,
    /// File holding the API's bearer token (the analyzer's --ui-api-token-file).
    #[arg(long, env = "IPAUDIT_UI_API_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Output format: a table, or the API's JSON as it came.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: IncidentsFormat,
    /// Only this cluster.
    #[arg(long)]
    cluster: Option<String>,
    /// Only this rule.
    #[arg(long)]
    rule: Option<String>,
    /// Only incidents involving this namespace.
    #[arg(long)]
    namespace: Option<String>,
    /// Only this subnet or pool.
    #[arg(long)]
    pool: Option<String>,
    /// firing, resolved or all.
    #[arg(long, default_value = "all")]
    state: String,
    /// Fired at or after this time (RFC 3339).
    #[arg(long)]
    since: Option<String>,
    /// Fired before this time (RFC 3339).
    #[arg(long)]
    until: Option<String>,
    /// Text in the subject, the address or the summary.
    #[arg(short = 'q', long)]
    query: Option<String>,
    /// Page number, from 1.
    #[arg(long, default_value_t = 1)]
    page: u32,
    /// Incidents per page (at most 500).
    #[arg(long, default_value_t = 50)]
    per_page: u32,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum IncidentsFormat {
    /// One line per incident.
    Table,
    /// The API's JSON (ipaudit.incident-list.v1).
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    /// The report `analyzer replay` prints.
    Text,
    /// One JSON object per alert.
    Jsonl,
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "text", env = "IPAUDIT_FORMAT")]
    format: Format,
    /// Also write the report for `release --from-report` to this file (JSON).
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        env = "IPAUDIT_REPORT"
    )]
    output: Option<PathBuf>,
    /// Objects per list request.
    #[arg(long, default_value_t = 500, env = "IPAUDIT_PAGE_SIZE")]
    page_size: u32,
    #[command(flatten)]
    rules: RuleArgs,
}

#[derive(Debug, Args)]
struct ReleaseArgs {
    /// The report `check -o` wrote.
    #[arg(long, value_name = "FILE", env = "IPAUDIT_REPORT")]
    from_report: PathBuf,
    /// Change the cluster (default: a dry run that checks everything and changes nothing).
    #[arg(long, env = "IPAUDIT_APPLY")]
    apply: bool,
    /// Refuse a report older than this.
    #[arg(long, default_value = "1h", value_parser = parse::duration, env = "IPAUDIT_MAX_REPORT_AGE")]
    max_report_age: Duration,
    /// At most this many targets handled per second (`5/s`), minute (`100/m`) or hour.
    #[arg(long, default_value = "5/s", env = "IPAUDIT_RATE")]
    rate: Rate,
    /// Every outcome (dry runs too) is appended to this file, one JSON line each.
    #[arg(
        long,
        default_value = "ipaudit-release.log",
        env = "IPAUDIT_RELEASE_LOG"
    )]
    log_file: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Generate(args) = &cli.command {
        return generate::main(args, Cli::command());
    }
    ipaudit_runtime::telemetry::init(
        ipaudit_runtime::telemetry::LogFormat::Text,
        ipaudit_runtime::telemetry::LogFilter::Given {
            directives: &cli.log,
            fallback: "warn",
        },
    );
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::from(2);
        }
    };
    let kube = KubeOptions {
        kubeconfig: cli.kubeconfig,
        context: cli.context,
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Check(args) => check(&kube, args).await,
            Command::Release(args) => release_from_report(&kube, args).await,
            Command::Incidents(args) => incidents(args).await,
            Command::Generate(_) => unreachable!("generate returned before the runtime started"),
        }
    });
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}

async fn check(kube: &KubeOptions, args: CheckArgs) -> anyhow::Result<ExitCode> {
    let (client, identity) = connect(kube).await.context("cannot reach the cluster")?;
    let kinds = discovery::discover(&client, None)
        .await
        .context("cannot tell which kinds the API server serves")?;
    let stamp = Stamp {
        cluster_id: identity.cluster_id(),
        collector_id: "kubectl-ipaudit".into(),
        raw_objects: false,
    };
    let snap = snapshot::take(&client, &kinds, &stamp, args.page_size.max(1))
        .await
        .context("cannot list the cluster")?;
    let config = AnalyzerConfig {
        default_cluster_id: identity.cluster_id(),
        rules: args.rules.config(),
        ..AnalyzerConfig::default()
    };
    let result = analyze(snap.events, snap.taken_at_ms, config);
    let mut stdout = std::io::stdout().lock();
    match args.format {
        Format::Text => {
            writeln!(
                stdout,
                "cluster {} (kube-system uid {})",
                identity.server,
                identity.kube_system_uid.as_deref().unwrap_or("unknown")
            )?;
            for list in &snap.lists {
                writeln!(
                    stdout,
                    "  listed {} at resourceVersion {}: {} object(s)",
                    list.resource, list.resource_version, list.objects
                )?;
            }
            write!(stdout, "{}", render_text(&result.findings, &result.outcome))?;
            write!(stdout, "{}", calicoctl::render_text(&result.calico))?;
        }
        Format::Jsonl => {
            write_jsonl(&mut stdout, &result.findings, &result.outcome)?;
            if !result.calico.is_empty() {
                let line = serde_json::json!({"record": "calico", "categories": result.calico});
                writeln!(stdout, "{line}")?;
            }
        }
    }
    if snap.unreadable > 0 {
        eprintln!(
            "warning: {} listed object(s) were not Kubernetes objects and were skipped",
            snap.unreadable
        );
    }
    let firing = result.firing.len();
    if let Some(path) = &args.output {
        CheckReport::new(identity, snap.taken_at_ms, snap.lists, result.firing)
            .write(path)
            .context("cannot write the report")?;
        eprintln!("report written to {}", path.display());
    }
    Ok(if firing == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn incidents(args: IncidentsArgs) -> anyhow::Result<ExitCode> {
    let token = ipaudit_runtime::secret::value_or_file(None, args.token_file.as_deref())
        .context("cannot read the API token")?;
    let filter = IncidentFilter {
        cluster: args.cluster,
        rule: args.rule,
        namespace: args.namespace,
        pool: args.pool,
        state: Some(args.state),
        since: args.since,
        until: args.until,
        q: args.query,
        page: Some(args.page),
        per_page: Some(args.per_page),
    };
    let list = ipaudit_kubectl::incidents::fetch(&args.url, &filter, token.as_deref()).await?;
    let mut stdout = std::io::stdout().lock();
    match args.output {
        IncidentsFormat::Table => write!(
            stdout,
            "{}",
            ipaudit_kubectl::incidents::table(&list, &args.url)
        )?,
        IncidentsFormat::Json => writeln!(stdout, "{list}")?,
    }
    let firing = list["items"]
        .as_array()
        .is_some_and(|items| items.iter().any(|i| i["state"] == "firing"));
    Ok(if firing {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

async fn release_from_report(kube: &KubeOptions, args: ReleaseArgs) -> anyhow::Result<ExitCode> {
    let report = CheckReport::read(&args.from_report)?;
    let (client, identity) = connect(kube).await.context("cannot reach the cluster")?;
    let options = ReleaseOptions {
        apply: args.apply,
        max_report_age: args.max_report_age,
        rate: args.rate,
        log_file: args.log_file,
    };
    if !options.apply {
        println!("dry run: nothing is changed (--apply to act)");
    }
    let mut stdout = std::io::stdout().lock();
    let actions = release(&client, &identity, &report, &options, &mut stdout).await?;
    let failed = actions
        .iter()
        .filter(|a| a.verdict == Verdict::Failed)
        .count();
    writeln!(
        stdout,
        "{} finding(s): {} applied, {} dry-run, {} skipped, {} report-only, {failed} failed; log: {}",
        actions.len(),
        actions.iter().filter(|a| a.verdict == Verdict::Applied).count(),
        actions.iter().filter(|a| a.verdict == Verdict::DryRun).count(),
        actions.iter().filter(|a| a.verdict == Verdict::Skipped).count(),
        actions.iter().filter(|a| a.verdict == Verdict::ReportOnly).count(),
        options.log_file.display()
    )?;
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
