//! kubectl recording benchmark: turns an Avro history (e.g. `replay-bench generate`'s) into
//! the kubectl recording of the same history, one file per kind as `kubectl get KIND -A
//! --watch --output-watch-events -o json` prints it, and times a generic
//! `serde_json::Value` parse of those files: the yardstick `analyzer replay` of the
//! recording is measured against.
//!
//! ```sh
//! cargo build --profile dist -p ipaudit-analyzer --bin replay-bench --bin kubectl-bench --bin analyzer
//! target/dist/replay-bench generate --out /tmp/ipaudit-history.avro
//! target/dist/kubectl-bench from-avro /tmp/ipaudit-history.avro --out /tmp/ipaudit-kubectl
//! target/dist/kubectl-bench parse-value /tmp/ipaudit-kubectl
//! target/dist/analyzer replay /tmp/ipaudit-kubectl/*.json
//! ```

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use ipaudit_analyzer::offline::source::{Source, SourceItem};
use ipaudit_analyzer::say;
use ipaudit_schemas::kubernetes::format_timestamp_ms;
use ipaudit_schemas::{ContainerReader, EventType, KindPart, Stream, WatchEvent};
use serde::Serialize;
use serde_json::{json, Map, Value};

// The analyzer's allocator, so that the yardstick and `analyzer replay` differ in how they
// parse, not in how they allocate (on glibc's malloc the generic parse takes 1.06x as
// long: BENCHMARKS.md, "Build choices"; book/src/development/benchmark-history.md, "Issue 11:
// the kubectl first pass takes pieces on their first fields").
ipaudit_analyzer::global_allocator!();

#[derive(Debug, Parser)]
#[command(about = "kubectl recording benchmark of the ipaudit analyzer")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write the kubectl recording of an Avro history: `DIR/<plural>.json` per kind.
    FromAvro {
        /// The Avro history file.
        history: PathBuf,
        /// Directory for the recording (created).
        #[arg(long)]
        out: PathBuf,
        /// Add what a real API server sends beside what ipaudit reads (containers,
        /// volumes, tolerations and container statuses of Pods; the rest of a kube-ovn IP's
        /// and Subnet's spec and status), so that documents have a real object's size; and
        /// give every object the creationTimestamp it would have (when its first event was
        /// observed), which kubectl recordings take their event time from.
        #[arg(long)]
        as_served: bool,
    },
    /// Parse every `*.json` file of DIR into generic `serde_json::Value`s (the yardstick).
    ParseValue {
        /// The recording's directory.
        dir: PathBuf,
    },
    /// Only read the recording into events as `analyzer replay` does, without analysing
    /// them, to split the cost.
    Read {
        /// The recording's directory.
        dir: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::FromAvro {
            history,
            out,
            as_served,
        } => from_avro(&history, &out, as_served),
        Command::ParseValue { dir } => parse_value(&dir),
        Command::Read { dir } => read(&dir),
    }
}

/// A watch document, `type` first as kubectl prints it.
#[derive(Serialize)]
struct Document {
    #[serde(rename = "type")]
    event_type: &'static str,
    object: Value,
}

/// One open output file per kind, in the order kinds first appear.
struct Recording {
    dir: PathBuf,
    files: BTreeMap<&'static str, BufWriter<File>>,
    documents: u64,
}

impl Recording {
    fn write(&mut self, plural: &'static str, document: &Document) -> anyhow::Result<()> {
        let file = match self.files.entry(plural) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let path = self.dir.join(format!("{plural}.json"));
                let file =
                    File::create(&path).with_context(|| format!("create {}", path.display()))?;
                e.insert(BufWriter::with_capacity(1 << 20, file))
            }
        };
        // kubectl's -o json: four-space indentation, one document after the other.
        let mut serializer = serde_json::Serializer::with_formatter(
            &mut *file,
            serde_json::ser::PrettyFormatter::with_indent(b"    "),
        );
        document.serialize(&mut serializer)?;
        file.write_all(b"\n")?;
        self.documents += 1;
        Ok(())
    }
}

fn from_avro(history: &Path, out: &Path, as_served: bool) -> anyhow::Result<()> {
    let started = Instant::now();
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    let input = File::open(history).with_context(|| format!("open {}", history.display()))?;
    let reader = ContainerReader::<WatchEvent, _>::new(BufReader::with_capacity(1 << 20, input))
        .with_context(|| format!("read {}", history.display()))?;
    let mut recording = Recording {
        dir: out.to_owned(),
        files: BTreeMap::new(),
        documents: 0,
    };
    // When each object was first seen: its creationTimestamp, which a real object has.
    let mut created: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    for event in reader {
        let mut event = event.with_context(|| format!("decode {}", history.display()))?;
        if as_served {
            if let (Some(meta), Some(t)) = (&mut event.metadata, event.observed_at_ms) {
                if meta.creation_timestamp_ms.is_none() {
                    let first = *created.entry(meta.uid.clone()).or_insert(t);
                    // Whole seconds, as the API server writes them.
                    meta.creation_timestamp_ms = Some(first - first % 1000);
                }
            }
        }
        // kubectl prints no bookmarks and knows no relist markers.
        let event_type = match event.event_type {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted | EventType::DeletedOnRelist => "DELETED",
            _ => continue,
        };
        let Some(spec) = event.stream.spec() else {
            continue;
        };
        let object = match &event.raw_object {
            Some(raw) => serde_json::from_str(raw).context("raw object of an event")?,
            None => {
                let mut object = object_of(&event, &spec.api_version(), spec.kind);
                if as_served {
                    serve(&mut object, &event);
                }
                object
            }
        };
        recording.write(spec.plural, &Document { event_type, object })?;
    }
    let mut bytes = 0;
    for (plural, mut file) in std::mem::take(&mut recording.files) {
        file.flush()?;
        bytes += std::fs::metadata(out.join(format!("{plural}.json")))?.len();
    }
    say!(
        "wrote {} documents ({:.1} MiB) to {} in {:.1?}",
        recording.documents,
        bytes as f64 / 1048576.0,
        out.display(),
        started.elapsed()
    )?;
    Ok(())
}

/// The Kubernetes object an event was read from, as far as the event keeps it.
fn object_of(event: &WatchEvent, api_version: &str, kind: &str) -> Value {
    let mut metadata = Map::new();
    metadata.insert(
        "resourceVersion".into(),
        event.resource_version.clone().into(),
    );
    let mut annotations = Map::new();
    if let Some(meta) = &event.metadata {
        metadata.insert("name".into(), meta.name.clone().into());
        if let Some(ns) = &meta.namespace {
            metadata.insert("namespace".into(), ns.clone().into());
        }
        metadata.insert("uid".into(), meta.uid.clone().into());
        if let Some(generation) = meta.generation {
            metadata.insert("generation".into(), generation.into());
        }
        if let Some(ms) = meta.creation_timestamp_ms {
            metadata.insert("creationTimestamp".into(), format_timestamp_ms(ms).into());
        }
        if let Some(ms) = meta.deletion_timestamp_ms {
            metadata.insert("deletionTimestamp".into(), format_timestamp_ms(ms).into());
        }
        if !meta.finalizers.is_empty() {
            metadata.insert("finalizers".into(), json!(meta.finalizers));
        }
        if !meta.owner_references.is_empty() {
            let refs: Vec<Value> = meta
                .owner_references
                .iter()
                .map(|r| {
                    json!({"apiVersion": r.api_version, "kind": r.kind, "name": r.name,
                           "uid": r.uid, "controller": r.controller})
                })
                .collect();
            metadata.insert("ownerReferences".into(), refs.into());
        }
        if !meta.labels.is_empty() {
            metadata.insert("labels".into(), json!(meta.labels));
        }
        for (k, v) in &meta.annotations {
            annotations.insert(k.clone(), v.clone().into());
        }
        if let Some(ms) = meta.last_update_ms {
            metadata.insert(
                "managedFields".into(),
                json!([{"manager": "kube-ovn-controller", "operation": "Update",
                        "time": format_timestamp_ms(ms)}]),
            );
        }
    }
    let (spec, status) = match &event.part {
        Some(KindPart::Ip(ip)) => (
            json!({"subnet": ip.subnet, "attachSubnets": ip.attach_subnets,
                   "podName": ip.pod_name, "namespace": ip.pod_namespace,
                   "nodeName": ip.node_name, "ipAddress": ip.ip_address,
                   "v4IpAddress": ip.v4_ip_address, "v6IpAddress": ip.v6_ip_address,
                   "attachIps": ip.attach_ips, "macAddress": ip.mac_address,
                   "podType": ip.pod_type}),
            None,
        ),
        Some(KindPart::Subnet(subnet)) => (
            json!({"cidrBlock": subnet.cidr_block, "vpc": subnet.vpc,
                   "provider": subnet.provider, "protocol": subnet.protocol,
                   "gateway": subnet.gateway}),
            Some(json!({"v4usingIPs": count(&subnet.v4_using_ips),
                        "v4availableIPs": count(&subnet.v4_available_ips),
                        "v6usingIPs": count(&subnet.v6_using_ips),
                        "v6availableIPs": count(&subnet.v6_available_ips)})),
        ),
        Some(KindPart::Pod(pod)) => {
            for a in &pod.allocations {
                let key = |field: &str| format!("{}.kubernetes.io/{field}", a.provider);
                annotations.insert(key("allocated"), a.allocated.to_string().into());
                annotations.insert(key("ip_address"), a.ip_address.clone().into());
                annotations.insert(key("mac_address"), a.mac_address.clone().into());
                annotations.insert(key("logical_switch"), a.logical_switch.clone().into());
                annotations.insert(key("cidr"), a.cidr.clone().into());
            }
            if !pod.network_status.is_empty() {
                let status: Vec<Value> = pod
                    .network_status
                    .iter()
                    .map(|n| {
                        json!({"name": n.name, "interface": n.interface, "ips": n.ips,
                               "mac": n.mac, "default": n.default})
                    })
                    .collect();
                annotations.insert(
                    "k8s.v1.cni.cncf.io/network-status".into(),
                    Value::Array(status).to_string().into(),
                );
            }
            let mut conditions = Vec::new();
            if pod.disruption_target {
                conditions.push(json!({"type": "DisruptionTarget", "status": "True"}));
            }
            let pod_ips: Vec<Value> = pod.pod_ips.iter().map(|ip| json!({"ip": ip})).collect();
            (
                json!({"nodeName": pod.node_name}),
                Some(json!({"phase": pod.phase, "podIPs": pod_ips, "conditions": conditions})),
            )
        }
        // The kinds of other IPAMs are not in the benchmark history: their part is not
        // rendered.
        _ => (json!({}), None),
    };
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), annotations.into());
    }
    let mut object = Map::new();
    object.insert("apiVersion".into(), api_version.into());
    object.insert("kind".into(), kind.into());
    object.insert("metadata".into(), metadata.into());
    object.insert("spec".into(), spec);
    if let Some(status) = status {
        object.insert("status".into(), status);
    }
    Value::Object(object)
}

/// Adds the fields of a real object that ipaudit does not read (modelled on objects of a
/// kube-ovn cluster as `kubectl get -o json` prints them).
fn serve(object: &mut Value, event: &WatchEvent) {
    let name = event.metadata.as_ref().map_or("", |m| m.name.as_str());
    let t = event
        .metadata
        .as_ref()
        .and_then(|m| m.creation_timestamp_ms)
        .unwrap_or(1_750_000_000_000);
    let time = format_timestamp_ms(t);
    let Some(object) = object.as_object_mut() else {
        return;
    };
    let merge = |object: &mut Map<String, Value>, key: &str, extra: Value| {
        let entry = object.entry(key).or_insert_with(|| json!({}));
        if let (Some(entry), Value::Object(extra)) = (entry.as_object_mut(), extra) {
            for (k, v) in extra {
                entry.entry(k).or_insert(v);
            }
        }
    };
    match event.stream {
        Stream::Pod => {
            merge(
                object,
                "metadata",
                json!({"generateName": format!("{name}-")}),
            );
            merge(
                object,
                "spec",
                json!({
                    "containers": [{
                        "name": "app", "image": "registry.example.com/team/app:1.27.3",
                        "imagePullPolicy": "IfNotPresent",
                        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                        "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                                      "requests": {"cpu": "100m", "memory": "128Mi"}},
                        "terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "File",
                        "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                                          "name": format!("kube-api-access-{name}"), "readOnly": true}]
                    }],
                    "dnsPolicy": "ClusterFirst", "enableServiceLinks": true,
                    "preemptionPolicy": "PreemptLowerPriority", "priority": 0,
                    "restartPolicy": "Always", "schedulerName": "default-scheduler",
                    "securityContext": {}, "serviceAccount": "default",
                    "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
                    "tolerations": [
                        {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready",
                         "operator": "Exists", "tolerationSeconds": 300},
                        {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable",
                         "operator": "Exists", "tolerationSeconds": 300}
                    ],
                    "volumes": [{"name": format!("kube-api-access-{name}"), "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}],
                                           "name": "kube-root-ca.crt"}},
                            {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1",
                                "fieldPath": "metadata.namespace"}, "path": "namespace"}]}}
                        ]}}]
                }),
            );
            let condition = |kind: &str| json!({"lastProbeTime": null, "lastTransitionTime": time, "status": "True", "type": kind});
            merge(
                object,
                "status",
                json!({
                    "conditions": [condition("PodReadyToStartContainers"), condition("Initialized"),
                                   condition("Ready"), condition("ContainersReady"),
                                   condition("PodScheduled")],
                    "containerStatuses": [{
                        "containerID": format!("containerd://{:064x}", t),
                        "image": "registry.example.com/team/app:1.27.3",
                        "imageID": format!("registry.example.com/team/app@sha256:{:064x}", t / 7),
                        "lastState": {}, "name": "app", "ready": true, "restartCount": 0,
                        "started": true, "state": {"running": {"startedAt": time}}
                    }],
                    "hostIP": "192.168.10.21", "hostIPs": [{"ip": "192.168.10.21"}],
                    "qosClass": "Burstable", "startTime": time
                }),
            );
            // status.conditions is read (a disruption target): keep one the event had.
            if let Some(KindPart::Pod(pod)) = &event.part {
                if pod.disruption_target {
                    if let Some(conditions) = object
                        .get_mut("status")
                        .and_then(|s| s.get_mut("conditions"))
                        .and_then(Value::as_array_mut)
                    {
                        conditions.push(json!({"type": "DisruptionTarget", "status": "True"}));
                    }
                }
            }
        }
        Stream::Ip => {
            merge(
                object,
                "spec",
                json!({"attachMacs": [], "containerID": format!("{:064x}", t)}),
            );
        }
        Stream::Subnet => {
            merge(
                object,
                "spec",
                json!({
                    "default": false, "enableDHCP": false, "enableIPv6RA": false,
                    "enableLb": true, "excludeIps": ["10.16.0.1"], "gatewayNode": "",
                    "gatewayType": "distributed", "natOutgoing": true, "private": false,
                    "namespaces": [format!("ns-{name}")], "u2oInterconnection": false
                }),
            );
            let condition = |kind: &str| {
                json!({"lastTransitionTime": time, "lastUpdateTime": time,
                       "reason": format!("{kind}Successfully"), "status": "True", "type": kind})
            };
            merge(
                object,
                "status",
                json!({
                    "activateGateway": "", "conditions": [condition("Validated"),
                        condition("Ready"), condition("Created")],
                    "dhcpV4OptionsUUID": "", "dhcpV6OptionsUUID": "",
                    "v4availableIPrange": "10.16.0.2-10.16.255.254", "v4usingIPrange": "",
                    "v6availableIPrange": "", "v6usingIPrange": ""
                }),
            );
        }
        _ => {}
    }
}

/// A Subnet count as the API server writes it: a bare number when it fits, else text.
fn count(text: &Option<String>) -> Value {
    match text {
        None => Value::Null,
        Some(text) => text
            .parse::<u64>()
            .map(Value::from)
            .unwrap_or_else(|_| text.clone().into()),
    }
}

/// The `*.json` files of a recording's directory.
fn recording_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("list {}", dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.retain(|p| p.extension().is_some_and(|e| e == "json"));
    paths.sort();
    Ok(paths)
}

fn read(dir: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    let (mut events, mut problems) = (0u64, 0u64);
    for path in recording_files(dir)? {
        for item in Source::open(&path)? {
            match item {
                SourceItem::Event(event) => {
                    std::hint::black_box(event);
                    events += 1;
                }
                _ => problems += 1,
            }
        }
    }
    let elapsed = started.elapsed();
    say!(
        "read {events} events ({problems} problem reports) in {elapsed:.2?}: {:.0} events/s",
        events as f64 / elapsed.as_secs_f64()
    )?;
    Ok(())
}

fn parse_value(dir: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    let paths = recording_files(dir)?;
    let (mut documents, mut bytes) = (0u64, 0u64);
    for path in &paths {
        // The fastest generic way: the whole file in memory, serde_json's slice reader.
        let text = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
        bytes += text.len() as u64;
        for value in serde_json::Deserializer::from_slice(&text).into_iter::<Value>() {
            let value = value.with_context(|| format!("parse {}", path.display()))?;
            std::hint::black_box(&value);
            documents += 1;
        }
    }
    let elapsed = started.elapsed();
    say!(
        "parsed {documents} documents ({:.1} MiB) into serde_json::Value in {elapsed:.2?}: {:.0} documents/s",
        bytes as f64 / 1048576.0,
        documents as f64 / elapsed.as_secs_f64()
    )?;
    Ok(())
}
