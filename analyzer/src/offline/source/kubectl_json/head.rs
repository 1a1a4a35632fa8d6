//! A document's first fields: its event type, kind and resourceVersion, read without
//! building anything (`peek_head`, `peek_resource_version`), which kubectl prints before
//! the rest of the object; and the full classification when they do not say (`classify`).

use std::borrow::Cow;

use ipaudit_schemas::convert::from_watch_document;
use ipaudit_schemas::kinds;
use ipaudit_schemas::Stream;
use serde::Deserialize;

/// What the first pass needs of a document: its type and its object's kind.
#[derive(Deserialize)]
pub(super) struct Head<'a> {
    #[serde(rename = "type", borrow)]
    pub(super) event_type: Cow<'a, str>,
    #[serde(borrow)]
    pub(super) object: ObjectHead<'a>,
}

#[derive(Deserialize)]
pub(super) struct ObjectHead<'a> {
    #[serde(rename = "apiVersion", borrow, default)]
    pub(super) api_version: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(super) kind: Cow<'a, str>,
}

/// The stream a complete document belongs to, or why it is not an event of a known kind.
pub(super) fn classify(doc: &[u8]) -> Result<Stream, String> {
    if let Ok(head) = serde_json::from_slice::<Head<'_>>(doc) {
        let known_type = matches!(
            &*head.event_type,
            "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK"
        );
        if let (true, Some(spec)) = (
            known_type,
            kinds::of_object(&head.object.api_version, &head.object.kind),
        ) {
            return Ok(spec.stream);
        }
    }
    // The rare path: the full conversion says exactly what is wrong.
    let value: serde_json::Value =
        serde_json::from_slice(doc).map_err(|e| format!("invalid JSON: {e}"))?;
    match from_watch_document(&value) {
        Ok(converted) => Ok(converted.event.stream),
        Err(e) => Err(e.to_string()),
    }
}

/// The stream of a complete document from its first fields alone: `type`, and `apiVersion`
/// and `kind` of `object`, which kubectl prints before the rest of the object, so that the
/// first pass does not read every document through. `None` when they are not plain
/// strings naming a known event type and kind (the full classification then decides). The
/// rest of the document is not checked here: the second pass reads it.
pub(super) fn peek_stream(doc: &[u8]) -> Option<Stream> {
    peek_head(doc).map(|(stream, _)| stream)
}

/// [`peek_stream`], and whether the document is an ADDED event.
pub(super) fn peek_head(doc: &[u8]) -> Option<(Stream, bool)> {
    let mut scan = Scan { text: doc, at: 0 };
    let (mut event_type, mut api_version, mut kind) = (None, None, None);
    scan.byte(b'{')?;
    loop {
        let key = scan.string()?;
        scan.byte(b':')?;
        match key {
            b"type" => event_type = Some(scan.string()?),
            b"object" => {
                scan.byte(b'{')?;
                let mut closed = false;
                while api_version.is_none() || kind.is_none() {
                    let key = scan.string()?;
                    scan.byte(b':')?;
                    match key {
                        b"apiVersion" => api_version = Some(scan.string()?),
                        b"kind" => kind = Some(scan.string()?),
                        _ => scan.value()?,
                    }
                    if scan.byte(b',').is_none() {
                        scan.byte(b'}')?;
                        closed = true;
                        break;
                    }
                }
                if event_type.is_some() {
                    break;
                }
                if !closed {
                    scan.close(1)?;
                }
            }
            _ => scan.value()?,
        }
        if event_type.is_some() && kind.is_some() {
            break;
        }
        if scan.byte(b',').is_none() {
            break;
        }
    }
    let event_type = event_type?;
    if !matches!(
        event_type,
        b"ADDED" | b"MODIFIED" | b"DELETED" | b"BOOKMARK"
    ) {
        return None;
    }
    let api_version = std::str::from_utf8(api_version.unwrap_or_default()).ok()?;
    let kind = std::str::from_utf8(kind.unwrap_or_default()).ok()?;
    kinds::of_object(api_version, kind).map(|spec| (spec.stream, event_type == b"ADDED"))
}

/// `object.metadata.resourceVersion` of a document, read without building anything, for
/// ordering an initial list before reading it. `None` when it is not there as a plain
/// string of a number (the list is then read and sorted whole, as the conversion reads
/// it).
pub(super) fn peek_resource_version(doc: &[u8]) -> Option<i64> {
    let mut scan = Scan { text: doc, at: 0 };
    scan.byte(b'{')?;
    for key in [&b"object"[..], b"metadata"] {
        scan.find_key(key)?;
        scan.byte(b'{')?;
    }
    scan.find_key(b"resourceVersion")?;
    let rv = std::str::from_utf8(scan.string()?).ok()?;
    ipaudit_schemas::event::parse_resource_version(rv)
}

/// A cursor over JSON text that skips what it does not read.
pub(super) struct Scan<'a> {
    pub(super) text: &'a [u8],
    pub(super) at: usize,
}

impl<'a> Scan<'a> {
    pub(super) fn skip_whitespace(&mut self) {
        while self
            .text
            .get(self.at)
            .is_some_and(|b| b.is_ascii_whitespace())
        {
            self.at += 1;
        }
    }

    pub(super) fn byte(&mut self, expected: u8) -> Option<()> {
        self.skip_whitespace();
        (self.text.get(self.at) == Some(&expected)).then(|| self.at += 1)
    }

    /// A string without escapes, as its bytes.
    pub(super) fn string(&mut self) -> Option<&'a [u8]> {
        self.byte(b'"')?;
        let rest = &self.text[self.at..];
        let end = memchr::memchr2(b'"', b'\\', rest)?;
        if rest[end] != b'"' {
            return None;
        }
        self.at += end + 1;
        Some(&rest[..end])
    }

    /// Past the end of a string whose opening quote was read.
    pub(super) fn skip_string(&mut self) -> Option<()> {
        loop {
            let rest = &self.text[self.at..];
            let end = memchr::memchr2(b'"', b'\\', rest)?;
            if rest[end] == b'"' {
                self.at += end + 1;
                return Some(());
            }
            self.at += end + 2;
        }
    }

    /// Past the `depth` open objects or arrays the cursor is in.
    pub(super) fn close(&mut self, mut depth: usize) -> Option<()> {
        while depth > 0 {
            let b = *self.text.get(self.at)?;
            self.at += 1;
            match b {
                b'"' => self.skip_string()?,
                b'{' | b'[' => depth += 1,
                b'}' | b']' => depth -= 1,
                _ => {}
            }
        }
        Some(())
    }

    /// Past the key `wanted` and its colon, in an object whose `{` was read; the values of
    /// the keys before it are skipped.
    pub(super) fn find_key(&mut self, wanted: &[u8]) -> Option<()> {
        loop {
            let key = self.string()?;
            self.byte(b':')?;
            if key == wanted {
                return Some(());
            }
            self.value()?;
            self.byte(b',')?;
        }
    }

    /// Past one value.
    pub(super) fn value(&mut self) -> Option<()> {
        self.skip_whitespace();
        let b = *self.text.get(self.at)?;
        self.at += 1;
        match b {
            b'"' => self.skip_string(),
            b'{' | b'[' => self.close(1),
            _ => {
                while self
                    .text
                    .get(self.at)
                    .is_some_and(|b| !matches!(b, b',' | b'}' | b']') && !b.is_ascii_whitespace())
                {
                    self.at += 1;
                }
                Some(())
            }
        }
    }
}

/// The stream of a complete document, as the first pass names it (from its first fields,
/// else by the full classification), and whether it is an ADDED event (`None` when the
/// first fields did not say); or why it is no event of a known kind.
pub(super) fn stream_of(doc: &[u8]) -> Result<(Stream, Option<bool>), String> {
    match peek_head(doc) {
        Some((stream, added)) => Ok((stream, Some(added))),
        None => classify(doc).map(|stream| (stream, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_named_by_the_first_fields_in_either_order() {
        let ip = br#"{"type": "ADDED", "object": {"apiVersion": "kubeovn.io/v1", "kind": "IP", "spec": {}}}"#;
        assert_eq!(peek_stream(ip), Some(Stream::Ip));
        let late_type = br#"{"object": {"metadata": {"a": ["}", {"b": "\"{"}]}, "kind": "Subnet", "apiVersion": "kubeovn.io/v1", "spec": {"x": 1}}, "type": "DELETED"}"#;
        assert_eq!(peek_stream(late_type), Some(Stream::Subnet));
        // Escapes, unknown types and kinds are left to the full classification.
        let escaped = br#"{"type": "ADD\u0045D", "object": {"apiVersion": "v1", "kind": "Pod"}}"#;
        assert_eq!(peek_stream(escaped), None);
        assert_eq!(classify(escaped), Ok(Stream::Pod));
        let error = br#"{"type": "ERROR", "object": {"kind": "Status", "code": 410}}"#;
        assert_eq!(peek_stream(error), None);
    }
}
