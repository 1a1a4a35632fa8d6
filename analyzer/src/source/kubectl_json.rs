//! kubectl watch output: `{"type": ..., "object": {...}}` documents, pretty-printed (as
//! `-o json` prints them) or one per line, concatenated from one or several kinds.
//!
//! kubectl first prints the initial list as ADDED events in no particular order, then the
//! watch events in order. Every listed version is at or below the list's version, and every
//! watch event is above it, so sorting each stream's leading run of ADDED events by version
//! orders the whole stream. That run is framed with `SYNC_START`/`SYNC_END`, as a
//! collector frames a list, so that the analyzer knows the list was complete. The file is read whole (kubectl recordings are incident-sized;
//! long recordings belong in Avro) and handed on merged in resourceVersion order.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use ipaudit_schemas::kubernetes::{from_watch_document, FieldProblem};
use ipaudit_schemas::{EventType, Stream, WatchEvent};

use super::{bump, counter, Position, Problem, SourceItem};

/// One top-level document found in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// Where it starts.
    pub position: Position,
    /// Byte range in the input.
    pub range: std::ops::Range<usize>,
    /// Why it is not a complete JSON value, if it is not.
    pub broken: Option<&'static str>,
}

/// Splits text into top-level JSON objects. A `{` at the start of a line always opens a
/// new document (nested objects are indented, and compact output has one per line), so a
/// truncated document cannot swallow the next one.
pub fn split_documents(text: &[u8]) -> Vec<Document> {
    let mut docs = Vec::new();
    let (mut line, mut line_start) = (1u64, 0usize);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let mut current: Option<(usize, Position)> = None;
    let mut garbage: Option<(usize, Position)> = None;
    let position = |i: usize, line: u64, line_start: usize| Position::Text {
        line,
        column: (i - line_start) as u64 + 1,
        offset: i as u64,
    };
    for (i, &b) in text.iter().enumerate() {
        if b == b'\n' {
            if in_string {
                // A raw newline cannot be inside a JSON string: the document is broken.
                in_string = false;
            }
            line += 1;
            line_start = i + 1;
            continue;
        }
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        let at_line_start = i == line_start;
        match b {
            b'{' if depth == 0 || at_line_start => {
                if let Some((start, pos)) = current.take() {
                    docs.push(Document {
                        position: pos,
                        range: start..i,
                        broken: Some("document is truncated"),
                    });
                }
                if let Some((start, pos)) = garbage.take() {
                    docs.push(Document {
                        position: pos,
                        range: start..i,
                        broken: Some("text that is not a JSON object"),
                    });
                }
                current = Some((i, position(i, line, line_start)));
                depth = 1;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    if let Some((start, pos)) = current.take() {
                        docs.push(Document {
                            position: pos,
                            range: start..i + 1,
                            broken: None,
                        });
                    }
                }
            }
            b'"' if depth > 0 => in_string = true,
            b if b.is_ascii_whitespace() => {}
            _ if depth == 0 && garbage.is_none() => {
                garbage = Some((i, position(i, line, line_start)));
            }
            _ => {}
        }
    }
    if let Some((start, pos)) = current {
        docs.push(Document {
            position: pos,
            range: start..text.len(),
            broken: Some("document is truncated"),
        });
    }
    if let Some((start, pos)) = garbage {
        docs.push(Document {
            position: pos,
            range: start..text.len(),
            broken: Some("text that is not a JSON object"),
        });
    }
    docs.sort_by_key(|d| d.range.start);
    docs
}

/// The events of one kubectl recording, in resourceVersion order.
pub struct KubectlJsonSource {
    items: std::vec::IntoIter<SourceItem>,
    total_bytes: u64,
    progress: Arc<AtomicU64>,
    done_bytes: Vec<u64>,
    emitted: usize,
}

impl KubectlJsonSource {
    /// Parses the whole text.
    pub fn new(path: PathBuf, text: &[u8]) -> Self {
        let mut problems = Vec::new();
        let mut per_stream: BTreeMap<Stream, Vec<(WatchEvent, u64)>> = BTreeMap::new();
        for doc in split_documents(text) {
            let problem = |message: String, skipped: bool| Problem {
                path: path.clone(),
                position: doc.position,
                message,
                skipped,
            };
            if let Some(why) = doc.broken {
                problems.push(problem(why.to_owned(), true));
                continue;
            }
            let value: serde_json::Value = match serde_json::from_slice(&text[doc.range.clone()]) {
                Ok(v) => v,
                Err(e) => {
                    problems.push(problem(format!("invalid JSON: {e}"), true));
                    continue;
                }
            };
            match from_watch_document(&value) {
                Ok(converted) => {
                    if !converted.problems.is_empty() {
                        problems.push(problem(describe(&converted.problems), false));
                    }
                    per_stream
                        .entry(converted.event.stream)
                        .or_default()
                        .push((converted.event, doc.range.end as u64));
                }
                Err(e) => problems.push(problem(e.to_string(), true)),
            }
        }
        for events in per_stream.values_mut() {
            frame_initial_list(events);
        }
        let mut items: Vec<SourceItem> = problems.into_iter().map(SourceItem::Problem).collect();
        let mut done_bytes = vec![0; items.len()];
        for (event, end) in merge_by_version(per_stream.into_values().collect()) {
            items.push(SourceItem::Event(event));
            done_bytes.push(end);
        }
        KubectlJsonSource {
            items: items.into_iter(),
            total_bytes: text.len() as u64,
            progress: counter(0),
            done_bytes,
            emitted: 0,
        }
    }

    /// Size of the text.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Bytes handed on so far (approximate: events are reordered).
    pub fn progress(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.progress)
    }
}

/// Sorts a stream's leading run of ADDED events (kubectl's initial list) and frames it
/// with relist markers.
fn frame_initial_list(events: &mut Vec<(WatchEvent, u64)>) {
    let listed = events
        .iter()
        .take_while(|(e, _)| e.event_type == EventType::Added)
        .count();
    if listed == 0 {
        return;
    }
    events[..listed].sort_by_key(|(e, _)| e.resource_version_num.unwrap_or(i64::MAX));
    let marker = |index: usize, event_type: EventType| {
        let (first, end) = &events[index];
        let mut marker = WatchEvent::new(first.stream, event_type, &first.resource_version);
        marker.cluster_id.clone_from(&first.cluster_id);
        (marker, *end)
    };
    let start = marker(0, EventType::SyncStart);
    let end = marker(listed - 1, EventType::SyncEnd);
    events.insert(listed, end);
    events.insert(0, start);
}

fn describe(problems: &[FieldProblem]) -> String {
    let fields: Vec<String> = problems
        .iter()
        .map(|p| format!("{} ({})", p.path, p.problem))
        .collect();
    format!("unusable fields: {}", fields.join(", "))
}

/// Merges per-stream ordered lists into one list ordered by resourceVersion.
fn merge_by_version(streams: Vec<Vec<(WatchEvent, u64)>>) -> Vec<(WatchEvent, u64)> {
    let total = streams.iter().map(Vec::len).sum();
    let mut iters: Vec<_> = streams
        .into_iter()
        .map(|s| s.into_iter().peekable())
        .collect();
    let mut merged = Vec::with_capacity(total);
    loop {
        let next = iters
            .iter_mut()
            .enumerate()
            .filter_map(|(i, it)| {
                it.peek()
                    .map(|(e, _)| (e.resource_version_num.unwrap_or(i64::MAX), i))
            })
            .min();
        let Some((_, i)) = next else { break };
        if let Some(item) = iters[i].next() {
            merged.push(item);
        }
    }
    merged
}

impl Iterator for KubectlJsonSource {
    type Item = SourceItem;

    fn next(&mut self) -> Option<SourceItem> {
        let item = self.items.next()?;
        if let Some(done) = self.done_bytes.get(self.emitted) {
            bump(&self.progress, *done);
        }
        self.emitted += 1;
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(text: &str) -> Vec<(String, Option<&'static str>)> {
        split_documents(text.as_bytes())
            .into_iter()
            .map(|d| (text[d.range].to_owned(), d.broken))
            .collect()
    }

    #[test]
    fn pretty_and_compact_documents_are_split() {
        let text = "{\n    \"type\": \"ADDED\",\n    \"object\": {\"a\": \"}{\"}\n}\n{\"type\":\"MODIFIED\",\"object\":{}}\n{\"type\":\"DELETED\",\"object\":{}}{\"type\":\"ADDED\",\"object\":{}}";
        let docs = ranges(text);
        assert_eq!(docs.len(), 4);
        assert!(docs.iter().all(|(_, broken)| broken.is_none()));
        assert!(docs[0].0.ends_with("}\n}"));
    }

    #[test]
    fn a_truncated_document_does_not_swallow_the_next() {
        let text = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"cut\n{\"type\":\"ADDED\",\"object\":{}}\n";
        let docs = ranges(text);
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].1, Some("document is truncated"));
        assert_eq!(
            docs[1],
            ("{\"type\":\"ADDED\",\"object\":{}}".to_owned(), None)
        );
    }

    #[test]
    fn text_between_documents_is_reported_with_its_line() {
        let text = "{\"a\":1}\nerror: watch closed\n{\"b\":2}\n";
        let docs = split_documents(text.as_bytes());
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[1].broken, Some("text that is not a JSON object"));
        assert!(matches!(
            docs[1].position,
            Position::Text {
                line: 2,
                column: 1,
                ..
            }
        ));
    }
}
