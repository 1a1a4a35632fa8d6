//! A check's Calico findings in the categories `calicoctl ipam check` prints, so that an
//! operator used to its report reads this one the same way: each category with its count,
//! its addresses or handles, and the ipaudit rule behind it. Two categories have no rule
//! (addresses pods show that no pool or no allocation covers: a snapshot says it, history
//! adds nothing), and two are ipaudit's own: blocks kept for nodes that are gone, which
//! `calicoctl` has no category for, and IPv6 tunnel addresses, which it counts as leaked
//! (it knows only the IPv4 ones).

use ipaudit_analyzer::analysis::state::{ClusterState, Part};
use ipaudit_schemas::Stream;
use serde::Serialize;

use crate::report::ReportFinding;

/// One category: the sentence calicoctl prints, the rule, what is in it.
#[derive(Debug, Clone, Serialize)]
pub struct Category {
    /// What `calicoctl ipam check` prints for it, or "" for a category it does not have.
    pub calicoctl: &'static str,
    /// The ipaudit rule that finds it, or `check` for one a snapshot finds by itself.
    pub ipaudit: &'static str,
    /// What this category holds, for a person.
    pub what: &'static str,
    /// The addresses, handles or nodes in it, sorted.
    pub items: Vec<String>,
}

/// The categories of one check; empty when the cluster serves no Calico kind.
pub fn categories(state: &ClusterState, firing: &[ReportFinding]) -> Vec<Category> {
    let calico_listed = [Stream::CalicoIpamBlock, Stream::CalicoV3IpamBlock]
        .iter()
        .any(|s| state.listed(*s).is_some());
    if !calico_listed {
        return Vec::new();
    }
    let subjects = |rule: &str, about_calico: &dyn Fn(&ReportFinding) -> bool| {
        let mut items: Vec<String> = firing
            .iter()
            .filter(|f| f.alert.rule == rule && about_calico(f))
            .map(|f| f.alert.subject_name.clone())
            .collect();
        items.sort();
        items.dedup();
        items
    };
    let cites_calico = |f: &ReportFinding| {
        f.alert.evidence.iter().any(|e| {
            matches!(
                e.stream.canonical(),
                Stream::CalicoIpamBlock | Stream::CalicoIpamHandle | Stream::CalicoBlockAffinity
            )
        })
    };
    let (outside_pools, without_allocation) = addresses_in_use_unaccounted(state);
    vec![
        Category {
            calicoctl: "IPs that are allocated in IPAM but not actually in use",
            ipaudit: "ip-without-pod",
            what: "allocations whose pod is gone (leaked)",
            items: subjects("ip-without-pod", &cites_calico),
        },
        Category {
            calicoctl: "in-use IPs that are not in active IP pools",
            ipaudit: "check",
            what: "addresses pods on Calico's network show outside every enabled IPPool",
            items: outside_pools,
        },
        Category {
            calicoctl:
                "in-use IPs that are in active IP pools but have no corresponding IPAM allocation",
            ipaudit: "check",
            what: "addresses pods on Calico's network show that no block allocates",
            items: without_allocation,
        },
        Category {
            calicoctl: "handles with no matching IPs",
            ipaudit: "handle-without-ip",
            what: "IPAMHandles counting addresses no block carries",
            items: subjects("handle-without-ip", &|_| true),
        },
        Category {
            calicoctl: "handles mentioned in blocks with no matching handle resource",
            ipaudit: "ip-without-handle",
            what: "allocations whose IPAMHandle is missing",
            items: subjects("ip-without-handle", &|_| true),
        },
        Category {
            calicoctl: "",
            ipaudit: "block-of-missing-node",
            what: "nodes that are gone while blocks or affinities are kept for them",
            items: subjects("block-of-missing-node", &cites_calico),
        },
        Category {
            calicoctl: "",
            ipaudit: "check",
            what: "IPv6 tunnel addresses in use (calicoctl ipam check counts them as leaked)",
            items: ipv6_tunnel_addresses(state),
        },
    ]
}

/// Addresses pods on Calico's network show (live, not finished) that no enabled pool
/// contains, and those a pool contains but no block allocates.
fn addresses_in_use_unaccounted(state: &ClusterState) -> (Vec<String>, Vec<String>) {
    let pools: Vec<&str> = [Stream::CalicoIpPool, Stream::CalicoV3IpPool]
        .into_iter()
        .flat_map(|s| state.records(s))
        .filter_map(|(_, record)| match record.part() {
            Part::CalicoPool(pool) if !pool.disabled => Some(pool.cidr.as_str()),
            _ => None,
        })
        .collect();
    let (mut outside, mut unallocated) = (Vec::new(), Vec::new());
    for (name, record) in state.records(Stream::Pod) {
        if !record.is_live_pod() {
            continue;
        }
        let Some(pod) = record.part().pod() else {
            continue;
        };
        for address in pod.calico_ips() {
            if !pools
                .iter()
                .any(|cidr| ipaudit_schemas::cidr::contains(cidr, address))
            {
                outside.push(format!("{address} (pod {name})"));
            } else if !state.records_holding(address).iter().any(|(key, _)| {
                matches!(key.0, Stream::CalicoIpamBlock | Stream::CalicoV3IpamBlock)
            }) {
                unallocated.push(format!("{address} (pod {name})"));
            }
        }
    }
    outside.sort();
    unallocated.sort();
    (outside, unallocated)
}

/// The IPv6 tunnel addresses Calico's blocks allocate.
fn ipv6_tunnel_addresses(state: &ClusterState) -> Vec<String> {
    let mut found: Vec<String> = [Stream::CalicoIpamBlock, Stream::CalicoV3IpamBlock]
        .into_iter()
        .flat_map(|s| state.records(s))
        .filter_map(|(_, record)| match record.part() {
            Part::CalicoBlock(block) if !block.deleted => Some(block),
            _ => None,
        })
        .flat_map(|block| block.allocations.iter())
        .filter(|a| {
            matches!(
                a.r#type.as_str(),
                "vxlanV6TunnelAddress" | "wireguardV6TunnelAddress"
            )
        })
        .map(|a| format!("{} ({} of {})", a.address, a.r#type, a.node))
        .collect();
    found.sort();
    found.dedup();
    found
}

/// The categories as text, calicoctl's sentences first.
pub fn render_text(categories: &[Category]) -> String {
    if categories.is_empty() {
        return String::new();
    }
    let mut out = String::from("Calico, in the categories of calicoctl ipam check:\n");
    for category in categories {
        let n = category.items.len();
        let head = if category.calicoctl.is_empty() {
            format!(
                "  {n} {} [{}; calicoctl has no such category]",
                category.what, category.ipaudit
            )
        } else {
            format!("  Found {n} {}. [{}]", category.calicoctl, category.ipaudit)
        };
        out.push_str(&head);
        out.push('\n');
        for item in &category.items {
            out.push_str(&format!("    {item}\n"));
        }
    }
    out
}
