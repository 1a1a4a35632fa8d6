//! A history like a production cluster's that runs several IPAMs, for the memory target
//! of issue 44 (peak memory per live object on a realistic history): pods spread over
//! every IPAM ipaudit serves, each with labels, annotations and an owner, and the IPAM
//! objects that hold its address; the pools filled as pods come; then a relist of every
//! stream (a collector's restart), the listed objects at their own resourceVersions.
//!
//! Pod `i` is on IPAM `i % 5`: kube-ovn (a Subnet per 250 pods, an IP per pod), whereabouts
//! (an IPPool per 250 pods, a reservation per pod), spiderpool (a SpiderIPPool per 250
//! pods, a SpiderEndpoint per pod), Calico (an IPAMBlock and its BlockAffinity per 64 pods,
//! an IPAMHandle per pod) or Cilium (a CiliumEndpoint per pod, its address in its node's
//! CiliumNode). Pools are written when they are created, every 50 allocations and full.

use std::collections::{BTreeMap, HashMap};

use ipaudit_schemas::builders::EventBuilder;
use ipaudit_schemas::{EventType, Stream, WatchEvent};

use super::{replica_set_of, uuid_of, Output};

const CLUSTER: &str = "prod-mixed-1";
const COLLECTOR: &str = "ipaudit-collector-7d4f9b6c8-m2x9z";
/// The IPAMs, in the order pods are spread over them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub(super) enum Ipam {
    KubeOvn,
    Whereabouts,
    Spiderpool,
    Calico,
    Cilium,
}

/// How pods are placed: the IPAMs they go round, and the nodes.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    /// The IPAMs pod `i` goes round (`i % len`).
    pub(super) ipams: Vec<Ipam>,
    /// Nodes (each with its CiliumNode).
    pub(super) nodes: usize,
}
/// Pods per pool (kube-ovn subnet, whereabouts and spiderpool pool).
const POOL: usize = 250;
/// Pods per Calico block (a /26).
const BLOCK: usize = 64;
/// A pool is written again after this many new allocations.
const POOL_WRITE_EVERY: usize = 50;

/// Writes the mixed history of `pods` pods placed by `layout`; returns the events written.
pub(super) fn generate(output: Output, pods: usize, layout: &Layout) -> anyhow::Result<usize> {
    let mut h = Mixed {
        output,
        rv: 5_000,
        t_ms: 1_760_000_000_000,
        last_rv: HashMap::new(),
        written: 0,
    };
    let nodes = layout.nodes;
    for n in 0..nodes {
        for event in node(n) {
            h.emit(event, EventType::Added)?;
        }
    }
    for i in 0..pods {
        let pod = Pod::new(i, layout);
        h.emit(pod.pod(false), EventType::Added)?;
        if let Some(pool) = pod.pool_created() {
            for event in pool {
                h.emit(event, EventType::Added)?;
            }
        }
        h.emit(pod.ipam_object(), EventType::Added)?;
        if let Some(pool) = pod.pool_written(pods) {
            h.emit(pool, EventType::Modified)?;
        }
        h.emit(pod.pod(true), EventType::Modified)?;
        h.emit(pod.pod(true), EventType::Modified)?;
    }
    // The collector restarts: every stream is listed again, each object at the version it
    // had, between the relist's markers.
    let mut listed: BTreeMap<Stream, Vec<WatchEvent>> = BTreeMap::new();
    for event in (0..nodes).flat_map(node) {
        listed.entry(event.stream).or_default().push(event);
    }
    for i in 0..pods {
        let pod = Pod::new(i, layout);
        for event in [pod.pod(true), pod.ipam_object()]
            .into_iter()
            .chain(pod.pool_created().into_iter().flatten())
        {
            listed.entry(event.stream).or_default().push(event);
        }
        if let Some(pool) = pod.pool_full(pods) {
            let key = pool.object_key();
            let list = listed.entry(pool.stream).or_default();
            list.retain(|e| e.object_key() != key);
            list.push(pool);
        }
    }
    for (stream, events) in listed {
        h.marker(stream, EventType::SyncStart)?;
        for event in events {
            h.list(event)?;
        }
        h.marker(stream, EventType::SyncEnd)?;
    }
    h.output.finish()?;
    Ok(h.written)
}

/// The history being written: versions and times, and each object's last version (for
/// the relist).
struct Mixed {
    output: Output,
    rv: i64,
    t_ms: i64,
    last_rv: HashMap<(Stream, String), i64>,
    written: usize,
}

impl Mixed {
    fn emit(&mut self, mut event: WatchEvent, event_type: EventType) -> anyhow::Result<()> {
        self.rv += 1;
        self.t_ms += 3;
        event.event_type = event_type;
        self.last_rv
            .insert((event.stream, event.object_key().to_string()), self.rv);
        self.write(event, self.rv)
    }

    /// Writes a listed object at the version it last had.
    fn list(&mut self, event: WatchEvent) -> anyhow::Result<()> {
        let rv = self
            .last_rv
            .get(&(event.stream, event.object_key().to_string()))
            .copied()
            .unwrap_or(self.rv);
        self.write(event, rv)
    }

    fn marker(&mut self, stream: Stream, event_type: EventType) -> anyhow::Result<()> {
        let event = EventBuilder::marker(stream, event_type, self.rv);
        self.write(event, self.rv)
    }

    fn write(&mut self, mut event: WatchEvent, rv: i64) -> anyhow::Result<()> {
        event.resource_version = rv.to_string();
        event.resource_version_num = Some(rv);
        event.observed_at_ms = Some(self.t_ms);
        event.cluster_id = CLUSTER.into();
        event.collector_id = COLLECTOR.into();
        self.output.append(&event)?;
        self.written += 1;
        Ok(())
    }
}

/// Node `n`: the core Node and its CiliumNode.
fn node(n: usize) -> [WatchEvent; 2] {
    let name = node_name(n);
    let mut event = EventBuilder::node(&name)
        .uid(&uuid_of("node", n))
        .build(EventType::Added);
    if let Some(meta) = event.metadata.as_mut() {
        meta.labels = BTreeMap::from([
            ("kubernetes.io/hostname".into(), name.clone()),
            ("kubernetes.io/os".into(), "linux".into()),
            (
                "node.kubernetes.io/instance-type".into(),
                "m6i.4xlarge".into(),
            ),
            (
                "topology.kubernetes.io/zone".into(),
                format!("eu-west-1{}", ["a", "b", "c"][n % 3]),
            ),
        ]);
    }
    let cidr = format!("10.250.{}.0/24", n % 256);
    let cilium = EventBuilder::cilium_node(&name, &[&cidr])
        .uid(&uuid_of("cilium-node", n))
        .build(EventType::Added);
    [event, cilium]
}

fn node_name(n: usize) -> String {
    format!("ip-10-0-{}-{}.eu-west-1.compute.internal", n / 256, n % 256)
}

/// Pod `i` and where its address comes from.
struct Pod {
    i: usize,
    ipam: Ipam,
    /// Its place among the pods of its IPAM.
    k: usize,
    /// How many IPAMs pods go round, and this pod's IPAM's place among them.
    spread: usize,
    place: usize,
    nodes: usize,
    node: usize,
    namespace: String,
    name: String,
    address: String,
}

impl Pod {
    fn new(i: usize, layout: &Layout) -> Pod {
        let spread = layout.ipams.len();
        let place = i % spread;
        Pod::make(
            i,
            layout.ipams[place],
            i / spread,
            spread,
            place,
            layout.nodes,
        )
    }

    /// The pod `k` places after this one among the pods of its IPAM.
    fn member(&self, k: usize) -> Pod {
        let i = k * self.spread + self.place;
        Pod::make(i, self.ipam, k, self.spread, self.place, self.nodes)
    }

    fn make(i: usize, ipam: Ipam, k: usize, spread: usize, place: usize, nodes: usize) -> Pod {
        let (pool, slot) = (k / POOL, k % POOL);
        let second = 100 + ipam as usize * 30 + pool / 256;
        let address = if ipam == Ipam::Calico {
            // A Calico block's ordinal: the address of `block_cidr` plus it.
            let (block, ordinal) = (k / BLOCK, k % BLOCK);
            let second = 100 + ipam as usize * 30 + block / 1024;
            format!(
                "10.{second}.{}.{}",
                block / 4 % 256,
                block % 4 * 64 + ordinal
            )
        } else {
            format!("10.{second}.{}.{}", pool % 256, slot + 2)
        };
        Pod {
            i,
            ipam,
            k,
            spread,
            place,
            nodes,
            node: i % nodes,
            namespace: format!("team-{}", i % 200),
            // As a ReplicaSet names its pods, and unique: the app's pods differ in `i / 1000`.
            name: format!(
                "svc-{}-{}-{:05x}",
                i % 1000,
                &uuid_of("rs", i % 1000)[..9],
                i / 1000
            ),
            address,
        }
    }

    fn podref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn pool(&self) -> usize {
        self.k / POOL
    }

    fn pool_cidr(&self) -> String {
        let (pool, second) = (
            self.pool(),
            100 + self.ipam as usize * 30 + self.pool() / 256,
        );
        format!("10.{second}.{}.0/24", pool % 256)
    }

    /// The pod: `Pending` without an address, or `Running` with it.
    fn pod(&self, running: bool) -> WatchEvent {
        let i = self.i;
        let app = format!("svc-{}", i % 1000);
        let hash = uuid_of("rs", i % 1000)[..10].to_owned();
        let mut builder = EventBuilder::pod(&self.namespace, &self.name)
            .uid(&uuid_of("pod", i))
            .phase(if running { "Running" } else { "Pending" });
        if self.ipam == Ipam::Calico {
            builder = builder.on_calico(&uuid_of("sandbox", i).replace('-', ""), &self.address);
        }
        let mut event = builder.build(EventType::Added);
        let annotations = self.annotations();
        let (node, address) = (node_name(self.node), self.address.clone());
        if let Some(meta) = event.metadata.as_mut() {
            meta.generation = Some(1);
            meta.creation_timestamp_ms = Some(1_760_000_000_000 + i as i64);
            meta.labels = BTreeMap::from([
                ("app".into(), app.clone()),
                ("app.kubernetes.io/name".into(), app.clone()),
                (
                    "app.kubernetes.io/part-of".into(),
                    format!("team-{}", i % 200),
                ),
                ("pod-template-hash".into(), hash),
            ]);
            if running {
                meta.annotations = annotations;
            }
            meta.owner_references = vec![replica_set_of(i % 1000)];
        }
        if let Some(ipaudit_schemas::KindPart::Pod(pod)) = event.part.as_mut() {
            pod.node_name = node;
            if running {
                pod.pod_ips = vec![address];
            }
        }
        event
    }

    /// The annotations each IPAM's CNI writes on a running pod.
    fn annotations(&self) -> BTreeMap<String, String> {
        let mut annotations = BTreeMap::from([(
            "kubectl.kubernetes.io/restartedAt".to_owned(),
            "2026-11-30T08:12:44Z".to_owned(),
        )]);
        let status = format!(
            r#"[{{"name":"{}","interface":"eth0","ips":["{}"],"mac":"0a:58:{:02x}:{:02x}:{:02x}:{:02x}","default":true,"dns":{{}}}}]"#,
            [
                "kube-ovn",
                "macvlan-whereabouts",
                "spiderpool",
                "k8s-pod-network",
                "cilium"
            ][self.ipam as usize],
            self.address,
            self.i >> 24 & 0xff,
            self.i >> 16 & 0xff,
            self.i >> 8 & 0xff,
            self.i & 0xff,
        );
        annotations.insert("k8s.v1.cni.cncf.io/network-status".into(), status);
        match self.ipam {
            Ipam::KubeOvn => {
                let ovn = |k: &str| format!("ovn.kubernetes.io/{k}");
                annotations.extend([
                    (ovn("allocated"), "true".into()),
                    (ovn("cidr"), self.pool_cidr()),
                    (ovn("ip_address"), self.address.clone()),
                    (ovn("logical_switch"), format!("ovn-subnet-{}", self.pool())),
                    (ovn("routed"), "true".into()),
                ]);
            }
            Ipam::Whereabouts => {
                annotations.insert(
                    "k8s.v1.cni.cncf.io/networks".into(),
                    "kube-system/macvlan-whereabouts".into(),
                );
            }
            Ipam::Spiderpool => {
                annotations.insert(
                    "ipam.spidernet.io/assigned-eth0".into(),
                    format!(
                        r#"{{"interface":"eth0","ipv4pool":"sp-pool-{}","ipv4":"{}/24","vlan":0}}"#,
                        self.pool(),
                        self.address
                    ),
                );
            }
            Ipam::Calico => {
                annotations.extend([
                    (
                        "cni.projectcalico.org/podIP".into(),
                        format!("{}/32", self.address),
                    ),
                    (
                        "cni.projectcalico.org/podIPs".into(),
                        format!("{}/32", self.address),
                    ),
                    (
                        "cni.projectcalico.org/containerID".into(),
                        uuid_of("sandbox", self.i).replace('-', ""),
                    ),
                ]);
            }
            Ipam::Cilium => {}
        }
        annotations
    }

    /// The object of the IPAM that holds this pod's address.
    fn ipam_object(&self) -> WatchEvent {
        let i = self.i;
        let builder = match self.ipam {
            Ipam::KubeOvn => EventBuilder::ip(
                &format!("{}.{}", self.name, self.namespace),
                &format!("ovn-subnet-{}", self.pool()),
            )
            .ip_of(&self.namespace, &self.name, &self.address, ""),
            Ipam::Whereabouts => {
                EventBuilder::reservation("kube-system", &self.address, &self.podref())
            }
            Ipam::Spiderpool => {
                EventBuilder::spider_endpoint(&self.namespace, &self.name, &uuid_of("pod", i))
                    .endpoint_ip(
                        &format!("{}/24", self.address),
                        &format!("sp-pool-{}", self.pool()),
                    )
            }
            Ipam::Calico => {
                EventBuilder::calico_handle(&self.handle_id(), &[(&self.block_cidr(), 1)])
            }
            Ipam::Cilium => {
                EventBuilder::cilium_endpoint(&self.namespace, &self.name, &[&self.address])
            }
        };
        builder.uid(&uuid_of("ipam", i)).build(EventType::Added)
    }

    fn handle_id(&self) -> String {
        format!(
            "k8s-pod-network.{}",
            uuid_of("sandbox", self.i).replace('-', "")
        )
    }

    /// The node a Calico block is affine to.
    fn block_node(&self) -> String {
        node_name(self.k / BLOCK % self.nodes)
    }

    fn block_cidr(&self) -> String {
        let block = self.k / BLOCK;
        let second = 100 + self.ipam as usize * 30 + block / 1024;
        format!("10.{second}.{}.{}/26", block / 4 % 256, block % 4 * 64)
    }

    /// The pool objects this pod's allocation creates (it is the pool's first).
    fn pool_created(&self) -> Option<Vec<WatchEvent>> {
        match self.ipam {
            Ipam::Calico if self.k.is_multiple_of(BLOCK) => {
                let (cidr, node) = (self.block_cidr(), self.block_node());
                Some(vec![
                    EventBuilder::calico_block(&cidr, &node).build(EventType::Added),
                    EventBuilder::calico_affinity(&node, &cidr).build(EventType::Added),
                ])
            }
            Ipam::KubeOvn | Ipam::Whereabouts | Ipam::Spiderpool if self.k.is_multiple_of(POOL) => {
                Some(vec![self.pool_with(self.k)])
            }
            _ => None,
        }
    }

    /// The pool holding every allocation up to this pod's, when it is written now.
    fn pool_written(&self, pods: usize) -> Option<WatchEvent> {
        let (size, place) = match self.ipam {
            Ipam::Calico => (BLOCK, self.k % BLOCK),
            Ipam::Cilium => return None,
            _ => (POOL, self.k % POOL),
        };
        let last = self.i + self.spread >= pods;
        ((place + 1) % POOL_WRITE_EVERY == 0 || place + 1 == size || last)
            .then(|| self.pool_with(self.k))
    }

    /// The pool as it is at the end, when this pod is the last of its pool.
    fn pool_full(&self, pods: usize) -> Option<WatchEvent> {
        let size = if self.ipam == Ipam::Calico {
            BLOCK
        } else {
            POOL
        };
        let last = self.i + self.spread >= pods;
        (self.ipam != Ipam::Cilium && (self.k % size + 1 == size || last))
            .then(|| self.pool_with(self.k))
    }

    /// This pod's pool holding the allocations of its IPAM's pods up to `upto`.
    fn pool_with(&self, upto: usize) -> WatchEvent {
        let size = if self.ipam == Ipam::Calico {
            BLOCK
        } else {
            POOL
        };
        let first = upto / size * size;
        let member = |k: usize| self.member(k);
        let mut builder = match self.ipam {
            Ipam::KubeOvn => EventBuilder::subnet(&format!("ovn-subnet-{}", self.pool()))
                .using_ips((upto - first + 1) as u64),
            Ipam::Whereabouts => EventBuilder::ip_pool(
                "kube-system",
                &format!("wb-pool-{}", self.pool()),
                &self.pool_cidr(),
            ),
            Ipam::Spiderpool => {
                EventBuilder::spider_pool(&format!("sp-pool-{}", self.pool()), &self.pool_cidr())
            }
            _ => EventBuilder::calico_block(&self.block_cidr(), &self.block_node()),
        };
        for k in first..=upto {
            let pod = member(k);
            builder = match self.ipam {
                Ipam::Whereabouts => {
                    builder.allocation((k - first + 2) as u32, &pod.address, &pod.podref())
                }
                Ipam::Spiderpool => {
                    builder.entry(&pod.address, &pod.podref(), &uuid_of("pod", pod.i))
                }
                Ipam::Calico => {
                    builder.calico_allocation((k - first) as u32, &pod.podref(), &pod.handle_id())
                }
                _ => builder,
            };
        }
        builder
            .uid(&uuid_of(
                "pool",
                self.ipam as usize * 1_000_000 + upto / size,
            ))
            .build(EventType::Added)
    }
}
