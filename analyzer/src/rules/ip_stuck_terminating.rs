//! Rule 2, `ip-stuck-terminating`: an IP has a deletionTimestamp and kube-ovn's finalizer
//! (either name) while its subnet is gone. The controller needs the subnet to finish the
//! deletion, so the IP can never go away by itself. Resolved when the IP is gone, loses
//! the finalizer, or the subnet exists again.

use super::{describe_ip, evidence, remove_finalizer_command, time_text, Context, Rule};
use crate::alerts::{alert_id, Finding};
use crate::state::{EventRef, IpRecord};

/// The id of rule 2's alert about `ip`.
fn stuck_alert_id(ctx: &Context<'_>, ip: &IpRecord) -> String {
    alert_id(
        ctx.cluster_id,
        Rule::IpStuckTerminating,
        &ip.uid,
        Some(&ip.subnet),
    )
}

/// Fires or resolves rule 2 for the IP `name` after `cause`.
pub(super) fn check(ctx: &mut Context<'_>, name: &str, cause: &EventRef) {
    let Some(ip) = ctx.state.ip(name) else { return };
    let stuck = ip.deletion_ms.is_some()
        && ip.kube_ovn_finalizer().is_some()
        && !ip.subnet.is_empty()
        && ctx.state.subnet_known_gone(&ip.subnet);
    // The common case, a healthy IP with no alert, computes no id.
    if !stuck && !ctx.book.has_active_for_subject(&ip.uid) {
        return;
    }
    let id = stuck_alert_id(ctx, ip);
    let firing = ctx.book.is_firing(&id);
    if stuck && !firing {
        let finding = finding(ctx, ip, name);
        ctx.fire(finding);
    } else if !stuck && firing {
        let what = if ip.kube_ovn_finalizer().is_none() {
            format!("IP {name} no longer has kube-ovn's finalizer")
        } else {
            format!("Subnet {} exists again", ip.subnet)
        };
        ctx.resolve(&id, evidence(cause, what));
    }
}

fn finding(ctx: &Context<'_>, ip: &IpRecord, name: &str) -> Finding {
    let subnet = ip.subnet.as_str();
    let (index, finalizer) = ip.kube_ovn_finalizer().unwrap_or((0, ""));
    let mut proof = Vec::new();
    if let Some(deleted) = ctx.state.subnet_deletion(subnet) {
        proof.push(evidence(deleted, format!("Subnet {subnet} deleted")));
    }
    let requested = ip.deletion_requested.as_ref().unwrap_or(&ip.last);
    proof.push(evidence(
        requested,
        format!(
            "IP {name} marked for deletion at {}; finalizer {finalizer} keeps it",
            time_text(ip.deletion_ms)
        ),
    ));
    if ip.last.rv != requested.rv {
        proof.push(evidence(&ip.last, format!("IP {name} still terminating")));
    }
    Finding {
        rule: Rule::IpStuckTerminating,
        subject_kind: "IP",
        subject_name: name.to_owned(),
        subject_uid: ip.uid.clone(),
        subnet: Some(subnet.to_owned()),
        summary: format!(
            "IP {name}{} is terminating but its subnet {subnet} is gone: kube-ovn can never remove finalizer {finalizer}",
            describe_ip(ip)
        ),
        fix: Some(remove_finalizer_command("ip", name, &ip.resource_version, index, finalizer)),
        evidence: proof,
    }
}

/// The IP is gone: it is no longer stuck.
pub(super) fn on_ip_gone(ctx: &mut Context<'_>, ip: &IpRecord, by: &EventRef) {
    if !ctx.book.has_active_for_subject(&ip.uid) {
        return;
    }
    let id = stuck_alert_id(ctx, ip);
    if ctx.book.is_firing(&id) {
        ctx.resolve(
            &id,
            evidence(by, format!("IP {} is gone ({})", by.name, by.event_type)),
        );
    }
}
