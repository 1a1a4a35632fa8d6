//! An object's finalizers, shared: a cluster has a handful of distinct finalizer lists
//! (kube-ovn's, a controller's or two), so every record with the same list points at one
//! copy of it (8 bytes a record, no allocation) instead of owning a vector of strings.

use std::hash::{BuildHasher, Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use rustc_hash::FxBuildHasher;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::shared::SharedTable;

/// How many distinct lists are kept to share. Past it (hostile or unusual input: a new
/// finalizer per object), a list is held by its record alone, so the table stays bounded.
const SHARED_LISTS: usize = 4_096;

/// A list behind one pointer (8 bytes a record; the list is read only when a rule looks).
type List = Arc<Box<[Box<str>]>>;

/// The lists handed out so far, process-wide: records of every cluster share them.
static LISTS: SharedTable<Box<[Box<str>]>> = SharedTable::new(SHARED_LISTS);

/// The hash of a list of names, the same for `[String]` and `[Box<str>]`.
fn list_hash<'a>(names: impl Iterator<Item = &'a str>) -> u64 {
    let mut hasher = FxBuildHasher.build_hasher();
    for name in names {
        name.hash(&mut hasher);
    }
    hasher.finish()
}

/// An object's `metadata.finalizers`, in order. Saved as a list of strings.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Finalizers(Option<List>);

impl Finalizers {
    /// The finalizers `names`, sharing the copy of an equal list seen before.
    pub fn new(names: &[String]) -> Self {
        if names.is_empty() {
            return Finalizers(None);
        }
        let hash = list_hash(names.iter().map(String::as_str));
        let list = LISTS.get_or_make(
            hash,
            |list| same(list, names),
            || names.iter().map(|n| Box::from(n.as_str())).collect(),
            |list| list_hash(list.iter().map(|n| &**n)),
        );
        Finalizers(Some(list))
    }

    /// [`Finalizers::new`], keeping `previous` (the object's version before) when the list
    /// did not change: the common case, and then nothing is looked up.
    pub fn new_or_same(names: &[String], previous: Option<&Finalizers>) -> Self {
        match previous {
            Some(previous) if same(previous, names) => previous.clone(),
            _ => Finalizers::new(names),
        }
    }
}

/// Whether a held list has exactly these names, in order.
fn same(list: &[Box<str>], names: &[String]) -> bool {
    list.len() == names.len() && list.iter().zip(names).all(|(a, b)| **a == **b)
}

impl Deref for Finalizers {
    type Target = [Box<str>];

    fn deref(&self) -> &[Box<str>] {
        self.0.as_deref().map_or(&[], |list| list)
    }
}

impl std::fmt::Debug for Finalizers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Finalizers {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Finalizers {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Finalizers::new(&Vec::<String>::deserialize(deserializer)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_finalizer_lists_share_one_copy_and_keep_their_order() {
        let a = Finalizers::new(&["x.io/one".into(), "x.io/two".into()]);
        let b = Finalizers::new(&["x.io/one".into(), "x.io/two".into()]);
        let c = Finalizers::new(&["x.io/two".into(), "x.io/one".into()]);
        assert!(Arc::ptr_eq(a.0.as_ref().unwrap(), b.0.as_ref().unwrap()));
        assert_eq!(&*a, ["x.io/one".into(), "x.io/two".into()] as [Box<str>; 2]);
        assert_ne!(a, c);
        assert_eq!(c.join(", "), "x.io/two, x.io/one");
        let again = Finalizers::new_or_same(&["x.io/one".into(), "x.io/two".into()], Some(&c));
        assert!(Arc::ptr_eq(
            a.0.as_ref().unwrap(),
            again.0.as_ref().unwrap()
        ));
        let kept = Finalizers::new_or_same(&["x.io/two".into(), "x.io/one".into()], Some(&c));
        assert!(Arc::ptr_eq(c.0.as_ref().unwrap(), kept.0.as_ref().unwrap()));
        assert!(Finalizers::new(&[]).is_empty());
        assert_eq!(std::mem::size_of::<Finalizers>(), 8);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, r#"["x.io/one","x.io/two"]"#);
        assert_eq!(serde_json::from_str::<Finalizers>(&json).unwrap(), a);
    }
}
