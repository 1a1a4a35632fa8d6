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
//! message is consumed; an alert's offset is therefore the earliest message consumed since
//! its cluster's analysis last held nothing back.
//!
//! An alert a grace period fires rests on the message consumed when it fired. A rebuild
//! from a snapshot taken while its grace period ran starts it again from the snapshot's
//! objects: the same alert (same alert id, so the same incident, resolved alike) may fire
//! at another resourceVersion, hence under another transition id.

use std::collections::HashMap;

use ipaudit_schemas::{Alert, AlertStatus};

use crate::analysis::engine::Output;

/// The prefix of a commit's metadata that carries a partition's rebuild point.
const METADATA_PREFIX: &str = "rebuild-from=";

/// What a point is about, in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// One point as stored: kind, key, partition, offset.
pub type PointRow = (PointKind, String, i32, i64);

/// A partition and an offset in it.
type Position = (i32, i64);

/// The rebuild points of the partitions this member analyses (see the module doc).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RebuildPoints {
    /// Per alert still firing: where the earliest message its firing may rest on is.
    firing: HashMap<String, Position>,
    /// Per cluster whose analysis holds events back: the earliest message consumed since
    /// it last held nothing.
    held_since: HashMap<String, Position>,
}

impl RebuildPoints {
    /// The points as stored.
    pub fn from_rows(rows: impl IntoIterator<Item = PointRow>) -> Self {
        let mut points = RebuildPoints::default();
        for (kind, key, partition, offset) in rows {
            let map = match kind {
                PointKind::Firing => &mut points.firing,
                PointKind::Held => &mut points.held_since,
            };
            map.insert(key, (partition, offset));
        }
        points
    }

    /// The points to store.
    pub fn rows(&self) -> impl Iterator<Item = PointRow> + '_ {
        let firing = self.firing.iter().map(|p| (PointKind::Firing, p));
        let held = self.held_since.iter().map(|p| (PointKind::Held, p));
        firing
            .chain(held)
            .map(|(kind, (key, (partition, offset)))| (kind, key.clone(), *partition, *offset))
    }

    /// `alert` was raised while `last` (`cluster`'s partition and the last offset consumed
    /// in it) was the newest message: a firing alert keeps the earliest point its firing
    /// may rest on; a resolved one needs none.
    pub fn transition(&mut self, alert: &Alert, last: Position) {
        match alert.status {
            AlertStatus::Firing => {
                let point = match self.held_since.get(&alert.cluster_id) {
                    Some(&(partition, held)) if partition == last.0 => {
                        (partition, held.min(last.1))
                    }
                    _ => last,
                };
                self.firing.entry(alert.alert_id.clone()).or_insert(point);
            }
            AlertStatus::Resolved => {
                self.firing.remove(&alert.alert_id);
            }
        }
    }

    /// After `cluster`'s analysis took a turn (a message analysed, or a tick) with `last`
    /// the newest message of its partition: the points of the alerts it raised
    /// (`outputs`), and whether it now holds events back (`holds`; the earliest of them is
    /// at `last` when it held none before).
    pub fn turned(&mut self, cluster: &str, last: Position, outputs: &[Output], holds: bool) {
        for output in outputs {
            if let Output::Alert(alert) = output {
                self.transition(alert, last);
            }
        }
        match (holds, self.held_since.contains_key(cluster)) {
            (true, false) => {
                self.held_since.insert(cluster.to_owned(), last);
            }
            (false, true) => {
                self.held_since.remove(cluster);
            }
            _ => {}
        }
    }

    /// Forgets what `partition`'s analyses had: they are dropped, to be rebuilt.
    pub fn forget_partition(&mut self, partition: i32) {
        self.firing.retain(|_, (p, _)| *p != partition);
        self.held_since.retain(|_, (p, _)| *p != partition);
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
    fn an_alert_fired_by_an_event_held_back_rests_on_the_earliest_message_held() {
        let mut points = RebuildPoints::default();
        let fired = |id| vec![Output::Alert(alert(id, AlertStatus::Firing))];
        // The cluster ("c", of sample alerts) holds its event of offset 12 back, and 13...
        points.turned("c", (0, 12), &[], true);
        points.turned("c", (0, 13), &[], true);
        // ...until the one of offset 14 releases them, and the alert fires.
        points.turned("c", (0, 14), &fired("a"), false);
        assert_eq!(points.of_partition(0), Some(12));
        // Once nothing is held, the next alert rests on its own message.
        points.turned("c", (0, 20), &fired("b"), false);
        points.transition(&alert("a", AlertStatus::Resolved), (0, 20));
        assert_eq!(points.of_partition(0), Some(20));
        // A tick that releases what was held makes an alert that rests on the first held.
        points.turned("c", (0, 25), &[], true);
        points.turned("c", (0, 30), &fired("d"), false);
        points.transition(&alert("b", AlertStatus::Resolved), (0, 31));
        assert_eq!(points.of_partition(0), Some(25));
    }

    #[test]
    fn the_points_survive_the_store_and_a_dropped_partition_loses_its_own() {
        let mut points = RebuildPoints::default();
        points.turned("c", (2, 5), &[], true);
        points.transition(&alert("a", AlertStatus::Firing), (2, 8));
        points.transition(&alert("b", AlertStatus::Firing), (3, 9));
        let again = RebuildPoints::from_rows(points.rows().collect::<Vec<_>>());
        assert_eq!(again, points);
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
