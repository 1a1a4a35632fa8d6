//! Exact takeover: the owner of a partition hands its analysis over through a compacted
//! checkpoints topic, and the member that takes the partition over (after a rebalance, or
//! a member's death) resumes from it instead of rebuilding from a snapshot.
//!
//! The local SQLite checkpoint stays the fast copy for a member's own restart. Every
//! `--handover-interval` (for the partitions whose analysis moved), when a revocation
//! takes partitions away, and at shutdown, the owner writes each partition's handover
//! ([`payload`], [`outgoing`], [`topic`]): every cluster's analysis as checkpointed, the
//! partition's next offset, its rebuild points, and the alert transitions some sink has
//! not yet delivered. The member that is given the partition without newer state of its
//! own reads it in the rebalance callback ([`topic::HandoverReader`], [`incoming`]),
//! restores the analyses and consumes from that offset: what the previous owner analysed
//! after its last write is read again and makes the same transitions (dropped by id), and
//! the undelivered transitions go into its own outbox, so its sinks deliver them under the
//! same transition ids (the `Idempotency-Key`s). Without a handover (no topic, none
//! written yet, unreadable) the partition is rebuilt from a snapshot as before
//! ([`crate::live::start_offset`]).

pub mod incoming;
pub mod outgoing;
pub mod payload;
pub mod topic;

pub use incoming::TakenOver;
pub use outgoing::{Checkpointed, Outgoing, PartitionAtCheckpoint};
pub use payload::{ClusterState, Handover};
pub use topic::{HandoverError, HandoverReader, HandoverWriter, Taken, Written};
