//! Rule 1, `subnet-deleted-before-ip`: a Subnet's deletion comes while IPs still name it
//! (spec.subnet or an attachment subnet). kube-ovn releases such an IP only through its
//! subnet, so the address leaks. Resolved when the IP is gone, stops naming the subnet, or
//! the subnet exists again.

use super::{describe_ip, evidence, remove_finalizer_command, Context, Rule};
use crate::alerts::{alert_id, Finding};
use crate::state::{EventRef, IpRecord};
use ipaudit_schemas::EventType;

/// The subnet `deletion.name` was just deleted: every live IP naming it leaks.
pub(super) fn on_subnet_deleted(ctx: &mut Context<'_>, deletion: &EventRef) {
    let subnet = deletion.name.as_str();
    for name in ctx.state.ips_naming(subnet) {
        let Some(ip) = ctx.state.ip(&name) else {
            continue;
        };
        let how = if deletion.event_type == EventType::DeletedOnRelist {
            "was found deleted on relist"
        } else {
            "was deleted"
        };
        let finding = Finding {
            rule: Rule::SubnetDeletedBeforeIp,
            subject_kind: "IP",
            subject_name: name.clone(),
            subject_uid: ip.uid.clone(),
            subnet: Some(subnet.to_owned()),
            summary: format!(
                "Subnet {subnet} {how} while IP {name}{} still named it: kube-ovn cannot release this address",
                describe_ip(ip)
            ),
            fix: Some(fix_for(ip, &name, subnet)),
            evidence: vec![
                evidence(&ip.last, format!("IP {name} on subnet {subnet}{}, finalizers [{}]", describe_ip(ip), ip.finalizers.join(", "))),
                evidence(deletion, format!("Subnet {subnet} deleted while {} IP(s) still named it", ctx.state.ips_naming(subnet).len())),
            ],
        };
        ctx.fire(finding);
    }
}

fn fix_for(ip: &IpRecord, name: &str, subnet: &str) -> String {
    let patch = match ip.kube_ovn_finalizer() {
        Some((index, finalizer)) => format!(
            "; if it then stays terminating, remove kube-ovn's finalizer: {}",
            remove_finalizer_command("ip", name, "<current resourceVersion>", index, finalizer)
        ),
        None => String::new(),
    };
    format!(
        "Recreate subnet {subnet} so that kube-ovn releases the address, or, if pod {} is gone, delete the IP: kubectl delete ip {name}{patch}",
        if ip.pod.is_empty() { "(none)" } else { ip.pod.as_str() }
    )
}

/// The IP `name` changed: resolve its rule-1 alerts that no longer hold.
pub(super) fn recheck_ip(ctx: &mut Context<'_>, name: &str, cause: &EventRef) {
    let Some(ip) = ctx.state.ip(name) else { return };
    if !ctx.book.has_active_for_subject(&ip.uid) {
        return;
    }
    let uid = ip.uid.clone();
    for id in ctx.book.active_for_subject(&uid) {
        let Some(alert) = ctx.book.get(&id) else {
            continue;
        };
        if alert.rule != Rule::SubnetDeletedBeforeIp.name() {
            continue;
        }
        let subnet = alert.subnet.clone().unwrap_or_default();
        let still_named = ip.subnets().any(|s| s == subnet);
        let restored = ctx.state.subnet(&subnet).is_some();
        if !still_named || restored {
            let what = if restored {
                format!("Subnet {subnet} exists again")
            } else {
                format!("IP {name} no longer names subnet {subnet}")
            };
            ctx.resolve(&id, evidence(cause, what));
        }
    }
}

/// The IP is gone: its leak is over.
pub(super) fn on_ip_gone(ctx: &mut Context<'_>, ip: &IpRecord, by: &EventRef) {
    if !ctx.book.has_active_for_subject(&ip.uid) {
        return;
    }
    for subnet in ip.subnets() {
        let id = alert_id(
            ctx.cluster_id,
            Rule::SubnetDeletedBeforeIp,
            &ip.uid,
            Some(subnet),
        );
        if ctx.book.is_firing(&id) {
            ctx.resolve(
                &id,
                evidence(by, format!("IP {} is gone ({})", by.name, by.event_type)),
            );
        }
    }
}
