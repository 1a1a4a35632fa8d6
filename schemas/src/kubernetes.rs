//! Kubernetes objects as JSON (what the API server and `kubectl --output-watch-events`
//! send) into `WatchEvent`s. Lenient on purpose: a field of the wrong type is recorded as a
//! [`FieldProblem`] and left empty, so that the event and its resourceVersion are never lost.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::event::{
    EventType, IpInfo, ObjectMeta, OwnerReference, PodAllocation, PodInfo, Stream, SubnetInfo,
    WatchEvent,
};

/// Why a document could not become an event at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// A watch document must be `{"type": ..., "object": {...}}`.
    #[error("not a watch event: {0}")]
    NotAWatchEvent(&'static str),
    /// The watch event type is none of ADDED, MODIFIED, DELETED, BOOKMARK.
    #[error("unknown watch event type {0:?}")]
    UnknownType(String),
    /// The API server reported an error in the stream (e.g. 410 Gone).
    #[error("watch ERROR event: {0}")]
    WatchError(String),
    /// The object is of a kind ipaudit does not watch.
    #[error("object of kind {0:?} is not a Pod, IP or Subnet")]
    UnknownKind(String),
}

/// A field that was present but unusable; the event was kept without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// JSON path of the field, e.g. `spec.subnet`.
    pub path: String,
    /// What was wrong.
    pub problem: &'static str,
}

/// An event and what could not be read of its object.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    /// The event, with every field that could be read.
    pub event: WatchEvent,
    /// The fields that could not.
    pub problems: Vec<FieldProblem>,
}

/// Converts one watch document `{"type": T, "object": O}` (the Kubernetes watch wire format).
pub fn from_watch_document(document: &Value) -> Result<Converted, ConvertError> {
    let doc = document.as_object().ok_or(ConvertError::NotAWatchEvent(
        "the document is not a JSON object",
    ))?;
    let kind = doc
        .get("type")
        .and_then(Value::as_str)
        .ok_or(ConvertError::NotAWatchEvent("no string field \"type\""))?;
    let object = doc
        .get("object")
        .ok_or(ConvertError::NotAWatchEvent("no field \"object\""))?;
    let event_type = match kind {
        "ADDED" => EventType::Added,
        "MODIFIED" => EventType::Modified,
        "DELETED" => EventType::Deleted,
        "BOOKMARK" => EventType::Bookmark,
        "ERROR" => {
            let message = object
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            return Err(ConvertError::WatchError(message.to_owned()));
        }
        other => return Err(ConvertError::UnknownType(other.to_owned())),
    };
    from_object(event_type, object)
}

/// Converts one object with the event type it came with; its `kind` names the stream.
pub fn from_object(event_type: EventType, object: &Value) -> Result<Converted, ConvertError> {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let stream = Stream::from_kind(kind).ok_or_else(|| ConvertError::UnknownKind(kind.into()))?;
    from_object_of(stream, event_type, object)
}

/// Converts one object of a known stream (list items of built-in kinds carry no `kind`).
pub fn from_object_of(
    stream: Stream,
    event_type: EventType,
    object: &Value,
) -> Result<Converted, ConvertError> {
    let obj = object.as_object().ok_or(ConvertError::NotAWatchEvent(
        "\"object\" is not a JSON object",
    ))?;
    let mut fields = Fields::default();
    let empty = Map::new();
    let meta = fields.object(obj, "metadata").unwrap_or(&empty);
    let resource_version = fields.string(meta, "metadata.resourceVersion", "resourceVersion");
    let mut event = WatchEvent::new(stream, event_type, &resource_version);
    if event_type != EventType::Bookmark {
        event.metadata = Some(fields.metadata(meta));
        let spec = fields.object(obj, "spec").unwrap_or(&empty);
        let status = fields.object(obj, "status").unwrap_or(&empty);
        match stream {
            Stream::Ip => event.ip = Some(fields.ip(spec)),
            Stream::Subnet => event.subnet = Some(fields.subnet(spec, status)),
            Stream::Pod => {
                let annotations = fields.object(meta, "annotations").unwrap_or(&empty);
                event.pod = Some(fields.pod(spec, status, annotations));
            }
        }
    }
    Ok(Converted {
        event,
        problems: fields.problems,
    })
}

/// Picks typed fields out of JSON, noting each one of the wrong type.
#[derive(Default)]
struct Fields {
    problems: Vec<FieldProblem>,
}

impl Fields {
    fn problem(&mut self, path: &str, problem: &'static str) {
        self.problems.push(FieldProblem {
            path: path.to_owned(),
            problem,
        });
    }

    fn object<'a>(
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

    fn string(&mut self, parent: &Map<String, Value>, path: &str, key: &str) -> String {
        match parent.get(key) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                self.problem(path, "expected a string");
                String::new()
            }
        }
    }

    fn opt_string(&mut self, parent: &Map<String, Value>, path: &str, key: &str) -> Option<String> {
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
    fn count(&mut self, parent: &Map<String, Value>, path: &str, key: &str) -> Option<String> {
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

    fn strings(&mut self, parent: &Map<String, Value>, path: &str, key: &str) -> Vec<String> {
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

    fn string_map(
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

    fn timestamp(&mut self, parent: &Map<String, Value>, path: &str, key: &str) -> Option<i64> {
        let text = self.opt_string(parent, path, key)?;
        match parse_timestamp_ms(&text) {
            Some(ms) => Some(ms),
            None => {
                self.problem(path, "expected an RFC 3339 time");
                None
            }
        }
    }

    fn metadata(&mut self, meta: &Map<String, Value>) -> ObjectMeta {
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

    fn ip(&mut self, spec: &Map<String, Value>) -> IpInfo {
        IpInfo {
            subnet: self.string(spec, "spec.subnet", "subnet"),
            attach_subnets: self.strings(spec, "spec.attachSubnets", "attachSubnets"),
            pod_name: self.string(spec, "spec.podName", "podName"),
            pod_namespace: self.string(spec, "spec.namespace", "namespace"),
            node_name: self.string(spec, "spec.nodeName", "nodeName"),
            ip_address: self.string(spec, "spec.ipAddress", "ipAddress"),
            v4_ip_address: self.string(spec, "spec.v4IpAddress", "v4IpAddress"),
            v6_ip_address: self.string(spec, "spec.v6IpAddress", "v6IpAddress"),
            attach_ips: self.strings(spec, "spec.attachIps", "attachIps"),
            mac_address: self.string(spec, "spec.macAddress", "macAddress"),
            pod_type: self.string(spec, "spec.podType", "podType"),
        }
    }

    fn subnet(&mut self, spec: &Map<String, Value>, status: &Map<String, Value>) -> SubnetInfo {
        SubnetInfo {
            cidr_block: self.string(spec, "spec.cidrBlock", "cidrBlock"),
            vpc: self.string(spec, "spec.vpc", "vpc"),
            provider: self.string(spec, "spec.provider", "provider"),
            protocol: self.string(spec, "spec.protocol", "protocol"),
            gateway: self.string(spec, "spec.gateway", "gateway"),
            v4_using_ips: self.count(status, "status.v4usingIPs", "v4usingIPs"),
            v4_available_ips: self.count(status, "status.v4availableIPs", "v4availableIPs"),
            v6_using_ips: self.count(status, "status.v6usingIPs", "v6usingIPs"),
            v6_available_ips: self.count(status, "status.v6availableIPs", "v6availableIPs"),
        }
    }

    fn pod(
        &mut self,
        spec: &Map<String, Value>,
        status: &Map<String, Value>,
        annotations: &Map<String, Value>,
    ) -> PodInfo {
        let pod_ips = match status.get("podIPs") {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|i| i.get("ip").and_then(Value::as_str).map(str::to_owned))
                .collect(),
            None | Some(Value::Null) => Vec::new(),
            Some(_) => {
                self.problem("status.podIPs", "expected an array");
                Vec::new()
            }
        };
        PodInfo {
            phase: self.string(status, "status.phase", "phase"),
            node_name: self.string(spec, "spec.nodeName", "nodeName"),
            pod_ips,
            allocations: pod_allocations(annotations),
        }
    }
}

/// kube-ovn's per-provider annotations: `<provider>.kubernetes.io/<field>`, where the
/// primary network's provider is `ovn`.
fn pod_allocations(annotations: &Map<String, Value>) -> Vec<PodAllocation> {
    let mut by_provider: BTreeMap<&str, PodAllocation> = BTreeMap::new();
    for (key, value) in annotations {
        let Some((provider, field)) = key.split_once(".kubernetes.io/") else {
            continue;
        };
        let Some(value) = value.as_str() else {
            continue;
        };
        let entry = match field {
            "allocated" | "ip_address" | "mac_address" | "logical_switch" | "cidr" => by_provider
                .entry(provider)
                .or_insert_with(|| PodAllocation {
                    provider: provider.to_owned(),
                    ..PodAllocation::default()
                }),
            _ => continue,
        };
        match field {
            "allocated" => entry.allocated = value == "true",
            "ip_address" => entry.ip_address = value.to_owned(),
            "mac_address" => entry.mac_address = value.to_owned(),
            "logical_switch" => entry.logical_switch = value.to_owned(),
            "cidr" => entry.cidr = value.to_owned(),
            _ => {}
        }
    }
    by_provider.into_values().collect()
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
