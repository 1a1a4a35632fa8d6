//! The watched kinds, one table entry each: API group, version, plural, scope, IPAM, and the
//! converter that reads the kind-specific part of an event from the object. Everything
//! that loops over kinds (the collector's watch list, discovery and metrics, RBAC, the
//! analyzer's reorder buffer and kubectl reader) reads this table.
//!
//! Adding a kind: a [`Stream`] variant and its symbol in the next `watch_event` schema
//! (the contract), a [`KindPart`] record, one entry here, and its
//! converter in the IPAM's module.

mod core;
mod kube_ovn;
mod spiderpool;
mod whereabouts;

use std::fmt;

use crate::event::{KindPart, Stream};
use crate::kubernetes::{FieldReader, ObjectParts};

/// The IPAM a kind belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ipam {
    /// kube-ovn (kubeovn.io).
    KubeOvn,
    /// whereabouts (whereabouts.cni.cncf.io).
    Whereabouts,
    /// spiderpool (spiderpool.spidernet.io).
    Spiderpool,
}

impl Ipam {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Ipam::KubeOvn => "kube-ovn",
            Ipam::Whereabouts => "whereabouts",
            Ipam::Spiderpool => "spiderpool",
        }
    }
}

impl fmt::Display for Ipam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reads the kind-specific part of one object.
pub type Converter = fn(&mut FieldReader, &ObjectParts<'_>) -> KindPart;

/// One watched kind.
#[derive(Debug)]
pub struct KindSpec {
    /// The stream its events travel on.
    pub stream: Stream,
    /// `kind` as objects carry it.
    pub kind: &'static str,
    /// API group; "" for the core group.
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Plural resource name, as in URLs, RBAC and kubectl.
    pub plural: &'static str,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// The IPAM it belongs to; `None` for Pods, which every IPAM reads.
    pub ipam: Option<Ipam>,
    /// Lower-case name, for metric labels and reports.
    pub label: &'static str,
    /// Reads the kind-specific part.
    pub convert: Converter,
}

impl KindSpec {
    /// `apiVersion` as objects carry it.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The path of the collection across all namespaces.
    pub fn collection_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}/{}", self.version, self.plural)
        } else {
            format!("/apis/{}/{}/{}", self.group, self.version, self.plural)
        }
    }

    /// The resource as kubectl and RBAC name it: `ippools.whereabouts.cni.cncf.io`, `pods`.
    pub fn resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_owned()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Whether `name` names this kind: its plural, its resource, its kind or its label,
    /// case-insensitively.
    pub fn is_named(&self, name: &str) -> bool {
        [self.plural, self.kind, self.label]
            .iter()
            .any(|n| n.eq_ignore_ascii_case(name))
            || self.resource().eq_ignore_ascii_case(name)
    }
}

/// Every watched kind. Pods first: every IPAM reads them.
pub static KINDS: &[KindSpec] = &[
    KindSpec {
        stream: Stream::Pod,
        kind: "Pod",
        group: "",
        version: "v1",
        plural: "pods",
        namespaced: true,
        ipam: None,
        label: "pod",
        convert: core::pod,
    },
    KindSpec {
        stream: Stream::Ip,
        kind: "IP",
        group: "kubeovn.io",
        version: "v1",
        plural: "ips",
        namespaced: false,
        ipam: Some(Ipam::KubeOvn),
        label: "ip",
        convert: kube_ovn::ip,
    },
    KindSpec {
        stream: Stream::Subnet,
        kind: "Subnet",
        group: "kubeovn.io",
        version: "v1",
        plural: "subnets",
        namespaced: false,
        ipam: Some(Ipam::KubeOvn),
        label: "subnet",
        convert: kube_ovn::subnet,
    },
    KindSpec {
        stream: Stream::IpPool,
        kind: "IPPool",
        group: "whereabouts.cni.cncf.io",
        version: "v1alpha1",
        plural: "ippools",
        namespaced: true,
        ipam: Some(Ipam::Whereabouts),
        label: "ippool",
        convert: whereabouts::ip_pool,
    },
    KindSpec {
        stream: Stream::OverlappingRangeIpReservation,
        kind: "OverlappingRangeIPReservation",
        group: "whereabouts.cni.cncf.io",
        version: "v1alpha1",
        plural: "overlappingrangeipreservations",
        namespaced: true,
        ipam: Some(Ipam::Whereabouts),
        label: "overlappingrangeipreservation",
        convert: whereabouts::reservation,
    },
    KindSpec {
        stream: Stream::SpiderIpPool,
        kind: "SpiderIPPool",
        group: "spiderpool.spidernet.io",
        version: "v2beta1",
        plural: "spiderippools",
        namespaced: false,
        ipam: Some(Ipam::Spiderpool),
        label: "spiderippool",
        convert: spiderpool::ip_pool,
    },
    KindSpec {
        stream: Stream::SpiderEndpoint,
        kind: "SpiderEndpoint",
        group: "spiderpool.spidernet.io",
        version: "v2beta1",
        plural: "spiderendpoints",
        namespaced: true,
        ipam: Some(Ipam::Spiderpool),
        label: "spiderendpoint",
        convert: spiderpool::endpoint,
    },
];

/// The kind of an object from its `apiVersion` and `kind`; an empty `apiVersion` matches
/// on the kind alone.
pub fn of_object(api_version: &str, kind: &str) -> Option<&'static KindSpec> {
    KINDS
        .iter()
        .find(|k| k.kind == kind && (api_version.is_empty() || api_version == k.api_version()))
}

/// The kind a user named (`--kinds`): plural, `plural.group`, kind or label.
pub fn named(name: &str) -> Option<&'static KindSpec> {
    KINDS.iter().find(|k| k.is_named(name.trim()))
}

/// The streams in table order.
pub fn streams() -> impl Iterator<Item = Stream> {
    KINDS.iter().map(|k| k.stream)
}

/// The stream whose label is `label` (as stored by the collector's outbox).
pub fn stream_labelled(label: &str) -> Option<Stream> {
    KINDS.iter().find(|k| k.label == label).map(|k| k.stream)
}

// The table owns the lookup so that the event types below it need not know the table.
impl Stream {
    /// The table entry of the stream's kind; `None` for [`Stream::Unknown`].
    pub fn spec(self) -> Option<&'static KindSpec> {
        KINDS.iter().find(|k| k.stream == self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stream_but_unknown_has_exactly_one_entry() {
        for stream in streams() {
            assert_eq!(KINDS.iter().filter(|k| k.stream == stream).count(), 1);
        }
        assert!(Stream::Unknown.spec().is_none());
        assert_eq!(KINDS.len(), 7);
    }

    #[test]
    fn kinds_are_found_by_api_version_and_kind_not_by_kind_alone() {
        let pool = of_object("whereabouts.cni.cncf.io/v1alpha1", "IPPool").unwrap();
        assert_eq!(pool.stream, Stream::IpPool);
        assert!(
            of_object("kubeovn.io/v1", "IPPool").is_none(),
            "kube-ovn's own IPPool is not whereabouts'"
        );
        assert_eq!(of_object("", "IP").unwrap().stream, Stream::Ip);
    }

    #[test]
    fn a_kind_is_named_by_plural_resource_kind_or_label() {
        for name in [
            "ippools",
            "ippools.whereabouts.cni.cncf.io",
            "IPPool",
            "ippool",
        ] {
            assert_eq!(named(name).unwrap().stream, Stream::IpPool, "{name}");
        }
        assert_eq!(
            named("spiderendpoints").unwrap().collection_path(),
            "/apis/spiderpool.spidernet.io/v2beta1/spiderendpoints"
        );
        assert_eq!(named("pods").unwrap().collection_path(), "/api/v1/pods");
        assert!(named("nodes").is_none());
    }
}
