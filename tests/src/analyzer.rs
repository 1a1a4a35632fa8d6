//! `analyzer run` as a process: started with flags, killed with SIGKILL, restarted on the
//! same state directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::collector::workspace_binary;

/// A running `analyzer run`.
pub struct AnalyzerProcess {
    child: Child,
    /// Its log file.
    pub log: PathBuf,
    /// Where /metrics, /healthz and /readyz are served (a free port of its own, unless
    /// the flags name one).
    pub metrics_port: u16,
    /// Where the incident pages are served (a free port of its own, unless the flags name
    /// one).
    pub ui_port: u16,
}

impl AnalyzerProcess {
    /// Starts `analyzer run` with the given flags after the common ones.
    pub fn start(
        brokers: &str,
        topic: &str,
        group: &str,
        state_dir: &Path,
        extra: &[&str],
    ) -> AnalyzerProcess {
        Self::spawn(
            Command::new(workspace_binary("analyzer")),
            brokers,
            topic,
            group,
            state_dir,
            extra,
        )
    }

    /// Starts `analyzer run` as [`AnalyzerProcess::start`] does, under `rusage-run`, which
    /// writes what the kernel accounted for it to `usage` when it exits
    /// ([`crate::measure::read_measured`]). For benchmarks of members that exit by
    /// themselves (`--exit-at-end`): a kill reaches `rusage-run`, not the analyzer.
    pub fn start_measured(
        brokers: &str,
        topic: &str,
        group: &str,
        state_dir: &Path,
        extra: &[&str],
        usage: &Path,
    ) -> AnalyzerProcess {
        let mut wrapper = Command::new(workspace_binary("rusage-run"));
        wrapper.arg(usage).arg(workspace_binary("analyzer"));
        Self::spawn(wrapper, brokers, topic, group, state_dir, extra)
    }

    /// Starts `program` (the analyzer, or a wrapper whose next argument is the analyzer)
    /// with `run`, the common flags and `extra`.
    fn spawn(
        mut program: Command,
        brokers: &str,
        topic: &str,
        group: &str,
        state_dir: &Path,
        extra: &[&str],
    ) -> AnalyzerProcess {
        std::fs::create_dir_all(state_dir).expect("state dir");
        let metrics_port = crate::broker::free_port();
        let listen = format!("127.0.0.1:{metrics_port}");
        let listen_flag = ["--listen", listen.as_str()];
        let ui_port = crate::broker::free_port();
        let ui_listen = format!("127.0.0.1:{ui_port}");
        let ui_flag = ["--ui-listen", ui_listen.as_str()];
        let log = state_dir.join(format!(
            "analyzer-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let child = program
            .arg("run")
            .args(["--brokers", brokers, "--topic", topic, "--group", group])
            .args(["--schemas-topic", &crate::broker::schemas_topic_of(topic)])
            .args(["--state-dir", &state_dir.display().to_string()])
            .args(if extra.contains(&"--checkpoint-interval") {
                &[][..]
            } else {
                &["--checkpoint-interval", "1s"][..]
            })
            .args(if extra.contains(&"--listen") {
                &[][..]
            } else {
                &listen_flag[..]
            })
            .args(if extra.contains(&"--ui-listen") {
                &[][..]
            } else {
                &ui_flag[..]
            })
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("analyzer log"))
            .spawn()
            .expect("start analyzer");
        AnalyzerProcess {
            child,
            log,
            metrics_port,
            ui_port,
        }
    }

    /// Waits until the member has joined its consumer group (its first assignment is
    /// logged), and fails the test after `timeout`.
    pub fn wait_joined(&self, timeout: std::time::Duration) {
        crate::wait_for("the analyzer joins its group", timeout, || {
            self.log_text()
                .contains("partitions assigned")
                .then_some(())
        });
    }

    /// The /metrics text (empty when it does not answer).
    pub fn metrics(&self) -> String {
        crate::collector::http_get(self.metrics_port, "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// Events of `event_type` (`REMEDIATION`, ...) consumed, over every stream.
    pub fn events_consumed(&self, event_type: &str) -> f64 {
        let label = format!("type=\"{event_type}\"");
        self.metrics()
            .lines()
            .filter(|l| l.starts_with("ipaudit_analyzer_events_total{") && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Asserts that versions never went backwards in the input: no new epoch was counted
    /// or logged.
    pub fn assert_no_new_epoch(&self) {
        let log = self.log_text();
        assert_eq!(
            self.value("ipaudit_analyzer_input_problems_total{kind=\"new_epoch\"}"),
            0.0,
            "log:\n{log}"
        );
        assert!(!log.contains("went backwards"), "log:\n{log}");
    }

    /// A series' value from /metrics (0 when absent).
    pub fn value(&self, name_and_labels: &str) -> f64 {
        self.metrics()
            .lines()
            .find(|l| l.starts_with(name_and_labels))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the process to exit by itself; whether it exited with success in time.
    pub fn wait(&mut self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        false
    }

    /// SIGTERM, then waits for a clean exit; returns whether it exited with success.
    pub fn terminate(mut self, timeout: std::time::Duration) -> bool {
        crate::terminate(&mut self.child, timeout)
    }

    /// SIGKILL.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for AnalyzerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
