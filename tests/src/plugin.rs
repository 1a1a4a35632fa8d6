//! `kubectl-ipaudit` as the tests run it: against a kubeconfig (the simulated or the real
//! API server), with what it printed and how it ended.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::collector::workspace_binary;

/// The plugin pointed at one cluster, with a scratch directory for reports and logs.
pub struct Plugin {
    /// The kubeconfig every run gets as `--kubeconfig`.
    pub kubeconfig: PathBuf,
    /// Where reports and release logs go.
    pub dir: PathBuf,
}

impl Plugin {
    /// The plugin against `kubeconfig`, writing its files under `dir`.
    pub fn new(kubeconfig: &Path, dir: &Path) -> Plugin {
        Plugin {
            kubeconfig: kubeconfig.to_path_buf(),
            dir: dir.to_path_buf(),
        }
    }

    /// `kubectl-ipaudit --kubeconfig K ARGS`.
    pub fn run(&self, args: &[&str]) -> Run {
        let mut command = Command::new(workspace_binary("kubectl-ipaudit"));
        command.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        Run::of(command)
    }

    /// `kubectl ipaudit --kubeconfig K ARGS`: found by kubectl's plugin discovery on a
    /// PATH that starts with the workspace's binaries, as an operator runs it.
    pub fn run_through_kubectl(&self, args: &[&str]) -> Run {
        let mut command = Command::new("kubectl");
        command
            .env("PATH", path_with_the_plugin())
            .env("KUBECONFIG", &self.kubeconfig)
            .arg("ipaudit")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args);
        Run::of(command)
    }

    /// `check` in JSON lines with no owner grace (a record of a pod absent from the list is a
    /// leak at once), its report written to `report.json`: the report's path and the run,
    /// which must have found leaks.
    pub fn check_without_grace(&self) -> (PathBuf, Run) {
        let report = self.dir.join("report.json");
        let run = self.run(&[
            "check",
            "--format",
            "jsonl",
            "--owner-grace",
            "0s",
            "-o",
            report.to_str().expect("UTF-8 path"),
        ]);
        assert_eq!(run.code, Some(1), "leaks found: {run}");
        (report, run)
    }

    /// `release --from-report REPORT` at 50/s with its log in `release.log`, plus `extra`
    /// (`--apply` for more than a dry run).
    pub fn release(&self, report: &Path, extra: &[&str]) -> Run {
        let log = self.dir.join("release.log");
        let mut args = vec![
            "release",
            "--from-report",
            report.to_str().expect("UTF-8 path"),
            "--log-file",
            log.to_str().expect("UTF-8 path"),
            "--rate",
            "50/s",
        ];
        args.extend_from_slice(extra);
        self.run(&args)
    }
}

/// `PATH` with the workspace's binaries first, where kubectl's plugin discovery finds
/// `kubectl-ipaudit`.
pub fn path_with_the_plugin() -> std::ffi::OsString {
    let binary = workspace_binary("kubectl-ipaudit");
    let bin_dir = binary.parent().expect("the binaries' directory");
    std::env::join_paths(
        std::iter::once(bin_dir.to_path_buf()).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )),
    )
    .expect("PATH")
}

/// What a run printed and how it ended.
pub struct Run {
    /// The exit code (None when killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// Runs `command` to its end.
    pub fn of(mut command: Command) -> Run {
        let out = command.output().expect("the binary runs");
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// (rule, subject) of every alert line of `--format jsonl`, sorted.
    pub fn alerts(&self) -> Vec<(String, String)> {
        let mut alerts: Vec<(String, String)> = self
            .stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["record"] == "alert")
            .map(|v| {
                (
                    v["rule"].as_str().unwrap_or_default().to_owned(),
                    v["subject_name"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        alerts.sort();
        alerts
    }

    /// The printed line about `target`.
    pub fn line_about(&self, target: &str) -> &str {
        self.stdout
            .lines()
            .find(|l| l.contains(target))
            .unwrap_or_else(|| panic!("no line about {target} in:\n{self}"))
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}
