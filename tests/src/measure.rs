//! Hostile and large inputs for `analyzer replay`, and a child process measured as it runs:
//! its exit code, wall time and peak resident memory (from the kernel's own accounting,
//! `wait4`'s rusage, so nothing is sampled or missed).

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// What a finished child used.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    /// Peak resident set size, in bytes.
    pub max_rss_bytes: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// CPU time, user and system, of the child and its threads.
    pub cpu: Duration,
}

/// Runs `program ARGS` with stdout and stderr discarded, and measures it.
///
/// A child's peak RSS counts the memory of the process it was forked from, up to its
/// `exec` (Linux records the old address space's high-water mark at exec, and Rust spawns
/// with `vfork`, sharing the test's whole address space). So the command is started by a
/// small process of its own, `rusage-run`, freshly executed, which waits for it with
/// `wait4` and writes what the kernel accounted.
pub fn run_measured(program: &Path, args: &[&std::ffi::OsStr]) -> Measured {
    let out = tempfile::NamedTempFile::new().expect("result file");
    let started = Instant::now();
    let status = Command::new(crate::collector::workspace_binary("rusage-run"))
        .arg(out.path())
        .arg(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("rusage-run starts");
    let elapsed = started.elapsed();
    assert!(status.success(), "rusage-run failed: {status}");
    read_measured(out.path(), elapsed)
}

/// What `rusage-run` wrote to `path` about a child that ran for `elapsed`.
pub fn read_measured(path: &Path, elapsed: Duration) -> Measured {
    let text = std::fs::read_to_string(path).expect("rusage-run wrote its result");
    let mut words = text.split_whitespace();
    let code = words.next().and_then(|w| w.parse().ok());
    let mut number = || {
        words
            .next()
            .and_then(|w| w.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let max_rss_bytes = number();
    let cpu = Duration::from_micros(number());
    Measured {
        code,
        max_rss_bytes,
        elapsed,
        cpu,
    }
}

/// What the kernel accounted for a child waited for with `wait4`.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// Exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    /// Peak resident set size, in bytes.
    pub max_rss_bytes: u64,
    /// User and system CPU time.
    pub cpu: Duration,
}

/// Runs `command` as a child and waits for it with `wait4`. The body of `rusage-run`;
/// call it from a freshly executed process only (see [`run_measured`]).
// std has no wait4: the one unsafe call in the workspace (tests/Cargo.toml denies the rest).
#[allow(unsafe_code)]
pub fn wait4_child(command: &mut Command) -> Usage {
    let child = command.spawn().expect("child starts");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not waited for yet (std's Child is only dropped,
    // which does not wait); the pointers are to live locals.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4 failed");
    drop(child);
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let time = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    Usage {
        code,
        // Linux reports kilobytes.
        max_rss_bytes: u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024,
        cpu: time(usage.ru_utime) + time(usage.ru_stime),
    }
}

/// Writes a kubectl watch recording of kube-ovn IPs: `objects` IPs listed (ADDED, in no
/// order) on one subnet, then MODIFIED events going round them, one second apart in
/// managedFields time, until the file holds at least `min_bytes`. Each document is about
/// 1 KiB, pretty-printed as `kubectl -o json` prints it.
pub fn write_kubectl_recording(path: &Path, objects: u64, min_bytes: u64) {
    let file = std::fs::File::create(path).expect("create recording");
    let mut out = std::io::BufWriter::new(file);
    let mut written = 0u64;
    let mut rv = 1_000u64;
    let base_s = 1_748_854_800i64; // 2025-06-02T09:00:00Z
    let mut document = |event: &str, i: u64, rv: u64, t: i64| {
        let time = time::OffsetDateTime::from_unix_timestamp(t)
            .map(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .expect("formats")
            })
            .expect("valid time");
        let doc = serde_json::json!({
            "type": event,
            "object": {
                "apiVersion": "kubeovn.io/v1",
                "kind": "IP",
                "metadata": {
                    "name": format!("pod-{i}.ns"),
                    "uid": format!("uid-{i}"),
                    "resourceVersion": rv.to_string(),
                    "creationTimestamp": "2025-06-02T09:00:00Z",
                    "finalizers": ["kubeovn.io/kube-ovn-controller"],
                    "labels": {"ovn.kubernetes.io/subnet": "net1", "round": (rv % 97).to_string()},
                    "managedFields": [{"manager": "kube-ovn-controller", "operation": "Update", "time": time}],
                    "annotations": {"filler": "x".repeat(400)},
                },
                "spec": {
                    "subnet": "net1",
                    "podName": format!("pod-{i}"),
                    "namespace": "ns",
                    "podType": "",
                    "nodeName": "node-1",
                    "v4IpAddress": format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255),
                    "macAddress": "00:00:00:00:00:01",
                },
            },
        });
        let text = serde_json::to_string_pretty(&doc).expect("serializes") + "\n";
        out.write_all(text.as_bytes()).expect("write");
        text.len() as u64
    };
    // The initial list, in an order that is not the versions' order.
    for i in (0..objects).rev() {
        rv += 1;
        written += document("ADDED", i, rv, base_s);
    }
    let mut t = base_s;
    while written < min_bytes {
        for i in 0..objects {
            rv += 1;
            t += 1;
            written += document("MODIFIED", i, rv, t);
            if written >= min_bytes {
                break;
            }
        }
    }
    out.flush().expect("flush");
}
