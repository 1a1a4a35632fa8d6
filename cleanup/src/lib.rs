//! Cleanup actions, one place for both callers: the collector's remediator (a signed
//! command from the analyzer, `ipaudit_collector::remediate`) and `kubectl ipaudit release` (a
//! finding of a check's report). A [`Cleanup`] says what to do to which object at which
//! uid and resourceVersion, and what must still hold; [`apply`] re-reads the target,
//! checks every precondition against the live objects, and only then writes, with the
//! API server's own preconditions (a JSON patch `test` on the resourceVersion and on the
//! entry it removes, or DELETE preconditions on uid and resourceVersion), so that an object
//! changed or recreated in between is never hit. The [`Outcome`] says what happened and
//! why: applied, dry-run (every check passed, nothing written), skipped (something no
//! longer holds; retrying does not help) or failed (the API server did not answer as
//! expected; a retry may).
//!
//! The actions, by IPAM (`kube_ovn`, `whereabouts`, `spiderpool`):
//! - kube-ovn, an IP stuck terminating whose subnet is gone: remove kube-ovn's finalizer
//!   (the IP still terminating, its subnet still the one named and still absent);
//! - kube-ovn, an orphaned IP (its subnet gone): delete it (uid and resourceVersion
//!   preconditions, the subnet still absent), then release it as above if kube-ovn's
//!   finalizer holds it;
//! - whereabouts, an IPPool allocation whose pod is gone: remove that allocation (a patch
//!   that tests the pool's resourceVersion and the allocation's podref; the pod still
//!   absent);
//! - whereabouts, an OverlappingRangeIPReservation whose pod is gone: delete it (uid and
//!   resourceVersion preconditions), while its pod is absent and no IPPool of its
//!   namespace allocates its address;
//! - spiderpool, a SpiderIPPool entry whose pod is gone: remove it from
//!   `status.allocatedIPs` (a status patch testing the resourceVersion and the entries as
//!   read, every other entry kept; the pod still absent);
//! - spiderpool, a SpiderEndpoint stuck terminating whose pod is gone: remove spiderpool's
//!   finalizer (the endpoint still terminating, its pod still absent; a patch that tests
//!   the resourceVersion and the finalizer at its index);
//! - Calico, an allocation whose pod is gone: release it from its block the way
//!   libcalico-go does (tests on the block's resourceVersion and the ordinal's sequence
//!   number; the pod still absent), then lower its handle's count or delete it at zero;
//! - Calico, an orphan IPAMHandle: delete it (uid and resourceVersion preconditions) once
//!   every block it names, re-read, carries none of its addresses;
//! - Cilium, a CiliumEndpoint whose pod is gone: delete it (uid and resourceVersion
//!   preconditions, the pod still absent).
//!
//! Report-only, by design: `duplicate-ip` and `ip-released-while-pod-alive` (which holder
//! keeps the address is a person's decision), `allocation-records-disagree` (which record
//! is wrong is), `subnet-stuck-terminating` and `subnet-deleted-before-ip` (the IPs'
//! cleanups follow from their own alerts).

pub mod api;
mod calico;
mod cilium;
mod kube_ovn;
mod spiderpool;
mod whereabouts;

use ipaudit_schemas::{CleanupAction, RemediationOutcome, Stream};
use kube::Client;

/// A write the cleanups of the remediation table make: the chart's remediation ClusterRole
/// grants exactly these (tests/helm_chart.rs compares), and the collector asks for them
/// before it starts with remediation on (`ipaudit_collector::watch::access`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write {
    /// The kind written.
    pub stream: Stream,
    /// `status` for a write to the status subresource.
    pub subresource: Option<&'static str>,
    /// The verb (`patch`, `delete`).
    pub verb: &'static str,
}

/// Every write of the remediation table, per IPAM in the order of the kind table (the
/// chart's role lists them so).
pub const WRITES: [Write; 12] = [
    // kube-ovn's finalizer off a stuck IP.
    Write {
        stream: Stream::Ip,
        subresource: None,
        verb: "patch",
    },
    // One allocation out of a whereabouts IPPool.
    Write {
        stream: Stream::IpPool,
        subresource: None,
        verb: "patch",
    },
    // A whereabouts reservation of a gone pod.
    Write {
        stream: Stream::OverlappingRangeIpReservation,
        subresource: None,
        verb: "delete",
    },
    // spiderpool's finalizer off a stuck SpiderEndpoint.
    Write {
        stream: Stream::SpiderEndpoint,
        subresource: None,
        verb: "patch",
    },
    // One entry out of a SpiderIPPool's status.
    Write {
        stream: Stream::SpiderIpPool,
        subresource: Some("status"),
        verb: "patch",
    },
    // A leaked allocation released from a Calico block.
    Write {
        stream: Stream::CalicoIpamBlock,
        subresource: None,
        verb: "patch",
    },
    // Its handle's count lowered.
    Write {
        stream: Stream::CalicoIpamHandle,
        subresource: None,
        verb: "patch",
    },
    // Its handle at zero, or an orphan handle, deleted.
    Write {
        stream: Stream::CalicoIpamHandle,
        subresource: None,
        verb: "delete",
    },
    // The same in Calico 3.32's v3 group.
    Write {
        stream: Stream::CalicoV3IpamBlock,
        subresource: None,
        verb: "patch",
    },
    Write {
        stream: Stream::CalicoV3IpamHandle,
        subresource: None,
        verb: "patch",
    },
    Write {
        stream: Stream::CalicoV3IpamHandle,
        subresource: None,
        verb: "delete",
    },
    // A CiliumEndpoint of a gone pod.
    Write {
        stream: Stream::CiliumEndpoint,
        subresource: None,
        verb: "delete",
    },
];

/// One object a cleanup acts on, exactly as the finding (or `kubectl ipaudit check`'s
/// snapshot) saw it: a cleanup acts only if it still is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Target {
    /// Its kind.
    pub stream: Stream,
    /// Its namespace; `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// The uid it must still have (metadata.uid).
    pub uid: String,
    /// The resourceVersion it must still have (metadata.resourceVersion).
    pub resource_version: String,
    /// For a pool allocation, the address in the pool.
    #[serde(default)]
    pub address: Option<String>,
}

impl Target {
    /// `IP a.default`, `IPPool kube-system/pool-a (10.0.0.5)`.
    pub fn describe(&self) -> String {
        let kind = self.stream.kind();
        let key = match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        };
        match &self.address {
            Some(address) => format!("{kind} {key} ({address})"),
            None => format!("{kind} {key}"),
        }
    }
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleanup {
    /// kube-ovn: remove kube-ovn's finalizer from an IP stuck terminating because its
    /// subnet (which must still be absent) is gone.
    ReleaseStuckIp {
        /// The IP.
        target: Target,
        /// The subnet the IP must still name, and that must still be absent.
        subnet: String,
    },
    /// kube-ovn: delete an IP whose subnet is gone, then release it if kube-ovn's finalizer
    /// holds it.
    DeleteOrphanedIp {
        /// The IP.
        target: Target,
    },
    /// spiderpool: remove spiderpool's finalizer from a SpiderEndpoint stuck terminating,
    /// its pod gone.
    ReleaseStuckEndpoint {
        /// The SpiderEndpoint.
        target: Target,
    },
    /// spiderpool: remove the entry of `address` from a SpiderIPPool's allocations, its
    /// pod gone.
    RemoveSpiderPoolEntry {
        /// The SpiderIPPool.
        target: Target,
        /// The allocated address.
        address: String,
    },
    /// whereabouts: delete an OverlappingRangeIPReservation whose pod is gone and that no
    /// IPPool allocation backs.
    DeleteReservation {
        /// The reservation.
        target: Target,
    },
    /// whereabouts: remove the allocation of `address` from an IPPool, its pod gone.
    RemovePoolAllocation {
        /// The IPPool.
        target: Target,
        /// The allocated address.
        address: String,
    },
    /// Calico: release the allocation of `address` from an IPAMBlock, its pod gone, and
    /// lower its handle's count.
    ReleaseCalicoAllocation {
        /// The IPAMBlock.
        target: Target,
        /// The allocated address.
        address: String,
    },
    /// Calico: delete an IPAMHandle whose blocks carry none of its addresses.
    DeleteOrphanHandle {
        /// The IPAMHandle.
        target: Target,
    },
    /// Cilium: delete a CiliumEndpoint whose pod is gone.
    DeleteStaleEndpoint {
        /// The CiliumEndpoint.
        target: Target,
    },
}

impl Cleanup {
    /// Its name, as `release` prints it: `remove-finalizer`, `delete`, `remove-allocation`.
    pub fn name(&self) -> &'static str {
        match self {
            Cleanup::ReleaseStuckIp { .. } | Cleanup::ReleaseStuckEndpoint { .. } => {
                "remove-finalizer"
            }
            Cleanup::DeleteOrphanedIp { .. }
            | Cleanup::DeleteReservation { .. }
            | Cleanup::DeleteOrphanHandle { .. }
            | Cleanup::DeleteStaleEndpoint { .. } => "delete",
            Cleanup::RemovePoolAllocation { .. }
            | Cleanup::RemoveSpiderPoolEntry { .. }
            | Cleanup::ReleaseCalicoAllocation { .. } => "remove-allocation",
        }
    }

    /// The cleanup an alert's typed cleanup asks for, if this module has it.
    pub fn of_alert(cleanup: &ipaudit_schemas::Cleanup) -> Option<Cleanup> {
        let target = Target {
            stream: cleanup.target_stream,
            namespace: cleanup.target_namespace.clone(),
            name: cleanup.target_name.clone(),
            uid: cleanup.target_uid.clone(),
            resource_version: cleanup.resource_version.clone(),
            address: None,
        };
        match (cleanup.action, cleanup.target_stream) {
            (CleanupAction::RemoveFinalizer, Stream::Ip) => Some(Cleanup::ReleaseStuckIp {
                target,
                subnet: cleanup.pool.clone(),
            }),
            (CleanupAction::RemoveFinalizer, Stream::SpiderEndpoint) => {
                Some(Cleanup::ReleaseStuckEndpoint { target })
            }
            (CleanupAction::Delete, Stream::OverlappingRangeIpReservation) => {
                Some(Cleanup::DeleteReservation { target })
            }
            (CleanupAction::RemoveAllocation, Stream::SpiderIpPool) => {
                Some(Cleanup::RemoveSpiderPoolEntry {
                    target,
                    address: cleanup.address.clone()?,
                })
            }
            (CleanupAction::RemoveAllocation, Stream::IpPool) => {
                Some(Cleanup::RemovePoolAllocation {
                    target,
                    address: cleanup.address.clone()?,
                })
            }
            (
                CleanupAction::RemoveAllocation,
                Stream::CalicoIpamBlock | Stream::CalicoV3IpamBlock,
            ) => Some(Cleanup::ReleaseCalicoAllocation {
                target,
                address: cleanup.address.clone()?,
            }),
            (CleanupAction::Delete, Stream::CalicoIpamHandle | Stream::CalicoV3IpamHandle) => {
                Some(Cleanup::DeleteOrphanHandle { target })
            }
            (CleanupAction::Delete, Stream::CiliumEndpoint) => {
                Some(Cleanup::DeleteStaleEndpoint { target })
            }
            _ => None,
        }
    }

    /// The object it acts on.
    pub fn target(&self) -> &Target {
        match self {
            Cleanup::ReleaseStuckIp { target, .. }
            | Cleanup::DeleteOrphanedIp { target }
            | Cleanup::ReleaseStuckEndpoint { target }
            | Cleanup::DeleteReservation { target }
            | Cleanup::RemovePoolAllocation { target, .. }
            | Cleanup::RemoveSpiderPoolEntry { target, .. }
            | Cleanup::ReleaseCalicoAllocation { target, .. }
            | Cleanup::DeleteOrphanHandle { target }
            | Cleanup::DeleteStaleEndpoint { target } => target,
        }
    }
}

/// Whether a cleanup writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every check runs; nothing is written.
    DryRun,
    /// Checks pass, then the write.
    Apply,
}

/// What happened to one cleanup.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Applied, dry-run, skipped or failed.
    pub outcome: RemediationOutcome,
    /// Why, for a person.
    pub reason: String,
    /// The finalizer removed (or that would be), once the checks reached it.
    pub finalizer: Option<String>,
    /// The target's resourceVersion as last read.
    pub resource_version: String,
}

impl Outcome {
    /// An outcome without a finalizer.
    pub fn new(outcome: RemediationOutcome, reason: String, rv: &str) -> Self {
        Outcome {
            outcome,
            reason,
            finalizer: None,
            resource_version: rv.to_owned(),
        }
    }

    /// Not acted on: something no longer holds (retrying does not help).
    pub fn skipped(reason: String, rv: &str) -> Self {
        Self::new(RemediationOutcome::Skipped, reason, rv)
    }

    /// The API server did not answer as expected (a retry may help).
    pub fn failed(reason: String, rv: &str) -> Self {
        Self::new(RemediationOutcome::Failed, reason, rv)
    }

    /// Whether trying again later may change it.
    pub fn is_retryable(&self) -> bool {
        self.outcome == RemediationOutcome::Failed
    }
}

/// What the dry runs earlier in one plan would have changed, so that a later dry run
/// checks the cluster as the apply would find it: a whereabouts reservation is backed by
/// its pool's allocation until that allocation's own cleanup, earlier in the plan, has
/// removed it (`kubectl ipaudit release` without `--apply`).
#[derive(Debug, Default)]
pub struct Planned {
    /// (namespace, pool, address) of the IPPool allocations a dry run would have removed.
    removed_allocations: std::collections::HashSet<(String, String, String)>,
}

impl Planned {
    /// Takes the outcome of `cleanup`: a dry run that passed counts as done for the
    /// cleanups after it.
    pub fn note(&mut self, cleanup: &Cleanup, outcome: &Outcome) {
        if outcome.outcome != RemediationOutcome::DryRun {
            return;
        }
        if let Cleanup::RemovePoolAllocation { target, address } = cleanup {
            self.removed_allocations.insert((
                target.namespace.clone().unwrap_or_default(),
                target.name.clone(),
                address.clone(),
            ));
        }
    }

    /// Whether a dry run earlier in the plan would have removed the allocation of
    /// `address` from the IPPool `namespace/pool`.
    fn allocation_removed(&self, namespace: &str, pool: &str, address: &str) -> bool {
        self.removed_allocations.contains(&(
            namespace.to_owned(),
            pool.to_owned(),
            address.to_owned(),
        ))
    }
}

/// Checks `cleanup`'s preconditions against the live objects and, in [`Mode::Apply`],
/// makes its change.
pub async fn apply(client: &Client, mode: Mode, cleanup: &Cleanup) -> Outcome {
    apply_after(client, mode, cleanup, &Planned::default()).await
}

/// [`apply`], as the step of a plan after the cleanups `earlier` has noted.
pub async fn apply_after(
    client: &Client,
    mode: Mode,
    cleanup: &Cleanup,
    earlier: &Planned,
) -> Outcome {
    match cleanup {
        Cleanup::ReleaseStuckIp { target, subnet } => {
            kube_ovn::release_stuck_ip(client, mode, target, subnet).await
        }
        Cleanup::DeleteOrphanedIp { target } => {
            kube_ovn::delete_orphaned_ip(client, mode, target).await
        }
        Cleanup::ReleaseStuckEndpoint { target } => {
            spiderpool::release_stuck_endpoint(client, mode, target).await
        }
        Cleanup::RemovePoolAllocation { target, address } => {
            whereabouts::remove_pool_allocation(client, mode, target, address).await
        }
        Cleanup::DeleteReservation { target } => {
            whereabouts::delete_reservation(client, mode, target, earlier).await
        }
        Cleanup::RemoveSpiderPoolEntry { target, address } => {
            spiderpool::remove_pool_entry(client, mode, target, address).await
        }
        Cleanup::ReleaseCalicoAllocation { target, address } => {
            calico::release_allocation(client, mode, target, address).await
        }
        Cleanup::DeleteOrphanHandle { target } => {
            calico::delete_orphan_handle(client, mode, target).await
        }
        Cleanup::DeleteStaleEndpoint { target } => {
            cilium::delete_stale_endpoint(client, mode, target).await
        }
    }
}
