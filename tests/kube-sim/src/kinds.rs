//! The kinds the simulated API server can serve: exactly the kinds of ipaudit's table,
//! [`ipaudit_schemas::KINDS`] (group, version, plural, scope), so that a kind added there
//! is served here with nothing else to change. A kind is named by its stream ([`Kind`]);
//! a server may serve only some of them ([`Served`]), as a cluster with only whereabouts
//! installed does.

use std::collections::BTreeMap;

use ipaudit_schemas::{kinds, KindSpec, Stream, KINDS};

/// A kind of the table, named by its stream (`Kind::Pod`, `Kind::IpPool`...); its table
/// entry is [`Stream::spec`]. [`Stream::Unknown`] is never served.
pub type Kind = Stream;

/// The list kind (`PodList`, `IPPoolList`).
pub fn list_kind(kind: &KindSpec) -> String {
    format!("{}List", kind.kind)
}

/// The singular resource name, as discovery reports it (`pod`, `ippool`).
pub fn singular(kind: &KindSpec) -> String {
    kind.kind.to_ascii_lowercase()
}

/// The kinds one server serves, in table order.
#[derive(Debug, Clone)]
pub struct Served {
    kinds: Vec<&'static KindSpec>,
}

impl Served {
    /// Every kind of the table.
    pub fn all() -> Self {
        Served {
            kinds: KINDS.iter().collect(),
        }
    }

    /// Only these kinds (in table order whatever the order given; unknown ones ignored).
    pub fn only(kinds: &[Kind]) -> Self {
        Served {
            kinds: KINDS.iter().filter(|k| kinds.contains(&k.stream)).collect(),
        }
    }

    /// The served kinds, in table order.
    pub fn kinds(&self) -> &[&'static KindSpec] {
        &self.kinds
    }

    /// The table entry of `kind` if it is served.
    pub fn spec(&self, kind: Kind) -> Option<&'static KindSpec> {
        self.kinds.iter().copied().find(|k| k.stream == kind)
    }

    /// The served kind at `/apis/<group>/<version>/<plural>` (`group` "" for `/api/v1`).
    pub fn at(&self, group: &str, version: &str, plural: &str) -> Option<&'static KindSpec> {
        self.kinds
            .iter()
            .copied()
            .find(|k| k.group == group && k.version == version && k.plural == plural)
    }

    /// The served kinds of one group/version.
    pub fn in_version(&self, group: &str, version: &str) -> Vec<&'static KindSpec> {
        self.kinds
            .iter()
            .copied()
            .filter(|k| k.group == group && k.version == version)
            .collect()
    }

    /// The served API groups (not the core group) with their versions, by group name.
    pub fn groups(&self) -> BTreeMap<&'static str, Vec<&'static str>> {
        let mut groups: BTreeMap<&'static str, Vec<&'static str>> = BTreeMap::new();
        for kind in self.kinds.iter().filter(|k| !k.group.is_empty()) {
            let versions = groups.entry(kind.group).or_default();
            if !versions.contains(&kind.version) {
                versions.push(kind.version);
            }
        }
        groups
    }
}

/// The kind a user named (`kube-sim --kinds`): plural, plural.group, Kind or label.
pub fn named(name: &str) -> Option<Kind> {
    kinds::named(name).map(|k| k.stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subset_keeps_table_order_and_its_groups() {
        let served = Served::only(&[Kind::OverlappingRangeIpReservation, Kind::Pod, Kind::IpPool]);
        let plurals: Vec<&str> = served.kinds().iter().map(|k| k.plural).collect();
        assert_eq!(
            plurals,
            ["pods", "ippools", "overlappingrangeipreservations"]
        );
        assert_eq!(
            served.groups().into_iter().collect::<Vec<_>>(),
            [("whereabouts.cni.cncf.io", vec!["v1alpha1"])]
        );
        assert!(served.spec(Kind::Ip).is_none());
        assert!(served.at("kubeovn.io", "v1", "ips").is_none());
        assert_eq!(
            served.at("", "v1", "pods").map(|k| k.stream),
            Some(Kind::Pod)
        );
        assert_eq!(list_kind(Kind::IpPool.spec().unwrap()), "IPPoolList");
    }
}
