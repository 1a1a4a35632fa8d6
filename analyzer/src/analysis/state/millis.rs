//! A time a record may have, in 8 bytes instead of an `Option<i64>`'s 16: records hold
//! two (first seen, deletion requested) and a cluster holds a million records.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Unix milliseconds, or none. `i64::MIN` (292 million years BC) stands for none.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Millis(Option<NonMin>);

/// An `i64` other than `i64::MIN`, so that `Option` of it takes 8 bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
struct NonMin(std::num::NonZeroU64);

impl NonMin {
    fn new(ms: i64) -> Option<NonMin> {
        // XOR with the sign bit maps i64::MIN to 0, the one value NonZeroU64 leaves out.
        std::num::NonZeroU64::new(ms.cast_unsigned() ^ (1 << 63)).map(NonMin)
    }

    fn get(self) -> i64 {
        (self.0.get() ^ (1 << 63)).cast_signed()
    }
}

impl Millis {
    /// The time, if any.
    pub fn get(self) -> Option<i64> {
        self.0.map(NonMin::get)
    }
}

impl From<Option<i64>> for Millis {
    fn from(ms: Option<i64>) -> Self {
        Millis(ms.and_then(NonMin::new))
    }
}

impl std::fmt::Debug for Millis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

impl Serialize for Millis {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.get().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Millis {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Option::<i64>::deserialize(deserializer).map(Millis::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_takes_8_bytes_and_reads_back_as_set_for_every_value_but_the_lowest() {
        assert_eq!(std::mem::size_of::<Millis>(), 8);
        for ms in [0, 1, -1, 1_750_000_000_000, i64::MAX, i64::MIN + 1] {
            let t = Millis::from(Some(ms));
            assert_eq!(t.get(), Some(ms));
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, ms.to_string());
            assert_eq!(serde_json::from_str::<Millis>(&json).unwrap(), t);
        }
        assert_eq!(Millis::from(None).get(), None);
        assert_eq!(Millis::from(Some(i64::MIN)).get(), None);
        assert_eq!(serde_json::to_string(&Millis::default()).unwrap(), "null");
    }
}
