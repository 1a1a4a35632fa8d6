//! Builders for events, so that tests, benchmarks and generators read like sentences:
//! `EventBuilder::ip("vm-1.ns", "subnet-x").rv(12).deleting(t).build(EventType::Modified)`.

use crate::event::{EventType, IpInfo, ObjectMeta, PodInfo, Stream, SubnetInfo, WatchEvent};
use crate::KUBE_OVN_FINALIZER;

/// Builds one `WatchEvent` for an object.
#[derive(Debug, Clone)]
pub struct EventBuilder {
    event: WatchEvent,
}

impl EventBuilder {
    fn object(stream: Stream, name: &str) -> Self {
        let mut event = WatchEvent::new(stream, EventType::Added, "0");
        event.cluster_id = "test".into();
        event.collector_id = "builder".into();
        event.metadata = Some(ObjectMeta {
            uid: format!("uid-{}-{name}", stream.as_str()),
            name: name.to_owned(),
            ..ObjectMeta::default()
        });
        EventBuilder { event }
    }

    /// A kube-ovn IP on `subnet`, with kube-ovn's finalizer.
    pub fn ip(name: &str, subnet: &str) -> Self {
        let mut b = Self::object(Stream::Ip, name);
        b.meta().finalizers.push(KUBE_OVN_FINALIZER.into());
        b.meta()
            .labels
            .insert("ovn.kubernetes.io/subnet".into(), subnet.into());
        b.event.ip = Some(IpInfo {
            subnet: subnet.to_owned(),
            ..IpInfo::default()
        });
        b
    }

    /// A kube-ovn Subnet, with kube-ovn's finalizer.
    pub fn subnet(name: &str) -> Self {
        let mut b = Self::object(Stream::Subnet, name);
        b.meta().finalizers.push(KUBE_OVN_FINALIZER.into());
        b.event.subnet = Some(SubnetInfo {
            v4_using_ips: Some("0".into()),
            ..SubnetInfo::default()
        });
        b
    }

    /// A Pod in `namespace`.
    pub fn pod(namespace: &str, name: &str) -> Self {
        let mut b = Self::object(Stream::Pod, name);
        b.meta().namespace = Some(namespace.to_owned());
        b.event.pod = Some(PodInfo {
            phase: "Running".into(),
            ..PodInfo::default()
        });
        b
    }

    /// A BOOKMARK on `stream`.
    pub fn bookmark(stream: Stream, rv: i64) -> WatchEvent {
        let mut event = WatchEvent::new(stream, EventType::Bookmark, &rv.to_string());
        event.cluster_id = "test".into();
        event.collector_id = "builder".into();
        event
    }

    /// A relist marker (`SYNC_START` or `SYNC_END`) on `stream`.
    pub fn marker(stream: Stream, event_type: EventType, rv: i64) -> WatchEvent {
        let mut event = Self::bookmark(stream, rv);
        event.event_type = event_type;
        event
    }

    fn meta(&mut self) -> &mut ObjectMeta {
        self.event.metadata.get_or_insert_with(ObjectMeta::default)
    }

    /// Sets the uid.
    pub fn uid(mut self, uid: &str) -> Self {
        self.meta().uid = uid.to_owned();
        self
    }

    /// Sets the resourceVersion.
    pub fn rv(mut self, rv: i64) -> Self {
        self.event.resource_version = rv.to_string();
        self.event.resource_version_num = Some(rv);
        self
    }

    /// Sets the observation time.
    pub fn at(mut self, ms: i64) -> Self {
        self.event.observed_at_ms = Some(ms);
        self
    }

    /// Sets the deletionTimestamp.
    pub fn deleting(mut self, ms: i64) -> Self {
        self.meta().deletion_timestamp_ms = Some(ms);
        self
    }

    /// Replaces the finalizers.
    pub fn finalizers(mut self, finalizers: &[&str]) -> Self {
        self.meta().finalizers = finalizers.iter().map(|f| (*f).to_owned()).collect();
        self
    }

    /// Adds attachment subnets to an IP.
    pub fn attach_subnets(mut self, subnets: &[&str]) -> Self {
        if let Some(ip) = self.event.ip.as_mut() {
            ip.attach_subnets = subnets.iter().map(|s| (*s).to_owned()).collect();
        }
        self
    }

    /// Sets an IP's pod, address and pod type.
    pub fn ip_of(
        mut self,
        pod_namespace: &str,
        pod_name: &str,
        address: &str,
        pod_type: &str,
    ) -> Self {
        if let Some(ip) = self.event.ip.as_mut() {
            ip.pod_namespace = pod_namespace.to_owned();
            ip.pod_name = pod_name.to_owned();
            ip.ip_address = address.to_owned();
            ip.v4_ip_address = address.to_owned();
            ip.pod_type = pod_type.to_owned();
        }
        self
    }

    /// Sets a subnet's used-IP count.
    pub fn using_ips(mut self, count: u64) -> Self {
        if let Some(subnet) = self.event.subnet.as_mut() {
            subnet.v4_using_ips = Some(count.to_string());
        }
        self
    }

    /// Sets the collector that saw the event.
    pub fn collector(mut self, collector_id: &str) -> Self {
        self.event.collector_id = collector_id.to_owned();
        self
    }

    /// The event, with this type.
    pub fn build(mut self, event_type: EventType) -> WatchEvent {
        self.event.event_type = event_type;
        self.event
    }

    /// Shorthands for the common types.
    pub fn added(self) -> WatchEvent {
        self.build(EventType::Added)
    }

    /// A MODIFIED event.
    pub fn modified(self) -> WatchEvent {
        self.build(EventType::Modified)
    }

    /// A DELETED event.
    pub fn deleted(self) -> WatchEvent {
        self.build(EventType::Deleted)
    }
}
