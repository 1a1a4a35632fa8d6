//! Reading Kubernetes objects as JSON (what the API server and `kubectl
//! --output-watch-events` send): the parts of an object, its metadata, timestamps. Lenient
//! on purpose: a field of the wrong type is recorded as a [`FieldProblem`] and left empty,
//! so that the event and its resourceVersion are never lost. The kinds' converters
//! ([`crate::kinds`]) read through it; [`crate::convert`] turns whole documents into events.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::event::{ObjectMeta, OwnerReference};

/// A field that was present but unusable; the event was kept without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// JSON path of the field, e.g. `spec.subnet`.
    pub path: String,
    /// What was wrong.
    pub problem: &'static str,
}

/// The three maps of an object a converter reads.
pub struct ObjectParts<'a> {
    /// metadata.
    pub meta: &'a Map<String, Value>,
    /// spec.
    pub spec: &'a Map<String, Value>,
    /// status.
    pub status: &'a Map<String, Value>,
}

impl ObjectParts<'_> {
    /// metadata.name.
    pub fn name(&self) -> &str {
        self.meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// Picks typed fields out of JSON, noting each one of the wrong type.
#[derive(Default)]
pub struct FieldReader {
    problems: Vec<FieldProblem>,
}

impl FieldReader {
    /// The fields that were present but unusable, in the order they were met.
    pub(crate) fn into_problems(self) -> Vec<FieldProblem> {
        self.problems
    }

    /// Notes a field that was present but unusable.
    pub fn problem(&mut self, path: &str, problem: &'static str) {
        self.problems.push(FieldProblem {
            path: path.to_owned(),
            problem,
        });
    }

    pub(crate) fn object<'a>(
        &mut self,
        parent: &'a Map<String, Value>,
        key: &str,
    ) -> Option<&'a Map<String, Value>> {
        match parent.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => Some(map),
            Some(_) => {
                self.problem(key, "expected an object");
                None
            }
        }
    }

    pub(crate) fn string(&mut self, parent: &Map<String, Value>, path: &str, key: &str) -> String {
        match parent.get(key) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                self.problem(path, "expected a string");
                String::new()
            }
        }
    }

    pub(crate) fn opt_string(
        &mut self,
        parent: &Map<String, Value>,
        path: &str,
        key: &str,
    ) -> Option<String> {
        match parent.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                self.problem(path, "expected a string");
                None
            }
        }
    }

    /// A big integer kept as its decimal text: a bare number (possibly beyond u64, or
    /// written as a float) or a quoted string.
    pub(crate) fn count(
        &mut self,
        parent: &Map<String, Value>,
        path: &str,
        key: &str,
    ) -> Option<String> {
        match parent.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(_) => {
                self.problem(path, "expected a number");
                None
            }
        }
    }

    pub(crate) fn strings(
        &mut self,
        parent: &Map<String, Value>,
        path: &str,
        key: &str,
    ) -> Vec<String> {
        match parent.get(key) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    match item.as_str() {
                        Some(s) => out.push(s.to_owned()),
                        None => self.problem(path, "expected strings in the array"),
                    }
                }
                out
            }
            Some(_) => {
                self.problem(path, "expected an array");
                Vec::new()
            }
        }
    }

    pub(crate) fn string_map(
        &mut self,
        parent: &Map<String, Value>,
        path: &str,
        key: &str,
        keep: impl Fn(&str) -> bool,
    ) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        match parent.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (k, v) in map.iter().filter(|(k, _)| keep(k)) {
                    match v.as_str() {
                        Some(s) => {
                            out.insert(k.clone(), s.to_owned());
                        }
                        None => self.problem(path, "expected string values"),
                    }
                }
            }
            Some(_) => self.problem(path, "expected an object"),
        }
        out
    }

    pub(crate) fn timestamp(
        &mut self,
        parent: &Map<String, Value>,
        path: &str,
        key: &str,
    ) -> Option<i64> {
        let text = self.opt_string(parent, path, key)?;
        match parse_timestamp_ms(&text) {
            Some(ms) => Some(ms),
            None => {
                self.problem(path, "expected an RFC 3339 time");
                None
            }
        }
    }

    pub(crate) fn metadata(&mut self, meta: &Map<String, Value>) -> ObjectMeta {
        let deletion_grace_period_seconds = match meta.get("deletionGracePeriodSeconds") {
            None | Some(Value::Null) => None,
            Some(value) => match value.as_i64() {
                Some(seconds) => Some(seconds),
                None => {
                    self.problem("metadata.deletionGracePeriodSeconds", "expected an integer");
                    None
                }
            },
        };
        let generation = match meta.get("generation") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let g = v.as_i64();
                if g.is_none() {
                    self.problem("metadata.generation", "expected an integer");
                }
                g
            }
        };
        let owner_references = match meta.get("ownerReferences") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|item| match item.as_object() {
                    Some(o) => Some(OwnerReference {
                        api_version: self.string(
                            o,
                            "metadata.ownerReferences.apiVersion",
                            "apiVersion",
                        ),
                        kind: self.string(o, "metadata.ownerReferences.kind", "kind"),
                        name: self.string(o, "metadata.ownerReferences.name", "name"),
                        uid: self.string(o, "metadata.ownerReferences.uid", "uid"),
                        controller: o.get("controller").and_then(Value::as_bool),
                    }),
                    None => {
                        self.problem("metadata.ownerReferences", "expected objects in the array");
                        None
                    }
                })
                .collect(),
            Some(_) => {
                self.problem("metadata.ownerReferences", "expected an array");
                Vec::new()
            }
        };
        let last_update_ms = match meta.get("managedFields") {
            Some(Value::Array(entries)) => entries
                .iter()
                .filter_map(|e| e.get("time").and_then(Value::as_str))
                .filter_map(parse_timestamp_ms)
                .max(),
            _ => None,
        };
        ObjectMeta {
            uid: self.string(meta, "metadata.uid", "uid"),
            name: self.string(meta, "metadata.name", "name"),
            namespace: self
                .opt_string(meta, "metadata.namespace", "namespace")
                .filter(|ns| !ns.is_empty()),
            generation,
            creation_timestamp_ms: self.timestamp(
                meta,
                "metadata.creationTimestamp",
                "creationTimestamp",
            ),
            deletion_timestamp_ms: self.timestamp(
                meta,
                "metadata.deletionTimestamp",
                "deletionTimestamp",
            ),
            deletion_grace_period_seconds,
            finalizers: self.strings(meta, "metadata.finalizers", "finalizers"),
            owner_references,
            labels: self.string_map(meta, "metadata.labels", "labels", |_| true),
            annotations: self.string_map(
                meta,
                "metadata.annotations",
                "annotations",
                is_network_annotation,
            ),
            last_update_ms,
        }
    }
}

/// The annotations kube-ovn and multus write; `kubectl.kubernetes.io/last-applied-configuration`
/// and other tools' annotations are dropped.
fn is_network_annotation(key: &str) -> bool {
    if key.starts_with("k8s.v1.cni.cncf.io/") {
        return true;
    }
    match key.split_once(".kubernetes.io/") {
        Some((prefix, _)) => {
            prefix != "kubectl" && prefix != "deployment" && prefix != "control-plane"
        }
        None => false,
    }
}

/// Parses an RFC 3339 time into Unix milliseconds.
pub fn parse_timestamp_ms(text: &str) -> Option<i64> {
    let t = OffsetDateTime::parse(text, &Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// Formats Unix milliseconds as RFC 3339 (UTC), for reports.
pub fn format_timestamp_ms(ms: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| format!("@{ms}ms"))
}
