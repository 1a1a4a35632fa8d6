//! `analyzer`: finds IPAM leaks in kube-ovn event histories.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand, ValueEnum};
use ipaudit_analyzer::reorder::ReorderConfig;
use ipaudit_analyzer::replay::{replay, ReplayOptions};
use ipaudit_analyzer::report::{render_jsonl, render_text, Findings};
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
    /// resourceVersion. Exit code: 0 no alert fired, 1 an alert fired, 2 usage error or
    /// unreadable input.
    Replay(ReplayArgs),
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

    /// How long a Subnet may be terminating before `subnet-stuck-terminating` fires.
    #[arg(long, default_value = "10m", value_parser = parse_duration, env = "IPAUDIT_SUBNET_GRACE")]
    subnet_grace: Duration,

    /// Never show a progress bar (it only shows when stderr is a terminal).
    #[arg(long)]
    no_progress: bool,
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
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay(args) => run_replay(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
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
            rules: RuleConfig {
                subnet_terminating_grace_ms: millis(args.subnet_grace),
            },
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
            print!("{}", render_jsonl(&findings));
        }
    }
    Ok(if findings.alerts.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
