//! One snapshot of the cluster: every served kind of the table listed in pages (`limit` and
//! `continue`, read-only), each list framed exactly as the collector's relist frames one —
//! `SYNC_START`, the objects as `ADDED` events, `SYNC_END` at the list's resourceVersion —
//! so that the analyzer takes each as a complete list of its kind.
//!
//! A list says what is, not when it became so. The events therefore carry no observation
//! time: an object's event time is its own (last update, deletion or creation timestamp),
//! and the snapshot's time is history's "now" (see [`crate::check`]). A grace period thus
//! runs from the last change the object shows, which is what one look at a cluster can
//! prove.
//!
//! Pools (Subnets, IPPools, SpiderIPPools) are listed last: a pool created while the
//! others were listed is then seen, and a record naming it is not taken for an orphan.

use ipaudit_analyzer::analysis::state::holdings::is_pool;
use ipaudit_collector::watch::event::Stamp;
use ipaudit_runtime::clock::now_ms;
use ipaudit_runtime::kube::PagedList;
use ipaudit_schemas::{EventType, KindSpec, Stream, WatchEvent};
use kube::Client;
use serde::{Deserialize, Serialize};
use tracing::{info, warn, Instrument};

/// One kind's list, as the report records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedKind {
    /// `ips.kubeovn.io/v1`.
    pub resource: String,
    /// The list's resourceVersion.
    pub resource_version: String,
    /// Objects listed.
    pub objects: usize,
}

/// The events of a snapshot and what was listed.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Every list, framed, in listing order.
    pub events: Vec<WatchEvent>,
    /// One entry per kind listed.
    pub lists: Vec<ListedKind>,
    /// Objects that were not Kubernetes objects at all (skipped, counted).
    pub unreadable: u64,
    /// When the last list ended: the snapshot's "now", Unix ms.
    pub taken_at_ms: i64,
}

/// Why a snapshot could not be taken. Listing again may help for every variant except a
/// 403 (the credentials may not list the kind).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// A list request failed.
    #[error("cannot list {resource}")]
    List {
        /// The resource.
        resource: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
}

impl SnapshotError {
    /// Whether listing again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            SnapshotError::List {
                source: kube::Error::Api(status),
                ..
            } => status.code != 403 && status.code != 401,
            SnapshotError::List { .. } => true,
        }
    }
}

/// The order kinds are listed in: everything else first, then Pods, then pools.
fn listing_order(kinds: &[&'static KindSpec]) -> Vec<&'static KindSpec> {
    let mut ordered = kinds.to_vec();
    ordered.sort_by_key(|k| match k.stream {
        stream if is_pool(stream) => 2,
        Stream::Pod => 1,
        _ => 0,
    });
    ordered
}

/// Lists every kind, `page_size` objects per request.
pub async fn take(
    client: &Client,
    kinds: &[&'static KindSpec],
    stamp: &Stamp,
    page_size: u32,
) -> Result<Snapshot, SnapshotError> {
    let mut snapshot = Snapshot::default();
    for kind in listing_order(kinds) {
        list_kind(client, kind, stamp, page_size, &mut snapshot).await?;
    }
    snapshot.taken_at_ms = now_ms();
    Ok(snapshot)
}

/// One kind, framed as a complete list.
async fn list_kind(
    client: &Client,
    kind: &'static KindSpec,
    stamp: &Stamp,
    page_size: u32,
    snapshot: &mut Snapshot,
) -> Result<(), SnapshotError> {
    let resource = ipaudit_collector::watch::discovery::served_name(kind);
    let stream = kind.stream;
    let span = tracing::info_span!("list", cluster = %stamp.cluster_id, stream = %stream);
    list_pages(client, kind, stamp, page_size, snapshot, resource)
        .instrument(span)
        .await
}

/// The pages of one kind's list, framed.
async fn list_pages(
    client: &Client,
    kind: &'static KindSpec,
    stamp: &Stamp,
    page_size: u32,
    snapshot: &mut Snapshot,
    resource: String,
) -> Result<(), SnapshotError> {
    let stream = kind.stream;
    let mut sequence = 0;
    let mut push = |snapshot: &mut Snapshot, mut event: WatchEvent| {
        sequence += 1;
        event.sequence = sequence;
        event.observed_at_ms = None;
        snapshot.events.push(event);
    };
    // As the collector's first list: it starts from version "0".
    push(snapshot, stamp.marker(stream, EventType::SyncStart, "0", 0));
    let mut list = PagedList::new(client.clone(), kind.collection_path(), page_size);
    let mut objects = 0;
    while let Some(page) = list.next_page().await {
        let items = page.map_err(|source| SnapshotError::List {
            resource: resource.clone(),
            source,
        })?;
        for item in &items {
            match stamp.object_event(stream, EventType::Added, item, 0) {
                Ok((event, problems)) => {
                    if !problems.is_empty() {
                        let fields: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
                        warn!(object = %event.object_key(), resource_version = %event.resource_version, ?fields,
                            "object with unusable fields analysed with what could be read");
                    }
                    objects += 1;
                    push(snapshot, event);
                }
                Err(error) => {
                    snapshot.unreadable += 1;
                    warn!(%error, %resource, "object that is not a Kubernetes object skipped");
                }
            }
        }
    }
    let list_rv = list.resource_version().unwrap_or("0").to_owned();
    info!(%resource, resource_version = %list_rv, objects, "listed");
    push(
        snapshot,
        stamp.marker(stream, EventType::SyncEnd, &list_rv, 0),
    );
    snapshot.lists.push(ListedKind {
        resource,
        resource_version: list_rv,
        objects,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_schemas::KINDS;

    #[test]
    fn pools_are_listed_last_and_pods_before_them() {
        let order: Vec<Stream> = listing_order(&KINDS.iter().collect::<Vec<_>>())
            .iter()
            .map(|k| k.stream)
            .collect();
        let pod = order.iter().position(|s| *s == Stream::Pod).unwrap();
        for (i, stream) in order.iter().enumerate() {
            if is_pool(*stream) {
                assert!(i > pod, "{order:?}");
            } else if *stream != Stream::Pod {
                assert!(i < pod, "{order:?}");
            }
        }
    }
}
