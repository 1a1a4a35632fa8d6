//! What the state remembers of what is gone, bounded: the last deletion of each pool
//! name, recently gone pods (for the grace periods of the rules), and tombstones of
//! deleted objects, so that a late event never brings one back.

use ipaudit_schemas::Stream;

use super::{ClusterState, EventRef, Gone};

/// Deleted objects remembered (their uids), the oldest forgotten first.
pub(super) const TOMBSTONES: usize = 65_536;
/// Gone pods remembered.
pub(super) const GONE_PODS: usize = 65_536;
/// Pool deletions remembered.
pub(super) const POOL_DELETIONS: usize = 16_384;

impl ClusterState {
    pub(super) fn remember_pool_deletion(&mut self, stream: Stream, name: &str, at: EventRef) {
        if self.pool_deletion_order.len() == POOL_DELETIONS {
            if let Some((stream, oldest, rv)) = self.pool_deletion_order.pop_front() {
                // Only if that pool was not deleted again since.
                if let Some(deletions) = self.pool_deletions.get_mut(&stream) {
                    if deletions.get(&oldest).is_some_and(|d| d.rv == rv) {
                        deletions.remove(&oldest);
                    }
                }
            }
        }
        self.pool_deletion_order
            .push_back((stream, name.to_owned(), at.rv));
        self.pool_deletions
            .entry(stream)
            .or_default()
            .insert(name.to_owned(), at);
    }

    /// `at` is the event that says so; its name is the pod's (and shared with its key).
    pub(super) fn remember_gone_pod(&mut self, uid: &str, at: EventRef) {
        if self.gone_order.len() == GONE_PODS {
            if let Some((oldest, rv)) = self.gone_order.pop_front() {
                // Only if that name did not go again since.
                if self.gone_pods.get(&oldest).is_some_and(|g| g.at.rv == rv) {
                    self.gone_pods.remove(&oldest);
                }
            }
        }
        self.undated_gone_pods |= at.time_ms().is_none();
        self.gone_order.push_back((at.name.clone(), at.rv));
        self.gone_pods.insert(
            at.name.clone(),
            Gone {
                uid: uid.to_owned(),
                at,
            },
        );
    }

    pub(super) fn bury(&mut self, uid: &str, rv: i64) {
        if uid.is_empty() {
            return;
        }
        if self.tombstone_order.len() == TOMBSTONES {
            if let Some(oldest) = self.tombstone_order.pop_front() {
                self.tombstones.remove(&oldest);
            }
        }
        self.tombstone_order.push_back(uid.to_owned());
        self.tombstones.insert(uid.to_owned(), rv);
    }
}
