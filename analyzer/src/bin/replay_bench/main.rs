//! Replay throughput benchmark: a synthetic cluster history (by default 1M events over 10k
//! subnets and 200k IPs, a small share of them leaking) written as an Avro container, then
//! replayed by the analyzer core with every rule on. Run the two steps as two processes so
//! that peak memory is the replay's own:
//!
//! ```sh
//! cargo build --profile dist -p ipaudit-analyzer --bin replay-bench --bin analyzer
//! target/dist/replay-bench generate --out /tmp/ipaudit-history.avro
//! target/dist/replay-bench run /tmp/ipaudit-history.avro
//! # generate also writes the findings its planted leaks must give beside the history
//! # (/tmp/ipaudit-history.avro.planted.json); run checks the replay's findings against it
//! # object content like a real cluster's (~600 bytes an event), and an older schema:
//! target/dist/replay-bench generate --realistic --out /tmp/realistic.avro
//! target/dist/replay-bench generate --schema-version 2 --out /tmp/history-v2.avro
//! # a cluster running every IPAM, pods with their annotations, then a relist of it all
//! # (the memory target: `state-bench memory /tmp/mixed.avro`)
//! target/dist/replay-bench mixed --out /tmp/mixed.avro
//! # side by side on one file: analyzer replay, apache-avro's Reader, fastavro
//! target/dist/replay-bench compare /tmp/realistic.avro
//! # everything issue 11 measures, in one run: with the kubectl recording of the history
//! # and a history of 1M live objects (needs kubectl-bench and state-bench built too)
//! target/dist/kubectl-bench from-avro /tmp/ipaudit-history.avro --out /tmp/ipaudit-kubectl
//! target/dist/replay-bench generate --out /tmp/ipaudit-1m-live.avro --ips 500000 --events 0
//! target/dist/replay-bench compare /tmp/ipaudit-history.avro \
//!     --kubectl /tmp/ipaudit-kubectl --live /tmp/ipaudit-1m-live.avro
//! ```

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use apache_avro::types::Value;
use apache_avro::{Codec, DeflateSettings};
use clap::{Parser, Subcommand};
use ipaudit_analyzer::offline::replay::{replay, ReplayOptions};
use ipaudit_analyzer::offline::source::ANALYSIS_FIELDS;
use ipaudit_analyzer::present::Findings;
use ipaudit_analyzer::say;
use ipaudit_schemas::builders::EventBuilder;
use ipaudit_schemas::{
    ContainerReader, ContainerWriter, EventType, Fields, KindPart, NetworkStatus, OwnerReference,
    PodAllocation, Record, Stream, WatchEvent,
};

mod mixed;

ipaudit_analyzer::global_allocator!();

#[derive(Debug, Parser)]
#[command(about = "Replay throughput benchmark of the ipaudit analyzer")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a synthetic cluster history as an Avro container file.
    Generate {
        /// Output file.
        #[arg(long)]
        out: PathBuf,
        /// Subnets.
        #[arg(long, default_value_t = 10_000)]
        subnets: usize,
        /// IPs (one pod each).
        #[arg(long, default_value_t = 200_000)]
        ips: usize,
        /// Approximate number of events.
        #[arg(long, default_value_t = 1_000_000)]
        events: usize,
        /// One subnet in this many is deleted under its live IPs (the leak).
        #[arg(long, default_value_t = 200)]
        leak_one_in: usize,
        /// Object content like a real kube-ovn cluster's (uids, labels, kube-ovn
        /// annotations, owner references, allocations, network-status): about 600 bytes an
        /// event before compression, where the default history has about 140. The same
        /// events, the same leaks.
        #[arg(long)]
        realistic: bool,
        /// Write with this WatchEvent schema version (1 to 4; default today's), as a
        /// collector of that version did: what it lacks is left out.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4))]
        schema_version: Option<u32>,
        /// Spread the history over this many clusters (cluster ids `NAME-0`, `NAME-1`,
        /// ...): subnet `s` and its IPs and pods are in cluster `s % clusters`, each
        /// cluster a whole history of its own (the live group benchmark's set-up).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        clusters: u32,
    },
    /// Write a history of a cluster that runs every IPAM ipaudit serves (kube-ovn,
    /// whereabouts, spiderpool, Calico, Cilium; pods spread over them, with labels,
    /// annotations and owners, and their pools), then a relist of every stream, each
    /// object at its own version: the realistic history of the memory target.
    Mixed {
        /// Output file.
        #[arg(long)]
        out: PathBuf,
        /// Pods (one IPAM object each; a pool per 250, a Calico block per 64).
        #[arg(long, default_value_t = 250_000)]
        pods: usize,
        /// Nodes (each with its CiliumNode).
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
        nodes: u32,
        /// The IPAMs pods go round (all by default; one alone gives that IPAM's cost).
        #[arg(long, value_delimiter = ',', value_enum)]
        ipams: Vec<mixed::Ipam>,
    },
    /// Replay a history (an Avro file, or a kubectl recording of one) and print events/s
    /// and peak memory; then check the findings against the leaks `generate` planted
    /// (exactly those alerts fire, nothing else) and fail when they differ.
    Run {
        /// The history: an Avro file, or the files of a kubectl recording of it
        /// (`kubectl-bench from-avro`), merged as `analyzer replay` merges them.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// The planted leaks' findings [default: FILE.planted.json beside the first file,
        /// as `generate` writes it; when that file is missing, the findings are not
        /// checked].
        #[arg(long)]
        planted: Option<PathBuf>,
    },
    /// Only decode a file (no analysis), to split the cost: the fields replay reads.
    Decode {
        /// The history file.
        file: PathBuf,
        /// Decode every field (raw objects, annotations, owner references, labels).
        #[arg(long)]
        all_fields: bool,
    },
    /// Decode the events of a file as `analyzer run` gets them from Kafka, single-object
    /// messages, in memory: each afresh with every field (`decode`, as the live analyzer
    /// did), then each into the one before with the fields the analysis reads
    /// (`decode_into`, as it does now), then the same events written by a collector one
    /// schema version ahead (`NextVersion`), read with the schema learnt from the schemas
    /// topic (`decode_into_with`, schema resolution); prints the rates side by side.
    Messages {
        /// The history file.
        file: PathBuf,
        /// Rounds over the messages (the best is shown).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Decode a file with apache-avro's generic `Reader` into `Value`s (no resolution, no
    /// analysis): the yardstick of issue 11.
    ApacheDecode {
        /// The history file.
        file: PathBuf,
    },
    /// Inflate every deflate block of a container with miniz_oxide (apache-avro's
    /// inflater, and ours before issue 11) and with libdeflate (ours now), in turn, and
    /// print each one's output rate: the measurement behind the choice.
    Inflate {
        /// A container file with deflate blocks.
        file: PathBuf,
        /// Rounds (the median is shown).
        #[arg(long, default_value_t = 7)]
        rounds: usize,
    },
    /// Side by side on one file, each a whole process, in turn: `analyzer replay` (decode
    /// and every rule), apache-avro's `Reader` decoding to `Value`s, and Python fastavro
    /// decoding (skipped when fastavro is not installed). Prints wall seconds, events/s
    /// and each one's ratio to `analyzer replay`. With `--kubectl`, also `analyzer
    /// replay` of the kubectl recording of the same history against a generic
    /// `serde_json::Value` parse of it; with `--live`, the peak memory per live object.
    Compare {
        /// The history file.
        file: PathBuf,
        /// Runs of each command (the median is shown).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// The analyzer binary (default: `analyzer` next to this program).
        #[arg(long)]
        analyzer: Option<PathBuf>,
        /// The Python interpreter for fastavro.
        #[arg(long, default_value = "python3")]
        python: String,
        /// A kubectl recording of the same history (`kubectl-bench from-avro FILE --out
        /// DIR`): adds `analyzer replay` of its `*.json` files and a generic
        /// `serde_json::Value` parse of them (`kubectl-bench parse-value`, next to this
        /// program).
        #[arg(long, value_name = "DIR")]
        kubectl: Option<PathBuf>,
        /// A history whose live objects peak at about 1M (`generate --ips 500000 --events
        /// 0`): adds the peak memory per live object of analysing it (`state-bench memory`,
        /// next to this program; run once).
        #[arg(long, value_name = "FILE")]
        live: Option<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Generate {
            out,
            subnets,
            ips,
            events,
            leak_one_in,
            realistic,
            schema_version,
            clusters,
        } => {
            let output = Output::create(&out, schema_version)?;
            let realism = realistic.then_some(Realism { subnets });
            let shape = Shape {
                subnets,
                ips,
                events,
                leak_one_in,
                clusters: clusters as usize,
            };
            generate(&out, output, realism, &shape)
        }
        Command::Mixed {
            out,
            pods,
            nodes,
            ipams,
        } => {
            let started = Instant::now();
            let mut ipams = ipams;
            if ipams.is_empty() {
                ipams = <mixed::Ipam as clap::ValueEnum>::value_variants().to_vec();
            }
            let layout = mixed::Layout {
                ipams,
                nodes: nodes as usize,
            };
            let written = mixed::generate(Output::create(&out, None)?, pods, &layout)?;
            say!(
                "wrote {written} events ({pods} pods on {nodes} nodes, IPAMs {:?}, then a relist) to {} ({:.1} MiB) in {:.1?}",
                layout.ipams,
                out.display(),
                std::fs::metadata(&out)?.len() as f64 / 1048576.0,
                started.elapsed()
            )?;
            Ok(())
        }
        Command::Run { files, planted } => run(&files, planted),
        Command::Decode { file, all_fields } => decode(&file, all_fields),
        Command::ApacheDecode { file } => apache_decode(&file),
        Command::Messages { file, rounds } => messages(&file, rounds),
        Command::Inflate { file, rounds } => inflate(&file, rounds),
        Command::Compare {
            file,
            runs,
            analyzer,
            python,
            kubectl,
            live,
        } => compare(
            &file,
            runs,
            analyzer,
            &python,
            kubectl.as_deref(),
            live.as_deref(),
        ),
    }
}

/// Where the history goes: a container of today's schema, or of an older version.
#[allow(clippy::large_enum_variant, reason = "one per run")]
enum Output {
    Current(ContainerWriter<WatchEvent, BufWriter<File>>),
    /// apache-avro's writer with the old schema; each event is turned into a `Value` of
    /// that version.
    Older(apache_avro::Writer<'static, BufWriter<File>>, u32),
}

impl Output {
    fn create(out: &Path, version: Option<u32>) -> anyhow::Result<Output> {
        let file = File::create(out).with_context(|| format!("create {}", out.display()))?;
        let set = WatchEvent::schemas();
        Ok(match version {
            Some(v) if v != set.current().version => {
                let schema = set.versions()[v as usize - 1].schema;
                let writer = apache_avro::Writer::builder()
                    .schema(schema)
                    .writer(BufWriter::new(file))
                    .codec(Codec::Deflate(DeflateSettings::default()))
                    .build()?;
                Output::Older(writer, v)
            }
            _ => Output::Current(ContainerWriter::new(BufWriter::new(file))?),
        })
    }

    fn append(&mut self, event: &WatchEvent) -> anyhow::Result<()> {
        match self {
            Output::Current(writer) => writer.append(event)?,
            Output::Older(writer, version) => {
                writer.append_value(value_of_version(event, *version)?)?;
            }
        }
        Ok(())
    }

    fn finish(self) -> anyhow::Result<()> {
        match self {
            Output::Current(writer) => drop(writer.finish()?),
            Output::Older(writer, _) => drop(writer.into_inner()?),
        }
        Ok(())
    }
}

/// The event as a collector of schema `version` wrote it: the fields that version lacks
/// left out, then resolved to its schema.
fn value_of_version(event: &WatchEvent, version: u32) -> anyhow::Result<Value> {
    fn strip(version: u32, value: &mut Value) {
        if let Value::Record(fields) = value {
            fields.retain(|(name, _)| match name.as_str() {
                "raw_object" | "last_update_ms" => version >= 2,
                "remediation" => version >= 3,
                "ip_pool" | "ip_reservation" | "spider_ip_pool" | "spider_endpoint"
                | "network_status" | "disruption_target" => version >= 4,
                _ => true,
            });
            for (_, v) in fields.iter_mut() {
                strip(version, v);
            }
        } else if let Value::Union(_, inner) = value {
            strip(version, inner);
        }
    }
    let mut value = apache_avro::to_value(event)?;
    strip(version, &mut value);
    let schema = WatchEvent::schemas().versions()[version as usize - 1].schema;
    Ok(value.resolve(schema)?)
}

/// Builds events in history order with one resourceVersion counter, as etcd would.
/// What `generate` writes: how many objects, events, leaks and clusters.
struct Shape {
    subnets: usize,
    ips: usize,
    events: usize,
    leak_one_in: usize,
    clusters: usize,
}

struct History {
    rv: i64,
    t_ms: i64,
    output: Output,
    realism: Option<Realism>,
    clusters: usize,
    written: usize,
}

impl History {
    /// Writes the event `builder` makes, in the cluster of subnet `s`.
    fn emit(
        &mut self,
        s: usize,
        builder: EventBuilder,
        event_type: EventType,
    ) -> anyhow::Result<()> {
        self.rv += 1;
        self.t_ms += 1;
        let mut event = builder.rv(self.rv).at(self.t_ms).build(event_type);
        if let Some(realism) = &self.realism {
            realism.enrich(&mut event, self.t_ms);
        }
        self.place(s, &mut event);
        self.output.append(&event)?;
        self.written += 1;
        Ok(())
    }

    /// Writes a bookmark of `stream` in the cluster of subnet `s`.
    fn bookmark(&mut self, s: usize, stream: Stream) -> anyhow::Result<()> {
        let mut event = EventBuilder::bookmark(stream, self.rv);
        self.place(s, &mut event);
        event.observed_at_ms = Some(self.t_ms);
        self.output.append(&event)?;
        self.written += 1;
        Ok(())
    }

    /// Names the cluster and collector of subnet `s`'s events.
    fn place(&self, s: usize, event: &mut WatchEvent) {
        let (cluster, collector) = match self.realism {
            Some(_) => (REALISTIC_CLUSTER, REALISTIC_COLLECTOR),
            None => ("bench", "collector-0"),
        };
        if self.clusters > 1 {
            let k = s % self.clusters;
            event.cluster_id = format!("{cluster}-{k}");
            event.collector_id = format!("{collector}-{k}");
        } else {
            event.cluster_id = cluster.into();
            event.collector_id = collector.into();
        }
    }
}

const REALISTIC_CLUSTER: &str = "prod-eu-west-1";
const REALISTIC_COLLECTOR: &str = "ipaudit-collector-6f9c7d8b5-x2k4q";

/// Object content like a real kube-ovn cluster's, added to the lean history's events
/// without changing what the rules see: the same names, addresses, finalizers and times.
/// Shapes from KUBE-OVN-FACTS.md: the labels kube-ovn puts on IPs, its per-provider pod
/// annotations, a ReplicaSet owner, the pod's allocation and network-status.
struct Realism {
    subnets: usize,
}

impl Realism {
    fn enrich(&self, event: &mut WatchEvent, t_ms: i64) {
        let stream = event.stream;
        let Some(meta) = event.metadata.as_mut() else {
            return;
        };
        meta.generation = Some(1);
        meta.creation_timestamp_ms = Some(1_700_000_000_000 + (t_ms % 86_400_000));
        match (stream, event.part.as_mut()) {
            (Stream::Pod, Some(KindPart::Pod(pod))) => {
                let i: usize = meta.name.trim_start_matches("pod-").parse().unwrap_or(0);
                let s = i % self.subnets.max(1);
                let address = address_of(i, s, self.subnets);
                let (mac, node) = (mac_of(i), format!("worker-{:03}", i % 97));
                let (cidr, switch) = (cidr_of(s), format!("subnet-{s}"));
                let app = format!("svc-{}", i % 1000);
                let hash = &uuid_of("rs", i % 1000)[..10];
                meta.uid = uuid_of("pod", i);
                meta.labels = BTreeMap::from([
                    ("app".into(), app.clone()),
                    ("app.kubernetes.io/name".into(), app.clone()),
                    ("pod-template-hash".into(), hash.into()),
                ]);
                let ovn = |k: &str| format!("ovn.kubernetes.io/{k}");
                meta.annotations = BTreeMap::from([
                    (ovn("allocated"), "true".into()),
                    (ovn("cidr"), cidr.clone()),
                    (ovn("gateway"), gateway_of(s)),
                    (ovn("ip_address"), address.clone()),
                    (ovn("logical_router"), "ovn-cluster".into()),
                    (ovn("logical_switch"), switch.clone()),
                    (ovn("mac_address"), mac.clone()),
                    (ovn("pod_nic_type"), "veth-pair".into()),
                    (ovn("routed"), "true".into()),
                ]);
                meta.owner_references = vec![replica_set_of(i % 1000)];
                pod.node_name = node;
                pod.pod_ips = vec![address.clone()];
                pod.allocations = vec![PodAllocation {
                    provider: "ovn".into(),
                    allocated: true,
                    ip_address: address.clone(),
                    mac_address: mac.clone(),
                    logical_switch: switch,
                    cidr,
                }];
                pod.network_status = vec![NetworkStatus {
                    name: "kube-ovn".into(),
                    interface: "eth0".into(),
                    ips: vec![address],
                    mac,
                    default: true,
                }];
            }
            (Stream::Ip, Some(KindPart::Ip(ip))) => {
                let i: usize = meta
                    .name
                    .trim_start_matches("pod-")
                    .split('.')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let node = format!("worker-{:03}", i % 97);
                meta.uid = uuid_of("ip", i);
                meta.labels.extend([
                    ("ovn.kubernetes.io/node-name".into(), node.clone()),
                    (ip.subnet.clone(), String::new()),
                ]);
                ip.node_name = node;
                ip.v4_ip_address = ip.ip_address.clone();
                ip.mac_address = mac_of(i);
            }
            (Stream::Subnet, Some(KindPart::Subnet(subnet))) => {
                let s: usize = meta.name.trim_start_matches("subnet-").parse().unwrap_or(0);
                meta.uid = uuid_of("subnet", s);
                subnet.cidr_block = cidr_of(s);
                subnet.gateway = gateway_of(s);
                subnet.vpc = "ovn-cluster".into();
                subnet.provider = "ovn".into();
                subnet.protocol = "IPv4".into();
                subnet.v4_available_ips = Some("253".into());
                subnet.v6_using_ips = Some("0".into());
                subnet.v6_available_ips = Some("0".into());
            }
            _ => {}
        }
    }
}

/// The ReplicaSet of app `svc-{app}` (named with its pod-template hash), as the
/// controlling owner of its pods.
fn replica_set_of(app: usize) -> OwnerReference {
    let hash = &uuid_of("rs", app)[..10];
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: format!("svc-{app}-{hash}"),
        uid: uuid_of("rs", app),
        controller: Some(true),
    }
}

/// A uid that looks like one (a v4 UUID), the same for the same object.
fn uuid_of(kind: &str, i: usize) -> String {
    let mut x = (i as u64)
        ^ kind.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    let mut next = || {
        // splitmix64
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let (a, b) = (next(), next());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

fn mac_of(i: usize) -> String {
    let b = (i as u32).to_be_bytes();
    format!("00:00:00:{:02x}:{:02x}:{:02x}", b[1], b[2], b[3])
}

fn cidr_of(s: usize) -> String {
    format!("10.{}.{}.0/24", s / 256 % 256, s % 256)
}

fn gateway_of(s: usize) -> String {
    format!("10.{}.{}.1", s / 256 % 256, s % 256)
}

/// The address of IP `i` on `subnet`, as [`ip_builder`] gives it.
fn address_of(i: usize, subnet: usize, subnets: usize) -> String {
    let host = (i / subnets.max(1)) % 253 + 2;
    format!("10.{}.{}.{host}", subnet / 256 % 256, subnet % 256)
}

/// The name of IP `i` on `subnet`.
fn ip_name(i: usize, subnet: usize) -> String {
    format!("pod-{i}.ns-{}", subnet % 500)
}

/// IP `i` on `subnet`: a subnet holds IPs `subnet`, `subnet + subnets`, ..., and the
/// `i / subnets`-th of them gets host address `i / subnets + 2`: unique in its /24 for up
/// to 253 IPs per subnet.
fn ip_builder(i: usize, subnet: usize, subnets: usize) -> EventBuilder {
    EventBuilder::ip(&ip_name(i, subnet), &format!("subnet-{subnet}"))
        .uid(&format!("ip-uid-{i}"))
        .ip_of(
            &format!("ns-{}", subnet % 500),
            &format!("pod-{i}"),
            &address_of(i, subnet, subnets),
            "",
        )
}

fn pod_builder(i: usize, subnet: usize) -> EventBuilder {
    EventBuilder::pod(&format!("ns-{}", subnet % 500), &format!("pod-{i}"))
        .uid(&format!("pod-uid-{i}"))
}

fn generate(
    out: &Path,
    output: Output,
    realism: Option<Realism>,
    shape: &Shape,
) -> anyhow::Result<()> {
    let Shape {
        subnets,
        ips,
        events,
        leak_one_in,
        clusters,
    } = *shape;
    let started = Instant::now();
    let mut h = History {
        rv: 1_000,
        t_ms: 1_750_000_000_000,
        output,
        realism,
        clusters,
        written: 0,
    };
    for s in 0..subnets {
        h.emit(
            s,
            EventBuilder::subnet(&format!("subnet-{s}")).uid(&format!("subnet-uid-{s}")),
            EventType::Added,
        )?;
    }
    // Each IP lives on subnet i % subnets: its pod and IP are created, the pod is updated a
    // few times (spread so that the whole history has about `events` events), and a
    // quarter of the subnets are torn down at the end.
    let base = subnets + ips * 3 + (ips / 4) * 3 + subnets / 4 + ips / 64;
    let extra = events.saturating_sub(base);
    for i in 0..ips {
        let s = i % subnets;
        h.emit(s, pod_builder(i, s), EventType::Added)?;
        h.emit(s, ip_builder(i, s, subnets), EventType::Added)?;
        let updates = (i + 1) * extra / ips.max(1) - i * extra / ips.max(1);
        for _ in 0..=updates {
            h.emit(s, pod_builder(i, s), EventType::Modified)?;
        }
        // A bookmark every 64 IPs of each cluster (consecutive IPs go round the clusters
        // when the subnets divide among them evenly). The analysis holds a cluster's events
        // until every stream's watermark has passed them, so a quiet stream's bookmarks
        // bound what it holds in a catch-up.
        if (i / clusters) % 64 == 0 {
            h.bookmark(s, Stream::Subnet)?;
        }
    }
    // Teardown of every fourth subnet: healthy order, except one in `leak_one_in`
    // whose subnet goes first and whose IPs then hang on their finalizer.
    let mut planted = Vec::new();
    for s in (0..subnets).step_by(4) {
        let leaks = s % (leak_one_in * 4) == 0;
        let members: Vec<usize> = (s..ips).step_by(subnets).collect();
        if leaks {
            for &i in &members {
                planted.extend(Finding::leaked_ip(&ip_name(i, s)));
            }
            h.emit(
                s,
                EventBuilder::subnet(&format!("subnet-{s}")).uid(&format!("subnet-uid-{s}")),
                EventType::Deleted,
            )?;
        }
        for &i in &members {
            let t = h.t_ms;
            h.emit(s, pod_builder(i, s), EventType::Deleted)?;
            h.emit(
                s,
                ip_builder(i, s, subnets).deleting(t),
                EventType::Modified,
            )?;
            if !leaks {
                h.emit(
                    s,
                    ip_builder(i, s, subnets).deleting(t).finalizers(&[]),
                    EventType::Deleted,
                )?;
            }
        }
        if !leaks {
            h.emit(
                s,
                EventBuilder::subnet(&format!("subnet-{s}")).uid(&format!("subnet-uid-{s}")),
                EventType::Deleted,
            )?;
        }
    }
    h.output.finish()?;
    let size = std::fs::metadata(out)?.len();
    planted.sort();
    let planted_path = planted_path(out);
    std::fs::write(&planted_path, serde_json::to_vec_pretty(&planted)?)
        .with_context(|| format!("cannot write {}", planted_path.display()))?;
    say!(
        "wrote {} events ({} subnets, {} IPs, {} clusters, rv up to {}) to {} ({:.1} MiB) in {:.1?}; the {} findings its leaks must give to {}",
        h.written,
        subnets,
        ips,
        clusters,
        h.rv,
        out.display(),
        size as f64 / 1048576.0,
        started.elapsed(),
        planted.len(),
        planted_path.display()
    )?;
    Ok(())
}

/// An alert a generated history must raise, by rule and subject.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
struct Finding {
    rule: String,
    subject_kind: String,
    subject_name: String,
}

impl Finding {
    /// What an IP left behind by its subnet's early deletion raises: the deletion order
    /// itself, and the IP stuck on its finalizer.
    fn leaked_ip(name: &str) -> [Finding; 2] {
        ["ip-stuck-terminating", "subnet-deleted-before-ip"].map(|rule| Finding {
            rule: rule.to_owned(),
            subject_kind: "IP".to_owned(),
            subject_name: name.to_owned(),
        })
    }
}

/// Where `generate` writes the findings of the leaks it planted in `history`.
fn planted_path(history: &Path) -> PathBuf {
    let mut path = history.as_os_str().to_owned();
    path.push(".planted.json");
    PathBuf::from(path)
}

/// Checks that the alerts fired are exactly the planted leaks' findings.
fn check_findings(fired: &[Finding], planted_file: &Path) -> anyhow::Result<String> {
    let planted: Vec<Finding> = serde_json::from_slice(
        &std::fs::read(planted_file)
            .with_context(|| format!("cannot read {}", planted_file.display()))?,
    )
    .with_context(|| format!("{} is not a list of findings", planted_file.display()))?;
    let planted: std::collections::BTreeSet<&Finding> = planted.iter().collect();
    let fired: std::collections::BTreeSet<&Finding> = fired.iter().collect();
    let missing: Vec<_> = planted.difference(&fired).take(10).collect();
    let unexpected: Vec<_> = fired.difference(&planted).take(10).collect();
    anyhow::ensure!(
        missing.is_empty() && unexpected.is_empty(),
        "the findings differ from the planted leaks ({}): {} fired, {} planted; missing (first 10): {missing:?}; not planted (first 10): {unexpected:?}",
        planted_file.display(),
        fired.len(),
        planted.len()
    );
    Ok(format!(
        "findings: exactly the {} planted ({})",
        planted.len(),
        planted_file.display()
    ))
}

fn run(files: &[PathBuf], planted: Option<PathBuf>) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut outcome = replay(files, &ReplayOptions::default())?;
    let elapsed = started.elapsed();
    // As `analyzer replay` does: the state is not freed object by object at exit, and the
    // alert transitions move into the findings.
    std::mem::forget(outcome.analyzer.take());
    let findings = Findings::take(std::mem::take(&mut outcome.outputs));
    let events = outcome.stats.events_in;
    let mut by_rule = std::collections::BTreeMap::new();
    for h in &findings.alerts {
        *by_rule.entry(h.fired.rule.clone()).or_insert(0u64) += 1;
    }
    say!(
        "replayed {events} events in {:.2?}: {:.0} events/s; alerts fired: {by_rule:?}; peak RSS {} MiB",
        elapsed,
        events as f64 / elapsed.as_secs_f64(),
        peak_rss_kib().map_or_else(|| "?".into(), |k| (k / 1024).to_string())
    )?;
    let Some(planted) = planted.or_else(|| files.first().map(|f| planted_path(f))) else {
        return Ok(());
    };
    if !planted.exists() {
        say!(
            "findings not checked: no {} (written by generate)",
            planted.display()
        )?;
        return Ok(());
    }
    let fired: Vec<Finding> = findings
        .alerts
        .iter()
        .map(|h| Finding {
            rule: h.fired.rule.clone(),
            subject_kind: h.fired.subject_kind.clone(),
            subject_name: h.fired.subject_name.clone(),
        })
        .collect();
    say!("{}", check_findings(&fired, &planted)?)?;
    Ok(())
}

fn decode(file: &Path, all_fields: bool) -> anyhow::Result<()> {
    let started = Instant::now();
    let reader = BufReader::with_capacity(1 << 20, File::open(file)?);
    let fields = if all_fields {
        Fields::ALL
    } else {
        ANALYSIS_FIELDS
    };
    let mut events = 0u64;
    // As replay reads them: each into the event before.
    let mut reader = ContainerReader::<WatchEvent, _>::with_fields(reader, fields)?;
    let mut event = WatchEvent::blank();
    while let Some(read) = reader.next_into(&mut event) {
        read?;
        std::hint::black_box(&event);
        events += 1;
    }
    let elapsed = started.elapsed();
    say!(
        "decoded {events} events in {elapsed:.2?}: {:.0} events/s",
        events as f64 / elapsed.as_secs_f64()
    )?;
    Ok(())
}

fn messages(file: &Path, rounds: usize) -> anyhow::Result<()> {
    let reader = BufReader::with_capacity(1 << 20, File::open(file)?);
    let mut messages = Vec::new();
    for event in ContainerReader::<WatchEvent, _>::new(reader)? {
        messages.push(ipaudit_schemas::encode(&event?)?);
    }
    let bytes: usize = messages.iter().map(Vec::len).sum();
    let afresh = best_of(rounds, || {
        for message in &messages {
            std::hint::black_box(ipaudit_schemas::decode::<WatchEvent>(message)?);
        }
        Ok(())
    })?;
    let mut event = WatchEvent::blank();
    let into = best_of(rounds, || {
        for message in &messages {
            ipaudit_schemas::decode_into(message, &ANALYSIS_FIELDS, &mut event)?;
            std::hint::black_box(&event);
        }
        Ok(())
    })?;
    let count = messages.len() as f64;
    say!(
        "{} messages ({:.1} MiB), best of {rounds}: decode afresh, every field {:.3} s ({:.0}/s); decode_into the event before, analysis fields {:.3} s ({:.0}/s); ratio {:.3}",
        messages.len(),
        bytes as f64 / 1048576.0,
        afresh,
        count / afresh,
        into,
        count / into,
        into / afresh
    )?;
    // A newer collector's messages: the slow path until the analyzer is upgraded.
    let next = ipaudit_schemas::builders::NextVersion::new();
    let mut learnt = ipaudit_schemas::WriterSchemas::new();
    learnt.learn::<WatchEvent>(&next.fingerprint, next.text.as_bytes())?;
    let newer: Vec<Vec<u8>> = messages
        .iter()
        .map(|m| ipaudit_schemas::decode::<WatchEvent>(m).map(|e| next.encode(&e)))
        .collect::<Result<_, _>>()?;
    let resolved = best_of(rounds, || {
        for message in &newer {
            ipaudit_schemas::decode_into_with(message, &ANALYSIS_FIELDS, &mut event, &learnt)?;
            std::hint::black_box(&event);
        }
        Ok(())
    })?;
    say!(
        "the same events one schema version ahead, read with the learnt schema (resolution): {:.3} s ({:.0}/s); against decode_into of this build's version: ratio {:.3}",
        resolved,
        count / resolved,
        into / resolved
    )?;
    Ok(())
}

/// The fastest of `rounds` runs of `round`, in seconds.
fn best_of(rounds: usize, mut round: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    let mut best = f64::INFINITY;
    for _ in 0..rounds.max(1) {
        let started = Instant::now();
        round()?;
        best = best.min(started.elapsed().as_secs_f64());
    }
    Ok(best)
}

fn apache_decode(file: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    let reader = BufReader::with_capacity(1 << 20, File::open(file)?);
    let mut events = 0u64;
    for value in apache_avro::Reader::new(reader)? {
        std::hint::black_box(value?);
        events += 1;
    }
    let elapsed = started.elapsed();
    say!(
        "apache-avro Reader decoded {events} events to Values in {elapsed:.2?}: {:.0} events/s",
        events as f64 / elapsed.as_secs_f64()
    )?;
    Ok(())
}

/// The deflate blocks of a container file, as stored (the header and sync markers
/// skipped). A bench helper: it trusts the file.
fn deflate_blocks(data: &[u8]) -> anyhow::Result<Vec<&[u8]>> {
    fn long(data: &[u8], at: &mut usize) -> anyhow::Result<i64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *data.get(*at).context("the file ends inside a number")?;
            *at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        anyhow::bail!("a number of more than 64 bits")
    }
    anyhow::ensure!(data.starts_with(b"Obj\x01"), "not an Avro container");
    let mut at = 4;
    let mut deflate = false;
    loop {
        let count = long(data, &mut at)?;
        if count == 0 {
            break;
        }
        if count < 0 {
            long(data, &mut at)?;
        }
        for _ in 0..count.unsigned_abs() {
            let key_len = usize::try_from(long(data, &mut at)?)?;
            let key = data.get(at..at + key_len).context("cut header")?;
            at += key_len;
            let value_len = usize::try_from(long(data, &mut at)?)?;
            let value = data.get(at..at + value_len).context("cut header")?;
            at += value_len;
            deflate |= key == b"avro.codec" && value == b"deflate";
        }
    }
    anyhow::ensure!(deflate, "the file's blocks are not deflate-compressed");
    at += 16;
    let mut blocks = Vec::new();
    while at < data.len() {
        long(data, &mut at)?;
        let size = usize::try_from(long(data, &mut at)?)?;
        blocks.push(data.get(at..at + size).context("cut block")?);
        at += size + 16;
    }
    Ok(blocks)
}

fn inflate(file: &Path, rounds: usize) -> anyhow::Result<()> {
    use miniz_oxide::inflate::core::{decompress, inflate_flags, DecompressorOxide};
    let data = std::fs::read(file).with_context(|| format!("read {}", file.display()))?;
    let blocks = deflate_blocks(&data)?;
    let mut out = vec![0u8; ipaudit_schemas::container::MAX_BLOCK_BYTES];
    let (mut miniz, mut libdeflate) = (Vec::new(), Vec::new());
    let mut total = 0;
    for _ in 0..rounds.max(1) {
        let started = Instant::now();
        let mut state = Box::<DecompressorOxide>::default();
        let mut sum = 0;
        for block in &blocks {
            state.init();
            let flags = inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
            let (status, _, written) = decompress(&mut state, block, &mut out, 0, flags);
            anyhow::ensure!(
                status == miniz_oxide::inflate::TINFLStatus::Done,
                "miniz_oxide: {status:?}"
            );
            sum += written;
        }
        miniz.push(started.elapsed().as_secs_f64());
        let started = Instant::now();
        let mut inflater = libdeflater::Decompressor::new();
        let mut sum2 = 0;
        for block in &blocks {
            sum2 += inflater.deflate_decompress(block, &mut out)?;
        }
        libdeflate.push(started.elapsed().as_secs_f64());
        anyhow::ensure!(sum == sum2, "the two inflaters disagree");
        total = sum;
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (m, l) = (median(miniz), median(libdeflate));
    say!(
        "{} deflate blocks, {:.1} MiB in, {:.1} MiB out; medians of {rounds} rounds:",
        blocks.len(),
        blocks.iter().map(|b| b.len()).sum::<usize>() as f64 / 1048576.0,
        total as f64 / 1048576.0
    )?;
    say!(
        "miniz_oxide {:.3} s ({:.0} MB/s out), libdeflate {:.3} s ({:.0} MB/s out): libdeflate/miniz_oxide time {:.2}",
        m,
        total as f64 / m / 1e6,
        l,
        total as f64 / l / 1e6,
        l / m
    )?;
    Ok(())
}

/// fastavro decoding every record of the file given as its argument, printing the count.
const FASTAVRO_DECODE: &str = "import sys, fastavro\n\
n = 0\n\
with open(sys.argv[1], 'rb') as f:\n    for _ in fastavro.reader(f):\n        n += 1\n\
print(n)\n";

/// One contender of `compare`: a whole process, timed from outside.
struct Contender {
    name: &'static str,
    /// The contenders of one input are compared with the first of them.
    input: Input,
    program: String,
    args: Vec<String>,
    /// Exit codes that mean success (`analyzer replay` exits 1 when an alert fired).
    ok_codes: &'static [i32],
    walls: Vec<f64>,
}

impl Contender {
    fn run_once(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        let status = std::process::Command::new(&self.program)
            .args(&self.args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .with_context(|| format!("start {}", self.program))?;
        let wall = started.elapsed().as_secs_f64();
        anyhow::ensure!(
            status.code().is_some_and(|c| self.ok_codes.contains(&c)),
            "{}: {} failed: {status}",
            self.name,
            self.program
        );
        self.walls.push(wall);
        Ok(())
    }

    fn median(&self) -> f64 {
        let mut walls = self.walls.clone();
        walls.sort_by(f64::total_cmp);
        walls[walls.len() / 2]
    }

    fn command_line(&self) -> String {
        shlex::try_join(
            std::iter::once(self.program.as_str()).chain(self.args.iter().map(String::as_str)),
        )
        .unwrap_or_else(|_| self.program.clone())
    }
}

/// What a contender reads: the Avro history, or its kubectl recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    Avro,
    Kubectl,
}

/// A bench binary next to this program, or an error that says how to build it.
fn sibling(me: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let path = me.with_file_name(name);
    anyhow::ensure!(
        path.exists(),
        "{} not found: build it (cargo build --profile dist -p ipaudit-analyzer --bin {name})",
        path.display()
    );
    Ok(path)
}

fn compare(
    file: &Path,
    runs: usize,
    analyzer: Option<PathBuf>,
    python: &str,
    kubectl: Option<&Path>,
    live: Option<&Path>,
) -> anyhow::Result<()> {
    let me = std::env::current_exe().context("where replay-bench is")?;
    let analyzer = match analyzer {
        Some(path) => path,
        None => me.with_file_name("analyzer"),
    };
    anyhow::ensure!(
        analyzer.exists(),
        "{} not found: build it (cargo build --profile dist -p ipaudit-analyzer --bin analyzer) or pass --analyzer",
        analyzer.display()
    );
    let memory = match live {
        Some(live) => Some((sibling(&me, "state-bench")?, live)),
        None => None,
    };
    let events = ContainerReader::<WatchEvent, _>::with_fields(
        BufReader::with_capacity(1 << 20, File::open(file)?),
        Fields::ANALYSIS,
    )?
    .count();
    let path = file.display().to_string();
    let mut contenders = vec![
        Contender {
            name: "analyzer replay (decode + every rule)",
            input: Input::Avro,
            program: analyzer.display().to_string(),
            args: vec![
                "replay".into(),
                "--format".into(),
                "jsonl".into(),
                path.clone(),
            ],
            ok_codes: &[0, 1],
            walls: Vec::new(),
        },
        Contender {
            name: "apache-avro Reader to Values (decode only)",
            input: Input::Avro,
            program: me.display().to_string(),
            args: vec!["apache-decode".into(), path.clone()],
            ok_codes: &[0],
            walls: Vec::new(),
        },
    ];
    let fastavro = std::process::Command::new(python)
        .args(["-c", "import fastavro"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if fastavro {
        contenders.push(Contender {
            name: "Python fastavro (decode only)",
            input: Input::Avro,
            program: python.to_owned(),
            args: vec!["-c".into(), FASTAVRO_DECODE.into(), path.clone()],
            ok_codes: &[0],
            walls: Vec::new(),
        });
    } else {
        say!("fastavro: skipped ({python} cannot import fastavro; pip install fastavro)")?;
    }
    if let Some(dir) = kubectl {
        let kubectl_bench = sibling(&me, "kubectl-bench")?;
        let mut recording: Vec<String> = std::fs::read_dir(dir)
            .with_context(|| format!("read {}", dir.display()))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|e| e == "json"))
            .map(|path| path.display().to_string())
            .collect();
        recording.sort();
        anyhow::ensure!(
            !recording.is_empty(),
            "{} holds no *.json files: write the recording with kubectl-bench from-avro {} --out {}",
            dir.display(),
            file.display(),
            dir.display()
        );
        contenders.push(Contender {
            name: "analyzer replay of its kubectl recording (parse + every rule)",
            input: Input::Kubectl,
            program: analyzer.display().to_string(),
            args: ["replay", "--format", "jsonl"]
                .into_iter()
                .map(String::from)
                .chain(recording)
                .collect(),
            ok_codes: &[0, 1],
            walls: Vec::new(),
        });
        contenders.push(Contender {
            name: "serde_json Value parse of the recording (parse only)",
            input: Input::Kubectl,
            program: kubectl_bench.display().to_string(),
            args: vec!["parse-value".into(), dir.display().to_string()],
            ok_codes: &[0],
            walls: Vec::new(),
        });
    }
    // In turn, A B C A B C ...: a drift in the machine's speed touches each alike.
    for _ in 0..runs.max(1) {
        for contender in &mut contenders {
            contender.run_once()?;
        }
    }
    say!("{events} events in {path}, {runs} runs each, medians of whole processes:")?;
    for input in [Input::Avro, Input::Kubectl] {
        let mut of_input = contenders.iter().filter(|c| c.input == input).peekable();
        let Some(reference) = of_input.peek().map(|c| c.median()) else {
            continue;
        };
        if let (Input::Kubectl, Some(dir)) = (input, kubectl) {
            say!(
                "its kubectl recording, {} (the same events):",
                dir.display()
            )?;
        }
        say!("| what | wall s | events/s | analyzer replay's speed / this one's |")?;
        say!("| --- | --- | --- | --- |")?;
        for contender in of_input {
            let wall = contender.median();
            say!(
                "| {} | {wall:.2} | {:.0} | {:.2} |",
                contender.name,
                events as f64 / wall,
                wall / reference
            )?;
        }
    }
    if let Some((state_bench, live)) = &memory {
        let out = std::process::Command::new(state_bench)
            .args(["memory".as_ref(), live.as_os_str()])
            .output()
            .with_context(|| format!("start {}", state_bench.display()))?;
        anyhow::ensure!(
            out.status.success(),
            "state-bench memory {} failed: {}",
            live.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        say!(
            "peak memory per live object ({}): {}",
            live.display(),
            String::from_utf8_lossy(&out.stdout).trim()
        )?;
    }
    say!("paired whole-command ratios: scripts/pair-bench -n 5 --timeout 600 --vs '<B>' -- <A>, with")?;
    for contender in &contenders {
        say!("  {}: {}", contender.name, contender.command_line())?;
    }
    Ok(())
}

/// Peak resident set size of this process (Linux), in KiB.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
