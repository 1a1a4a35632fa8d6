//! Applying one event to the state: locating its record, moving the object forward (an
//! event older than what is held changes nothing), and keeping the indexes and the
//! owner bindings in step.

use ipaudit_schemas::{EventType, Stream, WatchEvent};

use super::indexes::binds_owner_uid;
use super::object_record::{record_of, Previous};
use super::records::RecordId;
use super::{
    holdings, Applied, ClusterState, EventRef, Holding, Located, Name, ObjectRecord, RecordKey,
    ReleasedHolding, Slot,
};

impl ClusterState {
    /// Versions went backwards (a new epoch, see `reorder`): what is held stays, but no
    /// version of the new epoch is compared with one of before, so that the deletions after
    /// an etcd restore are not taken for stale events.
    pub fn start_epoch(&mut self) {
        self.tombstones.clear();
        self.tombstone_order.clear();
        self.from_earlier_epoch = self
            .objects
            .iter()
            .flat_map(|(stream, records)| records.keys().map(move |name| (stream, name.clone())))
            .collect();
    }

    /// Applies one event, in resourceVersion order, without a history clock: a deletion is
    /// dated by its event alone (the engine gives its clock to
    /// [`ClusterState::apply_located`]).
    pub fn apply(&mut self, mut event: WatchEvent) -> Applied {
        let located = self.locate(&event);
        self.apply_located(&mut event, located, None)
    }

    /// Points at `event` like [`EventRef::of`] and finds the record held under its name:
    /// the name is then shared with that record (only an object seen for the first time
    /// allocates its name), and applying the event looks nothing up again.
    pub fn locate(&mut self, event: &WatchEvent) -> Located {
        let (name, slot) = match &event.metadata {
            Some(meta) => {
                let key = match &meta.namespace {
                    Some(ns) if !ns.is_empty() => {
                        self.scratch.clear();
                        self.scratch.push_str(ns);
                        self.scratch.push('/');
                        self.scratch.push_str(&meta.name);
                        self.scratch.as_str()
                    }
                    _ => meta.name.as_str(),
                };
                let records = self.objects.of(event.stream);
                let slot = records.find(key);
                match slot.and_then(|s| records.at(s)) {
                    Some(held) => (held.last.name.clone(), slot),
                    None => (Name::from(key), None),
                }
            }
            None => (Name::from(""), None),
        };
        Located {
            at: EventRef::at(event, name),
            slot,
        }
    }

    /// The record an applied event left (`None` when it removed one, or changed nothing).
    pub fn applied_record(&self, applied: &Applied) -> Option<&ObjectRecord> {
        let (stream, _) = applied.key.as_ref()?;
        self.objects.of(*stream).at(applied.slot?)
    }

    /// [`ClusterState::apply`], with the event already located (the engine keeps its
    /// [`EventRef`] for the rules; the record shares its name). What the record keeps is
    /// copied or moved out of `event`; the rest is left for the event's next reading to
    /// reuse.
    ///
    /// `history_ms`: the time history had reached with the events before this one. A
    /// deletion that neither an observation time nor a deletion timestamp dates is
    /// remembered (a pod gone, a pool deleted) as no earlier than that: it came after
    /// them, while its object shows an older time only (a kubectl recording dates a
    /// DELETED object by its creation, or its last managedFields entry, when no deletion
    /// was requested), which would make a grace period from its going seem long over.
    /// A deletion timestamp is kept: it is when the deletion was asked for (and what an
    /// audit log's DELETE request is matched by).
    pub fn apply_located(
        &mut self,
        event: &mut WatchEvent,
        located: Located,
        history_ms: Option<i64>,
    ) -> Applied {
        let Located { mut at, slot } = located;
        if let (Some(now), true) = (history_ms, self.undated_gone_pods) {
            // Pods that went before history had a time went at the latest now: dated so,
            // a grace period from their going starts here instead of at the epoch.
            self.undated_gone_pods = false;
            for gone in self.gone_pods.values_mut() {
                if gone.at.time_ms().is_none() {
                    gone.at.not_before(Some(now));
                }
            }
        }
        if event.event_type == EventType::SyncEnd {
            self.listed
                .entry(event.stream)
                .or_insert_with(|| at.clone());
        }
        if !event.event_type.carries_object() || event.stream == Stream::Unknown {
            return Applied::default();
        }
        let rv = event.resource_version_num.unwrap_or(-1);
        let uid = event.uid();
        if self.tombstones.get(uid).is_some_and(|dead| rv <= *dead) {
            return stale();
        }
        let name = at.name.clone();
        let of_earlier_epoch = !self.from_earlier_epoch.is_empty()
            && self
                .from_earlier_epoch
                .remove(&(event.stream, name.clone()));
        let held = slot
            .and_then(|s| self.objects.of(event.stream).at(s))
            .map(|r| {
                let same_object = r.uid == *uid;
                Previous {
                    same_object,
                    uid: r.uid.clone(),
                    // Needed only when a new uid replaced it (a pod then counts as gone).
                    replaced_uid: (!same_object).then(|| r.uid.to_string()),
                    rv: r.rv(),
                    first_rv: r.first_rv,
                    first_ms: r.first_ms,
                    deletion_requested: r.deletion_requested().cloned(),
                    finalizers: r.finalizers.clone(),
                }
            });
        let same_object = held.as_ref().is_some_and(|p| p.same_object);
        if same_object && !of_earlier_epoch && held.as_ref().is_some_and(|p| rv <= p.rv) {
            return stale();
        }
        let stream = event.stream;
        if event.event_type.is_deletion() {
            if held.is_some() && !same_object {
                // The deletion of an object this state never held under this name.
                return stale();
            }
            self.bury(uid, rv);
            let dated_by_deletion = event.observed_at_ms.is_some()
                || event
                    .metadata
                    .as_ref()
                    .is_some_and(|m| m.deletion_timestamp_ms.is_some());
            if !dated_by_deletion {
                at.not_before(history_ms);
            }
            if holdings::is_pool(stream) {
                self.remember_pool_deletion(stream, &name, at.clone());
            }
            if stream == Stream::Pod {
                self.remember_gone_pod(uid, at);
            }
            let before = slot.and_then(|s| self.objects.of_mut(stream).remove_at(s));
            if before.is_some() && holdings::is_pool(stream) {
                self.indexes.set_pool_live(stream, &name, false);
            }
            let key: RecordKey = (stream, name);
            let released = match (&before, slot) {
                (Some(record), Some(slot)) => {
                    let pools = holdings::pool_names(record.part());
                    let held = holdings::holdings(&key.1, record);
                    let id = RecordId { stream, slot };
                    self.indexes.remove((id, &key), &pools, &held, &[])
                }
                _ => Vec::new(),
            };
            return Applied {
                key: Some(key),
                before,
                released,
                reindexed: true,
                ..Applied::default()
            };
        }
        let previous = held.as_ref().filter(|p| p.same_object);
        let like = slot
            .and_then(|s| self.objects.of(stream).at(s))
            .map(ObjectRecord::part);
        let record = record_of(event, at, previous, like);
        if let Some(replaced) = held.as_ref().filter(|p| !p.same_object) {
            if stream == Stream::Pod {
                // A new uid under a held name: the old pod is gone even if its deletion
                // was missed.
                let old_uid = replaced.replaced_uid.clone().unwrap_or_default();
                self.remember_gone_pod(&old_uid, record.last.clone());
            }
        }
        if holdings::is_pool(stream) {
            if let Some(deletions) = self.pool_deletions.get_mut(&stream) {
                deletions.remove(&*name);
            }
        }
        let key: RecordKey = (stream, record.last.name.clone());
        let records = self.objects.of_mut(stream);
        let (slot, before) = match slot {
            Some(slot) => (slot, records.replace(slot, record)),
            None => {
                if holdings::is_pool(stream) {
                    self.indexes.set_pool_live(stream, &key.1, true);
                }
                (records.insert_new(record), None)
            }
        };
        let (reindexed, released) = self.reindex(&key, slot, before.as_ref());
        Applied {
            key: Some(key),
            slot: Some(slot),
            before,
            released,
            reindexed,
            stale: false,
        }
    }

    /// Updates the indexes from `before` to the record now under `key`; returns whether
    /// anything indexed may have changed, and what the record no longer holds.
    pub(super) fn reindex(
        &mut self,
        key: &RecordKey,
        slot: Slot,
        before: Option<&ObjectRecord>,
    ) -> (bool, Vec<ReleasedHolding>) {
        let id = RecordId {
            stream: key.0,
            slot,
        };
        let released = {
            let Some(after) = self.objects.of(key.0).at(slot) else {
                return (false, Vec::new());
            };
            let unchanged = before.is_some_and(|b| b.uid == after.uid && b.part() == after.part());
            if unchanged {
                // The common case (status churn): nothing an index holds changed.
                return (false, Vec::new());
            }
            let new_pools = holdings::pool_names(after.part());
            let new_holdings = holdings::holdings(&key.1, after);
            let released = match before {
                Some(before) => {
                    let replaced = before.uid != after.uid;
                    let keep: &[Holding<'_>] = if replaced { &[] } else { &new_holdings };
                    let old_pools = holdings::pool_names(before.part());
                    let old = holdings::holdings(&key.1, before);
                    self.indexes.remove((id, key), &old_pools, &old, keep)
                }
                None => Vec::new(),
            };
            self.indexes.add(id, &new_pools, &new_holdings);
            if binds_owner_uid(key.0) {
                // whereabouts holdings that just appeared belong to the live pod of their
                // podref.
                let pods = self.objects.of(Stream::Pod);
                for holding in &new_holdings {
                    if let Some(pod) = pods.get(holding.owner.as_ref()) {
                        self.indexes
                            .bind(key, holding.address, &pod.uid.text(), false);
                    }
                }
            }
            released
        };
        if key.0 == Stream::Pod && self.holds_owner_binding_kinds() {
            self.bind_holdings_to_pod(&key.1);
        }
        (true, released)
    }

    /// Whether any record of a kind whose holdings are bound to pod uids is held: until
    /// one is, a pod has nothing to bind and its name need not be looked up.
    pub(super) fn holds_owner_binding_kinds(&self) -> bool {
        Stream::ALL
            .iter()
            .any(|&stream| binds_owner_uid(stream) && self.objects.of(stream).len() > 0)
    }

    /// A pod appeared or changed: whereabouts holdings of its name that found no pod yet
    /// are its; so are those bound to an earlier pod of its name whose address this pod
    /// shows in its network-status (a StatefulSet pod re-created under its name gets its
    /// allocation back, which whereabouts' own reconciler checks the same way).
    pub(super) fn bind_holdings_to_pod(&mut self, pod_name: &str) {
        let records: Vec<RecordKey> = self
            .owner_holders(pod_name, binds_owner_uid)
            .into_iter()
            .filter(|id| binds_owner_uid(id.stream))
            .filter_map(|id| self.key_of(id))
            .collect();
        if records.is_empty() {
            return;
        }
        let Some(pod) = self.objects.of(Stream::Pod).get(pod_name) else {
            return;
        };
        let shown = holdings::holdings(pod_name, pod);
        for record in records {
            let Some(held) = self.objects.of(record.0).get(&record.1) else {
                continue;
            };
            for holding in holdings::holdings(&record.1, held) {
                if holding.owner == pod_name {
                    let shows_it = shown.iter().any(|h| h.address == holding.address);
                    self.indexes
                        .bind(&record, holding.address, &pod.uid.text(), shows_it);
                }
            }
        }
    }
}

fn stale() -> Applied {
    Applied {
        stale: true,
        ..Applied::default()
    }
}
