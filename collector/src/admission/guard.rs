//! The admission guard's view and verdict, without I/O: an index, fed with the watch
//! events the collector records, of which live kube-ovn IPs name each Subnet, which
//! allocations each whereabouts IPPool and spiderpool SpiderIPPool holds, and which
//! allocations the Calico blocks inside each Calico IPPool's CIDR hold (in either of
//! Calico's API groups); and the verdict on the DELETE of one of them. [`crate::admission`] is the HTTPS side.
//!
//! The index is only trusted while it is synced: the stream that holds the allocations has
//! been listed completely by this process (its `SYNC_END` passed), is not relisting, is not
//! failing and is not paused by a full outbox. Otherwise the guard allows and says why: it
//! never blocks a cluster on its own outage.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, RwLock};

use ipaudit_schemas::{EventType, KindPart, KindSpec, Stream, WatchEvent};

/// At most this many holders are named in an answer; the count is always given.
pub const MAX_NAMED: usize = 10;

/// What the guard does with the DELETE of an object that live allocations still name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardMode {
    /// Allow, with warnings naming them (shown by kubectl).
    Warn,
    /// Refuse, naming them.
    Deny,
}

/// A kind whose deletion the guard reviews.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Guarded {
    /// A kube-ovn Subnet, named by IPs' `spec.subnet` and `spec.attachSubnets`.
    Subnet,
    /// A whereabouts IPPool, holding its allocations in `spec.allocations`.
    IpPool,
    /// A spiderpool SpiderIPPool, holding its allocations in `status.allocatedIPs`.
    SpiderIpPool,
    /// A Calico IPPool (crd.projectcalico.org/v1): the blocks inside its CIDR hold its
    /// allocations (no field links a block to its pool).
    CalicoIpPool,
    /// A Calico IPPool of Calico 3.32's native projectcalico.org/v3 group.
    CalicoV3IpPool,
}

impl Guarded {
    /// Every guarded kind.
    pub const ALL: [Guarded; 5] = [
        Guarded::Subnet,
        Guarded::IpPool,
        Guarded::SpiderIpPool,
        Guarded::CalicoIpPool,
        Guarded::CalicoV3IpPool,
    ];

    /// The stream of the guarded objects themselves.
    pub fn stream(self) -> Stream {
        match self {
            Guarded::Subnet => Stream::Subnet,
            Guarded::IpPool => Stream::IpPool,
            Guarded::SpiderIpPool => Stream::SpiderIpPool,
            Guarded::CalicoIpPool => Stream::CalicoIpPool,
            Guarded::CalicoV3IpPool => Stream::CalicoV3IpPool,
        }
    }

    /// The stream whose objects say what is allocated in it: the IPs for a Subnet, the
    /// pool itself for the pools (their allocations live in the pool object), the blocks
    /// of its API group for a Calico pool.
    pub fn holders_stream(self) -> Stream {
        match self {
            Guarded::Subnet => Stream::Ip,
            Guarded::CalicoIpPool => Stream::CalicoIpamBlock,
            Guarded::CalicoV3IpPool => Stream::CalicoV3IpamBlock,
            other => other.stream(),
        }
    }

    /// Every stream the verdict reads, each of which must be listed completely: the
    /// holders', and a Calico pool's own (its CIDR says which blocks are its).
    pub fn streams_read(self) -> Vec<Stream> {
        match self {
            Guarded::CalicoIpPool | Guarded::CalicoV3IpPool => {
                vec![self.holders_stream(), self.stream()]
            }
            _ => vec![self.holders_stream()],
        }
    }

    /// Its table entry.
    pub fn spec(self) -> Option<&'static KindSpec> {
        self.stream().spec()
    }

    /// The guarded kind of an admission request's resource (API group and plural, any
    /// version).
    pub fn of_resource(group: &str, resource: &str) -> Option<Guarded> {
        Guarded::ALL.into_iter().find(|g| {
            g.spec()
                .is_some_and(|s| s.group == group && s.plural == resource)
        })
    }

    /// Its metric label (`subnet`, `ippool`, `spiderippool`).
    pub fn label(self) -> &'static str {
        self.stream().as_str()
    }

    /// What the holders are called in messages.
    fn holders_noun(self) -> &'static str {
        match self {
            Guarded::Subnet => "live IPs",
            Guarded::CalicoIpPool | Guarded::CalicoV3IpPool => "allocations of its blocks",
            _ => "allocations",
        }
    }
}

/// One live IP or allocation that names a guarded object.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Holder {
    /// The IP object's name, or the allocated address of a pool.
    pub name: String,
    /// The address (empty when unknown).
    pub address: String,
    /// `namespace/pod` it is allocated to (empty when none is named).
    pub pod: String,
    /// The IP object itself is being deleted (kube-ovn: it stays while its subnet is gone).
    pub terminating: bool,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        let mut details = Vec::new();
        if !self.address.is_empty() && self.address != self.name {
            details.push(self.address.clone());
        }
        if !self.pod.is_empty() {
            details.push(format!("pod {}", self.pod));
        }
        if self.terminating {
            details.push("terminating".into());
        }
        if !details.is_empty() {
            write!(f, " ({})", details.join(", "))?;
        }
        Ok(())
    }
}

/// What names one guarded object: how many, and the first [`MAX_NAMED`] of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holders {
    /// All of them.
    pub count: usize,
    /// The first ones, in name order for IPs and in address order for pools.
    pub named: Vec<Holder>,
}

/// Why the guard does not trust its view of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsynced {
    /// The stream is not watched (not served by the API server, or left out by `--kinds`).
    NotWatched(Stream),
    /// The stream has not been listed completely yet, or is being relisted.
    Listing(Stream),
    /// The stream's list or watch is failing: events may be missing.
    Failing(Stream),
    /// The watches are paused because the outbox is full: events are not being read.
    Paused,
}

impl fmt::Display for Unsynced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unsynced::NotWatched(s) => write!(f, "the {s} kind is not watched"),
            Unsynced::Listing(s) => write!(f, "the {s} kind has not been listed completely"),
            Unsynced::Failing(s) => write!(f, "the {s} watch is failing"),
            Unsynced::Paused => f.write_str("the watches are paused (outbox full)"),
        }
    }
}

/// What the rest of the collector says about a stream at the moment of a review.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamHealth {
    /// Its list or watch has failed and not recovered.
    pub failing: bool,
    /// The watches are paused (full outbox).
    pub paused: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sync {
    Listing,
    Synced,
}

/// A live kube-ovn IP, as far as the guard cares. Compact, because a large cluster has
/// hundreds of thousands: the name and uid are shared with the subnet index, subnet names
/// with every other IP of the subnet.
#[derive(Debug, Clone)]
struct IpEntry {
    name: Arc<str>,
    address: Box<str>,
    /// `namespace/pod`, or empty.
    pod: Box<str>,
    terminating: bool,
    /// `spec.subnet` and `spec.attachSubnets`, without duplicates.
    subnets: Box<[Arc<str>]>,
    /// Subnets named by the IP's owner references: such an IP (u2o interconnection,
    /// multicast querier) belongs to its subnet and goes with it.
    owner_subnets: Box<[Box<str>]>,
}

impl IpEntry {
    fn holder(&self) -> Holder {
        Holder {
            name: self.name.to_string(),
            address: self.address.to_string(),
            pod: self.pod.to_string(),
            terminating: self.terminating,
        }
    }
}

/// A live pool.
#[derive(Debug, Clone)]
struct PoolEntry {
    key: PoolKey,
    holders: Vec<Holder>,
}

type PoolKey = (Stream, Option<String>, String);

/// An IP's (name, uid), shared with its entry.
type NameAndUid = (Arc<str>, Arc<str>);

/// The live view: IPs by the subnets they name, pools by name with their allocations.
#[derive(Debug, Default)]
pub struct Index {
    sync: HashMap<Stream, Sync>,
    /// uid -> IP.
    ips: HashMap<Arc<str>, IpEntry>,
    /// subnet -> (IP name, uid) of the IPs naming it; a set of pairs, because a relist
    /// adds a re-created IP before it removes the old uid of the same name.
    by_subnet: HashMap<Arc<str>, BTreeSet<NameAndUid>>,
    pools: HashMap<String, PoolEntry>,
    /// (stream, namespace, name) -> uid of the live pool of that name.
    pool_names: HashMap<PoolKey, String>,
    /// Calico pools: (stream, name) -> (uid, CIDR).
    calico_pools: HashMap<(Stream, String), (String, String)>,
    /// Calico blocks by uid, with their allocations.
    calico_blocks: HashMap<String, CalicoBlockEntry>,
}

/// A live Calico block, as far as the guard cares.
#[derive(Debug, Clone)]
struct CalicoBlockEntry {
    stream: Stream,
    cidr: String,
    holders: Vec<Holder>,
}

impl Index {
    /// An empty index for a collector that watches `watched`: every guarded stream among
    /// them is unsynced until its first complete list.
    pub fn new(watched: &[Stream]) -> Index {
        let sync = Guarded::ALL
            .iter()
            .flat_map(|g| g.streams_read())
            .filter(|s| watched.contains(s))
            .map(|s| (s, Sync::Listing))
            .collect();
        Index {
            sync,
            ..Index::default()
        }
    }

    /// Takes one recorded event into account. Events of streams the guard does not read
    /// (Pods, Subnets...) are ignored.
    pub fn apply(&mut self, event: &WatchEvent) {
        let Some(sync) = self.sync.get_mut(&event.stream) else {
            return;
        };
        match event.event_type {
            EventType::SyncStart => *sync = Sync::Listing,
            EventType::SyncEnd => *sync = Sync::Synced,
            EventType::Added | EventType::Modified => self.upsert(event),
            EventType::Deleted | EventType::DeletedOnRelist => self.remove(event.uid()),
            _ => {}
        }
    }

    fn upsert(&mut self, event: &WatchEvent) {
        let Some(meta) = &event.metadata else {
            return;
        };
        let uid = meta.uid.clone();
        if uid.is_empty() {
            return;
        }
        self.remove(&uid);
        let terminating = meta.deletion_timestamp_ms.is_some();
        match &event.part {
            Some(KindPart::Ip(ip)) => {
                let (name, uid): (Arc<str>, Arc<str>) = (meta.name.as_str().into(), uid.into());
                let mut subnets: Vec<Arc<str>> = Vec::with_capacity(1 + ip.attach_subnets.len());
                for s in std::iter::once(&ip.subnet).chain(&ip.attach_subnets) {
                    if s.is_empty() || subnets.iter().any(|known| **known == **s) {
                        continue;
                    }
                    // One copy of each subnet's name, shared by all its IPs.
                    let (subnet, set) = match self.by_subnet.get_key_value(s.as_str()) {
                        Some((subnet, _)) => {
                            let subnet = Arc::clone(subnet);
                            let set = self.by_subnet.get_mut(&subnet);
                            (subnet, set)
                        }
                        None => {
                            let subnet: Arc<str> = s.as_str().into();
                            let set = Some(self.by_subnet.entry(Arc::clone(&subnet)).or_default());
                            (subnet, set)
                        }
                    };
                    if let Some(set) = set {
                        set.insert((Arc::clone(&name), Arc::clone(&uid)));
                    }
                    subnets.push(subnet);
                }
                let address = [&ip.v4_ip_address, &ip.v6_ip_address, &ip.ip_address]
                    .into_iter()
                    .find(|a| !a.is_empty())
                    .map_or_else(Box::default, |a| a.as_str().into());
                let pod: Box<str> = if ip.pod_name.is_empty() {
                    Box::default()
                } else if ip.pod_namespace.is_empty() {
                    ip.pod_name.as_str().into()
                } else {
                    format!("{}/{}", ip.pod_namespace, ip.pod_name).into()
                };
                let owner_subnets = meta
                    .owner_references
                    .iter()
                    .filter(|o| o.kind == "Subnet")
                    .map(|o| o.name.as_str().into())
                    .collect();
                self.ips.insert(
                    uid,
                    IpEntry {
                        name,
                        address,
                        pod,
                        terminating,
                        subnets: subnets.into_boxed_slice(),
                        owner_subnets,
                    },
                );
            }
            Some(KindPart::IpPool(pool)) => {
                let holders = pool
                    .allocations
                    .iter()
                    .map(|a| Holder {
                        name: if a.address.is_empty() {
                            format!("offset {}", a.offset)
                        } else {
                            a.address.clone()
                        },
                        address: a.address.clone(),
                        pod: a.podref.clone(),
                        terminating: false,
                    })
                    .collect();
                self.insert_pool(event.stream, meta, uid, holders);
            }
            Some(KindPart::SpiderIpPool(pool)) => {
                let holders = pool
                    .allocations
                    .iter()
                    .map(|a| Holder {
                        name: a.address.clone(),
                        address: a.address.clone(),
                        pod: a.pod.clone(),
                        terminating: false,
                    })
                    .collect();
                self.insert_pool(event.stream, meta, uid, holders);
            }
            Some(KindPart::CalicoPool(pool)) => {
                self.calico_pools
                    .insert((event.stream, meta.name.clone()), (uid, pool.cidr.clone()));
            }
            Some(KindPart::CalicoBlock(block)) if !block.deleted => {
                let mut holders: Vec<Holder> = block
                    .allocations
                    .iter()
                    .filter(|a| a.released_at_ms.is_none())
                    .map(|a| Holder {
                        name: a.address.clone(),
                        address: a.address.clone(),
                        pod: if a.pod.is_empty() {
                            String::new()
                        } else {
                            format!("{}/{}", a.namespace, a.pod)
                        },
                        terminating: false,
                    })
                    .collect();
                holders.sort();
                self.calico_blocks.insert(
                    uid,
                    CalicoBlockEntry {
                        stream: event.stream,
                        cidr: block.cidr.clone(),
                        holders,
                    },
                );
            }
            _ => {}
        }
    }

    fn insert_pool(
        &mut self,
        stream: Stream,
        meta: &ipaudit_schemas::ObjectMeta,
        uid: String,
        holders: Vec<Holder>,
    ) {
        let key = (stream, meta.namespace.clone(), meta.name.clone());
        self.pool_names.insert(key.clone(), uid.clone());
        self.pools.insert(uid, PoolEntry { key, holders });
    }

    fn remove(&mut self, uid: &str) {
        if let Some((uid, ip)) = self.ips.remove_entry(uid) {
            let pair = (Arc::clone(&ip.name), uid);
            for s in ip.subnets.iter() {
                if let Some(set) = self.by_subnet.get_mut(s) {
                    set.remove(&pair);
                    if set.is_empty() {
                        self.by_subnet.remove(s);
                    }
                }
            }
        }
        if let Some(pool) = self.pools.remove(uid) {
            if self.pool_names.get(&pool.key).is_some_and(|u| u == uid) {
                self.pool_names.remove(&pool.key);
            }
        }
        self.calico_blocks.remove(uid);
        self.calico_pools.retain(|_, (pool_uid, _)| pool_uid != uid);
    }

    /// What still names `name` (in `namespace` for namespaced kinds), when the view of
    /// its holders' stream can be trusted; else why not.
    pub fn holders(
        &self,
        guarded: Guarded,
        namespace: Option<&str>,
        name: &str,
        health: StreamHealth,
    ) -> Result<Holders, Unsynced> {
        let stream = guarded.holders_stream();
        for read in guarded.streams_read() {
            match self.sync.get(&read) {
                None => return Err(Unsynced::NotWatched(read)),
                Some(Sync::Listing) => return Err(Unsynced::Listing(read)),
                Some(Sync::Synced) => {}
            }
        }
        if health.paused {
            return Err(Unsynced::Paused);
        }
        if health.failing {
            return Err(Unsynced::Failing(stream));
        }
        Ok(match guarded {
            Guarded::Subnet => {
                let mut holders = Holders::default();
                for (_, uid) in self.by_subnet.get(name).into_iter().flatten() {
                    let Some(ip) = self.ips.get(uid) else {
                        continue;
                    };
                    if ip.owner_subnets.iter().any(|o| &**o == name) {
                        continue;
                    }
                    holders.count += 1;
                    if holders.named.len() < MAX_NAMED {
                        holders.named.push(ip.holder());
                    }
                }
                holders
            }
            Guarded::IpPool | Guarded::SpiderIpPool => {
                let namespace = namespace
                    .filter(|n| !n.is_empty() && guarded.spec().is_some_and(|s| s.namespaced))
                    .map(str::to_owned);
                let key = (stream, namespace, name.to_owned());
                let pool = self
                    .pool_names
                    .get(&key)
                    .and_then(|uid| self.pools.get(uid));
                match pool {
                    None => Holders::default(),
                    Some(pool) => Holders {
                        count: pool.holders.len(),
                        named: pool.holders.iter().take(MAX_NAMED).cloned().collect(),
                    },
                }
            }
            Guarded::CalicoIpPool | Guarded::CalicoV3IpPool => {
                let Some((_, cidr)) = self.calico_pools.get(&(guarded.stream(), name.to_owned()))
                else {
                    return Ok(Holders::default());
                };
                let mut blocks: Vec<&CalicoBlockEntry> = self
                    .calico_blocks
                    .values()
                    .filter(|b| {
                        b.stream == stream && ipaudit_schemas::cidr::contains(cidr, &b.cidr)
                    })
                    .collect();
                blocks.sort_by(|a, b| a.cidr.cmp(&b.cidr));
                let mut holders = Holders::default();
                for holder in blocks.iter().flat_map(|b| b.holders.iter()) {
                    holders.count += 1;
                    if holders.named.len() < MAX_NAMED {
                        holders.named.push(holder.clone());
                    }
                }
                holders
            }
        })
    }
}

/// The guard's answer, the metric label its verdict is counted under, and what the API
/// server passes on to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the deletion may go on.
    pub allowed: bool,
    /// `allowed`, `warned`, `denied`, `unsynced` or `error`.
    pub decision: Decision,
    /// Why it is denied (shown by kubectl after "denied the request:").
    pub message: Option<String>,
    /// Warnings for the client (shown by kubectl as "Warning: ...").
    pub warnings: Vec<String>,
}

/// The label of a verdict in `ipaudit_collector_admission_reviews_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Nothing names the object (or the request is not a guarded deletion).
    Allowed,
    /// Allowed with warnings (`--guard warn`).
    Warned,
    /// Refused (`--guard deny`).
    Denied,
    /// Allowed because the view is not synced.
    Unsynced,
    /// Allowed because the request could not be read.
    Error,
}

impl Decision {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Warned => "warned",
            Decision::Denied => "denied",
            Decision::Unsynced => "unsynced",
            Decision::Error => "error",
        }
    }
}

impl Verdict {
    /// Allowed without a word.
    pub fn allow() -> Verdict {
        Verdict {
            allowed: true,
            decision: Decision::Allowed,
            message: None,
            warnings: Vec::new(),
        }
    }

    /// Allowed because the request could not be read: the guard never blocks on its own
    /// fault.
    pub fn unreadable(why: &str) -> Verdict {
        Verdict {
            allowed: true,
            decision: Decision::Error,
            message: None,
            warnings: vec![format!(
                "ipaudit guard could not read this request ({why}); not checked"
            )],
        }
    }
}

/// The verdict on deleting `object` (a `guarded`), given what names it.
pub fn decide(
    mode: GuardMode,
    guarded: Guarded,
    object: &str,
    view: Result<Holders, Unsynced>,
) -> Verdict {
    let kind = guarded.spec().map_or("object", |s| s.kind);
    let holders = match view {
        Err(why) => {
            return Verdict {
                allowed: true,
                decision: Decision::Unsynced,
                message: None,
                warnings: vec![format!(
                    "ipaudit guard has no synced view ({why}); {kind} {object} not checked"
                )],
            }
        }
        Ok(h) if h.count == 0 => return Verdict::allow(),
        Ok(h) => h,
    };
    let noun = guarded.holders_noun();
    let summary = format!("{kind} {object} is still named by {} {noun}", holders.count);
    let listed: Vec<String> = holders.named.iter().map(ToString::to_string).collect();
    let more = holders.count.saturating_sub(listed.len());
    match mode {
        GuardMode::Deny => {
            let mut message = format!("{summary}: {}", listed.join(", "));
            if more > 0 {
                message.push_str(&format!(" and {more} more"));
            }
            message.push_str("; deleting it now would leak them (ipaudit --guard deny)");
            Verdict {
                allowed: false,
                decision: Decision::Denied,
                message: Some(message),
                warnings: Vec::new(),
            }
        }
        GuardMode::Warn => {
            // One short warning each: the API server may cut warnings over 256 characters.
            let mut warnings = Vec::with_capacity(listed.len() + 2);
            warnings.push(format!("{summary}; deleting it now leaks them:"));
            warnings.extend(listed.into_iter().map(|h| format!("  {h}")));
            if more > 0 {
                warnings.push(format!("  and {more} more"));
            }
            Verdict {
                allowed: true,
                decision: Decision::Warned,
                message: None,
                warnings,
            }
        }
    }
}

/// The index shared by the writer thread (which updates it) and the admission server (readers).
pub type SharedIndex = Arc<RwLock<Index>>;

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_schemas::{IpInfo, IpPoolAllocation, IpPoolInfo, ObjectMeta, OwnerReference};
    use ipaudit_schemas::{SpiderAllocation, SpiderIpPoolInfo};

    fn marker(stream: Stream, event_type: EventType) -> WatchEvent {
        WatchEvent::new(stream, event_type, "1")
    }

    fn object(stream: Stream, uid: &str, name: &str, namespace: Option<&str>) -> WatchEvent {
        let mut e = WatchEvent::new(stream, EventType::Added, "2");
        e.metadata = Some(ObjectMeta {
            uid: uid.into(),
            name: name.into(),
            namespace: namespace.map(Into::into),
            ..ObjectMeta::default()
        });
        e
    }

    fn ip(uid: &str, name: &str, subnet: &str, address: &str) -> WatchEvent {
        let mut e = object(Stream::Ip, uid, name, None);
        e.part = Some(KindPart::Ip(Box::new(IpInfo {
            subnet: subnet.into(),
            v4_ip_address: address.into(),
            pod_name: name.split('.').next().unwrap_or(name).into(),
            pod_namespace: "ns".into(),
            ..IpInfo::default()
        })));
        e
    }

    fn whereabouts_pool(uid: &str, name: &str, allocations: &[(&str, &str)]) -> WatchEvent {
        let mut e = object(Stream::IpPool, uid, name, Some("kube-system"));
        e.part = Some(KindPart::IpPool(Box::new(IpPoolInfo {
            range: "10.9.0.0/24".into(),
            allocations: allocations
                .iter()
                .map(|(address, podref)| IpPoolAllocation {
                    offset: "1".into(),
                    address: (*address).into(),
                    podref: (*podref).into(),
                    ..IpPoolAllocation::default()
                })
                .collect(),
        })));
        e
    }

    fn deleted(mut e: WatchEvent) -> WatchEvent {
        e.event_type = EventType::Deleted;
        e
    }

    fn synced(streams: &[Stream]) -> Index {
        let mut index = Index::new(streams);
        for s in streams {
            index.apply(&marker(*s, EventType::SyncStart));
            index.apply(&marker(*s, EventType::SyncEnd));
        }
        index
    }

    const OK: StreamHealth = StreamHealth {
        failing: false,
        paused: false,
    };

    #[test]
    fn a_subnet_is_held_by_the_ips_naming_it_by_spec_subnet_or_attach_subnets() {
        let mut index = synced(&[Stream::Ip]);
        index.apply(&ip("u1", "a.ns", "net1", "10.0.0.2"));
        index.apply(&ip("u2", "b.ns", "net2", "10.0.1.2"));
        let mut attached = ip("u3", "c.ns", "net2", "10.0.1.3");
        if let Some(KindPart::Ip(info)) = &mut attached.part {
            info.attach_subnets = vec!["net1".into()];
        }
        index.apply(&attached);
        let held = index.holders(Guarded::Subnet, None, "net1", OK).unwrap();
        assert_eq!(held.count, 2);
        let names: Vec<&str> = held.named.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["a.ns", "c.ns"]);
        assert_eq!(
            held.named[0].to_string(),
            "a.ns (10.0.0.2, pod ns/a)",
            "an IP is named with its address and pod"
        );
        assert_eq!(
            index.holders(Guarded::Subnet, None, "empty", OK).unwrap(),
            Holders::default()
        );
    }

    #[test]
    fn a_deleted_or_moved_ip_no_longer_holds_its_subnet() {
        let mut index = synced(&[Stream::Ip]);
        index.apply(&ip("u1", "a.ns", "net1", "10.0.0.2"));
        index.apply(&ip("u2", "b.ns", "net1", "10.0.0.3"));
        index.apply(&deleted(ip("u1", "a.ns", "net1", "10.0.0.2")));
        let mut moved = ip("u2", "b.ns", "net9", "10.0.9.3");
        moved.event_type = EventType::Modified;
        index.apply(&moved);
        assert_eq!(
            index
                .holders(Guarded::Subnet, None, "net1", OK)
                .unwrap()
                .count,
            0
        );
        assert_eq!(
            index
                .holders(Guarded::Subnet, None, "net9", OK)
                .unwrap()
                .count,
            1
        );
    }

    #[test]
    fn a_relist_that_adds_a_recreated_ip_before_removing_the_old_uid_keeps_the_new_one() {
        let mut index = synced(&[Stream::Ip]);
        index.apply(&ip("old", "a.ns", "net1", "10.0.0.2"));
        index.apply(&marker(Stream::Ip, EventType::SyncStart));
        index.apply(&ip("new", "a.ns", "net1", "10.0.0.2"));
        let mut gone = object(Stream::Ip, "old", "a.ns", None);
        gone.event_type = EventType::DeletedOnRelist;
        index.apply(&gone);
        assert_eq!(
            index.holders(Guarded::Subnet, None, "net1", OK),
            Err(Unsynced::Listing(Stream::Ip)),
            "a relist in progress is not a synced view"
        );
        index.apply(&marker(Stream::Ip, EventType::SyncEnd));
        assert_eq!(
            index
                .holders(Guarded::Subnet, None, "net1", OK)
                .unwrap()
                .count,
            1
        );
    }

    #[test]
    fn an_ip_owned_by_the_subnet_itself_does_not_hold_it() {
        let mut index = synced(&[Stream::Ip]);
        let mut u2o = ip("u1", "u2o-interconnection.net1", "net1", "10.0.0.254");
        if let Some(meta) = &mut u2o.metadata {
            meta.owner_references = vec![OwnerReference {
                api_version: "kubeovn.io/v1".into(),
                kind: "Subnet".into(),
                name: "net1".into(),
                uid: "s1".into(),
                controller: Some(true),
            }];
        }
        index.apply(&u2o);
        assert_eq!(
            index
                .holders(Guarded::Subnet, None, "net1", OK)
                .unwrap()
                .count,
            0
        );
    }

    #[test]
    fn at_most_ten_holders_are_named_and_all_are_counted() {
        let mut index = synced(&[Stream::Ip]);
        for i in 0..25 {
            index.apply(&ip(
                &format!("u{i}"),
                &format!("p{i:02}.ns"),
                "big",
                &format!("10.0.0.{i}"),
            ));
        }
        let held = index.holders(Guarded::Subnet, None, "big", OK).unwrap();
        assert_eq!((held.count, held.named.len()), (25, MAX_NAMED));
        let verdict = decide(GuardMode::Deny, Guarded::Subnet, "big", Ok(held));
        let message = verdict.message.unwrap();
        assert!(message.contains("still named by 25 live IPs"), "{message}");
        assert!(
            message.contains("p09.ns") && !message.contains("p10.ns"),
            "{message}"
        );
        assert!(message.contains("and 15 more"), "{message}");
    }

    #[test]
    fn whereabouts_and_spiderpool_pools_are_held_by_their_own_allocations() {
        let mut index = synced(&[Stream::IpPool, Stream::SpiderIpPool]);
        index.apply(&whereabouts_pool(
            "w1",
            "10.9.0.0-24",
            &[("10.9.0.5", "default/web-1"), ("10.9.0.6", "default/web-2")],
        ));
        let mut spider = object(Stream::SpiderIpPool, "s1", "pool-a", None);
        spider.part = Some(KindPart::SpiderIpPool(Box::new(SpiderIpPoolInfo {
            allocations: vec![SpiderAllocation {
                address: "172.18.40.10".into(),
                pod: "default/db-0".into(),
                pod_uid: "p".into(),
            }],
            ..SpiderIpPoolInfo::default()
        })));
        index.apply(&spider);
        let held = index
            .holders(Guarded::IpPool, Some("kube-system"), "10.9.0.0-24", OK)
            .unwrap();
        assert_eq!(held.count, 2);
        assert_eq!(held.named[0].to_string(), "10.9.0.5 (pod default/web-1)");
        assert_eq!(
            index
                .holders(Guarded::IpPool, Some("other"), "10.9.0.0-24", OK)
                .unwrap()
                .count,
            0,
            "a whereabouts pool is namespaced"
        );
        let held = index
            .holders(Guarded::SpiderIpPool, None, "pool-a", OK)
            .unwrap();
        assert_eq!(held.count, 1);
        index.apply(&whereabouts_pool("w1", "10.9.0.0-24", &[]));
        assert_eq!(
            index
                .holders(Guarded::IpPool, Some("kube-system"), "10.9.0.0-24", OK)
                .unwrap()
                .count,
            0,
            "a pool emptied by its IPAM holds nothing"
        );
    }

    #[test]
    fn the_view_is_unsynced_before_the_first_list_while_failing_or_paused_and_when_unwatched() {
        let mut index = Index::new(&[Stream::Ip, Stream::Pod]);
        index.apply(&ip("u1", "a.ns", "net1", "10.0.0.2"));
        assert_eq!(
            index.holders(Guarded::Subnet, None, "net1", OK),
            Err(Unsynced::Listing(Stream::Ip))
        );
        index.apply(&marker(Stream::Ip, EventType::SyncStart));
        index.apply(&marker(Stream::Ip, EventType::SyncEnd));
        assert!(index.holders(Guarded::Subnet, None, "net1", OK).is_ok());
        let failing = StreamHealth {
            failing: true,
            paused: false,
        };
        assert_eq!(
            index.holders(Guarded::Subnet, None, "net1", failing),
            Err(Unsynced::Failing(Stream::Ip))
        );
        let paused = StreamHealth {
            failing: false,
            paused: true,
        };
        assert_eq!(
            index.holders(Guarded::Subnet, None, "net1", paused),
            Err(Unsynced::Paused)
        );
        assert_eq!(
            index.holders(Guarded::IpPool, Some("kube-system"), "p", OK),
            Err(Unsynced::NotWatched(Stream::IpPool))
        );
    }

    #[test]
    fn warn_allows_with_one_warning_per_named_holder_and_unsynced_allows_saying_why() {
        let held = Holders {
            count: 2,
            named: vec![
                Holder {
                    name: "a.ns".into(),
                    address: "10.0.0.2".into(),
                    pod: String::new(),
                    terminating: true,
                },
                Holder {
                    name: "b.ns".into(),
                    ..Holder::default()
                },
            ],
        };
        let verdict = decide(GuardMode::Warn, Guarded::Subnet, "net1", Ok(held));
        assert!(verdict.allowed);
        assert_eq!(verdict.decision, Decision::Warned);
        assert_eq!(
            verdict.warnings,
            [
                "Subnet net1 is still named by 2 live IPs; deleting it now leaks them:",
                "  a.ns (10.0.0.2, terminating)",
                "  b.ns"
            ]
        );
        let verdict = decide(
            GuardMode::Deny,
            Guarded::Subnet,
            "net1",
            Err(Unsynced::Listing(Stream::Ip)),
        );
        assert!(verdict.allowed);
        assert_eq!(verdict.decision, Decision::Unsynced);
        assert!(verdict.warnings[0].contains("the ip kind has not been listed completely"));
        let verdict = decide(
            GuardMode::Deny,
            Guarded::Subnet,
            "net1",
            Ok(Holders::default()),
        );
        assert_eq!(verdict, Verdict::allow());
    }

    #[test]
    fn guarded_kinds_are_found_by_group_and_resource() {
        assert_eq!(
            Guarded::of_resource("kubeovn.io", "subnets"),
            Some(Guarded::Subnet)
        );
        assert_eq!(
            Guarded::of_resource("whereabouts.cni.cncf.io", "ippools"),
            Some(Guarded::IpPool)
        );
        assert_eq!(
            Guarded::of_resource("spiderpool.spidernet.io", "spiderippools"),
            Some(Guarded::SpiderIpPool)
        );
        assert_eq!(
            Guarded::of_resource("crd.projectcalico.org", "ippools"),
            Some(Guarded::CalicoIpPool)
        );
        assert_eq!(
            Guarded::of_resource("projectcalico.org", "ippools"),
            Some(Guarded::CalicoV3IpPool)
        );
        assert_eq!(Guarded::of_resource("kubeovn.io", "ips"), None);
        assert_eq!(Guarded::of_resource("", "pods"), None);
    }

    fn calico_pool(stream: Stream, uid: &str, name: &str, cidr: &str) -> WatchEvent {
        let mut e = object(stream, uid, name, None);
        e.part = Some(KindPart::CalicoPool(Box::new(
            ipaudit_schemas::CalicoPoolInfo {
                cidr: cidr.into(),
                ..Default::default()
            },
        )));
        e
    }

    fn calico_block(stream: Stream, uid: &str, cidr: &str, pods: &[(&str, &str)]) -> WatchEvent {
        let mut e = object(stream, uid, &cidr.replace(['.', '/'], "-"), None);
        e.part = Some(KindPart::CalicoBlock(Box::new(
            ipaudit_schemas::CalicoBlockInfo {
                cidr: cidr.into(),
                allocations: pods
                    .iter()
                    .map(|(address, pod)| {
                        let (namespace, pod) = pod.split_once('/').unwrap_or(("", ""));
                        ipaudit_schemas::CalicoAllocation {
                            address: (*address).into(),
                            namespace: namespace.into(),
                            pod: pod.into(),
                            ..Default::default()
                        }
                    })
                    .collect(),
                ..Default::default()
            },
        )));
        e
    }

    #[test]
    fn a_calico_pool_is_held_by_the_allocations_of_the_blocks_inside_its_cidr() {
        let streams = [Stream::CalicoIpPool, Stream::CalicoIpamBlock];
        let mut index = synced(&streams);
        index.apply(&calico_pool(
            Stream::CalicoIpPool,
            "p1",
            "default-ipv4",
            "10.244.0.0/16",
        ));
        index.apply(&calico_pool(
            Stream::CalicoIpPool,
            "p2",
            "other",
            "10.99.0.0/16",
        ));
        index.apply(&calico_block(
            Stream::CalicoIpamBlock,
            "b1",
            "10.244.1.0/26",
            &[("10.244.1.0", ""), ("10.244.1.5", "shop/web-0")],
        ));
        index.apply(&calico_block(
            Stream::CalicoIpamBlock,
            "b2",
            "10.244.2.0/26",
            &[],
        ));
        index.apply(&calico_block(
            Stream::CalicoIpamBlock,
            "b3",
            "10.99.0.0/26",
            &[("10.99.0.7", "shop/api-1")],
        ));
        let held = index
            .holders(Guarded::CalicoIpPool, None, "default-ipv4", OK)
            .unwrap();
        assert_eq!(held.count, 2, "the tunnel address counts too: {held:?}");
        assert_eq!(held.named[1].to_string(), "10.244.1.5 (pod shop/web-0)");
        let verdict = decide(
            GuardMode::Deny,
            Guarded::CalicoIpPool,
            "default-ipv4",
            Ok(held),
        );
        assert!(!verdict.allowed);
        assert!(verdict
            .message
            .unwrap_or_default()
            .contains("allocations of its blocks"),);
        // Its blocks released: nothing holds it.
        index.apply(&deleted(calico_block(
            Stream::CalicoIpamBlock,
            "b1",
            "10.244.1.0/26",
            &[],
        )));
        assert_eq!(
            index
                .holders(Guarded::CalicoIpPool, None, "default-ipv4", OK)
                .unwrap()
                .count,
            0
        );
        // A v3 pool of the same name reads the v3 blocks, and is unwatched here.
        assert!(matches!(
            index.holders(Guarded::CalicoV3IpPool, None, "default-ipv4", OK),
            Err(Unsynced::NotWatched(Stream::CalicoV3IpamBlock))
        ));
    }

    #[test]
    fn a_calico_pool_is_judged_only_once_its_pools_and_blocks_were_listed() {
        let mut index = Index::new(&[Stream::CalicoIpPool, Stream::CalicoIpamBlock]);
        index.apply(&marker(Stream::CalicoIpamBlock, EventType::SyncEnd));
        assert!(matches!(
            index.holders(Guarded::CalicoIpPool, None, "p", OK),
            Err(Unsynced::Listing(Stream::CalicoIpPool))
        ));
    }
}
