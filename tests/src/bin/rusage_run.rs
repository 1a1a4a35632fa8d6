//! `rusage-run OUT PROGRAM [ARGS...]`: runs PROGRAM with the inherited stdio, waits for it
//! with `wait4`, and writes `EXIT_CODE PEAK_RSS_BYTES CPU_MICROSECONDS` to OUT (`-` for a
//! signal). Being a small, freshly executed process, its child's peak RSS is the child's
//! own (see `ipaudit_tests::measure::run_measured`).

use std::process::{Command, ExitCode};

use ipaudit_tests::measure::wait4_child;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let [out, program, rest @ ..] = &args[..] else {
        eprintln!("usage: rusage-run OUT PROGRAM [ARGS...]");
        return ExitCode::from(2);
    };
    let usage = wait4_child(Command::new(program).args(rest));
    let code = usage.code.map_or_else(|| "-".to_owned(), |c| c.to_string());
    let (rss, cpu) = (usage.max_rss_bytes, usage.cpu.as_micros());
    match std::fs::write(out, format!("{code} {rss} {cpu}\n")) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!(
                "rusage-run: cannot write {}: {error}",
                out.to_string_lossy()
            );
            ExitCode::from(2)
        }
    }
}
