//! Offline replay: recorded files -> merged by resourceVersion -> the analyzer core; then,
//! when audit logs are among the inputs, who made each request is named in the evidence.
//!
//! Audit logs alone give the events (see [`crate::offline::source::audit_log`]). Beside watch
//! recordings or Avro files, which then give the events, they only name the actors: an
//! audit log at Metadata level knows no resourceVersion, and its events would only
//! duplicate the recorded ones out of order.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use indicatif::{ProgressBar, ProgressStyle};
use ipaudit_schemas::WatchEvent;

use crate::analysis::actors::{ActorIndex, Named};
use crate::analysis::engine::{Analyzer, AnalyzerConfig, AnalyzerStats, Output};
use crate::offline::source::{
    detect_file, AuditLogSource, AuditSummary, InputFormat, Problem, Source, SourceError,
    SourceItem, Unlisted,
};

/// How to replay.
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// The analyzer core's settings.
    pub analyzer: AnalyzerConfig,
    /// Run timers up to this time at the end (else the latest event time seen).
    pub now_ms: Option<i64>,
    /// Show a progress bar on stderr when it is a terminal.
    pub progress: bool,
}

/// What a replay found.
#[derive(Debug, Default)]
pub struct ReplayOutcome {
    /// Alert transitions and epoch changes, in history order.
    pub outputs: Vec<Output>,
    /// Problems in the inputs (capped at [`MAX_PROBLEMS`]; `problem_count` has them all).
    pub problems: Vec<Problem>,
    /// Every problem counted.
    pub problem_count: u64,
    /// Documents or records skipped (a corrupt Avro block counts once).
    pub skipped: u64,
    /// Bytes of input those skipped.
    pub skipped_bytes: u64,
    /// The analyzer's counters.
    pub stats: AnalyzerStats,
    /// Lowest and highest resourceVersion replayed.
    pub rv_range: Option<(i64, i64)>,
    /// Per input, the problems counted but not listed.
    pub unlisted: Vec<Unlisted>,
    /// What the audit logs among the inputs gave, if any.
    pub audit: Option<AuditReport>,
    /// The analysis at the end of the input. Handed back rather than dropped inside
    /// [`replay`]: freeing a state of a million objects costs a fifth of a replay, which a
    /// process about to exit can skip (`std::mem::forget`).
    pub analyzer: Option<Analyzer>,
}

/// How the audit logs of a replay were used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditReport {
    /// How their entries were used.
    pub summary: AuditSummary,
    /// Whether they gave the events (alone) or only the actors (beside recordings).
    pub gave_events: bool,
    /// How many evidence entries got an actor.
    pub named: Named,
}

impl ReplayOutcome {
    /// Whether no event at all could be read: nothing was analysed.
    pub fn nothing_read(&self) -> bool {
        self.stats.events_in == 0
    }
}

/// Problems kept for the report over all inputs; more are only counted (each input also
/// lists at most [`crate::offline::source::MAX_LISTED_PROBLEMS`]).
pub const MAX_PROBLEMS: usize = 1_000;

/// Replays the files together, merged by resourceVersion.
pub fn replay(paths: &[PathBuf], options: &ReplayOptions) -> Result<ReplayOutcome, SourceError> {
    let mut audit_paths = Vec::new();
    let mut sources = Vec::new();
    for path in paths {
        match detect_file(path)? {
            InputFormat::AuditLog => audit_paths.push(path.clone()),
            _ => sources.push(Source::open(path)?),
        }
    }
    // Every audit file together: those of an HA control plane are merged.
    let mut actors = None;
    if !audit_paths.is_empty() {
        let gave_events = sources.is_empty();
        let audit = AuditLogSource::open(&audit_paths, gave_events)?;
        actors = Some((
            ActorIndex::new(audit.requests().iter().cloned()),
            audit.summary().clone(),
            gave_events,
        ));
        sources.push(Source::Audit(audit));
    }
    let progress = progress_bar(&sources, options.progress);
    let counters: Vec<_> = sources.iter().map(Source::progress).collect();
    let mut analyzer = Analyzer::new(options.analyzer.clone());
    let mut outcome = ReplayOutcome::default();
    let mut heads: Vec<Option<Box<WatchEvent>>> = vec![None; sources.len()];
    for (head, source) in heads.iter_mut().zip(sources.iter_mut()) {
        *head = next_event(source, &mut outcome);
    }
    // Inputs that each hand on their events in version order, merged here by version: the
    // lowest next version bounds what is still to come, so the analyzer need not hold
    // events back for quiet streams (kubectl recordings have no bookmarks to move them).
    // Once an input goes backwards (history restarted), that no longer holds.
    let mut in_order = sources.iter().all(Source::in_version_order);
    let mut steps = 0u64;
    while let Some(index) = earliest(&heads) {
        let Some(event) = heads[index].take() else {
            break;
        };
        heads[index] = next_event(&mut sources[index], &mut outcome);
        if let (Some(next), Some(rv)) = (&heads[index], event.resource_version_num) {
            if in_order && next.resource_version_num.is_none_or(|n| n < rv) {
                in_order = false;
                analyzer.input_unordered();
            }
        }
        // The version as sent: an audit log's ordering version (`V+n`) is not one.
        if let Some(rv) = ipaudit_schemas::event::parse_resource_version(&event.resource_version) {
            let (lo, hi) = outcome.rv_range.unwrap_or((rv, rv));
            outcome.rv_range = Some((lo.min(rv), hi.max(rv)));
        }
        analyzer.step(event, &mut outcome.outputs);
        if let Some(spare) = analyzer.take_spare() {
            sources[index].recycle(spare);
        }
        if in_order {
            if let Some(next) = lowest_next(&heads) {
                analyzer.input_passed(next.saturating_sub(1), &mut outcome.outputs);
            }
        }
        steps += 1;
        if steps.is_multiple_of(16_384) {
            if let Some(bar) = &progress {
                bar.set_position(counters.iter().map(|c| c.load(Ordering::Relaxed)).sum());
            }
        }
    }
    analyzer.finish(options.now_ms, &mut outcome.outputs);
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    outcome.stats = analyzer.stats();
    if let Some((index, summary, gave_events)) = actors {
        let named = index.name_all(&mut outcome.outputs);
        outcome.audit = Some(AuditReport {
            summary,
            gave_events,
            named,
        });
    }
    outcome.analyzer = Some(analyzer);
    Ok(outcome)
}

fn next_event(source: &mut Source, outcome: &mut ReplayOutcome) -> Option<Box<WatchEvent>> {
    for item in source.by_ref() {
        match item {
            SourceItem::Event(event) => return Some(event),
            SourceItem::Problem(problem) => {
                outcome.problem_count += 1;
                if problem.skipped {
                    outcome.skipped += 1;
                    outcome.skipped_bytes += problem.bytes;
                }
                if outcome.problems.len() < MAX_PROBLEMS {
                    outcome.problems.push(problem);
                }
            }
            SourceItem::Unlisted(more) => {
                outcome.problem_count += more.problems;
                outcome.skipped += more.skipped;
                outcome.skipped_bytes += more.skipped_bytes;
                outcome.unlisted.push(more);
            }
        }
    }
    None
}

/// The source whose next event has the lowest resourceVersion.
fn earliest(heads: &[Option<Box<WatchEvent>>]) -> Option<usize> {
    heads
        .iter()
        .enumerate()
        .filter_map(|(i, h)| {
            h.as_ref()
                .map(|e| (e.resource_version_num.unwrap_or(i64::MIN), i))
        })
        .min()
        .map(|(_, i)| i)
}

/// The lowest version still to come from inputs in version order; `None` when an input's
/// next event has no version (nothing is known then) or every input is done.
fn lowest_next(heads: &[Option<Box<WatchEvent>>]) -> Option<i64> {
    heads
        .iter()
        .flatten()
        .map(|e| e.resource_version_num)
        .try_fold(None, |low: Option<i64>, rv| {
            rv.map(|rv| Some(low.map_or(rv, |l| l.min(rv))))
        })
        .flatten()
}

fn progress_bar(sources: &[Source], wanted: bool) -> Option<ProgressBar> {
    if !wanted || !std::io::stderr().is_terminal() {
        return None;
    }
    let total: u64 = sources.iter().map(Source::total_bytes).sum();
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template(
        "{spinner} replay [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    Some(bar)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::reorder::MAX_HELD;

    #[test]
    fn a_kubectl_recording_with_a_quiet_stream_is_not_held_back_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let (subnets, ips) = (dir.path().join("subnets.json"), dir.path().join("ips.json"));
        std::fs::write(
            &subnets,
            "{\"type\":\"ADDED\",\"object\":{\"apiVersion\":\"kubeovn.io/v1\",\"kind\":\"Subnet\",\"metadata\":{\"name\":\"s\",\"resourceVersion\":\"1\"}}}\n",
        )
        .unwrap();
        // More IPs than the reorder buffer holds, after which no subnet event ever comes
        // (and a kubectl recording has no bookmarks to say so).
        let count = MAX_HELD + 10;
        let mut text = String::with_capacity(count * 128);
        for rv in 2..count + 2 {
            text.push_str(&format!(
                "{{\"type\":\"ADDED\",\"object\":{{\"apiVersion\":\"kubeovn.io/v1\",\"kind\":\"IP\",\"metadata\":{{\"name\":\"ip-{rv}\",\"resourceVersion\":\"{rv}\"}}}}}}\n"
            ));
        }
        std::fs::write(&ips, text).unwrap();
        let outcome = replay(&[ips, subnets], &ReplayOptions::default()).unwrap();
        assert_eq!(
            outcome.stats.events_in as usize,
            count + 1 + 4,
            "events and list frames"
        );
        assert_eq!(
            outcome.stats.reorder.forced, 0,
            "events were held for the quiet subnet stream"
        );
        assert!(outcome.problems.is_empty(), "{:?}", outcome.problems);
    }
}
