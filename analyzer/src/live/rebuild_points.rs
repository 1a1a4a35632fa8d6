//! Where a member that takes a partition over must rebuild it from, so that every alert
//! still firing fires again under its id and is resolved when its leak ends.
//!
//! A member without state for a partition rebuilds from a snapshot in the topic (see
//! [`crate::live::start_offset`]). A snapshot taken after an incident shows its outcome
//! (an IP naming a subnet that is not there), not the deletion that made it: a rebuild from
//! there reports the leak again under another rule and id, and the alert the previous
//! owner sent is never resolved. So the owner tracks, for each alert still firing, the
//! offset of the earliest message its firing may rest on, and commits the least of them
//! per partition with the partition's offset, in the commit's metadata
//! (`rebuild-from=<offset>`). The next owner starts from the latest snapshot at or before
//! it: the incident is read again, the alert fires again under the same transition id
//! (the sinks' idempotency keys drop it), and its resolution follows.
//!
//! An event may be held back by the reorder buffer and make an alert fire while a later
//! message is consumed (or a tick runs). So the owner keeps, per cluster, the offsets of
//! the messages whose events may still be held, by resourceVersion (the buffer releases in
//! version order: what lies below the lowest version it holds is released); the alerts of
//! a turn rest on the earliest message whose event that turn released. A busy cluster
//! whose buffer is never empty thus still rests each alert on a recent message.
//!
//! An alert a grace period fires rests on the message consumed when it fired. A rebuild
//! from a snapshot taken while its grace period ran starts it again from the snapshot's
//! objects: the same alert (same alert id, so the same incident, resolved alike) may fire
//! at another resourceVersion, hence under another transition id.

use std::collections::{BTreeMap, HashMap};

use ipaudit_schemas::{Alert, AlertStatus};

use crate::analysis::engine::Output;

/// The prefix of a commit's metadata that carries a partition's rebuild point.
const METADATA_PREFIX: &str = "rebuild-from=";

/// What a point is about, in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PointKind {
    /// An alert still firing (keyed by alert id).
    Firing,
    /// A cluster whose analysis holds events back (keyed by cluster id).
    Held,
}

impl PointKind {
    /// Its name in the store.
    pub fn as_str(self) -> &'static str {
        match self {
            PointKind::Firing => "firing",
            PointKind::Held => "held",
        }
    }

    /// The kind named `name` in the store.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "firing" => Some(PointKind::Firing),
            "held" => Some(PointKind::Held),
            _ => None,
        }
    }
}

/// One point as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PointRow {
    /// What it is about.
    pub kind: PointKind,
    /// The alert id (firing) or the cluster id (held).
    pub key: String,
    /// The partition.
    pub partition: i32,
    /// The earliest message it rests on.
    pub offset: i64,
    /// Of a cluster's held messages: the highest resourceVersion among them (they are all
    /// released once the reorder buffer holds nothing at or below it).
    pub version: Option<i64>,
}

/// A partition and an offset in it.
type Position = (i32, i64);

/// The messages of one cluster whose events the reorder buffer may still hold.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    partition: i32,
    /// resourceVersion -> the earliest offset of a message at that version.
    offsets: BTreeMap<i64, i64>,
}

/// The rebuild points of the partitions this member analyses (see the module doc).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RebuildPoints {
    /// Per alert still firing: where the earliest message its firing may rest on is.
    firing: HashMap<String, Position>,
    /// Per cluster whose analysis holds events back: the messages they came in.
    held: HashMap<String, Held>,
}

impl RebuildPoints {
    /// The points as stored. A cluster's held messages come back as one, at the earliest
    /// offset and the highest version of those saved: released only when all of them are.
    pub fn from_rows(rows: impl IntoIterator<Item = PointRow>) -> Self {
        let mut points = RebuildPoints::default();
        points.adopt(rows);
        points
    }

    /// Takes points as stored (or handed over by a partition's previous owner, see
    /// [`crate::live::handover`]) beside those it has.
    pub fn adopt(&mut self, rows: impl IntoIterator<Item = PointRow>) {
        for row in rows {
            match row.kind {
                PointKind::Firing => {
                    self.firing.insert(row.key, (row.partition, row.offset));
                }
                PointKind::Held => {
                    let version = row.version.unwrap_or(i64::MAX);
                    self.held.insert(
                        row.key,
                        Held {
                            partition: row.partition,
                            offsets: BTreeMap::from([(version, row.offset)]),
                        },
                    );
                }
            }
        }
    }

    /// The points to store: each firing alert's, and one per cluster holding events back
    /// (see [`RebuildPoints::from_rows`]).
    pub fn rows(&self) -> impl Iterator<Item = PointRow> + '_ {
        let firing = self
            .firing
            .iter()
            .map(|(id, (partition, offset))| PointRow {
                kind: PointKind::Firing,
                key: id.clone(),
                partition: *partition,
                offset: *offset,
                version: None,
            });
        let held = self.held.iter().filter_map(|(cluster, held)| {
            Some(PointRow {
                kind: PointKind::Held,
                key: cluster.clone(),
                partition: held.partition,
                offset: held.offsets.values().min().copied()?,
                version: held.offsets.keys().next_back().copied(),
            })
        });
        firing.chain(held)
    }

    /// `alert` was raised by a turn whose earliest message is at `point`: a firing alert
    /// keeps the earliest point its firing may rest on; a resolved one needs none.
    pub fn transition(&mut self, alert: &Alert, point: Position) {
        match alert.status {
            AlertStatus::Firing => {
                let kept = self.firing.entry(alert.alert_id.clone()).or_insert(point);
                if kept.0 == point.0 {
                    kept.1 = kept.1.min(point.1);
                }
            }
            AlertStatus::Resolved => {
                self.firing.remove(&alert.alert_id);
            }
        }
    }

    /// After `cluster`'s analysis took a turn, with `last` the newest message of its
    /// partition: `consumed` is the resourceVersion of that message's event when the turn
    /// analysed one (a tick analyses none), `lowest_held` the lowest version the reorder
    /// buffer holds after it. The messages whose events it released rest the alerts it
    /// raised (`outputs`) on the earliest of them; an alert of a turn that released none
    /// (a grace period's) rests on `last`.
    pub fn turned(
        &mut self,
        cluster: &str,
        last: Position,
        consumed: Option<i64>,
        lowest_held: Option<i64>,
        outputs: &[Output],
    ) {
        let (partition, offset) = last;
        if let Some(version) = consumed {
            // A lookup, not `entry`: the cluster's name is copied only when it starts holding.
            if !self.held.contains_key(cluster) {
                let offsets = BTreeMap::new();
                self.held
                    .insert(cluster.to_owned(), Held { partition, offsets });
            }
            if let Some(held) = self.held.get_mut(cluster) {
                let earliest = held.offsets.entry(version).or_insert(offset);
                *earliest = (*earliest).min(offset);
            }
        }
        // A new epoch releases everything held before it.
        let new_epoch = outputs.iter().any(|o| matches!(o, Output::NewEpoch(_)));
        // Nothing held: everything is released.
        let bound = lowest_held.filter(|_| !new_epoch);
        let mut released: Option<i64> = None;
        if let Some(held) = self.held.get_mut(cluster) {
            while let Some(entry) = held.offsets.first_entry() {
                if bound.is_some_and(|lowest| *entry.key() >= lowest) {
                    break;
                }
                let offset = entry.remove();
                released = Some(released.map_or(offset, |r| r.min(offset)));
            }
            if held.offsets.is_empty() {
                self.held.remove(cluster);
            }
        }
        let point = (partition, released.map_or(offset, |r| r.min(offset)));
        for output in outputs {
            if let Output::Alert(alert) = output {
                self.transition(alert, point);
            }
        }
    }

    /// Forgets what `partition`'s analyses had: they are dropped, to be rebuilt.
    pub fn forget_partition(&mut self, partition: i32) {
        self.firing.retain(|_, (p, _)| *p != partition);
        self.held.retain(|_, held| held.partition != partition);
    }

    /// The offset a new owner of `partition` must rebuild from, if an alert of it fires.
    pub fn of_partition(&self, partition: i32) -> Option<i64> {
        self.firing
            .values()
            .filter(|(p, _)| *p == partition)
            .map(|(_, offset)| *offset)
            .min()
    }
}

/// The commit metadata that carries rebuild point `offset`.
pub fn to_metadata(offset: i64) -> String {
    format!("{METADATA_PREFIX}{offset}")
}

/// The rebuild point a commit's metadata carries, if it carries one (another tool's
/// metadata, or none, carries none).
pub fn from_metadata(metadata: &str) -> Option<i64> {
    metadata
        .strip_prefix(METADATA_PREFIX)?
        .parse()
        .ok()
        .filter(|offset| *offset >= 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::alerts::sample_alert;

    fn alert(id: &str, status: AlertStatus) -> Alert {
        sample_alert(id, "subnet-deleted-before-ip", status, "7")
    }

    #[test]
    fn a_partition_rebuilds_from_its_oldest_alert_still_firing() {
        let mut points = RebuildPoints::default();
        assert_eq!(points.of_partition(0), None, "nothing fires: no point");
        points.transition(&alert("a", AlertStatus::Firing), (0, 40));
        points.transition(&alert("b", AlertStatus::Firing), (0, 70));
        points.transition(&alert("c", AlertStatus::Firing), (1, 10));
        assert_eq!(points.of_partition(0), Some(40));
        assert_eq!(points.of_partition(1), Some(10));
        // The same transition read again later (a replay) keeps its first point.
        points.transition(&alert("a", AlertStatus::Firing), (0, 90));
        assert_eq!(points.of_partition(0), Some(40));
        points.transition(&alert("a", AlertStatus::Resolved), (0, 95));
        assert_eq!(
            points.of_partition(0),
            Some(70),
            "a resolved: b is the oldest"
        );
        points.transition(&alert("b", AlertStatus::Resolved), (0, 96));
        assert_eq!(points.of_partition(0), None);
    }

    #[test]
    fn an_alert_fired_by_an_event_held_back_rests_on_the_earliest_message_released() {
        let mut points = RebuildPoints::default();
        let fired = |id| vec![Output::Alert(alert(id, AlertStatus::Firing))];
        // The cluster ("c", of sample alerts) holds its events of offsets 12 (version 100)
        // and 13 (version 101) back...
        points.turned("c", (0, 12), Some(100), Some(100), &[]);
        points.turned("c", (0, 13), Some(101), Some(100), &[]);
        // ...until the message of offset 14 releases them, and the alert fires.
        points.turned("c", (0, 14), Some(102), None, &fired("a"));
        assert_eq!(points.of_partition(0), Some(12));
        // Once nothing is held, the next alert rests on its own message.
        points.turned("c", (0, 20), Some(110), None, &fired("b"));
        points.transition(&alert("a", AlertStatus::Resolved), (0, 20));
        assert_eq!(points.of_partition(0), Some(20));
        // A tick that releases what was held makes an alert that rests on the first held.
        points.turned("c", (0, 25), Some(120), Some(120), &[]);
        points.turned("c", (0, 30), None, None, &fired("d"));
        points.transition(&alert("b", AlertStatus::Resolved), (0, 31));
        assert_eq!(points.of_partition(0), Some(25));
    }

    #[test]
    fn in_a_cluster_that_always_holds_something_an_alert_rests_on_what_its_turn_released() {
        let mut points = RebuildPoints::default();
        let fired = |id| vec![Output::Alert(alert(id, AlertStatus::Firing))];
        // A message every turn, each released two turns later: the buffer is never empty.
        for offset in 0..1_000 {
            points.turned(
                "c",
                (0, offset),
                Some(offset + 500),
                Some(offset + 499),
                &[],
            );
        }
        points.turned("c", (0, 1_000), Some(1_500), Some(1_499), &fired("a"));
        assert_eq!(
            points.of_partition(0),
            Some(998),
            "the message whose event this turn released, not the first one ever held"
        );
        assert!(
            points
                .rows()
                .any(|r| r.kind == PointKind::Held && r.offset == 999),
            "what is held now rests on offset 999 on"
        );
    }

    #[test]
    fn a_new_epoch_releases_everything_held() {
        let mut points = RebuildPoints::default();
        points.turned("c", (0, 5), Some(900), Some(900), &[]);
        let epoch_and_alert = [
            Output::NewEpoch(crate::analysis::reorder::EpochChange {
                epoch: 1,
                collector_id: "c1".into(),
                stream: ipaudit_schemas::Stream::Ip,
                previous_rv: 900,
                rv: 3,
            }),
            Output::Alert(alert("a", AlertStatus::Firing)),
        ];
        // Versions start over: 3 is held, below the 900 released with the epoch.
        points.turned("c", (0, 6), Some(3), Some(3), &epoch_and_alert);
        assert_eq!(points.of_partition(0), Some(5));
    }

    #[test]
    fn the_points_survive_the_store_and_a_dropped_partition_loses_its_own() {
        let mut points = RebuildPoints::default();
        points.turned("c", (2, 5), Some(50), Some(50), &[]);
        points.turned("c", (2, 6), Some(60), Some(50), &[]);
        points.transition(&alert("a", AlertStatus::Firing), (2, 8));
        points.transition(&alert("b", AlertStatus::Firing), (3, 9));
        let mut again = RebuildPoints::from_rows(points.rows().collect::<Vec<_>>());
        assert_eq!(again.of_partition(2), Some(8));
        assert_eq!(again.of_partition(3), Some(9));
        // The held messages come back as one, released only when both are.
        again.turned("c", (2, 7), None, Some(60), &[]);
        assert_eq!(
            again
                .rows()
                .find(|r| r.kind == PointKind::Held)
                .map(|r| r.offset),
            Some(5)
        );
        points.forget_partition(2);
        assert_eq!(points.of_partition(2), None);
        assert_eq!(points.of_partition(3), Some(9));
        assert_eq!(
            points.rows().count(),
            1,
            "the held point of partition 2 went too"
        );
    }

    #[test]
    fn the_metadata_carries_the_point_and_anything_else_carries_none() {
        assert_eq!(from_metadata(&to_metadata(1234)), Some(1234));
        for other in [
            "",
            "rebuild-from=",
            "rebuild-from=-3",
            "rebuild-from=x",
            "owner=a",
        ] {
            assert_eq!(from_metadata(other), None, "{other:?}");
        }
    }
}
