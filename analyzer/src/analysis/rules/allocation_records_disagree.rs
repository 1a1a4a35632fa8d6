//! `allocation-records-disagree`: the two records of one allocation disagree for longer
//! than a grace period: a whereabouts OverlappingRangeIPReservation without the matching
//! pool allocation (same address, same pod) or the reverse (#409, #712); a spiderpool pool
//! entry without a SpiderEndpoint of that pod uid holding that address, or the reverse
//! (#2517, #4916). Judged only once a complete list of both kinds was seen, so that a
//! recording without one of them says nothing. Resolved when they agree again.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashSet as HashSet;

use ipaudit_schemas::{Severity, Stream};
use serde::{Deserialize, Serialize};

use super::{duration_text, evidence, Change, Context, Deadlines, Rule};
use crate::analysis::alerts::Finding;
use crate::analysis::state::holdings;
use crate::analysis::state::{ClusterState, EventRef, Holding, Scope};

const NAME: &str = "allocation-records-disagree";

/// The two records that must agree, per IPAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pair {
    /// IPPool allocations and OverlappingRangeIPReservations.
    Whereabouts,
    /// SpiderIPPool entries and SpiderEndpoints.
    Spiderpool,
}

impl Pair {
    fn of(stream: Stream) -> Option<Pair> {
        match stream {
            Stream::IpPool | Stream::OverlappingRangeIpReservation => Some(Pair::Whereabouts),
            Stream::SpiderIpPool | Stream::SpiderEndpoint => Some(Pair::Spiderpool),
            _ => None,
        }
    }

    fn streams(self) -> (Stream, Stream) {
        match self {
            Pair::Whereabouts => (Stream::IpPool, Stream::OverlappingRangeIpReservation),
            Pair::Spiderpool => (Stream::SpiderIpPool, Stream::SpiderEndpoint),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Pair::Whereabouts => "whereabouts",
            Pair::Spiderpool => "spiderpool",
        }
    }
}

/// Rule 8.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct AllocationRecordsDisagree {
    /// Disagreements seen, by unit (`<ipam>|<scope>|<address>`), since when.
    open: BTreeMap<String, i64>,
    /// When each one's grace ends.
    wake: Deadlines,
}

/// What each side says of one address: owners (whereabouts: podref; spiderpool: pod uid).
struct Sides {
    first: BTreeSet<String>,
    second: BTreeSet<String>,
    evidence: Vec<(EventRef, String)>,
}

fn sides(state: &ClusterState, pair: Pair, scope: &str, address: &str) -> Sides {
    let (first_stream, second_stream) = pair.streams();
    let mut sides = Sides {
        first: BTreeSet::new(),
        second: BTreeSet::new(),
        evidence: Vec::new(),
    };
    for (key, record) in state.records_holding(address) {
        if key.0 != first_stream && key.0 != second_stream {
            continue;
        }
        for holding in holdings::holdings(&key.1, record) {
            if holding.address != address || unit_of(pair, &holding.scope, address).0 != scope {
                continue;
            }
            let owner = match pair {
                Pair::Whereabouts => holding.owner.to_string(),
                Pair::Spiderpool => state.owner_uid(&key, &holding).unwrap_or("").to_owned(),
            };
            if key.0 == first_stream {
                sides.first.insert(owner);
            } else {
                sides.second.insert(owner);
            }
            sides.evidence.push((
                record.last.clone(),
                format!(
                    "{} {} holds {address} for {}",
                    key.0.kind(),
                    key.1,
                    holding.owner
                ),
            ));
        }
    }
    sides
}

fn unit(pair: Pair, scope: &str, address: &str) -> String {
    format!("{}|{scope}|{address}", pair.label())
}

fn parse_unit(unit: &str) -> Option<(Pair, String, String)> {
    let mut parts = unit.splitn(3, '|');
    let pair = match parts.next()? {
        "whereabouts" => Pair::Whereabouts,
        "spiderpool" => Pair::Spiderpool,
        _ => return None,
    };
    Some((pair, parts.next()?.to_owned(), parts.next()?.to_owned()))
}

impl Rule for AllocationRecordsDisagree {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_change(&mut self, ctx: &mut Context<'_>, change: &Change<'_>) {
        let Some(pair) = Pair::of(change.stream()) else {
            return;
        };
        if change.is_list_end() {
            let (a, b) = pair.streams();
            let mut units = BTreeSet::new();
            for stream in [a, b] {
                for (name, record) in ctx.state.records(stream) {
                    for h in holdings::holdings(name, record) {
                        units.insert(unit_of(pair, &h.scope, h.address));
                    }
                }
            }
            for (scope, address) in units {
                self.evaluate(ctx, pair, &scope, &address, change.event);
            }
            return;
        }
        if !change.reindexed && change.after.is_some() {
            return;
        }
        // Only the allocations this change added, removed or gave another owner: a pool
        // holds thousands, and each event changes a few.
        let (before, after) = (change.held_before(), change.held_after());
        let had: HashSet<_> = before.iter().map(holding_key).collect();
        let has: HashSet<_> = after.iter().map(holding_key).collect();
        let mut units = BTreeSet::new();
        for h in before.iter().chain(after.iter()) {
            let k = holding_key(h);
            if had.contains(&k) != has.contains(&k) {
                units.insert(unit_of(pair, &h.scope, h.address));
            }
        }
        for (scope, address) in units {
            self.evaluate(ctx, pair, &scope, &address, change.event);
        }
    }

    fn on_time(&mut self, ctx: &mut Context<'_>, now_ms: i64) {
        for (_, unit) in self.wake.take_due(now_ms) {
            if let Some((pair, scope, address)) = parse_unit(&unit) {
                let cause = ctx.state.listed(pair.streams().0).cloned();
                if let Some(cause) = cause {
                    self.evaluate(ctx, pair, &scope, &address, &cause);
                }
            }
        }
    }

    fn has_due(&self, now_ms: i64) -> bool {
        self.wake.any_due(now_ms)
    }

    state_is_self!();
}

/// What must stay the same for an allocation to be unchanged: where, which address, for
/// whom.
fn holding_key<'a>(h: &Holding<'a>) -> (Scope<'a>, &'a str, &'a str, Option<&'a str>) {
    let owner: &'a str = match &h.owner {
        std::borrow::Cow::Borrowed(owner) => owner,
        // Only kube-ovn IPs own their owner's name, and they are not of this rule's kinds.
        std::borrow::Cow::Owned(_) => "",
    };
    (h.scope, h.address, owner, h.owner_uid)
}

/// The scope two records of `pair` share for an address: any whereabouts pool agrees
/// with the cluster-wide reservation; spiderpool records agree within one pool.
fn unit_of(pair: Pair, scope: &Scope<'_>, address: &str) -> (String, String) {
    match pair {
        Pair::Whereabouts => ("whereabouts".to_owned(), address.to_owned()),
        Pair::Spiderpool => (scope.to_string(), address.to_owned()),
    }
}

impl AllocationRecordsDisagree {
    fn evaluate(
        &mut self,
        ctx: &mut Context<'_>,
        pair: Pair,
        scope: &str,
        address: &str,
        cause: &EventRef,
    ) {
        let (a, b) = pair.streams();
        if ctx.state.listed(a).is_none() || ctx.state.listed(b).is_none() {
            return;
        }
        // A cluster whose whereabouts networks all run with `enable_overlapping_ranges:
        // false` has no reservations at all: a pool allocation without one says nothing.
        if pair == Pair::Whereabouts
            && ctx
                .state
                .records(Stream::OverlappingRangeIpReservation)
                .next()
                .is_none()
        {
            return;
        }
        let unit = unit(pair, scope, address);
        let subject_uid = unit.clone();
        let sides = sides(ctx.state, pair, scope, address);
        if sides.first == sides.second {
            self.open.remove(&unit);
            self.wake.cancel(&unit);
            let id = ctx.alert_id(NAME, &subject_uid, None);
            let what = if sides.first.is_empty() {
                format!("no record holds {address} any more")
            } else {
                format!("the records of {address} agree again")
            };
            ctx.resolve(&id, evidence(cause, what));
            return;
        }
        let since = *self.open.entry(unit.clone()).or_insert(ctx.now_ms);
        let due = since.saturating_add(ctx.config.records_grace_ms);
        if ctx.now_ms <= due {
            self.wake.set_if_absent(&unit, due);
            return;
        }
        let (first, second) = (a.kind(), b.kind());
        let only = |x: &BTreeSet<String>, y: &BTreeSet<String>| -> Vec<String> {
            x.difference(y).cloned().collect()
        };
        let mut why = Vec::new();
        let missing_second = only(&sides.first, &sides.second);
        if !missing_second.is_empty() {
            why.push(format!(
                "{first} holds it for {} with no {second}",
                missing_second.join(", ")
            ));
        }
        let missing_first = only(&sides.second, &sides.first);
        if !missing_first.is_empty() {
            why.push(format!(
                "{second} holds it for {} with no {first}",
                missing_first.join(", ")
            ));
        }
        let place = match pair {
            Pair::Whereabouts => "whereabouts".to_owned(),
            Pair::Spiderpool => scope.split_once('/').map_or(scope, |(_, p)| p).to_owned(),
        };
        ctx.fire_at(
            Finding {
                rule: NAME,
                severity: Severity::Warning,
                subject_kind: "Address",
                subject_name: address.to_owned(),
                subject_uid,
                scope: None,
                subnet: Some(place),
                namespace: sides
                    .first
                    .iter()
                    .chain(&sides.second)
                    .find_map(|owner| super::owner_namespace(owner)),
                summary: format!(
                    "The records of {address} have disagreed for more than {}: {}",
                    duration_text(ctx.config.records_grace_ms),
                    why.join("; ")
                ),
                fix: Some(match pair {
                    Pair::Whereabouts => format!("Compare the pool allocation and the OverlappingRangeIPReservation of {address}; delete the one whose pod is gone (whereabouts #409, #712)"),
                    Pair::Spiderpool => format!("Compare the SpiderIPPool entry and the SpiderEndpoint of {address}; the spiderpool controller's GC should reconcile them (spiderpool #2517, #4916)"),
                }),
                cleanup: None,
                evidence: sides.evidence.iter().map(|(e, w)| evidence(e, w.clone())).collect(),
            },
            due,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{t, transitions, MIN};
    use super::NAME;
    use ipaudit_schemas::builders::EventBuilder;
    use ipaudit_schemas::{EventType, Stream, WatchEvent};

    fn listed(stream: Stream, rv: i64) -> [WatchEvent; 2] {
        let mut start = EventBuilder::marker(stream, EventType::SyncStart, rv);
        start.observed_at_ms = Some(0);
        let mut end = EventBuilder::marker(stream, EventType::SyncEnd, rv);
        end.observed_at_ms = Some(0);
        [start, end]
    }

    fn pool() -> EventBuilder {
        EventBuilder::ip_pool("kube-system", "10.0.0.0-24", "10.0.0.0/24")
    }

    #[test]
    fn a_reservation_without_its_pool_allocation_past_the_grace_is_reported() {
        let mut events: Vec<WatchEvent> = listed(Stream::IpPool, 1).into();
        events.extend(listed(Stream::OverlappingRangeIpReservation, 1));
        events.push(
            EventBuilder::reservation("kube-system", "10.0.0.9", "default/a")
                .rv(2)
                .at(MIN)
                .added(),
        );
        events.push(EventBuilder::pod("default", "x").rv(3).at(7 * MIN).added());
        assert_eq!(transitions(events), [t(NAME, "firing", "10.0.0.9")]);
    }

    #[test]
    fn a_change_stamped_with_an_old_time_does_not_backdate_the_grace() {
        // kubectl recordings without managedFields stamp a pool's change with the pool's
        // creation time; the reservation follows one version later.
        let mut events: Vec<WatchEvent> = listed(Stream::IpPool, 1).into();
        events.extend(listed(Stream::OverlappingRangeIpReservation, 1));
        events.push(EventBuilder::pod("default", "x").rv(2).at(60 * MIN).added());
        events.push(
            pool()
                .allocation(9, "10.0.0.9", "default/a")
                .rv(3)
                .at(MIN)
                .modified(),
        );
        events.push(
            EventBuilder::reservation("kube-system", "10.0.0.9", "default/a")
                .rv(4)
                .at(60 * MIN)
                .added(),
        );
        assert!(transitions(events).is_empty());
    }

    #[test]
    fn records_that_agree_within_the_grace_or_a_kind_never_listed_say_nothing() {
        let mut events: Vec<WatchEvent> = listed(Stream::IpPool, 1).into();
        events.extend(listed(Stream::OverlappingRangeIpReservation, 1));
        events.push(
            pool()
                .allocation(9, "10.0.0.9", "default/a")
                .rv(2)
                .at(MIN)
                .added(),
        );
        events.push(
            EventBuilder::reservation("kube-system", "10.0.0.9", "default/a")
                .rv(3)
                .at(MIN + 5)
                .added(),
        );
        events.push(EventBuilder::pod("default", "x").rv(4).at(30 * MIN).added());
        assert!(transitions(events).is_empty());
        let mut events: Vec<WatchEvent> = listed(Stream::IpPool, 1).into();
        events.push(
            pool()
                .allocation(9, "10.0.0.9", "default/a")
                .rv(2)
                .at(MIN)
                .added(),
        );
        events.push(EventBuilder::pod("default", "x").rv(3).at(30 * MIN).added());
        assert!(
            transitions(events).is_empty(),
            "no reservations were ever listed"
        );
    }
}
