//! The kinds the simulated API server serves, and where they live in the URL space.

use std::fmt;

/// A served kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// core/v1 Pods (namespaced).
    Pod,
    /// kubeovn.io/v1 IPs (cluster-scoped).
    Ip,
    /// kubeovn.io/v1 Subnets (cluster-scoped).
    Subnet,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 3] = [Kind::Pod, Kind::Ip, Kind::Subnet];

    /// `kind` as objects carry it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pod => "Pod",
            Kind::Ip => "IP",
            Kind::Subnet => "Subnet",
        }
    }

    /// The plural resource name in URLs.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Pod => "pods",
            Kind::Ip => "ips",
            Kind::Subnet => "subnets",
        }
    }

    /// The singular resource name.
    pub fn singular(self) -> &'static str {
        match self {
            Kind::Pod => "pod",
            Kind::Ip => "ip",
            Kind::Subnet => "subnet",
        }
    }

    /// `apiVersion` as objects carry it.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Pod => "v1",
            Kind::Ip | Kind::Subnet => "kubeovn.io/v1",
        }
    }

    /// Whether objects live in namespaces.
    pub fn namespaced(self) -> bool {
        matches!(self, Kind::Pod)
    }

    /// The kind of a plural resource name.
    pub fn from_plural(plural: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.plural() == plural)
    }

    /// The list kind (`PodList`, `IPList`).
    pub fn list_kind(self) -> String {
        format!("{}List", self.name())
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.plural())
    }
}
