//! The simulated cluster's objects and their history, with the API server's semantics:
//! one resourceVersion counter for every kind, finalizers and deletionTimestamp, merge and
//! JSON patches with preconditions, and a bounded history that makes old versions expire.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use ipaudit_schemas::KindSpec;
use serde_json::{json, Map, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use tokio::sync::broadcast;

use crate::kinds::Kind;

/// One change to one object, as watchers see it.
#[derive(Debug, Clone)]
pub struct Change {
    /// The resourceVersion the change got.
    pub rv: u64,
    /// The kind.
    pub kind: Kind,
    /// Namespace ("" for cluster-scoped).
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// ADDED, MODIFIED or DELETED.
    pub event_type: &'static str,
    /// The object after the change (for DELETED: its last state, with the deletion's version).
    pub object: Value,
    /// The object before the change (`None` for ADDED): what a list at an earlier version
    /// shows.
    pub previous: Option<Value>,
    /// When it was made.
    pub made_at: std::time::Instant,
}

/// Future changes, as a watch receives them.
pub type Subscription = broadcast::Receiver<Arc<Change>>;

/// An API error, as a Kubernetes `Status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason (NotFound, Conflict, ...).
    pub reason: &'static str,
    /// For a person.
    pub message: String,
    /// The Status `details` (what kube-apiserver names: `name`, `group`, `kind` as the
    /// plural); only an object's NotFound carries them, a missing resource type's does not.
    pub details: Option<Value>,
}

impl ApiError {
    fn not_found(kind: &KindSpec, name: &str) -> Self {
        ApiError {
            details: Some(json!({"name": name, "group": kind.group, "kind": kind.plural})),
            code: 404,
            reason: "NotFound",
            message: format!("{} \"{name}\" not found", kind.resource()),
        }
    }

    /// 404 for a kind the server does not serve (its CRD is not installed).
    pub fn not_served(resource: &str) -> Self {
        ApiError {
            details: None,
            code: 404,
            reason: "NotFound",
            message: format!("the server could not find the requested resource ({resource})"),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            details: None,
            code: 400,
            reason: "BadRequest",
            message: message.into(),
        }
    }

    fn conflict(message: impl Into<String>) -> Self {
        ApiError {
            details: None,
            code: 409,
            reason: "Conflict",
            message: message.into(),
        }
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
            "details": self.details.clone().unwrap_or_else(|| json!({})),
        })
    }
}

/// A DELETE's preconditions (`DeleteOptions.preconditions`): what the object must still be.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// metadata.uid.
    pub uid: Option<String>,
    /// metadata.resourceVersion.
    pub resource_version: Option<String>,
}

/// How a patch body is to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// application/merge-patch+json (and strategic merge, treated alike).
    Merge,
    /// application/json-patch+json, `test` operations included.
    Json,
}

type Key = (Kind, String, String);

/// The objects and their history.
pub struct Store {
    rv: u64,
    uids: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Arc<Change>>,
    history_window: usize,
    /// Watches from a version below this get 410 Gone.
    oldest_servable: u64,
    changes: broadcast::Sender<Arc<Change>>,
    journal: Vec<Mutation>,
}

/// One change, summarised: what a complete recording must contain.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mutation {
    /// The kind.
    pub kind: Kind,
    /// `namespace/name`, or the name of a cluster-scoped object.
    pub key: String,
    /// metadata.uid (empty if the object had none).
    pub uid: String,
    /// ADDED, MODIFIED or DELETED.
    pub event_type: &'static str,
    /// The resourceVersion it got.
    pub rv: u64,
}

impl Store {
    /// An empty cluster keeping the last `history_window` changes for watches.
    pub fn new(history_window: usize, starting_rv: u64) -> Self {
        let (changes, _) = broadcast::channel(65_536);
        Store {
            rv: starting_rv,
            uids: 0,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_window: history_window.max(1),
            oldest_servable: starting_rv,
            changes,
            journal: Vec::new(),
        }
    }

    /// Every change since the start, in order.
    pub fn journal(&self) -> &[Mutation] {
        &self.journal
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// Forgets all history: watches from any version before now get 410 Gone.
    pub fn expire_history(&mut self) {
        self.history.clear();
        self.oldest_servable = self.rv;
    }

    /// Objects of a kind, optionally in one namespace, with the list's version.
    pub fn list(&self, kind: &'static KindSpec, namespace: Option<&str>) -> (Vec<Value>, u64) {
        let items = self
            .objects
            .iter()
            .filter(|((k, ns, _), _)| *k == kind.stream && namespace.is_none_or(|n| n == ns))
            .map(|(_, v)| v.clone())
            .collect();
        (items, self.rv)
    }

    /// [`Store::list`] as it was at `rv` (a list with `resourceVersionMatch=Exact`): the
    /// changes after it undone. `Err(oldest)` when `rv` is older than the history kept, or
    /// newer than the store (kube-apiserver answers both with an error, 410 and 504).
    pub fn list_at(
        &self,
        kind: &'static KindSpec,
        namespace: Option<&str>,
        rv: u64,
    ) -> Result<(Vec<Value>, u64), u64> {
        if rv < self.oldest_servable || rv > self.rv {
            return Err(self.oldest_servable);
        }
        let mut objects: BTreeMap<(&str, &str), &Value> = self
            .objects
            .iter()
            .filter(|((k, ns, _), _)| *k == kind.stream && namespace.is_none_or(|n| n == ns))
            .map(|((_, ns, name), v)| ((ns.as_str(), name.as_str()), v))
            .collect();
        let newer = self.history.iter().rev().take_while(|c| c.rv > rv);
        for change in
            newer.filter(|c| c.kind == kind.stream && namespace.is_none_or(|n| n == c.namespace))
        {
            let key = (change.namespace.as_str(), change.name.as_str());
            match &change.previous {
                Some(previous) => objects.insert(key, previous),
                None => objects.remove(&key),
            };
        }
        Ok((objects.into_values().cloned().collect(), rv))
    }

    /// One object.
    pub fn get(
        &self,
        kind: &'static KindSpec,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.objects
            .get(&(kind.stream, namespace.to_owned(), name.to_owned()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(kind, name))
    }

    /// Changes after `rv` of this kind (and namespace), and a subscription to the next
    /// ones, taken together so that nothing falls between; `None` when `rv` has expired.
    pub fn watch_from(
        &self,
        kind: &'static KindSpec,
        namespace: Option<&str>,
        rv: u64,
    ) -> Option<(Vec<Arc<Change>>, Subscription)> {
        if rv < self.oldest_servable {
            return None;
        }
        let backlog = self
            .history
            .iter()
            .filter(|c| {
                c.rv > rv && c.kind == kind.stream && namespace.is_none_or(|n| n == c.namespace)
            })
            .cloned()
            .collect();
        Some((backlog, self.changes.subscribe()))
    }

    /// A subscription to future changes only.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.changes.subscribe()
    }

    /// Creates an object (POST): uid, creationTimestamp, generation and version are set.
    pub fn create(
        &mut self,
        kind: &'static KindSpec,
        namespace: &str,
        mut object: Value,
    ) -> Result<Value, ApiError> {
        let name =
            name_of(&object).ok_or_else(|| ApiError::bad_request("metadata.name is required"))?;
        if kind.namespaced == namespace.is_empty() {
            return Err(ApiError::bad_request(if kind.namespaced {
                format!(
                    "{} are namespaced: a namespace is required",
                    kind.resource()
                )
            } else {
                format!("{} are cluster-scoped: no namespace", kind.resource())
            }));
        }
        let key = (kind.stream, namespace.to_owned(), name.clone());
        if self.objects.contains_key(&key) {
            return Err(ApiError {
                details: None,
                code: 409,
                reason: "AlreadyExists",
                message: format!("{} \"{name}\" already exists", kind.resource()),
            });
        }
        self.uids += 1;
        let uid = format!("00000000-0000-4000-8000-{:012x}", self.uids);
        let meta = metadata_mut(&mut object);
        meta.entry("uid").or_insert_with(|| Value::String(uid));
        meta.insert("creationTimestamp".into(), Value::String(now()));
        meta.insert("generation".into(), json!(1));
        if kind.namespaced {
            meta.insert("namespace".into(), Value::String(namespace.to_owned()));
        }
        set_type(&mut object, kind);
        Ok(self.commit(key, object, "ADDED"))
    }

    /// Stores any JSON as the object, without validation (for malformed objects): only
    /// the resourceVersion is set. ADDED if new, else MODIFIED.
    pub fn put_raw(
        &mut self,
        kind: &'static KindSpec,
        namespace: &str,
        name: &str,
        object: Value,
    ) -> Value {
        let key = (kind.stream, namespace.to_owned(), name.to_owned());
        let event_type = if self.objects.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.commit(key, object, event_type)
    }

    /// Replaces an object (PUT), honouring a resourceVersion precondition.
    pub fn replace(
        &mut self,
        kind: &'static KindSpec,
        namespace: &str,
        name: &str,
        mut object: Value,
    ) -> Result<Value, ApiError> {
        let current = self.get(kind, namespace, name)?;
        check_precondition(&current, &object)?;
        carry_identity(&current, &mut object, kind);
        self.after_write(kind, namespace, name, object)
    }

    /// Patches an object.
    pub fn patch(
        &mut self,
        kind: &'static KindSpec,
        namespace: &str,
        name: &str,
        patch_type: PatchType,
        body: &Value,
    ) -> Result<Value, ApiError> {
        let current = self.get(kind, namespace, name)?;
        let mut object = current.clone();
        match patch_type {
            PatchType::Merge => {
                check_precondition(&current, body)?;
                json_patch::merge(&mut object, body);
            }
            PatchType::Json => {
                let patch: json_patch::Patch = serde_json::from_value(body.clone())
                    .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
                json_patch::patch(&mut object, &patch).map_err(|e| ApiError {
                    details: None,
                    code: 422,
                    reason: "Invalid",
                    message: format!("the JSON patch could not be applied: {e}"),
                })?;
            }
        }
        carry_identity(&current, &mut object, kind);
        if object == current {
            return Ok(current);
        }
        self.after_write(kind, namespace, name, object)
    }

    /// Updates an object in place (for tests), as a controller would.
    pub fn update(
        &mut self,
        kind: &'static KindSpec,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut Value),
    ) -> Result<Value, ApiError> {
        let current = self.get(kind, namespace, name)?;
        let mut object = current.clone();
        change(&mut object);
        carry_identity(&current, &mut object, kind);
        self.after_write(kind, namespace, name, object)
    }

    /// Deletes an object only if it still has the uid and resourceVersion the request's
    /// preconditions name (409 Conflict otherwise), as kube-apiserver does.
    pub fn delete_if(
        &mut self,
        kind: &'static KindSpec,
        namespace: &str,
        name: &str,
        preconditions: &Preconditions,
    ) -> Result<Value, ApiError> {
        let object = self.get(kind, namespace, name)?;
        let meta = |field: &str| {
            object
                .pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        for (field, expected) in [
            ("uid", &preconditions.uid),
            ("resourceVersion", &preconditions.resource_version),
        ] {
            if let Some(expected) = expected {
                let actual = meta(field);
                if *expected != actual {
                    return Err(ApiError::conflict(format!(
                        "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: {field}: {expected}, ObjectMeta.{field}: {actual}",
                        kind.resource()
                    )));
                }
            }
        }
        self.delete(kind, namespace, name)
    }

    /// Deletes an object: with finalizers it only gets a deletionTimestamp.
    pub fn delete(
        &mut self,
        kind: &'static KindSpec,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let mut object = self.get(kind, namespace, name)?;
        if finalizers_of(&object) == 0 {
            return Ok(self.remove(kind, namespace, name, object));
        }
        let meta = metadata_mut(&mut object);
        if meta.get("deletionTimestamp").is_some_and(|t| !t.is_null()) {
            return Ok(object);
        }
        meta.insert("deletionTimestamp".into(), Value::String(now()));
        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
        Ok(self.commit(
            (kind.stream, namespace.to_owned(), name.to_owned()),
            object,
            "MODIFIED",
        ))
    }

    fn after_write(
        &mut self,
        kind: &'static KindSpec,
        namespace: &str,
        name: &str,
        object: Value,
    ) -> Result<Value, ApiError> {
        let deleting = object
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null());
        if deleting && finalizers_of(&object) == 0 {
            return Ok(self.remove(kind, namespace, name, object));
        }
        Ok(self.commit(
            (kind.stream, namespace.to_owned(), name.to_owned()),
            object,
            "MODIFIED",
        ))
    }

    fn remove(
        &mut self,
        kind: &'static KindSpec,
        namespace: &str,
        name: &str,
        object: Value,
    ) -> Value {
        let key = (kind.stream, namespace.to_owned(), name.to_owned());
        let last = self.commit(key.clone(), object, "DELETED");
        self.objects.remove(&key);
        last
    }

    fn commit(&mut self, key: Key, mut object: Value, event_type: &'static str) -> Value {
        self.rv += 1;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(self.rv.to_string()));
        }
        let change = Arc::new(Change {
            rv: self.rv,
            kind: key.0,
            namespace: key.1.clone(),
            name: key.2.clone(),
            event_type,
            object: object.clone(),
            previous: self.objects.get(&key).cloned(),
            made_at: std::time::Instant::now(),
        });
        self.journal.push(Mutation {
            kind: key.0,
            key: if key.1.is_empty() {
                key.2.clone()
            } else {
                format!("{}/{}", key.1, key.2)
            },
            uid: object
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            event_type,
            rv: self.rv,
        });
        self.objects.insert(key, object.clone());
        self.history.push_back(Arc::clone(&change));
        while self.history.len() > self.history_window {
            if let Some(old) = self.history.pop_front() {
                self.oldest_servable = old.rv;
            }
        }
        // No receiver is not an error: nobody watches.
        let _ = self.changes.send(change);
        object
    }
}

fn check_precondition(current: &Value, incoming: &Value) -> Result<(), ApiError> {
    let wanted = incoming
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str);
    let have = current
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str);
    match wanted {
        Some(w) if Some(w) != have => Err(ApiError::conflict(format!(
            "Operation cannot be fulfilled: the object has been modified (resourceVersion {} is not {w}); please apply your changes to the latest version and try again",
            have.unwrap_or("?")
        ))),
        _ => Ok(()),
    }
}

/// Keeps what a client cannot change: kind, name, namespace, uid, creation time.
fn carry_identity(current: &Value, object: &mut Value, kind: &KindSpec) {
    set_type(object, kind);
    for field in ["name", "namespace", "uid", "creationTimestamp"] {
        if let Some(v) = current.pointer(&format!("/metadata/{field}")) {
            metadata_mut(object).insert(field.into(), v.clone());
        }
    }
    // Once set, a deletionTimestamp stays.
    if let Some(t) = current
        .pointer("/metadata/deletionTimestamp")
        .filter(|t| !t.is_null())
    {
        metadata_mut(object).insert("deletionTimestamp".into(), t.clone());
    }
}

fn set_type(object: &mut Value, kind: &KindSpec) {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(kind.api_version()));
        map.insert("kind".into(), Value::String(kind.kind.into()));
    }
}

fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = json!({});
    }
    let map = object.as_object_mut().expect("made an object above");
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    meta.as_object_mut().expect("made an object above")
}

fn finalizers_of(object: &Value) -> usize {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

/// metadata.name of an object.
pub fn name_of(object: &Value) -> Option<String> {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn now() -> String {
    OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip_kind() -> &'static KindSpec {
        Kind::Ip.spec().expect("in the table")
    }

    fn subnet_kind() -> &'static KindSpec {
        Kind::Subnet.spec().expect("in the table")
    }

    fn ip(name: &str, finalizers: &[&str]) -> Value {
        json!({"metadata": {"name": name, "finalizers": finalizers}, "spec": {"subnet": "s"}})
    }

    #[test]
    fn one_counter_orders_every_kind() {
        let mut store = Store::new(100, 10);
        let a = store
            .create(subnet_kind(), "", json!({"metadata": {"name": "s"}}))
            .unwrap();
        let b = store.create(ip_kind(), "", ip("a", &[])).unwrap();
        assert_eq!(a["metadata"]["resourceVersion"], "11");
        assert_eq!(b["metadata"]["resourceVersion"], "12");
        assert_eq!(b["kind"], "IP");
    }

    #[test]
    fn a_list_at_an_exact_version_shows_the_objects_as_they_were_then() {
        let mut store = Store::new(100, 10);
        store.create(ip_kind(), "", ip("kept", &[])).unwrap();
        store.create(ip_kind(), "", ip("gone", &[])).unwrap();
        store
            .create(subnet_kind(), "", json!({"metadata": {"name": "s"}}))
            .unwrap();
        let at = store.resource_version();
        store
            .update(ip_kind(), "", "kept", |o| o["spec"]["subnet"] = json!("t"))
            .unwrap();
        store.delete(ip_kind(), "", "gone").unwrap();
        store.create(ip_kind(), "", ip("new", &[])).unwrap();

        let (then, rv) = store.list_at(ip_kind(), None, at).unwrap();
        assert_eq!(rv, at);
        let shown: Vec<(&str, &str)> = then
            .iter()
            .map(|o| {
                (
                    o["metadata"]["name"].as_str().unwrap(),
                    o["spec"]["subnet"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(shown, [("gone", "s"), ("kept", "s")]);
        let (now, _) = store
            .list_at(ip_kind(), None, store.resource_version())
            .unwrap();
        assert_eq!(now, store.list(ip_kind(), None).0);
    }

    #[test]
    fn a_list_at_a_version_older_than_the_history_kept_or_newer_than_the_store_is_refused() {
        let mut store = Store::new(2, 10);
        for name in ["a", "b", "c"] {
            store.create(ip_kind(), "", ip(name, &[])).unwrap();
        }
        assert!(store.list_at(ip_kind(), None, 10).is_err());
        assert!(store.list_at(ip_kind(), None, 11).is_ok());
        assert!(store.list_at(ip_kind(), None, 14).is_err());
    }

    #[test]
    fn an_object_is_created_in_a_namespace_exactly_when_its_kind_is_namespaced() {
        let mut store = Store::new(100, 0);
        let pool = Kind::IpPool.spec().expect("in the table");
        let object =
            json!({"metadata": {"name": "10.128.40.0-24"}, "spec": {"range": "10.128.40.0/24"}});
        assert_eq!(
            store.create(pool, "", object.clone()).unwrap_err().code,
            400
        );
        assert_eq!(
            store
                .create(ip_kind(), "ns", ip("a", &[]))
                .unwrap_err()
                .code,
            400
        );
        let created = store.create(pool, "kube-system", object).unwrap();
        assert_eq!(created["metadata"]["namespace"], "kube-system");
        assert_eq!(created["kind"], "IPPool");
        assert_eq!(created["apiVersion"], "whereabouts.cni.cncf.io/v1alpha1");
    }

    #[test]
    fn deleting_an_object_with_finalizers_only_marks_it() {
        let mut store = Store::new(100, 0);
        store
            .create(ip_kind(), "", ip("a", &["kubeovn.io/kube-ovn-controller"]))
            .unwrap();
        let marked = store.delete(ip_kind(), "", "a").unwrap();
        assert!(marked["metadata"]["deletionTimestamp"].is_string());
        assert!(store.get(ip_kind(), "", "a").is_ok());
        let patch = json!([{"op": "remove", "path": "/metadata/finalizers/0"}]);
        store
            .patch(ip_kind(), "", "a", PatchType::Json, &patch)
            .unwrap();
        assert_eq!(store.get(ip_kind(), "", "a").unwrap_err().code, 404);
    }

    #[test]
    fn a_json_patch_testing_an_old_version_is_refused() {
        let mut store = Store::new(100, 0);
        store.create(ip_kind(), "", ip("a", &["f"])).unwrap();
        let patch = json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "0"},
            {"op": "remove", "path": "/metadata/finalizers/0"}
        ]);
        let err = store
            .patch(ip_kind(), "", "a", PatchType::Json, &patch)
            .unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(finalizers_of(&store.get(ip_kind(), "", "a").unwrap()), 1);
    }

    #[test]
    fn watches_from_expired_versions_are_refused() {
        let mut store = Store::new(2, 0);
        for name in ["a", "b", "c"] {
            store.create(ip_kind(), "", ip(name, &[])).unwrap();
        }
        assert!(
            store.watch_from(ip_kind(), None, 0).is_none(),
            "rv 1 fell out of the window"
        );
        let (backlog, _) = store.watch_from(ip_kind(), None, 1).unwrap();
        assert_eq!(backlog.len(), 2);
        store.expire_history();
        assert!(store.watch_from(ip_kind(), None, 2).is_none());
        assert!(store.watch_from(ip_kind(), None, 3).is_some());
    }
}
