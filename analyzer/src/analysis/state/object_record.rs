//! One live object of any watched kind as the state keeps it ([`ObjectRecord`]), its saved
//! form, and how a record is made from an event and the version before it.

use serde::{Deserialize, Serialize};
use smol_str::SmolStr;

use ipaudit_schemas::{is_kube_ovn_finalizer, KindPart, ObjectMeta, WatchEvent};

use super::{EventRef, Finalizers, Millis, Part, Uid, IP_RESERVED_LABEL};

/// A live object of any watched kind. Kept small: a cluster holds hundreds of thousands.
/// Saved as `SavedRecord`.
#[derive(Debug, Clone, Deserialize)]
#[serde(from = "ReadRecord")]
pub struct ObjectRecord {
    /// metadata.uid.
    pub uid: Uid,
    /// metadata.finalizers.
    pub finalizers: Finalizers,
    /// The version this object (this uid) was first seen at.
    pub first_rv: i64,
    /// The time it was first seen at.
    pub(super) first_ms: Millis,
    /// Its deletion, once requested (apart: few objects are terminating at any time).
    pub(super) deletion: Option<Box<Deletion>>,
    /// The latest event: the object's current version.
    pub last: EventRef,
    /// What the rules read of the kind's part.
    pub(super) part: Part,
}

/// A requested deletion.
#[derive(Debug, Clone)]
pub(super) struct Deletion {
    /// The first event that showed a deletionTimestamp.
    pub(super) requested: EventRef,
    /// metadata.deletionTimestamp of the current version.
    pub(super) timestamp_ms: Millis,
}

/// [`ObjectRecord`] as saved: with kube-ovn's reserved label beside the part, where a
/// record kept it before it moved into the IP's part. Written from borrowed fields,
/// read as [`ReadRecord`].
#[derive(Serialize, Deserialize)]
struct SavedRecord<U, F, M, E, L, P> {
    pub(super) uid: U,
    pub(super) finalizers: F,
    pub(super) deletion_ms: M,
    pub(super) reserved: bool,
    pub(super) first_rv: i64,
    pub(super) first_ms: M,
    pub(super) deletion_requested: Option<E>,
    pub(super) last: L,
    pub(super) part: P,
}

/// A [`SavedRecord`] read back.
type ReadRecord = SavedRecord<Uid, Finalizers, Millis, EventRef, EventRef, KindPart>;

impl From<ReadRecord> for ObjectRecord {
    fn from(saved: ReadRecord) -> Self {
        let mut part = saved.part;
        ObjectRecord {
            uid: saved.uid,
            finalizers: saved.finalizers,
            first_rv: saved.first_rv,
            first_ms: saved.first_ms,
            deletion: Deletion::of(saved.deletion_requested, saved.deletion_ms, &saved.last),
            last: saved.last,
            part: Part::new(&mut part, saved.reserved, None),
        }
    }
}

impl Serialize for ObjectRecord {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        SavedRecord {
            uid: &self.uid,
            finalizers: &self.finalizers,
            deletion_ms: Millis::from(self.deletion_ms()),
            reserved: self.reserved(),
            first_rv: self.first_rv,
            first_ms: self.first_ms,
            deletion_requested: self.deletion_requested(),
            last: &self.last,
            part: &self.part,
        }
        .serialize(serializer)
    }
}

impl Deletion {
    /// The deletion of a record whose current version `last` shows `timestamp_ms`: first
    /// requested by `requested`, or by `last` itself when that is the first to show a
    /// timestamp. `None` while neither requested it.
    fn of(
        requested: Option<EventRef>,
        timestamp_ms: Millis,
        last: &EventRef,
    ) -> Option<Box<Deletion>> {
        let requested = requested.or_else(|| timestamp_ms.get().map(|_| last.clone()));
        requested.map(|requested| {
            Box::new(Deletion {
                requested,
                timestamp_ms,
            })
        })
    }
}

impl ObjectRecord {
    /// The first event that showed a deletionTimestamp.
    pub fn deletion_requested(&self) -> Option<&EventRef> {
        self.deletion.as_ref().map(|d| &d.requested)
    }

    /// Labelled `ovn.kubernetes.io/ip_reserved: "true"` (a kube-ovn IP reserved by hand).
    pub fn reserved(&self) -> bool {
        self.part.reserved()
    }

    /// What the rules read of the kind's part.
    pub fn part(&self) -> &Part {
        &self.part
    }

    /// The object's resourceVersion, as sent.
    pub fn resource_version(&self) -> SmolStr {
        self.last.resource_version()
    }

    /// The object's resourceVersion as a number (-1 when it is not one).
    pub fn rv(&self) -> i64 {
        self.last.rv
    }

    /// kube-ovn's finalizer (either name) and its index, if the object still has it.
    pub fn kube_ovn_finalizer(&self) -> Option<(usize, &str)> {
        self.finalizer_where(is_kube_ovn_finalizer)
    }

    /// The first finalizer that matches, with its index.
    pub fn finalizer_where(&self, matches: impl Fn(&str) -> bool) -> Option<(usize, &str)> {
        self.finalizers
            .iter()
            .enumerate()
            .find(|(_, f)| matches(f))
            .map(|(i, f)| (i, &**f))
    }

    /// Whether deletion was requested.
    pub fn is_terminating(&self) -> bool {
        self.deletion_ms().is_some()
    }

    /// metadata.deletionTimestamp, Unix ms.
    pub fn deletion_ms(&self) -> Option<i64> {
        self.deletion.as_ref().and_then(|d| d.timestamp_ms.get())
    }

    /// The time it was first seen at.
    pub fn first_ms(&self) -> Option<i64> {
        self.first_ms.get()
    }

    /// The pod's phase, for Pod records.
    pub fn phase(&self) -> Option<&str> {
        match self.part() {
            Part::Pod(pod) => Some(pod.phase()),
            _ => None,
        }
    }

    /// Whether a Pod record is live: it exists and has not finished (a terminating pod
    /// still holds its address).
    pub fn is_live_pod(&self) -> bool {
        !matches!(self.phase(), Some("Succeeded" | "Failed") | None)
    }
}

/// What a new version of an object keeps of the version before it.
pub(super) struct Previous {
    pub(super) same_object: bool,
    pub(super) finalizers: Finalizers,
    /// The held object's uid (the new version's, when it is the same object).
    pub(super) uid: Uid,
    pub(super) replaced_uid: Option<String>,
    pub(super) rv: i64,
    pub(super) first_rv: i64,
    pub(super) first_ms: Millis,
    pub(super) deletion_requested: Option<EventRef>,
}

/// The record for an upserted object; what the previous version of the same object knew
/// (first sighting, first deletion request) carries over.
///
/// `like`: the part of the record held under its name, whose shared fields the new part
/// takes when they are alike.
pub(super) fn record_of(
    event: &mut WatchEvent,
    last: EventRef,
    previous: Option<&Previous>,
    like: Option<&Part>,
) -> ObjectRecord {
    let no_meta;
    let meta = match &event.metadata {
        Some(meta) => meta,
        None => {
            no_meta = ObjectMeta::default();
            &no_meta
        }
    };
    let mut no_part;
    let part = match &mut event.part {
        Some(part) => part,
        None => {
            no_part = KindPart::empty(event.stream).unwrap_or(KindPart::Pod(Default::default()));
            &mut no_part
        }
    };
    drop_unread(part);
    let reserved = meta
        .labels
        .get(IP_RESERVED_LABEL)
        .is_some_and(|v| v == "true");
    let part = Part::new(part, reserved, like);
    ObjectRecord {
        uid: match previous {
            Some(p) => p.uid.clone(),
            None => Uid::new(&meta.uid),
        },
        finalizers: Finalizers::new_or_same(&meta.finalizers, previous.map(|p| &p.finalizers)),
        first_rv: previous.map_or(last.rv, |p| p.first_rv),
        first_ms: previous.map_or(last.time_ms, |p| p.first_ms),
        deletion: Deletion::of(
            previous.and_then(|p| p.deletion_requested.clone()),
            Millis::from(meta.deletion_timestamp_ms),
            &last,
        ),
        part,
        last,
    }
}

/// Frees what no rule reads of a part, so that a live object costs only what the analysis
/// needs (the event keeps everything; the record is not the audit log).
fn drop_unread(part: &mut KindPart) {
    // IPs and pods keep only what rules read: see `part`.
    if let KindPart::Subnet(subnet) = part {
        subnet.cidr_block = String::new();
        subnet.provider = String::new();
        subnet.protocol = String::new();
        subnet.gateway = String::new();
        subnet.v4_available_ips = None;
        subnet.v6_using_ips = None;
        subnet.v6_available_ips = None;
    }
}
