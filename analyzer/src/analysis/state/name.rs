//! An object's name (`namespace/name` when namespaced), shared by its record, the index
//! entries and the evidence that point at it: one allocation per object, whose count
//! takes 8 bytes (`std`'s `Arc` keeps a weak count beside it, which nothing here uses).

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An object's name, shared. Saved as its text.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(triomphe::Arc<str>);

impl Deref for Name {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Name {
    fn from(name: &str) -> Self {
        Name(triomphe::Arc::from(name))
    }
}

impl From<String> for Name {
    fn from(name: String) -> Self {
        Name(triomphe::Arc::from(name))
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl Serialize for Name {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Name::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_a_shared_str_with_a_count_of_8_bytes_saved_as_its_text() {
        let name = Name::from("default/web-0");
        let again = name.clone();
        assert!(triomphe::Arc::ptr_eq(&name.0, &again.0));
        assert_eq!(&*again, "default/web-0");
        let map: std::collections::HashMap<Name, u8> = [(name, 1)].into_iter().collect();
        assert_eq!(map.get("default/web-0"), Some(&1), "looked up by its text");
        let json = serde_json::to_string(&again).unwrap();
        assert_eq!(json, r#""default/web-0""#);
        assert_eq!(serde_json::from_str::<Name>(&json).unwrap(), again);
        assert_eq!(std::mem::size_of::<Name>(), 16);
    }
}
