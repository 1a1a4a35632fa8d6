//! Who made the request behind each evidence entry, from the API server's audit log.
//!
//! Only writes that succeeded are candidates (the audit source keeps nothing else): a read
//! (get, list, watch, also with a name field selector) or a refused request (403, 409, an
//! admission webhook's denial) never changed anything, so it is never the actor, however
//! close it came before the event. Among the writes of the same object, an evidence entry
//! is matched:
//! 1. exactly, when its event was built from the audit entry (an audit log replayed alone);
//! 2. by the response object's resourceVersion (RequestResponse level), when the request
//!    produced that version;
//! 3. else by kind + name + a verb that can cause the event (create for ADDED; delete,
//!    update or patch for MODIFIED and DELETED) within [`MATCH_WINDOW_MS`] of the event's
//!    time: the closest one, and for a DELETED the last one (the write that made the
//!    object go comes after the delete call that only marked it).

use std::collections::HashMap;

use ipaudit_schemas::{Actor, Alert, EventType, Evidence, Stream};

use crate::analysis::engine::Output;

/// How far apart an event's time and its request's audit time may be for a match by name
/// and verb. Watch recordings time events with managedFields, to the second, and the
/// audit log stamps the response a few milliseconds after the write: two seconds cover both
/// and rarely take in another write of the same object.
pub const MATCH_WINDOW_MS: i64 = 2_000;

/// How an evidence entry says that a write removed the last finalizer.
pub const FINALIZER_REMOVED: &str = "removed the last finalizer";

/// What a write did to its object, as far as the audit entry tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Created it.
    Created,
    /// A delete that only marked it (it has finalizers, or a grace period).
    DeletionMarked,
    /// A delete that removed it.
    Deleted,
    /// An update or patch that left a terminating object without finalizers: it went.
    FinalizersEmptied,
    /// An update or patch that changed it.
    Changed,
    /// A delete at Metadata level: marked or removed, the entry does not say.
    DeleteRequested,
    /// An update or patch at Metadata level: changed or removed, the entry does not say.
    Written,
}

impl Effect {
    /// Whether a write with this effect can be the cause of an event of this type.
    fn causes(self, event_type: EventType) -> bool {
        match event_type {
            EventType::Added => self == Effect::Created,
            EventType::Modified => matches!(
                self,
                Effect::DeletionMarked
                    | Effect::Changed
                    | Effect::DeleteRequested
                    | Effect::Written
            ),
            EventType::Deleted | EventType::DeletedOnRelist => matches!(
                self,
                Effect::Deleted
                    | Effect::FinalizersEmptied
                    | Effect::DeleteRequested
                    | Effect::Written
            ),
            _ => false,
        }
    }
}

/// One successful write of a watched object, from the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The object's kind.
    pub stream: Stream,
    /// `namespace/name` or `name`.
    pub name: String,
    /// create, update, patch or delete.
    pub verb: String,
    /// What it did.
    pub effect: Effect,
    /// The audit time (`stageTimestamp`), Unix ms.
    pub time_ms: i64,
    /// The response object's resourceVersion (RequestResponse level).
    pub response_rv: Option<i64>,
    /// The version of the event built from this entry, when the audit log gave events.
    pub event_rv: Option<String>,
    /// Who made it.
    pub actor: Actor,
}

/// The writes of an audit log by object, to name the actor of evidence entries.
#[derive(Debug, Default)]
pub struct ActorIndex {
    by_object: HashMap<(Stream, String), Vec<Request>>,
}

/// How many evidence entries were given an actor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Named {
    /// Entries looked at.
    pub evidence: u64,
    /// Entries that got an actor.
    pub named: u64,
}

impl ActorIndex {
    /// Indexes the writes.
    pub fn new(requests: impl IntoIterator<Item = Request>) -> Self {
        let mut by_object: HashMap<(Stream, String), Vec<Request>> = HashMap::new();
        for request in requests {
            if request.name.is_empty() {
                continue;
            }
            by_object
                .entry((request.stream, request.name.clone()))
                .or_default()
                .push(request);
        }
        for requests in by_object.values_mut() {
            requests.sort_by_key(|r| r.time_ms);
        }
        ActorIndex { by_object }
    }

    /// Whether there is no write at all.
    pub fn is_empty(&self) -> bool {
        self.by_object.is_empty()
    }

    /// The request behind an evidence entry, if one matches (see the module doc).
    pub fn request_for(&self, e: &Evidence) -> Option<&Request> {
        let candidates = self.by_object.get(&(e.stream, e.name.clone()))?;
        let mut causing = candidates.iter().filter(|r| r.effect.causes(e.event_type));
        if let Some(exact) = causing
            .clone()
            .find(|r| r.event_rv.as_deref() == Some(e.resource_version.as_str()))
        {
            return Some(exact);
        }
        let rv = ipaudit_schemas::event::parse_resource_version(&e.resource_version);
        if let Some(by_rv) = causing
            .clone()
            .find(|r| rv.is_some() && r.response_rv == rv && r.effect != Effect::FinalizersEmptied)
        {
            return Some(by_rv);
        }
        let time = e.time_ms?;
        let near = causing
            .by_ref()
            .filter(|r| (r.time_ms - time).abs() <= MATCH_WINDOW_MS);
        if e.event_type.is_deletion() {
            near.last()
        } else {
            near.min_by_key(|r| (r.time_ms - time).abs())
        }
    }

    /// Fills the actor of every evidence entry of `alert` that a request matches. A deletion
    /// caused by an update or patch can only be the removal of the last finalizer of a
    /// terminating object: the entry's text says so, with who did it.
    pub fn name_actors(&self, alert: &mut Alert, named: &mut Named) {
        for e in &mut alert.evidence {
            named.evidence += 1;
            if e.actor.is_some() {
                named.named += 1;
                continue;
            }
            let Some(request) = self.request_for(e) else {
                continue;
            };
            named.named += 1;
            let finalizer_removed = e.event_type.is_deletion()
                && matches!(request.effect, Effect::FinalizersEmptied | Effect::Written);
            if finalizer_removed && !e.what.contains(FINALIZER_REMOVED) {
                e.what = format!(
                    "{} ({} by {} {FINALIZER_REMOVED})",
                    e.what, request.verb, request.actor.user
                );
            }
            e.actor = Some(request.actor.clone());
        }
    }

    /// [`ActorIndex::name_actors`] for every alert among `outputs`.
    pub fn name_all(&self, outputs: &mut [Output]) -> Named {
        let mut named = Named::default();
        for output in outputs {
            if let Output::Alert(alert) = output {
                self.name_actors(alert, &mut named);
            }
        }
        named
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(user: &str) -> Actor {
        Actor {
            user: user.into(),
            user_agent: None,
            source_ips: vec![],
            impersonated_user: None,
        }
    }

    fn request(verb: &str, effect: Effect, time_ms: i64, rv: Option<i64>, user: &str) -> Request {
        Request {
            stream: Stream::Subnet,
            name: "net".into(),
            verb: verb.into(),
            effect,
            time_ms,
            response_rv: rv,
            event_rv: None,
            actor: actor(user),
        }
    }

    fn evidence(event_type: EventType, rv: &str, time_ms: i64) -> Evidence {
        Evidence {
            stream: Stream::Subnet,
            event_type,
            name: "net".into(),
            resource_version: rv.into(),
            time_ms: Some(time_ms),
            what: String::new(),
            actor: None,
        }
    }

    fn user_of(index: &ActorIndex, e: &Evidence) -> Option<String> {
        index.request_for(e).map(|r| r.actor.user.clone())
    }

    #[test]
    fn a_version_produced_by_a_delete_names_the_deleter_not_the_later_finalizer_removal() {
        let index = ActorIndex::new([
            request(
                "delete",
                Effect::DeletionMarked,
                10_000,
                Some(1100),
                "alice",
            ),
            // Answered with the version before it: it must not take version 1100.
            request(
                "patch",
                Effect::FinalizersEmptied,
                10_100,
                Some(1100),
                "ovn",
            ),
        ]);
        let marked = evidence(EventType::Modified, "1100", 10_100);
        assert_eq!(user_of(&index, &marked).as_deref(), Some("alice"));
        let gone = evidence(EventType::Deleted, "1101", 10_000);
        assert_eq!(user_of(&index, &gone).as_deref(), Some("ovn"));
    }

    #[test]
    fn at_metadata_level_a_deletion_is_the_last_write_in_the_window_and_a_mark_the_closest() {
        let index = ActorIndex::new([
            request("delete", Effect::DeleteRequested, 303_100, None, "alice"),
            request("patch", Effect::Written, 304_100, None, "ovn"),
        ]);
        let marked = evidence(EventType::Modified, "1100", 303_000);
        assert_eq!(user_of(&index, &marked).as_deref(), Some("alice"));
        let gone = evidence(EventType::Deleted, "1101", 303_000);
        assert_eq!(user_of(&index, &gone).as_deref(), Some("ovn"));
    }

    #[test]
    fn a_write_outside_the_window_or_of_a_verb_that_cannot_cause_the_event_is_nobody() {
        let index = ActorIndex::new([
            request("create", Effect::Created, 1_000, None, "alice"),
            request("patch", Effect::Written, 100_000, None, "bob"),
        ]);
        let changed = evidence(EventType::Modified, "7", 1_000);
        assert_eq!(user_of(&index, &changed), None, "a create is no MODIFIED");
        let late = evidence(EventType::Modified, "8", 100_000 + MATCH_WINDOW_MS + 1);
        assert_eq!(user_of(&index, &late), None, "outside the window");
        let added = evidence(EventType::Added, "6", 1_500);
        assert_eq!(user_of(&index, &added).as_deref(), Some("alice"));
    }

    #[test]
    fn a_finalizer_removal_says_so_in_the_evidence_with_its_actor() {
        let index = ActorIndex::new([request(
            "patch",
            Effect::FinalizersEmptied,
            5_000,
            Some(40),
            "bob",
        )]);
        let mut alert_evidence = evidence(EventType::Deleted, "40+1", 5_000);
        alert_evidence.what = "Subnet net deleted".into();
        let mut named = Named::default();
        let mut alert = sample_alert(vec![alert_evidence]);
        index.name_actors(&mut alert, &mut named);
        let e = &alert.evidence[0];
        assert_eq!(e.actor.as_ref().map(|a| a.user.as_str()), Some("bob"));
        assert_eq!(
            e.what,
            "Subnet net deleted (patch by bob removed the last finalizer)"
        );
        assert_eq!(
            named,
            Named {
                evidence: 1,
                named: 1
            }
        );
    }

    fn sample_alert(evidence: Vec<Evidence>) -> Alert {
        Alert {
            alert_id: "a".into(),
            cluster_id: "c".into(),
            rule: "r".into(),
            severity: ipaudit_schemas::Severity::Critical,
            status: ipaudit_schemas::AlertStatus::Firing,
            subject_kind: "Subnet".into(),
            subject_name: "net".into(),
            subject_uid: "u".into(),
            subnet: None,
            summary: String::new(),
            fix: None,
            epoch: 0,
            fired_at_ms: 0,
            resolved_at_ms: None,
            fired_resource_version: "1".into(),
            resolved_resource_version: None,
            evidence,
            cleanup: None,
            url: None,
            namespace: None,
        }
    }
}
