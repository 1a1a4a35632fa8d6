//! Incidents as HTML: an incident is a set of alerts linked by the objects their evidence
//! names (a subnet deleted under three IPs is one incident with four lanes), drawn as an
//! alert list, a timeline picture (inline SVG) with a lane per object and a mark per
//! event, an event table and the fix. The replay report's page
//! ([`crate::offline::report::html`]) and the live incident pages
//! ([`crate::live::ui`]) are made of these pieces and this stylesheet.
//!
//! Marks are placed left to right in time order (then resourceVersion), one column each,
//! so events a second apart stay distinguishable and the wrong order shows at a glance;
//! the time is written above every column where it changes. Every text that comes from
//! the input (object names, messages, user names) is hostile until escaped: the markup is
//! built with `maud`, which escapes every interpolated value in text and attributes.

use std::collections::HashMap;

use ipaudit_schemas::kubernetes::format_timestamp_ms;
use ipaudit_schemas::{Actor, Alert, EventType, Evidence, Severity, Stream};
use maud::{html, Markup};

use super::{actor_text, AlertHistory, Findings};

/// Width of one event column in the timeline, px.
const COLUMN: i64 = 64;
/// Height of one lane, px.
const LANE: i64 = 44;
/// Height of the time axis above the lanes, px.
const AXIS: i64 = 34;
/// Characters of an actor's name written beside a mark (the full name is in its tooltip
/// and in the event table).
const ACTOR_CHARS: usize = 10;
/// Incidents with more events than this show their event table collapsed.
const OPEN_TABLE_MAX: usize = 60;
/// Incidents with more alerts (or fixes) than this list them collapsed, under a count
/// per rule.
const LIST_OPEN_MAX: usize = 8;

/// What an event did to its object, as the timeline draws it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MarkKind {
    /// The object appeared.
    Created,
    /// Its deletion was requested: it is terminating, held by a finalizer.
    DeletionRequested,
    /// A finalizer was removed.
    FinalizerRemoved,
    /// The object is gone.
    Deleted,
    /// Any other change.
    Changed,
    /// The collector acted on a cleanup command.
    Remediation,
}

impl MarkKind {
    /// Whether a DELETED event came from removing the object's last finalizer (a
    /// terminating object goes when its finalizers are gone), as its evidence says.
    fn finalizer_removed_by(e: &Evidence) -> bool {
        e.event_type.is_deletion() && e.what.contains(crate::analysis::actors::FINALIZER_REMOVED)
    }

    /// Reads the kind from the event type and, for a MODIFIED event, from what the rule
    /// said it shows (the evidence has no structured field for it).
    pub(crate) fn of(e: &Evidence) -> Self {
        match e.event_type {
            EventType::Added => MarkKind::Created,
            EventType::Deleted | EventType::DeletedOnRelist => MarkKind::Deleted,
            EventType::Remediation => MarkKind::Remediation,
            EventType::Modified => {
                let what = e.what.to_ascii_lowercase();
                if what.contains("finalizer")
                    && (what.contains("removed") || what.contains("emptied"))
                    && !what.contains("never removed")
                {
                    MarkKind::FinalizerRemoved
                } else if (what.contains("marked for deletion")
                    || what.contains("deletion requested")
                    || what.contains(" is terminating"))
                    && !what.contains("not terminating")
                    && !what.contains("no longer terminating")
                {
                    MarkKind::DeletionRequested
                } else {
                    MarkKind::Changed
                }
            }
            EventType::Bookmark | EventType::SyncStart | EventType::SyncEnd => MarkKind::Changed,
        }
    }

    /// The value of the mark's `data-kind` attribute and CSS class.
    fn as_str(self) -> &'static str {
        match self {
            MarkKind::Created => "created",
            MarkKind::DeletionRequested => "deletion-requested",
            MarkKind::FinalizerRemoved => "finalizer-removed",
            MarkKind::Deleted => "deleted",
            MarkKind::Changed => "changed",
            MarkKind::Remediation => "remediation",
        }
    }

    /// For a person.
    fn label(self) -> &'static str {
        match self {
            MarkKind::Created => "created",
            MarkKind::DeletionRequested => "deletion requested",
            MarkKind::FinalizerRemoved => "finalizer removed",
            MarkKind::Deleted => "deleted",
            MarkKind::Changed => "changed",
            MarkKind::Remediation => "remediation",
        }
    }

    const ALL: [MarkKind; 6] = [
        MarkKind::Created,
        MarkKind::DeletionRequested,
        MarkKind::FinalizerRemoved,
        MarkKind::Deleted,
        MarkKind::Changed,
        MarkKind::Remediation,
    ];
}

/// One object of an incident: a subnet or pool, an IP or allocation, a pod.
type ObjectKey = (Stream, String);

/// The `data-object`/`data-lane` value of an object: `stream/name`.
pub(crate) fn object_id(key: &ObjectKey) -> String {
    format!("{}/{}", key.0.as_str(), key.1)
}

/// One event on the timeline, merged over the alerts that cite it.
pub(crate) struct Mark<'a> {
    /// What the event was.
    pub(crate) evidence: &'a Evidence,
    kind: MarkKind,
    /// The event that caused the incident's leak (the first alert's firing event).
    pub(crate) cause: bool,
    /// Rules that fired at this event.
    fired: Vec<&'a str>,
    /// Whether only resolved alerts cite it.
    healthy: bool,
}

/// Alerts linked by the objects their evidence names.
pub(crate) struct Incident<'a> {
    alerts: Vec<&'a AlertHistory>,
    /// Its events, one mark each.
    pub(crate) marks: Vec<Mark<'a>>,
    /// Lanes in drawing order, and whether each is healthy (cited by resolved alerts only).
    pub(crate) lanes: Vec<(ObjectKey, bool)>,
}

impl Incident<'_> {
    /// Whether an alert of it still fires.
    pub(crate) fn firing(&self) -> bool {
        self.alerts.iter().any(|h| h.resolved.is_none())
    }

    fn severity(&self) -> Severity {
        self.alerts
            .iter()
            .map(|h| h.fired.severity)
            .max()
            .unwrap_or(Severity::Info)
    }

    fn cause(&self) -> Option<&Mark<'_>> {
        self.marks.iter().find(|m| m.cause)
    }
}

/// The stylesheet of every page that shows incidents (the replay report, the analyzer's
/// live incident pages).
pub const STYLESHEET: &str = CSS;

/// One incident of the report, drawn from `histories` as the report draws each of its
/// incidents: alert list, timeline picture, event table and fix (the live incident page
/// shows the same section the replay report does).
pub fn incident_markup(histories: &[AlertHistory]) -> Markup {
    let incident = incident(histories.iter().collect());
    html! {
        (legend())
        (incident_section(1, &incident))
    }
}

/// Groups the alerts into incidents: alerts whose evidence or subject share an object.
pub(crate) fn incidents(findings: &Findings) -> Vec<Incident<'_>> {
    let alerts = &findings.alerts;
    let mut parent: Vec<usize> = (0..alerts.len()).collect();
    let mut owner: HashMap<(&str, ObjectKey), usize> = HashMap::new();
    for (i, history) in alerts.iter().enumerate() {
        let alert = history.latest();
        for key in objects_of(alert) {
            match owner.get(&(alert.cluster_id.as_str(), key.clone())) {
                Some(&j) => union(&mut parent, i, j),
                None => {
                    owner.insert((alert.cluster_id.as_str(), key), i);
                }
            }
        }
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_of_root: HashMap<usize, usize> = HashMap::new();
    for i in 0..alerts.len() {
        let root = find(&mut parent, i);
        let g = *group_of_root.entry(root).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(i);
    }
    groups
        .into_iter()
        .map(|members| incident(members.iter().map(|&i| &alerts[i]).collect()))
        .collect()
}

/// The objects an alert names: its evidence's, and its subject when that is a known kind.
fn objects_of(alert: &Alert) -> Vec<ObjectKey> {
    let mut keys: Vec<ObjectKey> = alert
        .evidence
        .iter()
        .map(|e| (e.stream, e.name.clone()))
        .collect();
    if let Some(stream) = stream_of_kind(&alert.subject_kind) {
        keys.push((stream, alert.subject_name.clone()));
    }
    keys
}

fn stream_of_kind(kind: &str) -> Option<Stream> {
    ipaudit_schemas::KINDS
        .iter()
        .find(|k| k.kind == kind)
        .map(|k| k.stream)
}

fn find(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

fn union(parent: &mut [usize], a: usize, b: usize) {
    let (ra, rb) = (find(parent, a), find(parent, b));
    if ra != rb {
        parent[ra.max(rb)] = ra.min(rb);
    }
}

/// Builds one incident's marks and lanes from its alerts (in firing order).
fn incident(alerts: Vec<&AlertHistory>) -> Incident<'_> {
    let mut marks: Vec<Mark<'_>> = Vec::new();
    let mut index: HashMap<(Stream, &str, &str, EventType), usize> = HashMap::new();
    for history in &alerts {
        let alert = history.latest();
        let resolved = history.resolved.is_some();
        for e in &alert.evidence {
            let key = (
                e.stream,
                e.name.as_str(),
                e.resource_version.as_str(),
                e.event_type,
            );
            let i = *index.entry(key).or_insert_with(|| {
                marks.push(Mark {
                    evidence: e,
                    kind: MarkKind::of(e),
                    cause: false,
                    fired: Vec::new(),
                    healthy: true,
                });
                marks.len() - 1
            });
            let mark = &mut marks[i];
            // The same event cited twice: keep the entry that names who did it.
            if mark.evidence.actor.is_none() && e.actor.is_some() {
                mark.evidence = e;
            }
            mark.healthy &= resolved;
        }
    }
    // Each alert fired at one of its events; the earliest firing one caused the incident.
    let mut cause: Option<(i64, usize)> = None;
    for history in &alerts {
        let fired = &history.fired;
        let at = marks.iter().position(|m| {
            m.evidence.resource_version == fired.fired_resource_version
                && fired.evidence.iter().any(|e| {
                    e.resource_version == m.evidence.resource_version && e.name == m.evidence.name
                })
        });
        if let Some(i) = at {
            marks[i].fired.push(fired.rule.as_str());
            let order = marks[i].evidence.time_ms.unwrap_or(i64::MAX);
            if cause.is_none_or(|(t, _)| order < t) {
                cause = Some((order, i));
            }
        }
    }
    if let Some((_, i)) = cause {
        marks[i].cause = true;
    }
    // Time order, then resourceVersion; events without a time go last.
    marks.sort_by_cached_key(|m| {
        (
            m.evidence.time_ms.unwrap_or(i64::MAX),
            m.evidence
                .resource_version
                .parse::<i64>()
                .unwrap_or(i64::MAX),
            m.evidence.resource_version.clone(),
            m.evidence.stream.as_str(),
            m.evidence.name.clone(),
        )
    });
    let mut lanes: Vec<(ObjectKey, bool, usize)> = Vec::new();
    let mut lane_of: HashMap<ObjectKey, usize> = HashMap::new();
    for (column, m) in marks.iter().enumerate() {
        let key = (m.evidence.stream, m.evidence.name.clone());
        match lane_of.get(&key) {
            Some(&l) => lanes[l].1 &= m.healthy,
            None => {
                lane_of.insert(key.clone(), lanes.len());
                lanes.push((key, m.healthy, column));
            }
        }
    }
    // Pools and nodes first, then blocks, then addresses, then pods; within a kind, by
    // first appearance.
    lanes.sort_by_key(|(key, _, first)| (lane_rank(key.0), *first));
    Incident {
        alerts,
        marks,
        lanes: lanes.into_iter().map(|(k, h, _)| (k, h)).collect(),
    }
}

fn lane_rank(stream: Stream) -> u8 {
    match stream {
        Stream::Subnet
        | Stream::IpPool
        | Stream::SpiderIpPool
        | Stream::CalicoIpPool
        | Stream::CalicoV3IpPool
        | Stream::Node
        | Stream::CiliumNode => 0,
        Stream::CalicoIpamBlock
        | Stream::CalicoV3IpamBlock
        | Stream::CalicoBlockAffinity
        | Stream::CalicoV3BlockAffinity => 1,
        Stream::Ip
        | Stream::OverlappingRangeIpReservation
        | Stream::SpiderEndpoint
        | Stream::CalicoIpamHandle
        | Stream::CalicoV3IpamHandle
        | Stream::CiliumEndpoint => 2,
        Stream::Pod => 3,
        Stream::Unknown => 4,
    }
}

fn time_text(ms: Option<i64>) -> String {
    ms.filter(|&ms| ms > 0)
        .map_or_else(|| "no time recorded".to_owned(), format_timestamp_ms)
}

/// The actor's name, short enough to sit beside a mark: a service account by its own
/// name (`sa/ovn`); the full name is in the mark's tooltip and the event table.
fn actor_name(actor: &Actor) -> String {
    let user = actor
        .user
        .strip_prefix("system:serviceaccount:")
        .and_then(|sa| sa.rsplit_once(':'))
        .map_or_else(|| actor.user.clone(), |(_, name)| format!("sa/{name}"));
    match &actor.impersonated_user {
        Some(as_user) => format!("{user} (as {as_user})"),
        None => user,
    }
}

fn shorten(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        text.to_owned()
    } else {
        let mut short: String = text.chars().take(chars - 1).collect();
        short.push('…');
        short
    }
}

pub(crate) fn legend() -> Markup {
    html! {
        div #legend {
            "Marks: "
            @for kind in MarkKind::ALL {
                span.legend-item {
                    svg width="18" height="18" viewBox="-9 -9 18 18" { (shape(kind)) }
                    (kind.label())
                }
            }
            span.legend-item {
                svg width="18" height="18" viewBox="-9 -9 18 18" {
                    circle.cause-ring r="7" {}
                }
                "the event that caused the leak"
            }
        }
    }
}

pub(crate) fn index(incidents: &[Incident<'_>]) -> Markup {
    html! {
        nav #index {
            h2 { "Incidents" }
            table {
                thead { tr { th { "#" } th { "status" } th { "severity" } th { "rules" } th { "objects" } th { "caused by" } } }
                tbody {
                    @for (n, incident) in incidents.iter().enumerate() {
                        @let status = if incident.firing() { "firing" } else { "healed" };
                        tr data-incident=(n + 1) data-status=(status) {
                            td { a href={ "#incident-" (n + 1) } { (n + 1) } }
                            td.(status) { (status) }
                            td.(incident.severity().as_str()) { (incident.severity().as_str()) }
                            td { (rules_of(incident).join(", ")) }
                            td { (incident.lanes.len()) }
                            td {
                                @if let Some(cause) = incident.cause() {
                                    (cause.evidence.stream.kind()) " " (cause.evidence.name) " "
                                    (cause.kind.label()) " at rv " (cause.evidence.resource_version)
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn rules_of<'a>(incident: &Incident<'a>) -> Vec<&'a str> {
    let mut rules: Vec<&str> = incident
        .alerts
        .iter()
        .map(|h| h.fired.rule.as_str())
        .collect();
    rules.sort_unstable();
    rules.dedup();
    rules
}

pub(crate) fn incident_section(n: usize, incident: &Incident<'_>) -> Markup {
    let status = if incident.firing() {
        "firing"
    } else {
        "healed"
    };
    let active: Vec<&(ObjectKey, bool)> = incident.lanes.iter().filter(|(_, h)| !h).collect();
    let healthy: Vec<&(ObjectKey, bool)> = incident.lanes.iter().filter(|(_, h)| *h).collect();
    // A healed incident has only healthy lanes: show them all in its one timeline.
    let (shown, collapsed) = if active.is_empty() {
        (healthy, Vec::new())
    } else {
        (active, healthy)
    };
    html! {
        section.incident id={ "incident-" (n) } data-incident=(n) data-status=(status) {
            h2 {
                "Incident " (n) " "
                span.(incident.severity().as_str()) { (incident.severity().as_str().to_uppercase()) }
                " " span.(status) { (status) }
            }
            @if incident.alerts.len() <= LIST_OPEN_MAX {
                ul.alerts {
                    @for history in &incident.alerts {
                        (alert_item(history))
                    }
                }
            } @else {
                ul.rules {
                    @for (rule, firing, resolved) in rule_counts(incident) {
                        li { strong { (rule) } ": " (firing) " firing, " (resolved) " resolved" }
                    }
                }
                details.alerts {
                    summary { "Alerts (" (incident.alerts.len()) ")" }
                    ul.alerts {
                        @for history in &incident.alerts {
                            (alert_item(history))
                        }
                    }
                }
            }
            (timeline(incident, &shown))
            @if !collapsed.is_empty() {
                details.healthy {
                    summary { (collapsed.len()) " healthy object(s): their alerts resolved" }
                    (timeline(incident, &collapsed))
                }
            }
            details.events open[incident.marks.len() <= OPEN_TABLE_MAX] {
                summary { "Events (" (incident.marks.len()) ")" }
                (event_table(incident))
            }
            @let fixes: Vec<&Alert> = incident.alerts.iter()
                .filter(|h| h.resolved.is_none())
                .map(|h| &h.fired)
                .filter(|a| a.fix.is_some())
                .collect();
            @if !fixes.is_empty() {
                h3 { "Fix" }
                details.fixes open[fixes.len() <= LIST_OPEN_MAX] {
                    summary { (fixes.len()) " fix(es), one per firing alert" }
                    @for alert in fixes {
                        div.fix data-rule=(alert.rule) data-subject=(alert.subject_name) {
                            p { (alert.rule) " on " (alert.subject_kind) " " (alert.subject_name) ":" }
                            pre { (alert.fix.as_deref().unwrap_or_default()) }
                        }
                    }
                }
            }
        }
    }
}

/// Per rule of an incident: how many of its alerts fire and how many resolved.
fn rule_counts<'a>(incident: &Incident<'a>) -> Vec<(&'a str, usize, usize)> {
    let mut counts: Vec<(&str, usize, usize)> = Vec::new();
    for history in &incident.alerts {
        let rule = history.fired.rule.as_str();
        let i = counts.iter().position(|c| c.0 == rule).unwrap_or_else(|| {
            counts.push((rule, 0, 0));
            counts.len() - 1
        });
        if history.resolved.is_none() {
            counts[i].1 += 1;
        } else {
            counts[i].2 += 1;
        }
    }
    counts
}

fn alert_item(history: &AlertHistory) -> Markup {
    let alert = history.latest();
    html! {
        li.alert data-rule=(alert.rule) data-alert-id=(alert.alert_id) data-status=(alert.status.as_str()) {
            span.(alert.severity.as_str()) { (alert.severity.as_str().to_uppercase()) }
            " " strong { (alert.rule) } " "
            @match &history.resolved {
                Some(r) => span.healed { "resolved at rv " (r.resolved_resource_version.as_deref().unwrap_or("?")) },
                None => span.firing { "firing since rv " (history.fired.fired_resource_version) " (" (time_text(Some(history.fired.fired_at_ms))) ")" },
            }
            br;
            (alert.summary)
        }
    }
}

/// One timeline picture: the given lanes, with the incident's marks on them.
fn timeline(incident: &Incident<'_>, lanes: &[&(ObjectKey, bool)]) -> Markup {
    let lane_of: HashMap<&ObjectKey, usize> =
        lanes.iter().enumerate().map(|(i, (k, _))| (k, i)).collect();
    let mut on_lane: Vec<Vec<(&Mark<'_>, usize)>> = vec![Vec::new(); lanes.len()];
    let mut columns: Vec<Column<'_>> = Vec::new();
    for m in &incident.marks {
        let Some(&lane) = lane_of.get(&(m.evidence.stream, m.evidence.name.clone())) else {
            continue;
        };
        if !columns.last_mut().is_some_and(|c| c.takes(m, lane)) {
            columns.push(Column::new(m));
        }
        if let Some(column) = columns.last_mut() {
            column.lanes.push(lane);
        }
        on_lane[lane].push((m, columns.len() - 1));
    }
    let width = COLUMN * (columns.len() as i64 + 1);
    let height = AXIS + LANE * lanes.len() as i64 + 8;
    let x = |column: usize| COLUMN / 2 + COLUMN * column as i64;
    let y = |lane: usize| AXIS + LANE * lane as i64 + LANE / 2;
    html! {
        div.timeline {
            div.labels style={ "padding-top:" (AXIS) "px" } {
                @for (key, healthy) in lanes {
                    div.lane-label data-lane=(object_id(key)) data-healthy=(healthy) title=(key.1) style={ "height:" (LANE) "px" } {
                        span.kind { (key.0.kind()) } " " (key.1)
                    }
                }
            }
            div.scroll {
                svg xmlns="http://www.w3.org/2000/svg" width=(width) height=(height)
                    viewBox={ "0 0 " (width) " " (height) } role="img"
                    aria-label="timeline: one lane per object, one mark per event, in time order" {
                    @for (lane, _) in lanes.iter().enumerate() {
                        rect.lane-bg.(if lane % 2 == 0 { "even" } else { "odd" })
                            x="0" y=(AXIS + LANE * lane as i64) width=(width) height=(LANE) {}
                    }
                    @for (i, column) in columns.iter().enumerate() {
                        @if column.cause {
                            rect.cause-band x=(x(i) - COLUMN / 2 + 2) y=(AXIS - 4)
                                width=(COLUMN - 4) height=(LANE * lanes.len() as i64 + 4) {}
                        }
                        @let time = time_text(column.time_ms);
                        @let previous = i.checked_sub(1).map(|p| time_text(columns[p].time_ms));
                        @if previous.as_deref() != Some(time.as_str()) {
                            line.tick x1=(x(i)) x2=(x(i)) y1=(AXIS - 6) y2=(height) {}
                            @if previous.as_deref().map(time_date) != Some(time_date(&time)) {
                                text.time x=(x(i)) y="12" { (time_date(&time)) }
                            }
                            @let (clock, fraction) = time_clock(&time);
                            @if previous.as_deref().map(|p| time_clock(p).0) != Some(clock) {
                                text.time x=(x(i)) y="25" { (clock) }
                            } @else {
                                text.time x=(x(i)) y="25" { "." (fraction) }
                            }
                        }
                    }
                    @for (lane, (key, _)) in lanes.iter().enumerate() {
                        g.lane data-lane=(object_id(key)) {
                            (life_line(&on_lane[lane], lane, &x, &y, width))
                            @for (m, column) in &on_lane[lane] {
                                (mark(m, x(*column), y(lane)))
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Marks of one second and one kind on different lanes share a column, so a thousand IPs
/// created in the same second take one column, not a thousand; the order of different
/// kinds of events, even within a second, stays visible. The cause gets its own column.
struct Column<'a> {
    time_ms: Option<i64>,
    kind: MarkKind,
    cause: bool,
    lanes: Vec<usize>,
    first: &'a Mark<'a>,
}

impl<'a> Column<'a> {
    fn new(m: &'a Mark<'a>) -> Self {
        Column {
            time_ms: m.evidence.time_ms,
            kind: m.kind,
            cause: m.cause,
            lanes: Vec::new(),
            first: m,
        }
    }

    fn takes(&self, m: &Mark<'_>, lane: usize) -> bool {
        let second = |ms: Option<i64>| ms.map(|ms| ms.div_euclid(1_000));
        !self.cause
            && !m.cause
            && self.kind == m.kind
            && second(self.time_ms) == second(m.evidence.time_ms)
            && self.first.evidence.time_ms.is_some() == m.evidence.time_ms.is_some()
            && !self.lanes.contains(&lane)
    }
}

/// An object's life on its lane: solid from its first mark to its last, dashed from the
/// left edge when it existed before its first event here, and on to the right edge when
/// it was never seen gone.
fn life_line(
    marks: &[(&Mark<'_>, usize)],
    lane: usize,
    x: &dyn Fn(usize) -> i64,
    y: &dyn Fn(usize) -> i64,
    width: i64,
) -> Markup {
    let (Some((first, first_column)), Some((last, last_column))) = (marks.first(), marks.last())
    else {
        return html! {};
    };
    let y = y(lane);
    html! {
        @if first.kind != MarkKind::Created {
            line.life.open x1="0" x2=(x(*first_column)) y1=(y) y2=(y) {}
        }
        line.life x1=(x(*first_column)) x2=(x(*last_column)) y1=(y) y2=(y) {}
        @if last.kind != MarkKind::Deleted {
            line.life.open x1=(x(*last_column)) x2=(width) y1=(y) y2=(y) {}
        }
    }
}

/// The date part of an RFC 3339 time (the whole text when it is not one).
fn time_date(time: &str) -> &str {
    time.split_once('T').map_or(time, |(date, _)| date)
}

/// The clock part of an RFC 3339 time without the zone, split into whole seconds and
/// the fraction (empty when there is none).
fn time_clock(time: &str) -> (&str, &str) {
    let clock = time
        .split_once('T')
        .map_or("", |(_, clock)| clock.trim_end_matches('Z'));
    clock.split_once('.').unwrap_or((clock, ""))
}

fn mark(m: &Mark<'_>, x: i64, y: i64) -> Markup {
    let e = m.evidence;
    let actor = e.actor.as_ref();
    let mut tooltip = format!(
        "{} {} {}: {}{} at rv {} ({})\n{}",
        e.stream.kind(),
        e.name,
        e.event_type.as_str(),
        m.kind.label(),
        if MarkKind::finalizer_removed_by(e) {
            " (its last finalizer removed)"
        } else {
            ""
        },
        e.resource_version,
        time_text(e.time_ms),
        e.what
    );
    if let Some(actor) = actor {
        tooltip.push_str(&format!("\nby {}", actor_text(actor)));
    }
    if m.cause {
        tooltip.push_str("\nthis event caused the leak");
    }
    html! {
        g.mark.(m.kind.as_str()) data-kind=(m.kind.as_str()) data-object=(object_id(&(e.stream, e.name.clone())))
            data-rv=(e.resource_version) data-time=[e.time_ms.filter(|&t| t > 0).map(format_timestamp_ms)]
            data-actor=[actor.map(|a| a.user.as_str())] data-cause=[m.cause.then_some("true")]
            transform={ "translate(" (x) "," (y) ")" } {
            title { (tooltip) }
            @if m.cause {
                circle.cause-ring r="12" {}
            }
            (shape(m.kind))
            @if MarkKind::finalizer_removed_by(e) {
                g.via data-via="finalizer-removed" transform="translate(-22,0) scale(0.6)" {
                    (shape(MarkKind::FinalizerRemoved))
                }
            }
            text.rv y="19" { (shorten(&e.resource_version, 10)) }
            @if let Some(actor) = actor {
                text.actor y="-11" { (shorten(&actor_name(actor), ACTOR_CHARS)) }
            }
        }
    }
}

/// The symbol of a mark kind, centred on the origin.
fn shape(kind: MarkKind) -> Markup {
    html! {
        @match kind {
            MarkKind::Created => circle.shape.created r="6" {},
            MarkKind::DeletionRequested => polygon.shape.deletion-requested points="0,-7 7,0 0,7 -7,0" {},
            MarkKind::FinalizerRemoved => rect.shape.finalizer-removed x="-6" y="-6" width="12" height="12" {},
            MarkKind::Deleted => path.shape.deleted d="M-6,-6 L6,6 M6,-6 L-6,6" {},
            MarkKind::Changed => circle.shape.changed r="4" {},
            MarkKind::Remediation => polygon.shape.remediation points="0,-7 7,6 -7,6" {},
        }
    }
}

fn event_table(incident: &Incident<'_>) -> Markup {
    html! {
        table.events {
            thead { tr { th { "time" } th { "rv" } th { "object" } th { "event" } th { "who" } th { "what" } } }
            tbody {
                @for m in &incident.marks {
                    @let e = m.evidence;
                    tr.cause[m.cause] data-object=(object_id(&(e.stream, e.name.clone()))) data-rv=(e.resource_version) {
                        td { (time_text(e.time_ms)) }
                        td { (e.resource_version) }
                        td { (e.stream.kind()) " " (e.name) }
                        td { (m.kind.label())
                            @if MarkKind::finalizer_removed_by(e) { ": its last finalizer removed" }
                            " (" (e.event_type.as_str()) ")"
                            @if m.cause { br; strong { "caused the leak" } }
                            @for rule in &m.fired { br; span.fired { (rule) " fired" } }
                        }
                        td { @if let Some(actor) = &e.actor { (actor_text(actor)) } @else { span.unknown { "-" } } }
                        td { (e.what) }
                    }
                }
            }
        }
    }
}

/// The page's style: plain colours, monospace names, lanes that scroll sideways while
/// their labels stay.
const CSS: &str = r#"
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1b1f24; background: #fff; }
h1 { margin: 0 0 .3em; font-size: 1.6em; }
h2 { margin: 1.2em 0 .4em; font-size: 1.25em; }
code, pre, .lane-label, table.events td:nth-child(3) { font-family: ui-monospace, monospace; }
.note { color: #6a4a00; }
.critical { color: #fff; background: #b3261e; padding: 0 .35em; border-radius: 3px; }
.warning { color: #1b1f24; background: #f5b400; padding: 0 .35em; border-radius: 3px; }
.info { color: #fff; background: #3b6ea8; padding: 0 .35em; border-radius: 3px; }
.firing { color: #b3261e; font-weight: 600; }
.healed { color: #2e7d32; font-weight: 600; }
nav#index table, table.events { border-collapse: collapse; }
nav#index td, nav#index th, table.events td, table.events th { border: 1px solid #d0d7de; padding: 2px 8px; text-align: left; vertical-align: top; }
table.events { font-size: 12px; max-width: 100%; }
table.events td:last-child { word-break: break-word; }
tr.cause { background: #fde7e7; }
section.incident { border-top: 2px solid #d0d7de; margin-top: 1.5em; }
ul.alerts, ul.rules { padding-left: 1.2em; }
#legend { margin: .8em 0; }
.legend-item { display: inline-flex; align-items: center; gap: 4px; margin-right: 14px; }
.timeline { display: flex; border: 1px solid #d0d7de; margin: .6em 0; max-width: 100%; }
.labels { flex: 0 0 320px; width: 320px; border-right: 1px solid #d0d7de; background: #f6f8fa; }
.lane-label { box-sizing: border-box; padding: 0 8px; line-height: 44px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; font-size: 12px; }
.lane-label .kind { font-family: system-ui, sans-serif; font-weight: 600; color: #57606a; }
.scroll { overflow-x: auto; flex: 1 1 auto; }
svg text { font: 10px ui-monospace, monospace; text-anchor: middle; fill: #1b1f24; }
svg text.time { fill: #57606a; }
svg text.actor { fill: #0b5394; font-weight: 600; }
rect.lane-bg.even { fill: #ffffff; }
rect.lane-bg.odd { fill: #f6f8fa; }
rect.cause-band { fill: #fde7e7; }
line.tick { stroke: #d0d7de; stroke-width: 1; }
line.life { stroke: #8c959f; stroke-width: 2; }
line.life.open { stroke-dasharray: 4 4; }
.shape.created { fill: #2e7d32; }
.shape.deletion-requested { fill: #e8710a; }
.shape.finalizer-removed { fill: #7b1fa2; }
.shape.deleted { stroke: #b3261e; stroke-width: 3; fill: none; }
.shape.changed { fill: #57606a; }
.shape.remediation { fill: #0b5394; }
.cause-ring { fill: none; stroke: #b3261e; stroke-width: 3; }
.fix pre { background: #f6f8fa; border: 1px solid #d0d7de; padding: 8px; white-space: pre-wrap; word-break: break-all; }
details { margin: .5em 0; }
summary { cursor: pointer; }
"#;
