//! Peak memory of `analyzer replay` against the size of a kubectl recording of a fixed set
//! of objects: with the recording streamed, the peak does not grow with the file.
//!
//! ```text
//! cargo build --profile dist -p ipaudit-analyzer -p ipaudit-tests --bins
//! target/dist/replay-memory-bench [OBJECTS] [MIB...]    # default: 3000 100 400
//! ```
//!
//! Writes each recording to a temporary folder, replays it with the `analyzer` built next
//! to this binary, and prints one line per size: file size, peak RSS (the kernel's
//! `wait4` account), wall time, exit code.

use ipaudit_tests::collector::workspace_binary;
use ipaudit_tests::measure::{run_measured, write_kubectl_recording};

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers: OBJECTS MIB..."))
        .collect();
    let (objects, sizes) = match args.split_first() {
        Some((objects, sizes)) if !sizes.is_empty() => (*objects, sizes.to_vec()),
        Some((objects, _)) => (*objects, vec![100, 400]),
        None => (3_000, vec![100, 400]),
    };
    let dir = tempfile::tempdir().expect("temporary folder");
    println!("objects  file_MiB  peak_RSS_MiB  seconds  exit");
    for mib in sizes {
        let path = dir.path().join(format!("ips-{mib}.json"));
        write_kubectl_recording(&path, objects, mib * 1024 * 1024);
        let size = std::fs::metadata(&path).map_or(0, |m| m.len());
        let measured = run_measured(
            &workspace_binary("analyzer"),
            &[
                "replay".as_ref(),
                "--no-progress".as_ref(),
                path.as_os_str(),
            ],
        );
        println!(
            "{objects:>7}  {:>8}  {:>12}  {:>7.1}  {:?}",
            size / (1024 * 1024),
            measured.max_rss_bytes / (1024 * 1024),
            measured.elapsed.as_secs_f64(),
            measured.code
        );
        let _ = std::fs::remove_file(&path);
    }
}
