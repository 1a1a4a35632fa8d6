//! Calico's IPAM model as its rules read it, pure: how an allocation names its handle, how
//! a handle or a block is found by the name Calico gives it, and each object as one
//! whatever the API group it is seen in (`crd.projectcalico.org/v1` or, from Calico 3.32,
//! `projectcalico.org/v3`; during a migration the same object is in both).

use ipaudit_schemas::{CalicoAllocation, CalicoBlockInfo, CalicoHandleInfo, Stream};

use ipaudit_schemas::EventType;

use super::{ClusterState, EventRef, ObjectRecord, Part};

/// The handle Calico's Windows nodes reserve addresses under: it has no IPAMHandle by
/// design (libcalico-go `WindowsReservedHandle`).
pub const WINDOWS_RESERVED_HANDLE: &str = "windows-reserved-ipam-handle";

/// The block streams, v1 first.
pub const BLOCK_STREAMS: [Stream; 2] = [Stream::CalicoIpamBlock, Stream::CalicoV3IpamBlock];

/// The handle streams, v1 first.
pub const HANDLE_STREAMS: [Stream; 2] = [Stream::CalicoIpamHandle, Stream::CalicoV3IpamHandle];

/// The affinity streams, v1 first.
pub const AFFINITY_STREAMS: [Stream; 2] =
    [Stream::CalicoBlockAffinity, Stream::CalicoV3BlockAffinity];

/// A handle id as Calico compares it: cut at the first carriage return (blocks migrated
/// from old releases carry `\r\neth0` junk; libcalico-go's `sanitizeHandle`).
pub fn clean_handle(handle_id: &str) -> &str {
    handle_id.split('\r').next().unwrap_or(handle_id)
}

/// The name of a handle's object: its id in lower case.
pub fn handle_object_name(handle_id: &str) -> String {
    clean_handle(handle_id).to_lowercase()
}

/// The name of a block's object: its CIDR with `.`, `:` and `/` written as `-`.
pub fn block_object_name(cidr: &str) -> String {
    cidr.replace(['.', ':', '/'], "-")
}

/// The handle an allocation must have an IPAMHandle for: none for an allocation cooling
/// down (its attribute has no handle), one without handle, or Windows' reserved one.
pub fn handle_needed(allocation: &CalicoAllocation) -> Option<&str> {
    let handle = clean_handle(&allocation.handle_id);
    (allocation.released_at_ms.is_none() && !handle.is_empty() && handle != WINDOWS_RESERVED_HANDLE)
        .then_some(handle)
}

/// The live (not soft-deleted) block of this object name, in either API group (v1 first),
/// with its record.
pub fn blocks_named<'a>(
    state: &'a ClusterState,
    name: &str,
) -> impl Iterator<Item = (&'a ObjectRecord, &'a CalicoBlockInfo)> + 'a {
    let name = name.to_owned();
    BLOCK_STREAMS.into_iter().filter_map(move |stream| {
        let record = state.get(stream, &name)?;
        match record.part() {
            Part::CalicoBlock(block) if !block.deleted => Some((record, &***block)),
            _ => None,
        }
    })
}

/// The allocations of a block as it was and as it is (a change's `before` and `after`).
pub fn allocations_had_and_has<'a>(
    before: Option<&'a ObjectRecord>,
    after: Option<&'a ObjectRecord>,
) -> impl Iterator<Item = &'a CalicoAllocation> {
    [before, after]
        .into_iter()
        .flatten()
        .filter_map(|record| match record.part() {
            Part::CalicoBlock(block) => Some(block.allocations.iter()),
            _ => None,
        })
        .flatten()
}

/// The live handle `handle_id` (compared as Calico does), in either API group (v1 first).
pub fn handle<'a>(
    state: &'a ClusterState,
    handle_id: &str,
) -> Option<(&'a ObjectRecord, &'a CalicoHandleInfo)> {
    let name = handle_object_name(handle_id);
    HANDLE_STREAMS.into_iter().find_map(|stream| {
        let record = state.get(stream, &name)?;
        match record.part() {
            Part::CalicoHandle(h) if !h.deleted => Some((record, &**h)),
            _ => None,
        }
    })
}

/// How many addresses of the block `cidr` carry `handle_id`: the most that one copy of
/// the block (either API group) shows.
pub fn addresses_of_handle_in(state: &ClusterState, cidr: &str, handle_id: &str) -> i64 {
    blocks_named(state, &block_object_name(cidr))
        .map(|(_, block)| {
            block
                .allocations
                .iter()
                .filter(|a| handle_needed(a) == Some(handle_id))
                .count() as i64
        })
        .max()
        .unwrap_or(0)
}

/// Whether blocks and handles were both listed completely (a collector's first list, or the
/// initial list of a kubectl recording), in either API group: only then do their counts
/// compare. A recording's lists are merged by resourceVersion, each object at its own
/// version: until both lists end, a handle may show up long before the block it counts.
pub fn blocks_and_handles_listed(state: &ClusterState) -> bool {
    let listed = |streams: [Stream; 2]| streams.iter().any(|s| state.listed(*s).is_some());
    listed(BLOCK_STREAMS) && listed(HANDLE_STREAMS)
}

/// Since when a mismatch between blocks and handles exists: when the change that made it
/// was seen (`now_ms`); but when it is seen at the end of a list (a collector's first list,
/// a one-shot check's snapshot), since the latest change of the objects involved, which
/// is when it began at the latest.
pub fn mismatch_since<'a>(
    cause: &EventRef,
    involved: impl Iterator<Item = &'a ObjectRecord>,
    now_ms: i64,
) -> i64 {
    if cause.event_type != EventType::SyncEnd {
        return now_ms;
    }
    involved
        .filter_map(|r| r.last.time_ms())
        .max()
        .map_or(now_ms, |latest| latest.min(now_ms))
}

/// The node a block is affine to (`host:<node>`); none for no affinity or a `virtual`
/// one (`virtual:load-balancer` is not a node).
pub fn block_host(block: &CalicoBlockInfo) -> Option<&str> {
    block
        .affinity
        .strip_prefix("host:")
        .filter(|node| !node.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_compare_as_calico_compares_them() {
        assert_eq!(
            clean_handle("k8s-pod-network.abc\r\neth0"),
            "k8s-pod-network.abc"
        );
        assert_eq!(
            handle_object_name("k8s-pod-network.ABC\r\n"),
            "k8s-pod-network.abc"
        );
        assert_eq!(block_object_name("10.244.120.64/26"), "10-244-120-64-26");
        assert_eq!(block_object_name("fd00::/122"), "fd00---122");
        let windows = CalicoAllocation {
            handle_id: WINDOWS_RESERVED_HANDLE.into(),
            ..CalicoAllocation::default()
        };
        assert_eq!(handle_needed(&windows), None);
        let cooling = CalicoAllocation {
            handle_id: "h".into(),
            released_at_ms: Some(1),
            ..CalicoAllocation::default()
        };
        assert_eq!(handle_needed(&cooling), None);
    }

    #[test]
    fn a_virtual_affinity_is_no_node() {
        let block = |affinity: &str| CalicoBlockInfo {
            affinity: affinity.into(),
            ..CalicoBlockInfo::default()
        };
        assert_eq!(block_host(&block("host:node-a")), Some("node-a"));
        assert_eq!(block_host(&block("virtual:load-balancer")), None);
        assert_eq!(block_host(&block("")), None);
    }
}
