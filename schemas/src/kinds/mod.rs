//! The watched kinds, one table entry each: API group, version, plural, scope, IPAM, and the
//! converter that reads the kind-specific part of an event from the object. Everything
//! that loops over kinds (the collector's watch list, discovery and metrics, RBAC, the
//! analyzer's reorder buffer and kubectl reader) reads this table.
//!
//! Adding a kind: a [`Stream`] variant and its symbol in the next `watch_event` schema
//! (the contract), a [`KindPart`] record, one entry here, and its
//! converter in the IPAM's module.

mod calico;
mod cilium;
mod core;
mod kube_ovn;
mod spiderpool;
mod whereabouts;

use std::fmt;

pub use self::core::{CALICO_CONTAINER_ID_ANNOTATION, NETWORK_STATUS_ANNOTATION};

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
    /// Calico (crd.projectcalico.org and, from Calico 3.32, projectcalico.org).
    Calico,
    /// Cilium (cilium.io).
    Cilium,
}

impl Ipam {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Ipam::KubeOvn => "kube-ovn",
            Ipam::Whereabouts => "whereabouts",
            Ipam::Spiderpool => "spiderpool",
            Ipam::Calico => "calico",
            Ipam::Cilium => "cilium",
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
    /// The IPAMs that read it besides its own: Nodes are Calico's and Cilium's.
    pub read_by: &'static [Ipam],
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

/// Every watched kind. Pods first: every IPAM reads them. A stream's entry; each Calico kind
/// twice, once per API group (`crd.projectcalico.org/v1` and Calico 3.32's native
/// `projectcalico.org/v3`: during a migration objects exist in both).
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
        read_by: &[],
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
        read_by: &[],
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
        read_by: &[],
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
        read_by: &[],
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
        read_by: &[],
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
        read_by: &[],
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
        read_by: &[],
        convert: spiderpool::endpoint,
    },
    KindSpec {
        stream: Stream::Node,
        kind: "Node",
        group: "",
        version: "v1",
        plural: "nodes",
        namespaced: false,
        ipam: None,
        label: "node",
        read_by: &[Ipam::Calico, Ipam::Cilium],
        convert: core::node,
    },
    KindSpec {
        stream: Stream::CalicoIpamBlock,
        kind: "IPAMBlock",
        group: "crd.projectcalico.org",
        version: "v1",
        plural: "ipamblocks",
        namespaced: false,
        ipam: Some(Ipam::Calico),
        label: "ipamblock",
        read_by: &[],
        convert: calico::block,
    },
    KindSpec {
        stream: Stream::CalicoIpamHandle,
        kind: "IPAMHandle",
        group: "crd.projectcalico.org",
        version: "v1",
        plural: "ipamhandles",
        namespaced: false,
        ipam: Some(Ipam::Calico),
        label: "ipamhandle",
        read_by: &[],
        convert: calico::handle,
    },
    KindSpec {
        stream: Stream::CalicoBlockAffinity,
        kind: "BlockAffinity",
        group: "crd.projectcalico.org",
        version: "v1",
        plural: "blockaffinities",
        namespaced: false,
        ipam: Some(Ipam::Calico),
        label: "blockaffinity",
        read_by: &[],
        convert: calico::affinity,
    },
    KindSpec {
        stream: Stream::CalicoIpPool,
        kind: "IPPool",
        group: "crd.projectcalico.org",
        version: "v1",
        plural: "ippools",
        namespaced: false,
        ipam: Some(Ipam::Calico),
        label: "calico-ippool",
        read_by: &[],
        convert: calico::pool,
    },
    KindSpec {
        stream: Stream::CalicoV3IpamBlock,
        kind: "IPAMBlock",
        group: "projectcalico.org",
        version: "v3",
        plural: "ipamblocks",
        namespaced: false,
        ipam: Some(Ipam::Calico),
        label: "ipamblock-v3",
        read_by: &[],
        convert: calico::block,
    },
    KindSpec {
        stream: Stream::CalicoV3IpamHandle,
        kind: "IPAMHandle",
        group: "projectcalico.org",
        version: "v3",
        plural: "ipamhandles",
        namespaced: false,
        ipam: Some(Ipam::Calico),
        label: "ipamhandle-v3",
        read_by: &[],
        convert: calico::handle,
    },
    KindSpec {
        stream: Stream::CalicoV3BlockAffinity,
        kind: "BlockAffinity",
        group: "projectcalico.org",
        version: "v3",
        plural: "blockaffinities",
        namespaced: false,
        ipam: Some(Ipam::Calico),
        label: "blockaffinity-v3",
        read_by: &[],
        convert: calico::affinity,
    },
    KindSpec {
        stream: Stream::CalicoV3IpPool,
        kind: "IPPool",
        group: "projectcalico.org",
        version: "v3",
        plural: "ippools",
        namespaced: false,
        ipam: Some(Ipam::Calico),
        label: "calico-ippool-v3",
        read_by: &[],
        convert: calico::pool,
    },
    KindSpec {
        stream: Stream::CiliumNode,
        kind: "CiliumNode",
        group: "cilium.io",
        version: "v2",
        plural: "ciliumnodes",
        namespaced: false,
        ipam: Some(Ipam::Cilium),
        label: "ciliumnode",
        read_by: &[],
        convert: cilium::node,
    },
    KindSpec {
        stream: Stream::CiliumEndpoint,
        kind: "CiliumEndpoint",
        group: "cilium.io",
        version: "v2",
        plural: "ciliumendpoints",
        namespaced: true,
        ipam: Some(Ipam::Cilium),
        label: "ciliumendpoint",
        read_by: &[],
        convert: cilium::endpoint,
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

/// How a cleanup command names the kind of its target (`CleanupCommand.target_kind`): its
/// kind, unless an entry earlier in the table has the same kind (Calico's v3 kinds, whose
/// v1 twins come first; Calico's IPPool after whereabouts'), then its resource
/// (`ipamblocks.projectcalico.org`), so that the name finds it back
/// ([`stream_of_target_kind`]).
pub fn target_kind_of(stream: Stream) -> String {
    let Some(spec) = stream.spec() else {
        return stream.kind().to_owned();
    };
    match KINDS.iter().find(|k| k.kind == spec.kind) {
        Some(first) if first.stream != stream => spec.resource(),
        _ => spec.kind.to_owned(),
    }
}

/// The stream a cleanup command's `target_kind` names (see [`target_kind_of`]).
pub fn stream_of_target_kind(target_kind: &str) -> Option<Stream> {
    KINDS
        .iter()
        .find(|k| k.kind == target_kind)
        .or_else(|| KINDS.iter().find(|k| k.resource() == target_kind))
        .map(|k| k.stream)
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
        assert_eq!(KINDS.len(), 18);
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
        assert_eq!(
            of_object("crd.projectcalico.org/v1", "IPPool")
                .unwrap()
                .stream,
            Stream::CalicoIpPool
        );
        assert_eq!(
            of_object("projectcalico.org/v3", "IPAMBlock")
                .unwrap()
                .stream
                .canonical(),
            Stream::CalicoIpamBlock,
            "one object in either group"
        );
    }

    #[test]
    fn a_cleanup_commands_target_kind_finds_its_stream_back_in_either_calico_group() {
        for stream in streams() {
            assert_eq!(
                stream_of_target_kind(&target_kind_of(stream)),
                Some(stream),
                "{stream:?}"
            );
        }
        assert_eq!(
            target_kind_of(Stream::IpPool),
            "IPPool",
            "as before Calico came"
        );
        assert_eq!(
            target_kind_of(Stream::CalicoV3IpamBlock),
            "ipamblocks.projectcalico.org"
        );
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
        assert_eq!(named("nodes").unwrap().collection_path(), "/api/v1/nodes");
        assert!(named("endpoints").is_none());
    }
}
