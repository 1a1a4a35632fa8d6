//! kubectl watch output: `{"type": ..., "object": {...}}` documents, pretty-printed (as
//! `-o json` prints them) or one per line, concatenated from one or several kinds.
//!
//! kubectl first prints the initial list as ADDED events in no particular order, then the
//! watch events in order. Every listed version is at or below the list's version, and every
//! watch event is above it, so sorting each stream's leading run of ADDED events by version
//! orders the whole stream. That run is framed with `SYNC_START`/`SYNC_END`, as a
//! collector frames a list, so that the analyzer knows the list was complete.
//!
//! The file is streamed, never read whole: memory is bounded by one document and a few
//! dozen bytes per listed object, not by the length of the recording. A first pass cuts the
//! text where a line starts with `{` (`pieces`), names each piece's kind from its first
//! fields (`peek_head`), notes where each kind's documents lie (a few runs of byte ranges:
//! one per file concatenated into this one) and indexes each kind's initial list (each
//! listed document's version and place, `ListIndex`), so that the list is read in version
//! order without holding its events (whole and sorted only when the first fields do not
//! give the versions). Past a kind's initial list, it takes a piece whose first fields
//! name that kind, and that looks like one object, for one document without reading it
//! through (`Index::trusted`: the structure is checked once, by the second pass's parse);
//! any other piece it splits exactly (`Splitter`), reporting the broken documents
//! (`Checked`). Then one cursor per kind reads its runs again, piece by piece, typed
//! (`kubectl_typed`) where it can; a piece the typed path does not take is split exactly,
//! read generically where it must, and what the first pass did not split is reported then
//! (`Usable`). The cursors are merged by resourceVersion.
//!
//! In the order the text goes through them: `pieces` (cut where a line starts with `{`),
//! `head` (a document's first fields), `splitter` (exact splitting), `list` (a kind's
//! initial list), `first_pass`, `second_pass`, and here the source that merges the
//! cursors.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use ipaudit_schemas::WatchEvent;

use super::kubectl_typed;
use super::{
    bump, counter, unversioned_problem, Position, Problem, ProblemLog, SourceError, SourceItem,
};

mod first_pass;
mod head;
mod list;
mod pieces;
mod second_pass;
mod splitter;

use first_pass::index;
use second_pass::StreamCursor;
pub use splitter::split_documents;

/// The largest document kept for parsing. Kubernetes objects are at most a few MiB (etcd's
/// request limit is 1.5 MiB); a larger "document" is a broken one that never closes.
pub const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;

/// The events of one kubectl recording, in resourceVersion order.
pub struct KubectlJsonSource {
    log: ProblemLog,
    cursors: Vec<StreamCursor>,
    heads: Vec<Option<(Box<WatchEvent>, u64)>>,
    started: bool,
    total_bytes: u64,
    progress: Arc<AtomicU64>,
}

impl KubectlJsonSource {
    /// Opens a recording: the first pass reads it through once.
    pub fn open(path: &Path) -> Result<Self, SourceError> {
        Self::open_with(path, true)
    }

    /// [`KubectlJsonSource::open`]; without `trust_heads`, the first pass splits every
    /// piece exactly (the tests' reference).
    fn open_with(path: &Path, trust_heads: bool) -> Result<Self, SourceError> {
        let io = SourceError::io(path);
        let file = File::open(path).map_err(io)?;
        let total_bytes = file.metadata().map_err(io)?.len();
        let mut log = ProblemLog::new(path);
        let index = index(path, file, total_bytes, &mut log, trust_heads)?;
        let checked = Arc::new(index.checked);
        let cursors = index
            .streams
            .into_iter()
            .map(|(stream, runs, list)| {
                StreamCursor::new(stream, runs, list, path, Arc::clone(&checked))
            })
            .collect::<Vec<_>>();
        Ok(KubectlJsonSource {
            log,
            heads: cursors.iter().map(|_| None).collect(),
            cursors,
            started: false,
            total_bytes,
            progress: counter(0),
        })
    }

    /// Size of the text.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Bytes handed on so far (approximate: events are reordered).
    pub fn progress(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.progress)
    }

    fn advance(&mut self, index: usize) {
        self.heads[index] = match self.cursors[index].next(&mut self.log) {
            Ok(next) => next,
            Err(error) => {
                // The file went away or became unreadable under us: say so, end the stream.
                self.log.push(Problem {
                    path: self.cursors[index].path.clone(),
                    position: Position::Text {
                        line: 0,
                        column: 0,
                        offset: 0,
                    },
                    message: super::avro_file::error_chain(&error),
                    skipped: true,
                    bytes: 0,
                });
                None
            }
        };
    }
}

impl Iterator for KubectlJsonSource {
    type Item = SourceItem;

    fn next(&mut self) -> Option<SourceItem> {
        if !self.started {
            self.started = true;
            for index in 0..self.cursors.len() {
                self.advance(index);
            }
        }
        loop {
            if let Some(item) = self.log.next_item() {
                return Some(item);
            }
            let next = self
                .heads
                .iter()
                .enumerate()
                .filter_map(|(i, h)| {
                    h.as_ref()
                        .map(|(e, _)| (e.resource_version_num.unwrap_or(i64::MAX), i))
                })
                .min();
            let Some((_, index)) = next else {
                return self.log.finish();
            };
            let Some((event, end)) = self.heads[index].take() else {
                continue;
            };
            bump(&self.progress, end);
            self.advance(index);
            return Some(SourceItem::Event(event));
        }
    }
}

#[cfg(test)]
mod tests {
    use ipaudit_schemas::{EventType, Stream};

    use super::*;

    /// The problems among a source's items.
    fn problems_of(items: &[SourceItem]) -> Vec<&Problem> {
        items
            .iter()
            .filter_map(|i| match i {
                SourceItem::Problem(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_document_named_by_its_first_fields_but_broken_after_is_reported_once_where_it_is() {
        let doc = |name: &str, rv: u64| {
            format!(
                "{{\n    \"type\": \"ADDED\",\n    \"object\": {{\"apiVersion\": \"kubeovn.io/v1\", \"kind\": \"IP\", \"metadata\": {{\"name\": {name}, \"resourceVersion\": \"{rv}\"}}}}\n}}\n"
            )
        };
        let text = doc("\"a\"", 5) + &doc("bare", 6) + &doc("\"c\"", 7);
        let (_dir, path) = written("ips.json", &text);
        let items: Vec<SourceItem> = KubectlJsonSource::open(&path).unwrap().collect();
        let events: Vec<_> = items
            .iter()
            .filter_map(|i| match i {
                SourceItem::Event(e) => Some(e.resource_version.as_str()),
                _ => None,
            })
            .collect();
        assert!(events.contains(&"5") && events.contains(&"7"), "{events:?}");
        let problems = problems_of(&items);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].skipped);
        assert!(
            problems[0].message.starts_with("invalid JSON"),
            "{}",
            problems[0].message
        );
        assert!(matches!(
            problems[0].position,
            Position::Text {
                line: 5,
                column: 1,
                ..
            }
        ));
    }

    /// `text` in a file `name` of a new temporary directory, gone with the directory.
    fn written(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    /// An IP's watch document as kubectl prints it.
    fn ip_doc(event_type: &str, name: &str, rv: &str) -> String {
        format!(
            "{{\n    \"type\": \"{event_type}\",\n    \"object\": {{\n        \"apiVersion\": \"kubeovn.io/v1\",\n        \"kind\": \"IP\",\n        \"metadata\": {{\n            \"labels\": {{\"a\": \"}}\"}},\n            \"name\": \"{name}\",\n            \"resourceVersion\": \"{rv}\"\n        }}\n    }}\n}}\n"
        )
    }

    /// (type, version, name) of every event of a recording, and the most events any cursor
    /// held at once; `indexed: false` reads the initial lists whole and sorts them.
    fn read_recording(path: &Path, indexed: bool) -> (Vec<(EventType, String, String)>, usize) {
        let mut source = KubectlJsonSource::open(path).unwrap();
        if !indexed {
            for cursor in &mut source.cursors {
                cursor.list = None;
                cursor.in_list = true;
            }
        }
        let (mut events, mut most_held) = (Vec::new(), 0);
        while let Some(item) = source.next() {
            most_held = most_held.max(
                source
                    .cursors
                    .iter()
                    .map(|c| c.ready.len())
                    .max()
                    .unwrap_or(0),
            );
            if let SourceItem::Event(e) = item {
                let name = e
                    .metadata
                    .as_ref()
                    .map(|m| m.name.clone())
                    .unwrap_or_default();
                events.push((e.event_type, e.resource_version, name));
            }
        }
        (events, most_held)
    }

    #[test]
    fn a_shuffled_initial_list_is_handed_on_in_version_order_without_being_held() {
        let listed = [("c", "7"), ("a", "3"), ("d", "9"), ("b", "5"), ("e", "5")];
        let mut text: String = listed
            .iter()
            .map(|(n, rv)| ip_doc("ADDED", n, rv))
            .collect();
        text += &ip_doc("MODIFIED", "a", "12");
        text += &ip_doc("ADDED", "f", "13");
        let (_dir, path) = written("ips.json", &text);
        let (events, most_held) = read_recording(&path, true);
        let got: Vec<(EventType, &str, &str)> = events
            .iter()
            .map(|(t, rv, n)| (*t, rv.as_str(), n.as_str()))
            .collect();
        use EventType::*;
        assert_eq!(
            got,
            [
                (SyncStart, "3", ""),
                (Added, "3", "a"),
                (Added, "5", "b"),
                (Added, "5", "e"),
                (Added, "7", "c"),
                (Added, "9", "d"),
                (SyncEnd, "9", ""),
                (Modified, "12", "a"),
                (Added, "13", "f"),
            ]
        );
        assert!(
            most_held <= 2,
            "the list was held: {most_held} events at once"
        );
        assert_eq!(
            read_recording(&path, false).0,
            events,
            "as the sort of the whole list"
        );
    }

    #[test]
    fn a_document_on_the_line_of_the_last_listed_one_is_read_after_the_list() {
        // A list out of version order (read document by document), its last document
        // followed on the same line by the first watch event.
        let mut text = ip_doc("ADDED", "b", "5") + &ip_doc("ADDED", "a", "3");
        text.pop();
        text += &ip_doc("MODIFIED", "a", "12");
        let (_dir, path) = written("ips.json", &text);
        let (events, _) = read_recording(&path, true);
        let got: Vec<(EventType, &str)> =
            events.iter().map(|(t, rv, _)| (*t, rv.as_str())).collect();
        use EventType::*;
        assert_eq!(
            got,
            [
                (SyncStart, "3"),
                (Added, "3"),
                (Added, "5"),
                (SyncEnd, "5"),
                (Modified, "12")
            ]
        );
        assert_eq!(
            read_recording(&path, false).0,
            events,
            "as the sort of the whole list"
        );
    }

    #[test]
    fn initial_lists_in_any_order_read_as_the_sort_of_the_whole_list() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recording.json");
        // Permutations of a list, a watch after it, and a second file of the same kind
        // concatenated (a second list run); in some, a version the first fields cannot
        // give (an escaped key), so the list is read whole.
        for seed in 0..24u64 {
            let mut rvs: Vec<u64> = (1..=12).map(|i| i * 10 % 37).collect();
            let mut state = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            for i in (1..rvs.len()).rev() {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                rvs.swap(i, (state >> 33) as usize % (i + 1));
            }
            let mut text: String = rvs
                .iter()
                .enumerate()
                .map(|(i, rv)| ip_doc("ADDED", &format!("ip-{i}"), &rv.to_string()))
                .collect();
            if seed % 4 == 3 {
                text = text.replacen("\"resourceVersion\"", "\"resource\\u0056ersion\"", 1);
            }
            text += &ip_doc("MODIFIED", "ip-1", "100");
            text += &ip_doc("DELETED", "ip-2", "101");
            text += "{\"type\": \"ADDED\", \"object\": {\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"p\", \"namespace\": \"n\", \"resourceVersion\": \"50\"}}}\n";
            text += &ip_doc("ADDED", "ip-late", "4");
            std::fs::write(&path, &text).unwrap();
            let (indexed, most_held) = read_recording(&path, true);
            let (whole, _) = read_recording(&path, false);
            assert_eq!(indexed, whole, "seed {seed}");
            assert_eq!(
                indexed
                    .iter()
                    .filter(|e| e.0 == EventType::SyncStart)
                    .count(),
                2
            );
            if seed % 4 != 3 {
                assert!(most_held <= 2, "seed {seed}: {most_held} held");
            }
        }
    }

    #[test]
    fn a_document_longer_than_the_limit_is_reported_once_and_the_run_goes_on_after_it() {
        let big = format!(
            "{{\"type\": \"MODIFIED\", \"object\": {{\"apiVersion\": \"kubeovn.io/v1\", \"kind\": \"IP\", \"metadata\": {{\"name\": \"big\", \"resourceVersion\": \"6\"}}, \"pad\": \"{}\"}}}}\n",
            "x".repeat(MAX_DOCUMENT_BYTES + (1 << 20))
        );
        let text = ip_doc("ADDED", "a", "5") + &big + &ip_doc("MODIFIED", "a", "7");
        let (_dir, path) = written("ips.json", &text);
        let items: Vec<SourceItem> = KubectlJsonSource::open(&path).unwrap().collect();
        let versions: Vec<&str> = items
            .iter()
            .filter_map(|i| match i {
                SourceItem::Event(e) if e.event_type.carries_object() => {
                    Some(e.resource_version.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(versions, ["5", "7"]);
        let problems = problems_of(&items);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].message, "document larger than 16 MiB");
        // After the first document's 12 lines.
        assert!(matches!(
            problems[0].position,
            Position::Text {
                line: 13,
                column: 1,
                ..
            }
        ));
    }

    /// Pieces of recordings: documents of two kinds, ADDED (lists out of order) and not,
    /// pretty and compact, some on one line, and what breaks them.
    fn recording_piece() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let doc = (
            prop::sample::select(vec!["ADDED", "ADDED", "MODIFIED", "DELETED"]),
            prop::sample::select(vec!["IP", "Pod"]),
            0u32..40,
            0u8..3,
        )
            .prop_map(|(event_type, kind, rv, layout)| {
                let api = if kind == "IP" { "kubeovn.io/v1" } else { "v1" };
                let doc = format!(
                    "{{\"type\": \"{event_type}\", \"object\": {{\"apiVersion\": \"{api}\", \"kind\": \"{kind}\", \"metadata\": {{\"name\": \"n{rv}\", \"namespace\": \"ns\", \"resourceVersion\": \"{rv}\"}}, \"spec\": {{\"subnet\": \"s\"}}}}}}"
                );
                match layout {
                    0 => {
                        let value: serde_json::Value = serde_json::from_str(&doc).unwrap();
                        serde_json::to_string_pretty(&value).unwrap() + "\n"
                    }
                    1 => doc + "\n",
                    // The next document follows on the same line.
                    _ => doc,
                }
            });
        let odd = prop::sample::select(vec![
            "{\"type\": \"ADDED\", \"object\": {\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"cut\n",
            "{\"type\": \"MODIFIED\", \"object\": {\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": bare}}}\n",
            "{\"type\": \"MODIFIED\", \"object\": {\"apiVersion\": \"kubeovn.io/v1\", \"kind\": \"IP\", \"metadata\": {\"name\": \"x\", \"resourceVersion\": \"7\"}, \"spec\": {\"subnet\": 5}}}\n",
            "error: watch closed\n",
            "{\"a\":\n{\n\"b\": 1}}\n",
            "{\"esc\": \"ends with \\\n",
            "\u{c}\n",
            // Broken after first fields that name a stream, yet ending in a brace: what the
            // first pass takes for a document without splitting it.
            "{\"type\": \"MODIFIED\", \"object\": {\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"t\", \"resourceVersion\": \"8\"}}\n",
            "{\"type\": \"ADDED\", \"object\": {\"apiVersion\": \"kubeovn.io/v1\", \"kind\": \"IP\", \"metadata\": {\"name\": \"t\", \"resourceVersion\": \"9\"}}\n",
            "{\"type\": \"MODIFIED\", \"object\": {\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"x\", \"namespace\": \"ns\", \"resourceVersion\": \"11\"}}}}\n",
        ])
        .prop_map(str::to_owned);
        prop_oneof![6 => doc, 1 => odd]
    }

    /// Every item of a recording, in order, read in pieces or each run whole.
    fn items_of(path: &Path, whole_runs: bool) -> Vec<String> {
        let mut source = KubectlJsonSource::open(path).unwrap();
        for cursor in &mut source.cursors {
            cursor.whole_runs = whole_runs;
        }
        source.map(|item| format!("{item:?}")).collect()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// Read in pieces, a recording gives the items, in the order, that reading each run
        /// whole with the splitter gave: events, lists and their markers, problems with
        /// their places.
        #[test]
        fn runs_read_in_pieces_give_what_runs_read_whole_gave(
            pieces in proptest::collection::vec(recording_piece(), 0..30)
        ) {
            let text = pieces.concat();
            let (_dir, path) = written("recording.json", &text);
            proptest::prop_assert_eq!(items_of(&path, false), items_of(&path, true), "{:?}", text);
        }

        /// A first pass that takes pieces for documents by their first fields gives the
        /// events, in the order, that one splitting every piece gave, and the same problems
        /// at the same places (reported later: by the second pass, when it reaches them).
        #[test]
        fn a_first_pass_trusting_first_fields_reads_as_one_splitting_everything(
            pieces in proptest::collection::vec(recording_piece(), 0..30)
        ) {
            let text = pieces.concat();
            let (_dir, path) = written("recording.json", &text);
            let (trusting, exact) = (read_all(&path, true), read_all(&path, false));
            proptest::prop_assert_eq!(trusting, exact, "{:?}", text);
        }
    }

    /// Every event of a recording in order, and its problems sorted by place.
    fn read_all(path: &Path, trust_heads: bool) -> (Vec<String>, Vec<String>) {
        let (mut events, mut problems) = (Vec::new(), Vec::new());
        for item in KubectlJsonSource::open_with(path, trust_heads).unwrap() {
            match item {
                SourceItem::Problem(p) => problems.push((p.position, format!("{p:?}"))),
                other => events.push(format!("{other:?}")),
            }
        }
        problems.sort_by_key(|(position, _)| match position {
            Position::Text { offset, .. } => *offset,
            _ => u64::MAX,
        });
        (events, problems.into_iter().map(|(_, p)| p).collect())
    }

    fn pod_doc(event_type: &str, name: &str, rv: &str) -> String {
        format!(
            "{{\"type\": \"{event_type}\", \"object\": {{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {{\"name\": \"{name}\", \"namespace\": \"ns\", \"resourceVersion\": \"{rv}\"}}}}}}"
        )
    }

    #[test]
    fn initial_lists_and_broken_documents_read_as_with_a_first_pass_splitting_everything() {
        let p = |t: &str, n: &str, rv: &str| pod_doc(t, n, rv);
        let broken_listed = |rv: &str| {
            format!("{{\"type\": \"ADDED\", \"object\": {{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {{\"name\": \"t\"{rv}}}}}\n")
        };
        let unversioned = "{\"type\": \"MODIFIED\", \"object\": {\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"u\", \"namespace\": \"ns\"}}}\n";
        let recordings = [
            // Two documents of a kind with text between them, in its initial list.
            format!("{}\n{}, {}\n", p("ADDED", "a", "5"), p("ADDED", "b", "9"), p("MODIFIED", "b", "10")),
            format!("{}\n{}, {}\n", p("ADDED", "a", "5"), p("ADDED", "b", "9"), p("ADDED", "c", "3")),
            format!(
                "{}\n{}], {}\n{}\n",
                p("ADDED", "a", "5"),
                p("ADDED", "b", "3"),
                p("MODIFIED", "b", "10"),
                p("ADDED", "c", "4")
            ),
            // A broken document ending in a brace, in an initial list.
            format!("{}\n{}{unversioned}{}\n", p("ADDED", "a", "5"), broken_listed(""), p("ADDED", "c", "3")),
            format!("{}{unversioned}{}\n", broken_listed(", \"resourceVersion\": \"9\""), p("ADDED", "c", "3")),
            // ... of a kind seen nowhere before, with versions equal across kinds after it.
            format!(
                "{{\"type\": \"ADDED\", \"object\": {{\"apiVersion\": \"kubeovn.io/v1\", \"kind\": \"IP\", \"metadata\": {{\"name\": \"t\", \"resourceVersion\": \"9\"}}}}\n{}\n{}",
                p("MODIFIED", "p", "5"),
                ip_doc("MODIFIED", "ip", "5")
            ),
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recording.json");
        for text in recordings {
            std::fs::write(&path, &text).unwrap();
            assert_eq!(read_all(&path, true), read_all(&path, false), "{text}");
        }
    }

    #[test]
    fn a_stretch_longer_than_a_piece_without_a_line_starting_with_a_brace_is_read_through_once() {
        // Documents indented by a space: no line starts with `{` for 17 MiB. Reading them
        // one per streaming splitter, each searching the next 16 MiB for a line start
        // again, took minutes.
        let pad = "x".repeat(900);
        let mut text = p_line("ADDED", "a", 1, "") + "\n";
        let mut rv = 2;
        while text.len() < pieces::PIECE_LIMIT + (1 << 20) {
            text += " ";
            text += &p_line("MODIFIED", "a", rv, &pad);
            text += "\n";
            rv += 1;
        }
        text += &p_line("MODIFIED", "a", rv, "");
        let (_dir, path) = written("pods.json", &text);
        let (events, problems) = read_all(&path, true);
        assert!(problems.is_empty(), "{problems:?}");
        // SYNC_START and SYNC_END around the first.
        assert_eq!(events.len() as u64, rv + 2);
        assert_eq!((events, problems), read_all(&path, false));
    }

    /// A Pod's watch document on one line, with `pad` in an annotation.
    fn p_line(event_type: &str, name: &str, rv: u64, pad: &str) -> String {
        format!(
            "{{\"type\": \"{event_type}\", \"object\": {{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {{\"name\": \"{name}\", \"namespace\": \"ns\", \"resourceVersion\": \"{rv}\", \"annotations\": {{\"pad\": \"{pad}\"}}}}}}}}"
        )
    }

    #[test]
    fn a_document_taken_on_its_first_fields_but_truncated_is_reported_once_where_it_is() {
        let mut cut = pod_doc("MODIFIED", "b", "6");
        cut.pop();
        let text = [
            pod_doc("ADDED", "a", "4"),
            pod_doc("MODIFIED", "a", "5"),
            cut,
            pod_doc("MODIFIED", "a", "7"),
        ]
        .join("\n");
        let (_dir, path) = written("pods.json", &text);
        let (events, problems) = read_all(&path, true);
        assert_eq!(events.len(), 5, "SYNC_START, 4, SYNC_END, 5, 7: {events:?}");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("document is truncated"),
            "{}",
            problems[0]
        );
        assert!(
            problems[0].contains("line: 3, column: 1"),
            "{}",
            problems[0]
        );
        assert_eq!((events, problems), read_all(&path, false));
    }

    #[test]
    fn documents_of_two_kinds_with_text_between_them_on_one_line_are_both_read() {
        // `]` and `,` may follow a closing brace inside a document: the first pass cannot
        // tell this piece from one document without reading it through.
        let text = [
            pod_doc("ADDED", "a", "4"),
            pod_doc("MODIFIED", "a", "5"),
            pod_doc("MODIFIED", "a", "6") + "], " + &ip_doc("MODIFIED", "ip", "7"),
            pod_doc("MODIFIED", "a", "8"),
        ]
        .join("\n");
        let (_dir, path) = written("recording.json", &text);
        let items: Vec<SourceItem> = KubectlJsonSource::open(&path).unwrap().collect();
        let modified: Vec<(Stream, &str)> = items
            .iter()
            .filter_map(|i| match i {
                SourceItem::Event(e) if e.event_type == EventType::Modified => {
                    Some((e.stream, e.resource_version.as_str()))
                }
                _ => None,
            })
            .collect();
        use Stream::*;
        assert_eq!(modified, [(Pod, "5"), (Pod, "6"), (Ip, "7"), (Pod, "8")]);
        let problems: Vec<String> = problems_of(&items)
            .iter()
            .map(|p| format!("{p:?}"))
            .collect();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("text that is not a JSON object"),
            "{}",
            problems[0]
        );
    }
}
