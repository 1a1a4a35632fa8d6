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
        std::fs::create_dir_all(state_dir).expect("state dir");
        let log = state_dir.join(format!(
            "analyzer-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let child = Command::new(workspace_binary("analyzer"))
            .arg("run")
            .args(["--brokers", brokers, "--topic", topic, "--group", group])
            .args(["--state-dir", &state_dir.display().to_string()])
            .args(if extra.contains(&"--checkpoint-interval") {
                &[][..]
            } else {
                &["--checkpoint-interval", "1s"][..]
            })
            .args(["--kafka-option", "session.timeout.ms=6000"])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("analyzer log"))
            .spawn()
            .expect("start analyzer");
        AnalyzerProcess { child, log }
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
