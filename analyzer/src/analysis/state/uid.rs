//! An object's uid, stored in 24 bytes with no allocation for the uids a cluster really
//! has: a canonical lower-case UUID (what the API server issues) is kept as its 16 bytes,
//! a short uid (up to 22 bytes, what tests and hand-made objects carry) inline, anything
//! else in a box. Every uid reads back exactly as sent: only the canonical text form of a
//! UUID is packed, so that printing it again gives the same string.

use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

const INLINE: usize = 22;
const UUID_LEN: usize = 36;
const HYPHENS: [usize; 4] = [8, 13, 18, 23];
const HEX: &[u8; 16] = b"0123456789abcdef";
/// Where each byte's two hex digits start in the text of a UUID.
const HEX_AT: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];

/// An object's `metadata.uid`. Saved as its text.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Uid(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    Uuid([u8; 16]),
    Inline { len: u8, bytes: [u8; INLINE] },
    Boxed(Box<str>),
}

impl Uid {
    /// The uid `text`.
    pub fn new(text: &str) -> Self {
        if let Some(uuid) = parse_uuid(text) {
            return Uid(Repr::Uuid(uuid));
        }
        if text.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..text.len()].copy_from_slice(text.as_bytes());
            // `len` fits: it is at most INLINE.
            return Uid(Repr::Inline {
                len: text.len() as u8,
                bytes,
            });
        }
        Uid(Repr::Boxed(text.into()))
    }

    /// The uid as text, without allocating.
    pub fn text(&self) -> UidText<'_> {
        match &self.0 {
            Repr::Uuid(uuid) => {
                let mut buf = [b'-'; UUID_LEN];
                for (byte, at) in uuid.iter().zip(HEX_AT) {
                    buf[at] = HEX[usize::from(byte >> 4)];
                    buf[at + 1] = HEX[usize::from(byte & 0xf)];
                }
                UidText::Uuid(buf)
            }
            Repr::Inline { len, bytes } => {
                // Always valid: copied from a `str` whole.
                UidText::Borrowed(std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or(""))
            }
            Repr::Boxed(text) => UidText::Borrowed(text),
        }
    }

    /// The length of its text.
    fn len(&self) -> usize {
        match &self.0 {
            Repr::Uuid(_) => UUID_LEN,
            Repr::Inline { len, .. } => usize::from(*len),
            Repr::Boxed(text) => text.len(),
        }
    }

    /// Whether the uid is empty (an event without metadata).
    pub fn is_empty(&self) -> bool {
        matches!(&self.0, Repr::Inline { len: 0, .. })
    }
}

impl Default for Uid {
    fn default() -> Self {
        Uid::new("")
    }
}

impl From<&str> for Uid {
    fn from(text: &str) -> Self {
        Uid::new(text)
    }
}

impl PartialEq<str> for Uid {
    fn eq(&self, other: &str) -> bool {
        // Every event of an object is compared with its record: printing a packed UUID is
        // a table lookup per digit, cheaper than parsing the event's text.
        self.len() == other.len() && *self.text() == *other
    }
}

impl PartialEq<&str> for Uid {
    fn eq(&self, other: &&str) -> bool {
        *self.text() == **other
    }
}

impl PartialEq<Uid> for &str {
    fn eq(&self, other: &Uid) -> bool {
        other == self
    }
}

impl PartialEq<Uid> for str {
    fn eq(&self, other: &Uid) -> bool {
        other == self
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

impl fmt::Debug for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.text(), f)
    }
}

impl Serialize for Uid {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text())
    }
}

impl<'de> Deserialize<'de> for Uid {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Owned: checkpoints are read from readers that cannot lend their strings.
        let text = String::deserialize(deserializer)?;
        Ok(Uid::new(&text))
    }
}

/// A uid's text, on the stack when the uid is packed.
pub enum UidText<'a> {
    /// A packed UUID, printed.
    Uuid([u8; UUID_LEN]),
    /// Text held as such.
    Borrowed(&'a str),
}

impl Deref for UidText<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            // Always valid: ASCII hex digits and hyphens.
            UidText::Uuid(buf) => std::str::from_utf8(buf).unwrap_or(""),
            UidText::Borrowed(text) => text,
        }
    }
}

/// The 16 bytes of a canonical (lower-case, hyphenated) UUID; `None` for any other text.
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let text = text.as_bytes();
    if text.len() != UUID_LEN {
        return None;
    }
    if HYPHENS.iter().any(|&i| text[i] != b'-') {
        return None;
    }
    // Every new object's uid is parsed: a table lookup per digit, and one test at the end
    // (a digit that is not one sets the high bits).
    let mut out = [0u8; 16];
    let mut not_hex = 0u8;
    for (byte, at) in out.iter_mut().zip(HEX_AT) {
        let (high, low) = (
            HEX_VALUE[usize::from(text[at])],
            HEX_VALUE[usize::from(text[at + 1])],
        );
        not_hex |= high | low;
        *byte = (high << 4) | low;
    }
    (not_hex & 0xf0 == 0).then_some(out)
}

/// A lower-case hex digit's value by its byte; 0xff for any other byte.
const HEX_VALUE: [u8; 256] = {
    let mut table = [0xff; 256];
    let mut digit = 0;
    while digit < 16 {
        table[HEX[digit] as usize] = digit as u8;
        digit += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uid_takes_24_bytes_and_reads_back_as_sent_in_every_form() {
        assert_eq!(std::mem::size_of::<Uid>(), 24);
        for text in [
            "",
            "ip-uid-12",
            "0123456789abcdef012345",
            "0123456789abcdef0123456",
            "3f2b8c1e-9a4d-4e7b-8c2a-1f0e9d8c7b6a",
            // Not canonical: upper case, no hyphens, hyphen moved, non-hex.
            "3F2B8C1E-9A4D-4E7B-8C2A-1F0E9D8C7B6A",
            "3f2b8c1e9a4d4e7b8c2a1f0e9d8c7b6a0000",
            "3f2b8c1e9-a4d-4e7b-8c2a-1f0e9d8c7b6a",
            "3f2b8c1e-9a4d-4e7b-8c2a-1f0e9d8c7b6g",
            "ünïcödé-uid-that-is-longer-than-inline",
        ] {
            let uid = Uid::new(text);
            assert_eq!(&*uid.text(), text);
            assert_eq!(uid.to_string(), text);
            assert!(uid == text);
            assert!(uid != *"3f2b8c1e-9a4d-4e7b-8c2a-1f0e9d8c7b6b");
            let json = serde_json::to_string(&uid).unwrap();
            assert_eq!(json, serde_json::to_string(text).unwrap());
            assert_eq!(serde_json::from_str::<Uid>(&json).unwrap(), uid);
        }
        assert!(matches!(
            Uid::new("3f2b8c1e-9a4d-4e7b-8c2a-1f0e9d8c7b6a").0,
            Repr::Uuid(_)
        ));
        assert!(Uid::new("").is_empty() && !Uid::new("a").is_empty());
        assert!(Uid::new("a") != Uid::new("b"));
    }
}
