//! The collector as a process, the way it runs in a cluster: started with flags, killed
//! with SIGKILL or stopped with SIGTERM, its `/metrics` scraped; or as `collector record`
//! writing an Avro file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ipaudit_schemas::{ContainerReader, EventType, Stream, WatchEvent};

/// A built binary of the workspace (`collector`, `analyzer`), next to the test binary.
pub fn workspace_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // A test runs from target/<profile>/deps/, a bench binary from target/<profile>/.
    let candidates: Vec<PathBuf> = exe
        .ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join(name))
        .collect();
    candidates.iter().find(|p| p.is_file()).cloned().unwrap_or_else(|| {
        panic!("{name} is not built next to {}: run cargo build --workspace first (scripts/test does)", exe.display())
    })
}

/// Every event of a recording written by `collector record`, in file order.
pub fn read_recording(path: &Path) -> Vec<WatchEvent> {
    let file = std::fs::File::open(path).expect("the recording exists");
    ContainerReader::<WatchEvent, _>::new(std::io::BufReader::new(file))
        .expect("an Avro container file")
        .map(|event| event.expect("every record decodes"))
        .collect()
}

/// A running `collector run` or `collector record`.
pub struct CollectorProcess {
    child: Child,
    /// Where /metrics is served.
    pub metrics_port: u16,
    /// Its log file.
    pub log: PathBuf,
}

/// What a collector is started with.
pub struct CollectorSetup<'a> {
    /// kubeconfig of the simulated API server.
    pub kubeconfig: &'a Path,
    /// Kafka.
    pub brokers: &'a str,
    /// Events topic.
    pub topic: &'a str,
    /// Outbox directory (kept across restarts).
    pub state_dir: &'a Path,
    /// Cluster id.
    pub cluster_id: &'a str,
}

impl CollectorProcess {
    /// Starts `collector run` and waits until /readyz says every stream is watching.
    pub fn start(setup: &CollectorSetup<'_>, extra: &[&str]) -> CollectorProcess {
        let mut process = Self::start_unready(setup, extra);
        process.wait_ready(Duration::from_secs(30));
        process
    }

    /// Starts `collector run` without waiting for anything (for collectors that are
    /// meant to fail or stay unready). Its collector id is `collector-test` unless `extra`
    /// names one.
    pub fn start_unready(setup: &CollectorSetup<'_>, extra: &[&str]) -> CollectorProcess {
        let metrics_port = crate::broker::free_port();
        let log = setup
            .state_dir
            .join(format!("collector-{metrics_port}.log"));
        let mut command = Command::new(workspace_binary("collector"));
        command
            .arg("run")
            .args(["--kubeconfig", &setup.kubeconfig.display().to_string()])
            .args(["--cluster-id", setup.cluster_id])
            .args(if extra.contains(&"--collector-id") {
                &[][..]
            } else {
                &["--collector-id", "collector-test"][..]
            })
            .args(["--brokers", setup.brokers, "--topic", setup.topic])
            .args([
                "--schemas-topic",
                &crate::broker::schemas_topic_of(setup.topic),
            ])
            .args(["--state-dir", &setup.state_dir.display().to_string()])
            .args(["--kafka-option", "message.timeout.ms=120000"])
            .args(extra);
        Self::spawn(command, metrics_port, log)
    }

    /// Starts `collector run` with the admission webhook on a free port of 127.0.0.1
    /// (`--guard mode`, the server certificate of `certs`), waiting until /readyz says
    /// every stream is watching when `ready`, and in any case until the port accepts.
    pub fn start_with_guard(
        setup: &CollectorSetup<'_>,
        certs: &crate::tls::Certs,
        mode: &str,
        ready: bool,
    ) -> (CollectorProcess, u16) {
        let port = crate::broker::free_port();
        let listen = format!("127.0.0.1:{port}");
        let cert = certs.server_cert.display().to_string();
        let key = certs.server_key.display().to_string();
        let args = [
            "--admission-listen",
            listen.as_str(),
            "--admission-cert",
            cert.as_str(),
            "--admission-key",
            key.as_str(),
            "--guard",
            mode,
        ];
        let collector = if ready {
            Self::start(setup, &args)
        } else {
            Self::start_unready(setup, &args)
        };
        crate::broker::wait_for_port(port, Duration::from_secs(30));
        (collector, port)
    }

    /// Starts `collector record --out <out>` (cluster `lab`) against `kubeconfig`, logging
    /// next to `out`, and waits until /readyz says every stream it watches is watching;
    /// [`CollectorProcess::terminate`] then finishes the file.
    pub fn record(kubeconfig: &Path, out: &Path, extra: &[&str]) -> CollectorProcess {
        let metrics_port = crate::broker::free_port();
        let mut command = Command::new(workspace_binary("collector"));
        command
            .arg("record")
            .args(["--kubeconfig", &kubeconfig.display().to_string()])
            .args(["--cluster-id", "lab", "--collector-id", "recorder-test"])
            .args(["--out", &out.display().to_string()])
            .args(extra);
        let mut process = Self::spawn(command, metrics_port, out.with_extension("log"));
        process.wait_ready(Duration::from_secs(30));
        process
    }

    fn spawn(mut command: Command, metrics_port: u16, log: PathBuf) -> CollectorProcess {
        let child = command
            .args(["--listen", &format!("127.0.0.1:{metrics_port}")])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("collector log"))
            .spawn()
            .expect("start collector");
        CollectorProcess {
            child,
            metrics_port,
            log,
        }
    }

    /// Waits until /readyz answers 200; panics with the log when the collector exits or
    /// the timeout passes.
    pub fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if self.readyz().is_some_and(|(code, _)| code == 200) {
                return;
            }
            assert!(
                self.is_running(),
                "collector exited before it was ready; log:\n{}",
                self.log_text()
            );
            assert!(
                Instant::now() < deadline,
                "collector not ready after {timeout:?}; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The collector's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The /metrics text.
    pub fn metrics(&self) -> String {
        http_get(self.metrics_port, "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// A counter's value from /metrics (0 when absent).
    pub fn counter(&self, name_and_labels: &str) -> f64 {
        self.metrics()
            .lines()
            .find(|l| l.starts_with(name_and_labels))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }

    /// `/readyz`: (status, body), `None` while nothing answers.
    pub fn readyz(&self) -> Option<(u16, String)> {
        // Only once this process says it bound its port: before that, whatever answers
        // there is another process (one that took the port meanwhile), not this one.
        let bound = format!("bound=127.0.0.1:{}", self.metrics_port);
        if !self.log_text().contains(&bound) {
            return None;
        }
        http_get(self.metrics_port, "/readyz")
    }

    /// Waits for the process to exit; its status, or `None` when it still runs after
    /// `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL: a crash, nothing flushed.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits for a clean exit; returns whether it exited with success.
    pub fn terminate(mut self, timeout: Duration) -> bool {
        crate::terminate(&mut self.child, timeout)
    }
}

impl Drop for CollectorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `collector ARGS...` to completion (the operator's commands, e.g. `outbox
/// quarantine list`); its exit status and standard output and error.
pub fn collector_command(args: &[&str]) -> std::process::Output {
    Command::new(workspace_binary("collector"))
        .args(args)
        .output()
        .expect("run collector")
}

/// A plain HTTP/1.0 GET on 127.0.0.1; `(status, body)`.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_request(port, "GET", path, &[])
}

/// A plain HTTP/1.0 request without a body on 127.0.0.1, with these headers;
/// `(status, body)`.
pub fn http_request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let headers: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{headers}\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((code, body))
}

/// (stream, object key, type, resourceVersion) of an event, or of a change an API server
/// made.
pub type EventKey = (Stream, String, EventType, i64);

/// The key of `e`.
pub fn event_key(e: &WatchEvent) -> EventKey {
    (
        e.stream,
        e.object_key(),
        e.event_type,
        e.resource_version_num.unwrap_or(-1),
    )
}

/// Watch events (not markers, not relist items) by key, with how often each came.
pub fn watch_event_counts(events: &[WatchEvent]) -> BTreeMap<EventKey, usize> {
    let mut in_relist = BTreeSet::new();
    let mut counts = BTreeMap::new();
    for e in events {
        match e.event_type {
            EventType::SyncStart => {
                in_relist.insert(e.stream);
            }
            EventType::SyncEnd => {
                in_relist.remove(&e.stream);
            }
            EventType::Bookmark | EventType::DeletedOnRelist => {}
            _ if in_relist.contains(&e.stream) => {}
            _ => *counts.entry(event_key(e)).or_insert(0) += 1,
        }
    }
    counts
}
