//! Kubernetes API server audit logs (`audit.k8s.io/v1` Events, one JSON object per line, as
//! the log backend writes them; gzip-compressed too) as a source of events and of who made
//! each request.
//!
//! Only `ResponseComplete` entries with a 2xx code that wrote a watched kind (create,
//! update, patch, delete; the `status` subresource counts as the object) are used; reads,
//! refused requests, other stages, other resources and other verbs are counted and skipped.
//!
//! - At `RequestResponse` level the response object is the object: its event and its
//!   resourceVersion. A delete answered with an object that still has finalizers (or a
//!   graceful pod deletion) is a MODIFIED with deletionTimestamp; a delete that removed it,
//!   or an update/patch that left a terminating object without finalizers, is its DELETED.
//!   Such a patch is answered with the version *before* it: the deletion's own
//!   resourceVersion is never logged, so it is ordered just after that version by time.
//! - At `Metadata` level there is no object: a create is an ADDED of the name alone, and the
//!   last delete of an object (a pod is deleted twice: by whoever asks, then by its kubelet)
//!   is its DELETED. Updates and patches only name who made them.
//!
//! Several files (one per API server of an HA control plane: there is no order across them)
//! are merged: entries are ordered by their resourceVersion where the response gives one,
//! and by the audit time after the latest known version where it does not. Such events
//! carry the version `V+n` (the n-th entry after version V), which the report explains.
//! The writes of the watched kinds are held in memory to merge the files; reads, which are
//! most of a log, are not.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use ipaudit_schemas::convert::from_object_of;
use ipaudit_schemas::kinds::KindSpec;
use ipaudit_schemas::kubernetes::parse_timestamp_ms;
use ipaudit_schemas::{Actor, EventType, KindPart, ObjectMeta, Stream, WatchEvent, KINDS};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{bump, counter, Position, Problem, ProblemLog, SourceError, SourceItem};
use crate::analysis::actors::{Effect, Request};

/// The longest line kept for parsing: a line is one Event, whose objects are at most a few
/// MiB (etcd's request limit is 1.5 MiB, and an entry holds a request and a response).
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Versions are spread by this factor so that entries without a known version fit between
/// two known ones, in audit-time order: version V is `V * SPREAD`, the n-th entry after it
/// `V * SPREAD + n`.
pub const SPREAD: i64 = 1_000_000;

/// The highest version that can be spread; etcd revisions stay far below it.
const MAX_VERSION: i64 = i64::MAX / SPREAD - 1;

/// The gzip magic number.
pub const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// What the first line of a file needs to say to be an audit log.
#[derive(Deserialize)]
struct Kind<'a> {
    #[serde(rename = "apiVersion", borrow, default)]
    api_version: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
}

/// Whether this line is an `audit.k8s.io` Event.
pub fn is_audit_line(line: &[u8]) -> bool {
    serde_json::from_slice::<Kind<'_>>(line)
        .is_ok_and(|k| k.kind == "Event" && k.api_version.starts_with("audit.k8s.io/"))
}

/// The fields of an audit Event ipaudit reads; the others are skipped unparsed.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry<'a> {
    #[serde(borrow, default)]
    api_version: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    level: Cow<'a, str>,
    #[serde(borrow, default)]
    stage: Cow<'a, str>,
    #[serde(borrow, default)]
    verb: Cow<'a, str>,
    #[serde(borrow, default)]
    user: Option<User<'a>>,
    #[serde(borrow, default)]
    impersonated_user: Option<User<'a>>,
    #[serde(rename = "sourceIPs", borrow, default)]
    source_ips: Vec<Cow<'a, str>>,
    #[serde(borrow, default)]
    user_agent: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    object_ref: Option<ObjectRef<'a>>,
    #[serde(default)]
    response_status: Option<ResponseStatus>,
    #[serde(borrow, default)]
    stage_timestamp: Cow<'a, str>,
    #[serde(borrow, default)]
    response_object: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct User<'a> {
    #[serde(borrow, default)]
    username: Cow<'a, str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectRef<'a> {
    #[serde(borrow, default)]
    resource: Cow<'a, str>,
    #[serde(borrow, default)]
    namespace: Cow<'a, str>,
    #[serde(borrow, default)]
    name: Cow<'a, str>,
    #[serde(borrow, default)]
    uid: Cow<'a, str>,
    #[serde(borrow, default)]
    api_group: Cow<'a, str>,
    #[serde(borrow, default)]
    subresource: Cow<'a, str>,
}

#[derive(Deserialize)]
struct ResponseStatus {
    #[serde(default)]
    code: i64,
}

/// What the response object says about the object after the request.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ResponseHead<'a> {
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
    #[serde(default)]
    metadata: ResponseMeta<'a>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ResponseMeta<'a> {
    #[serde(borrow, default)]
    resource_version: Cow<'a, str>,
    #[serde(borrow, default)]
    deletion_timestamp: Option<Cow<'a, str>>,
    #[serde(default)]
    deletion_grace_period_seconds: Option<i64>,
    #[serde(default)]
    finalizers: Option<Vec<serde::de::IgnoredAny>>,
}

/// How many entries of the audit input went where.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditSummary {
    /// Audit files read.
    pub files: u64,
    /// Entries (lines) read, broken ones included.
    pub entries: u64,
    /// Writes of watched kinds that succeeded: the events and actors come from them.
    pub writes: u64,
    /// Of those, at RequestResponse level (the object and its version are known).
    pub with_object: u64,
    /// Reads (get, list, watch) skipped.
    pub reads: u64,
    /// Requests refused (not 2xx: 403, 409, an admission webhook's denial) skipped.
    pub refused: u64,
    /// Stages other than ResponseComplete skipped.
    pub other_stages: u64,
    /// Entries about resources ipaudit does not watch (or other subresources) skipped.
    pub other_resources: u64,
    /// Other verbs (deletecollection, ...) skipped.
    pub other_verbs: u64,
    /// Events ordered by audit time, after the latest known version (`V+n`).
    pub ordered_by_time: u64,
}

/// What is known of the version an entry's event has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    /// The response gives it.
    Known(i64),
    /// Some version after this one (a removal by emptying finalizers).
    After(i64),
    /// Nothing (Metadata level).
    Unknown,
}

/// One usable write, before ordering.
struct Write {
    request: Request,
    /// The event it makes, if it makes one (its version is filled when ordered).
    event: Option<WatchEvent>,
    /// What the response says of its version.
    version: Version,
    /// Where: file index and line, for a stable order at equal times.
    file: usize,
    line: u64,
}

/// Audit log files read together: their events in order, and who made each request.
pub struct AuditLogSource {
    logs: Vec<ProblemLog>,
    events: VecDeque<WatchEvent>,
    requests: Vec<Request>,
    summary: AuditSummary,
    total_bytes: u64,
    progress: Arc<AtomicU64>,
}

impl AuditLogSource {
    /// Reads the files (plain or gzip); `with_events: false` keeps only the requests (who
    /// did what), for an audit log beside watch recordings, which then give the events.
    pub fn open(paths: &[PathBuf], with_events: bool) -> Result<Self, SourceError> {
        let mut logs = Vec::with_capacity(paths.len());
        let mut writes = Vec::new();
        let mut summary = AuditSummary::default();
        let mut total_bytes = 0;
        for (file, path) in paths.iter().enumerate() {
            let mut log = ProblemLog::new(path);
            total_bytes += read_file(path, file, &mut log, &mut summary, &mut writes)?;
            summary.files += 1;
            logs.push(log);
        }
        let (events, requests) = order(writes, with_events, &mut summary);
        Ok(AuditLogSource {
            logs,
            events: events.into(),
            requests,
            summary,
            total_bytes,
            progress: counter(0),
        })
    }

    /// The usable writes: who made which request.
    pub fn requests(&self) -> &[Request] {
        &self.requests
    }

    /// How the entries were used.
    pub fn summary(&self) -> &AuditSummary {
        &self.summary
    }

    /// Size of the input (compressed, for gzip files).
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Bytes consumed so far: all of it once open (the files are read when opened).
    pub fn progress(&self) -> Arc<AtomicU64> {
        bump(&self.progress, self.total_bytes);
        Arc::clone(&self.progress)
    }
}

impl Iterator for AuditLogSource {
    type Item = SourceItem;

    fn next(&mut self) -> Option<SourceItem> {
        for log in &mut self.logs {
            if let Some(item) = log.next_item() {
                return Some(item);
            }
        }
        if let Some(event) = self.events.pop_front() {
            return Some(SourceItem::Event(Box::new(event)));
        }
        self.logs.iter_mut().find_map(ProblemLog::finish)
    }
}

/// Opens a file, gunzipping it when it starts with the gzip magic number; says whether it
/// did.
pub(crate) fn reader(path: &Path) -> std::io::Result<(Box<dyn BufRead>, bool)> {
    let mut file = File::open(path)?;
    let mut magic = [0u8; 2];
    let gz = file.read_exact(&mut magic).is_ok() && magic == GZIP_MAGIC;
    let file = File::open(path)?;
    let input: Box<dyn BufRead> = if gz {
        Box::new(BufReader::with_capacity(
            1 << 20,
            flate2::read::MultiGzDecoder::new(file),
        ))
    } else {
        Box::new(BufReader::with_capacity(1 << 20, file))
    };
    Ok((input, gz))
}

/// Reads one line of at most [`MAX_LINE_BYTES`] into `line`; a longer one is consumed and
/// reported by its length. Returns the bytes consumed (0 at the end).
fn read_line(input: &mut dyn BufRead, line: &mut Vec<u8>) -> std::io::Result<(u64, bool)> {
    line.clear();
    let mut consumed = 0u64;
    let mut oversized = false;
    loop {
        let chunk = match input.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok((consumed, oversized));
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !oversized {
            if line.len() + take > MAX_LINE_BYTES {
                oversized = true;
                *line = Vec::new();
            } else {
                line.extend_from_slice(&chunk[..take]);
            }
        }
        input.consume(take);
        consumed += take as u64;
        if done {
            return Ok((consumed, oversized));
        }
    }
}

fn read_file(
    path: &Path,
    file: usize,
    log: &mut ProblemLog,
    summary: &mut AuditSummary,
    writes: &mut Vec<Write>,
) -> Result<u64, SourceError> {
    let io = SourceError::io(path);
    let size = std::fs::metadata(path).map_err(io)?.len();
    let (mut input, _) = reader(path).map_err(io)?;
    let mut line = Vec::new();
    let mut offset = 0u64;
    let mut number = 0u64;
    loop {
        let (consumed, oversized) = read_line(&mut *input, &mut line).map_err(io)?;
        if consumed == 0 {
            break;
        }
        number += 1;
        let position = Position::Text {
            line: number,
            column: 1,
            offset,
        };
        offset += consumed;
        let problem = |message: String| Problem {
            path: path.to_owned(),
            position,
            message,
            skipped: true,
            bytes: consumed,
        };
        if oversized {
            summary.entries += 1;
            log.push(problem("audit entry larger than 16 MiB".into()));
            continue;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        summary.entries += 1;
        match read_entry(&line, summary) {
            Ok(Some((request, event, version, field_problems))) => {
                if let Some(message) = field_problems {
                    log.push(Problem {
                        skipped: false,
                        ..problem(message)
                    });
                }
                writes.push(Write {
                    request,
                    event,
                    version,
                    file,
                    line: number,
                });
            }
            Ok(None) => {}
            Err(message) => log.push(problem(message)),
        }
    }
    Ok(size)
}

/// A usable write: the request, its event (without an ordering version yet), what the
/// response says of its version, and the fields of the object that could not be read.
type Usable = (Request, Option<WatchEvent>, Version, Option<String>);

/// Reads one entry: `Ok(None)` when it is skipped on purpose (and counted), `Err` when it is
/// not an audit Event ipaudit can read.
fn read_entry(line: &[u8], summary: &mut AuditSummary) -> Result<Option<Usable>, String> {
    let entry: Entry<'_> =
        serde_json::from_slice(line).map_err(|e| format!("invalid audit entry: {e}"))?;
    if entry.kind != "Event" || !entry.api_version.starts_with("audit.k8s.io/") {
        return Err(format!(
            "not an audit.k8s.io Event (apiVersion {:?}, kind {:?})",
            entry.api_version, entry.kind
        ));
    }
    if entry.stage != "ResponseComplete" {
        summary.other_stages += 1;
        return Ok(None);
    }
    let verb = match &*entry.verb {
        "get" | "list" | "watch" => {
            summary.reads += 1;
            return Ok(None);
        }
        "create" | "update" | "patch" | "delete" => entry.verb.to_string(),
        _ => {
            summary.other_verbs += 1;
            return Ok(None);
        }
    };
    let Some(object_ref) = entry
        .object_ref
        .as_ref()
        .filter(|r| r.subresource.is_empty() || r.subresource == "status")
    else {
        summary.other_resources += 1;
        return Ok(None);
    };
    let Some(spec) = kind_of(&object_ref.resource, &object_ref.api_group) else {
        summary.other_resources += 1;
        return Ok(None);
    };
    let code = entry.response_status.as_ref().map_or(0, |s| s.code);
    if !(200..300).contains(&code) {
        summary.refused += 1;
        return Ok(None);
    }
    let time_ms = parse_timestamp_ms(&entry.stage_timestamp).ok_or_else(|| {
        format!(
            "stageTimestamp {:?} is not an RFC 3339 time",
            entry.stage_timestamp
        )
    })?;
    let actor = Actor {
        user: entry
            .user
            .as_ref()
            .map_or_else(String::new, |u| u.username.to_string()),
        user_agent: entry.user_agent.as_deref().map(str::to_owned),
        source_ips: entry.source_ips.iter().map(|ip| ip.to_string()).collect(),
        impersonated_user: entry
            .impersonated_user
            .as_ref()
            .map(|u| u.username.to_string()),
    };
    let object = entry
        .response_object
        .filter(|_| entry.level == "RequestResponse");
    let head: Option<ResponseHead<'_>> = object
        .map(|raw| serde_json::from_str(raw.get()))
        .transpose()
        .map_err(|e| format!("unreadable responseObject: {e}"))?
        .filter(|h: &ResponseHead<'_>| h.kind != "Status");
    let mut request = Request {
        stream: spec.stream,
        name: key(spec, &object_ref.namespace, &object_ref.name),
        verb,
        effect: Effect::Written,
        time_ms,
        response_rv: None,
        event_rv: None,
        actor,
    };
    summary.writes += 1;
    let Some(head) = head else {
        // Metadata level (or a Status answer): the name alone.
        request.effect = match request.verb.as_str() {
            "create" => Effect::Created,
            "delete" => Effect::DeleteRequested,
            _ => Effect::Written,
        };
        if object_ref.name.is_empty() {
            return Ok(Some((request, None, Version::Unknown, None)));
        }
        let event = (request.effect == Effect::Created
            || request.effect == Effect::DeleteRequested)
            .then(|| bare_event(spec, object_ref, request.effect, time_ms));
        return Ok(Some((request, event, Version::Unknown, None)));
    };
    summary.with_object += 1;
    let meta = &head.metadata;
    let terminating = meta.deletion_timestamp.is_some();
    let has_finalizers = meta.finalizers.as_ref().is_some_and(|f| !f.is_empty());
    let graceful = meta.deletion_grace_period_seconds.is_some_and(|g| g > 0);
    let (effect, event_type) = match request.verb.as_str() {
        "create" => (Effect::Created, EventType::Added),
        "delete" if has_finalizers || graceful => (Effect::DeletionMarked, EventType::Modified),
        "delete" => (Effect::Deleted, EventType::Deleted),
        _ if terminating && !has_finalizers => (Effect::FinalizersEmptied, EventType::Deleted),
        _ => (Effect::Changed, EventType::Modified),
    };
    request.effect = effect;
    let known_rv = ipaudit_schemas::event::parse_resource_version(&meta.resource_version);
    request.response_rv = known_rv;
    let value: serde_json::Value = object
        .map(|raw| serde_json::from_str(raw.get()))
        .transpose()
        .map_err(|e| format!("unreadable responseObject: {e}"))?
        .unwrap_or_default();
    let converted = from_object_of(spec.stream, event_type, &value).map_err(|e| e.to_string())?;
    let mut event = converted.event;
    if request.name.is_empty() {
        request.name = event.object_key();
    }
    event.observed_at_ms = Some(time_ms);
    let problems = (!converted.problems.is_empty()).then(|| {
        converted
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.path, p.problem))
            .collect::<Vec<_>>()
            .join("; ")
    });
    // A removal by emptying finalizers answers with the version before it.
    let version = match known_rv {
        Some(rv) if effect == Effect::FinalizersEmptied => Version::After(rv),
        Some(rv) => Version::Known(rv),
        None => Version::Unknown,
    };
    Ok(Some((request, Some(event), version, problems)))
}

/// The watched kind of a resource and API group.
fn kind_of(resource: &str, group: &str) -> Option<&'static KindSpec> {
    KINDS
        .iter()
        .find(|k| k.plural == resource && k.group == group)
}

/// `namespace/name`, or `name` for cluster-scoped kinds.
fn key(spec: &KindSpec, namespace: &str, name: &str) -> String {
    if name.is_empty() {
        String::new()
    } else if spec.namespaced && !namespace.is_empty() {
        format!("{namespace}/{name}")
    } else {
        name.to_owned()
    }
}

/// The event of a Metadata-level create or delete: the object's name, nothing else.
fn bare_event(
    spec: &KindSpec,
    object_ref: &ObjectRef<'_>,
    effect: Effect,
    time_ms: i64,
) -> WatchEvent {
    let event_type = if effect == Effect::Created {
        EventType::Added
    } else {
        EventType::Deleted
    };
    let mut event = WatchEvent::new(spec.stream, event_type, "");
    event.observed_at_ms = Some(time_ms);
    event.metadata = Some(ObjectMeta {
        uid: object_ref.uid.to_string(),
        name: object_ref.name.to_string(),
        namespace: (spec.namespaced && !object_ref.namespace.is_empty())
            .then(|| object_ref.namespace.to_string()),
        creation_timestamp_ms: (effect == Effect::Created).then_some(time_ms),
        ..ObjectMeta::default()
    });
    event.part = KindPart::empty(spec.stream);
    event
}

/// Orders the writes (see the module doc) and gives each event its ordering version.
fn order(
    mut writes: Vec<Write>,
    with_events: bool,
    summary: &mut AuditSummary,
) -> (Vec<WatchEvent>, Vec<Request>) {
    writes.sort_by_key(|w| (w.request.time_ms, w.file, w.line));
    // At Metadata level a pod is deleted twice (the request, then the kubelet's final
    // delete): only the last delete before the name is created again removes it.
    let mut last_delete: HashMap<(Stream, &str), usize> = HashMap::new();
    let mut not_last = Vec::new();
    for (i, w) in writes.iter().enumerate() {
        let object = (w.request.stream, w.request.name.as_str());
        match w.request.effect {
            Effect::DeleteRequested if w.event.is_some() => {
                if let Some(earlier) = last_delete.insert(object, i) {
                    not_last.push(earlier);
                }
            }
            Effect::Created => {
                last_delete.remove(&object);
            }
            _ => {}
        }
    }
    for i in not_last {
        writes[i].event = None;
    }
    let mut latest: i64 = 0;
    let mut after = 0i64;
    let mut events = Vec::new();
    let mut requests = Vec::with_capacity(writes.len());
    // The uid an object was last seen with: a Metadata-level entry rarely names it, and a
    // deletion under another uid than the one held would not be applied.
    let mut uids: HashMap<(Stream, String), String> = HashMap::new();
    for w in writes {
        let Write {
            mut request,
            event,
            version,
            ..
        } = w;
        if let Some(mut event) = event {
            if let Some(meta) = event.metadata.as_mut() {
                let object = (request.stream, request.name.clone());
                if meta.uid.is_empty() {
                    if let Some(uid) = uids.get(&object) {
                        meta.uid.clone_from(uid);
                    }
                } else if event.event_type.is_deletion() {
                    uids.remove(&object);
                } else {
                    uids.insert(object, meta.uid.clone());
                }
            }
            let (num, text) = match version {
                Version::Known(rv) if rv <= MAX_VERSION => {
                    if rv > latest {
                        latest = rv;
                        after = 0;
                    }
                    (rv * SPREAD, rv.to_string())
                }
                version => {
                    // After the latest version seen by then (and after the version the
                    // response gave), in audit-time order.
                    if let Version::After(rv) = version {
                        if rv > latest && rv <= MAX_VERSION {
                            latest = rv;
                            after = 0;
                        }
                    }
                    after = (after + 1).min(SPREAD - 1);
                    summary.ordered_by_time += 1;
                    (latest * SPREAD + after, format!("{latest}+{after}"))
                }
            };
            event.resource_version = text.clone();
            event.resource_version_num = Some(num);
            request.event_rv = Some(text);
            if with_events {
                events.push(event);
            }
        }
        requests.push(request);
    }
    events.sort_by_key(|e| e.resource_version_num);
    (events, requests)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    use crate::offline::source::{detect_file, InputFormat};

    const T: &str = "2025-06-02T09:00:0";

    /// One audit entry: `verb` on subnet `name` by `user` at second `s`, with `object` as
    /// the response (RequestResponse) or none (Metadata).
    fn entry(
        verb: &str,
        name: &str,
        user: &str,
        s: u32,
        code: i64,
        object: Option<&str>,
    ) -> String {
        let level = if object.is_some() {
            "RequestResponse"
        } else {
            "Metadata"
        };
        let response = object.map_or_else(String::new, |o| format!(",\"responseObject\":{o}"));
        format!(
            "{{\"kind\":\"Event\",\"apiVersion\":\"audit.k8s.io/v1\",\"level\":\"{level}\",\"auditID\":\"x\",\"stage\":\"ResponseComplete\",\"verb\":\"{verb}\",\"user\":{{\"username\":\"{user}\"}},\"sourceIPs\":[\"10.0.0.1\"],\"objectRef\":{{\"resource\":\"subnets\",\"apiGroup\":\"kubeovn.io\",\"name\":\"{name}\"}},\"responseStatus\":{{\"code\":{code}}},\"stageTimestamp\":\"{T}{s}.000100Z\"{response}}}\n"
        )
    }

    fn subnet(name: &str, rv: u32, deleting: bool, finalizers: &str) -> String {
        let deletion = if deleting {
            ",\"deletionTimestamp\":\"2025-06-02T09:00:01Z\""
        } else {
            ""
        };
        format!(
            "{{\"apiVersion\":\"kubeovn.io/v1\",\"kind\":\"Subnet\",\"metadata\":{{\"name\":\"{name}\",\"uid\":\"u-{name}\",\"resourceVersion\":\"{rv}\",\"finalizers\":[{finalizers}]{deletion}}},\"spec\":{{\"cidrBlock\":\"10.0.0.0/24\"}}}}"
        )
    }

    fn write(dir: &Path, name: &str, text: &str, gzip: bool) -> PathBuf {
        let path = dir.join(name);
        let file = File::create(&path).unwrap();
        if gzip {
            let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
            gz.write_all(text.as_bytes()).unwrap();
            gz.finish().unwrap();
        } else {
            let mut file = file;
            file.write_all(text.as_bytes()).unwrap();
        }
        path
    }

    fn events(source: AuditLogSource) -> Vec<(String, EventType, String)> {
        source
            .filter_map(|item| match item {
                SourceItem::Event(e) => Some((e.object_key(), e.event_type, e.resource_version)),
                _ => None,
            })
            .collect()
    }

    const FIN: &str = "\"kubeovn.io/kube-ovn-controller\"";

    #[test]
    fn an_audit_log_is_told_from_kubectl_json_by_its_first_line_gzipped_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let line = entry("get", "a", "u", 1, 200, None);
        let plain = write(dir.path(), "audit.log", &line, false);
        let gz = write(dir.path(), "audit.log.gz", &line, true);
        let kubectl = "{\n    \"type\": \"ADDED\",\n    \"object\": {}\n}\n";
        let watch = write(dir.path(), "ips.json", kubectl, false);
        let watch_gz = write(dir.path(), "ips.json.gz", kubectl, true);
        assert_eq!(detect_file(&plain).unwrap(), InputFormat::AuditLog);
        assert_eq!(detect_file(&gz).unwrap(), InputFormat::AuditLog);
        assert_eq!(detect_file(&watch).unwrap(), InputFormat::KubectlJson);
        assert!(
            matches!(
                detect_file(&watch_gz),
                Err(SourceError::UnknownFormat { .. })
            ),
            "only audit logs are read gzipped"
        );
    }

    #[test]
    fn a_delete_then_a_patch_emptying_finalizers_are_the_mark_and_the_deletion_after_its_version() {
        let dir = tempfile::tempdir().unwrap();
        let log = [
            entry(
                "create",
                "net",
                "alice",
                0,
                200,
                Some(&subnet("net", 10, false, FIN)),
            ),
            entry(
                "delete",
                "net",
                "alice",
                1,
                200,
                Some(&subnet("net", 12, true, FIN)),
            ),
            // Refused and read: never events.
            entry("patch", "net", "carol", 2, 403, None),
            entry("get", "net", "bob", 2, 200, None),
            // Answered with the version before it.
            entry(
                "patch",
                "net",
                "ovn",
                3,
                200,
                Some(&subnet("net", 12, true, "")),
            ),
        ]
        .concat();
        let path = write(dir.path(), "audit.log", &log, false);
        let source = AuditLogSource::open(&[path], true).unwrap();
        let summary = source.summary().clone();
        assert_eq!((summary.writes, summary.refused, summary.reads), (3, 1, 1));
        assert_eq!(summary.ordered_by_time, 1);
        let users: Vec<&str> = source
            .requests()
            .iter()
            .map(|r| r.actor.user.as_str())
            .collect();
        assert_eq!(users, ["alice", "alice", "ovn"]);
        assert_eq!(
            events(source),
            [
                ("net".into(), EventType::Added, "10".into()),
                ("net".into(), EventType::Modified, "12".into()),
                ("net".into(), EventType::Deleted, "12+1".into()),
            ]
        );
    }

    #[test]
    fn files_of_two_api_servers_are_merged_by_version_and_audit_time() {
        let dir = tempfile::tempdir().unwrap();
        let one = [
            entry(
                "create",
                "a",
                "u",
                0,
                200,
                Some(&subnet("a", 10, false, FIN)),
            ),
            entry(
                "delete",
                "a",
                "u",
                4,
                200,
                Some(&subnet("a", 30, true, FIN)),
            ),
        ]
        .concat();
        let two = [
            entry(
                "create",
                "b",
                "u",
                1,
                200,
                Some(&subnet("b", 20, false, "")),
            ),
            entry("patch", "a", "u", 5, 200, Some(&subnet("a", 30, true, ""))),
            entry(
                "delete",
                "b",
                "u",
                6,
                200,
                Some(&subnet("b", 40, false, "")),
            ),
        ]
        .concat();
        let paths = [
            write(dir.path(), "cp1.log", &one, false),
            write(dir.path(), "cp2.log.gz", &two, true),
        ];
        let got = events(AuditLogSource::open(&paths, true).unwrap());
        assert_eq!(
            got,
            [
                ("a".into(), EventType::Added, "10".into()),
                ("b".into(), EventType::Added, "20".into()),
                ("a".into(), EventType::Modified, "30".into()),
                ("a".into(), EventType::Deleted, "30+1".into()),
                ("b".into(), EventType::Deleted, "40".into()),
            ]
        );
    }

    #[test]
    fn at_metadata_level_only_the_last_delete_of_an_object_deletes_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = [
            entry("create", "p", "controller", 0, 200, None),
            entry("patch", "p", "kubelet", 1, 200, None),
            entry("delete", "p", "alice", 2, 200, None),
            entry("delete", "p", "kubelet", 3, 200, None),
        ]
        .concat();
        let path = write(dir.path(), "audit.log", &log, false);
        let source = AuditLogSource::open(&[path], true).unwrap();
        assert_eq!(source.requests().len(), 4, "every write names its actor");
        assert_eq!(
            events(source),
            [
                ("p".into(), EventType::Added, "0+1".into()),
                ("p".into(), EventType::Deleted, "0+2".into()),
            ]
        );
    }

    #[test]
    fn a_metadata_level_delete_of_an_object_known_with_its_uid_deletes_that_object() {
        let dir = tempfile::tempdir().unwrap();
        let log = [
            entry(
                "create",
                "a",
                "u",
                0,
                200,
                Some(&subnet("a", 10, false, "")),
            ),
            entry("delete", "a", "u", 1, 200, None),
        ]
        .concat();
        let path = write(dir.path(), "audit.log", &log, false);
        let uids: Vec<(EventType, String)> = AuditLogSource::open(&[path], true)
            .unwrap()
            .filter_map(|item| match item {
                SourceItem::Event(e) => Some((e.event_type, e.uid().to_owned())),
                _ => None,
            })
            .collect();
        assert_eq!(
            uids,
            [
                (EventType::Added, "u-a".into()),
                (EventType::Deleted, "u-a".into())
            ]
        );
    }

    #[test]
    fn lines_that_are_not_audit_events_are_problems_at_their_line_and_the_rest_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let log = [
            entry(
                "create",
                "a",
                "u",
                0,
                200,
                Some(&subnet("a", 10, false, FIN)),
            ),
            "{\"type\":\"ADDED\",\"object\":{}}\n".to_owned(),
            "not json\n".to_owned(),
            entry(
                "delete",
                "a",
                "u",
                1,
                200,
                Some(&subnet("a", 11, false, "")),
            ),
        ]
        .concat();
        let path = write(dir.path(), "audit.log", &log, false);
        let items: Vec<SourceItem> = AuditLogSource::open(&[path], true).unwrap().collect();
        let problems: Vec<(u64, bool)> = items
            .iter()
            .filter_map(|i| match i {
                SourceItem::Problem(Problem {
                    position: Position::Text { line, .. },
                    skipped,
                    ..
                }) => Some((*line, *skipped)),
                _ => None,
            })
            .collect();
        assert_eq!(problems, [(2, true), (3, true)]);
        let events = items
            .iter()
            .filter(|i| matches!(i, SourceItem::Event(_)))
            .count();
        assert_eq!(events, 2);
    }

    #[test]
    fn evidence_versions_sort_with_audit_ordered_ones_after_their_base() {
        let mut versions = vec!["1100+2", "1101", "x", "1100", "1100+1", "99"];
        versions.sort_by_key(|v| crate::analysis::alerts::version_order(v));
        assert_eq!(versions, ["99", "1100", "1100+1", "1100+2", "1101", "x"]);
    }
}
