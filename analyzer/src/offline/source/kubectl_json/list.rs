//! A kind's initial list: what the first pass learns of it (`ListIndex`: each listed
//! document's version and place) and how the second pass reads it in version order
//! without holding its events (`ListPlan`), framed with `SYNC_START`/`SYNC_END`.

use std::fs::File;

use ipaudit_schemas::{EventType, WatchEvent};

use super::splitter::Cursor;

/// One document of an initial list, as the first pass found it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Listed {
    /// Its resourceVersion, read from its first fields.
    pub(super) rv: i64,
    /// Where it starts.
    pub(super) at: Cursor,
    /// Where it ends.
    pub(super) end: u64,
}

/// What the first pass learnt of one stream's initial list (its leading run of ADDED
/// documents): where each document lies and its version, so that the list is read in
/// version order without being held (a few dozen bytes a listed object instead of its event).
#[derive(Debug)]
pub(super) struct ListIndex {
    /// Still in the leading run.
    pub(super) open: bool,
    /// Every listed document's version and type were read from its first fields.
    pub(super) exact: bool,
    pub(super) docs: Vec<Listed>,
}

impl ListIndex {
    pub(super) fn new() -> Self {
        ListIndex {
            open: true,
            exact: true,
            docs: Vec::new(),
        }
    }

    /// A document of this stream from `at` to `end`, ADDED or not (`None`: its type was
    /// not read), and its version as its first fields give it.
    pub(super) fn note(
        &mut self,
        added: Option<bool>,
        version: impl FnOnce() -> Option<i64>,
        at: Cursor,
        end: u64,
    ) {
        if !self.open {
            return;
        }
        match (added, added.and_then(|_| version())) {
            (Some(true), Some(rv)) => self.docs.push(Listed { rv, at, end }),
            (Some(false), _) => self.open = false,
            // What the first fields do not say is left to the conversion: the list is
            // then read whole and sorted, as before there was an index of it.
            _ => {
                self.exact = false;
                self.open = false;
                self.docs = Vec::new();
            }
        }
    }

    /// How to read the list, or `None` to read it whole and sort it.
    pub(super) fn plan(self) -> Option<ListPlan> {
        if !self.exact || self.docs.is_empty() {
            return None;
        }
        let end = self.docs.iter().map(|d| d.end).max().unwrap_or(0);
        let in_file_order = self.docs.windows(2).all(|w| w[0].rv <= w[1].rv);
        let mut docs = self.docs;
        if !in_file_order {
            // Stable: equal versions stay in file order, as the sort of whole events had it.
            docs.sort_by_key(|d| d.rv);
        }
        Some(ListPlan {
            docs,
            in_file_order,
            next: 0,
            end,
            last: None,
            ended: false,
            file: None,
            buffer: Vec::new(),
        })
    }
}

/// How a stream's initial list is read: in file order when its versions already are in
/// order (then it is read with the rest, in one pass), else document by document in
/// version order; framed with `SYNC_START`/`SYNC_END` either way, and never held.
pub(super) struct ListPlan {
    /// The listed documents, in version order (file order among equal versions).
    pub(super) docs: Vec<Listed>,
    pub(super) in_file_order: bool,
    /// The next of `docs` to read (when not in file order).
    pub(super) next: usize,
    /// Where the last listed document ends: this stream's documents before it are listed.
    pub(super) end: u64,
    /// The last listed event handed on (as its `SYNC_END` marker), the highest version.
    pub(super) last: Option<(Box<WatchEvent>, u64)>,
    /// `SYNC_END` was handed on.
    pub(super) ended: bool,
    /// The file, and one document's bytes, when reading out of file order.
    pub(super) file: Option<File>,
    pub(super) buffer: Vec<u8>,
}

/// A marker of `event`'s stream at its version.
pub(super) fn marker_at(event: &WatchEvent, event_type: EventType) -> Box<WatchEvent> {
    let mut marker = WatchEvent::new(event.stream, event_type, &event.resource_version);
    marker.cluster_id.clone_from(&event.cluster_id);
    Box::new(marker)
}
