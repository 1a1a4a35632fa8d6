//! The commands in a finding's `fix`: kubectl lines a person pastes into a shell, so they
//! must not be able to run anything else whatever the recorded events say.
//!
//! Names come from events, and events can be forged (anyone who can write to the events
//! topic or hand over a recording). So every name that goes into a command is checked to be
//! a Kubernetes name (DNS-1123 subdomain; namespaces DNS-1123 labels), a resourceVersion
//! must be a decimal number, JSON patches are built by serde_json, and every argument is
//! shell-quoted (`shlex`). A builder given something else returns [`NO_COMMAND`] in place
//! of the command; [`vet`] then drops the whole fix and says why in the summary. [`vet`]
//! also refuses a fix text in which a shell would expand or redirect anything, as a net
//! under every rule's text.

use ipaudit_schemas::Alert;
use serde_json::json;

/// Stands in for a command that could not be built safely; a fix holding it is dropped.
pub const NO_COMMAND: &str = "<no command: a name in the events is not a valid Kubernetes name>";

/// The resourceVersion placeholder of a command whose version is not known yet.
pub const CURRENT_VERSION: &str = "<current resourceVersion>";

/// Whether `name` is a DNS-1123 subdomain: at most 253 lowercase letters, digits, `-` and
/// `.`, starting and ending with a letter or digit (the names of most Kubernetes objects).
pub fn is_object_name(name: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 253
        && bytes.iter().all(|&b| alnum(b) || b == b'-' || b == b'.')
        && bytes.first().copied().is_some_and(alnum)
        && bytes.last().copied().is_some_and(alnum)
}

/// Whether `name` is a DNS-1123 label (namespaces): a subdomain of at most 63 bytes and no dot.
pub fn is_label_name(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && is_object_name(name)
}

/// Whether `key` is `name` or `namespace/name` with valid parts.
pub fn is_object_key(key: &str) -> bool {
    match key.split_once('/') {
        Some((namespace, name)) => is_label_name(namespace) && is_object_name(name),
        None => is_object_name(key),
    }
}

/// Whether `rv` is a resourceVersion as etcd makes them: a decimal number.
pub fn is_resource_version(rv: &str) -> bool {
    !rv.is_empty() && rv.len() <= 19 && rv.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `resource` is a resource as kubectl takes it (`ip`, `spiderendpoints.spiderpool.spidernet.io`).
fn is_resource(resource: &str) -> bool {
    is_object_name(resource)
}

/// `kubectl ARGS...`, every argument quoted for a POSIX shell (those made only of
/// characters no shell acts on are left as they are, so that the command reads as usual).
fn kubectl<S: AsRef<str>>(args: &[S]) -> String {
    let plain = |arg: &str| {
        !arg.is_empty()
            && arg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@%+".contains(&b))
    };
    let mut command = String::from("kubectl");
    for arg in args {
        let arg = arg.as_ref();
        command.push(' ');
        if plain(arg) {
            command.push_str(arg);
            continue;
        }
        // Only a NUL byte makes quoting fail: then there is no command.
        match shlex::try_quote(arg) {
            Ok(quoted) => command.push_str(&quoted),
            Err(_) => return NO_COMMAND.to_owned(),
        }
    }
    command
}

/// `RESOURCE [-n NAMESPACE] NAME`, or `None` when a part is not a valid name.
fn target(resource: &str, key: &str) -> Option<Vec<String>> {
    if !is_resource(resource) || !is_object_key(key) {
        return None;
    }
    Some(match key.split_once('/') {
        Some((namespace, name)) => vec![
            resource.to_owned(),
            "-n".to_owned(),
            namespace.to_owned(),
            name.to_owned(),
        ],
        None => vec![resource.to_owned(), key.to_owned()],
    })
}

/// `kubectl delete RESOURCE [-n NS] NAME`.
pub fn delete(resource: &str, key: &str) -> String {
    match target(resource, key) {
        Some(target) => kubectl(&[vec!["delete".to_owned()], target].concat()),
        None => NO_COMMAND.to_owned(),
    }
}

/// `kubectl get RESOURCE -l LABEL=VALUE`, for a label whose value is an object name.
pub fn list_by_label(resource: &str, label: &str, value: &str) -> String {
    if !is_resource(resource) || !is_object_name(value) || value.len() > 63 {
        return NO_COMMAND.to_owned();
    }
    kubectl(&["get", resource, "-l", &format!("{label}={value}")])
}

/// `kubectl patch RESOURCE [-n NS] NAME --type=json -p PATCH`, guarded by a test of the
/// object's resourceVersion (a number, or [`CURRENT_VERSION`] for the person to fill in).
pub fn json_patch(resource: &str, key: &str, rv: &str, ops: Vec<serde_json::Value>) -> String {
    let Some(target) = target(resource, key) else {
        return NO_COMMAND.to_owned();
    };
    if !is_resource_version(rv) && rv != CURRENT_VERSION {
        return NO_COMMAND.to_owned();
    }
    let mut patch = vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv})];
    patch.extend(ops);
    let patch = serde_json::Value::Array(patch).to_string();
    let args = [
        vec!["patch".to_owned()],
        target,
        vec!["--type=json".to_owned(), "-p".to_owned(), patch],
    ]
    .concat();
    kubectl(&args)
}

/// Removes finalizer `finalizer` at `index`, only if the object is still at `rv` and the
/// finalizer is still there.
pub fn remove_finalizer(
    resource: &str,
    key: &str,
    rv: &str,
    index: usize,
    finalizer: &str,
) -> String {
    let path = format!("/metadata/finalizers/{index}");
    json_patch(
        resource,
        key,
        rv,
        vec![
            json!({"op": "test", "path": path, "value": finalizer}),
            json!({"op": "remove", "path": path}),
        ],
    )
}

/// Whether pasting `text` into a POSIX shell expands, substitutes or redirects nothing:
/// outside quotes no `$`, backquote, `|`, `&`, `<`, `>`, `!` or line break; inside double
/// quotes no unescaped `$`, backquote or `!`; a backslash makes the next character literal
/// (outside single quotes); quotes are balanced.
pub fn is_inert_in_shell(text: &str) -> bool {
    #[derive(PartialEq, Clone, Copy)]
    enum Quote {
        None,
        Single,
        Double,
    }
    let mut quote = Quote::None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        quote = match (quote, c) {
            (Quote::Single, '\'') => Quote::None,
            (Quote::Single, _) => Quote::Single,
            (Quote::Double | Quote::None, '\\') => {
                if chars.next().is_none() {
                    return false;
                }
                quote
            }
            (Quote::Double, '"') => Quote::None,
            (Quote::Double, '$' | '`' | '!') => return false,
            (Quote::Double, _) => Quote::Double,
            (Quote::None, '\'') => Quote::Single,
            (Quote::None, '"') => Quote::Double,
            (Quote::None, '$' | '`' | '|' | '&' | '<' | '>' | '!' | '\n' | '\r') => return false,
            (Quote::None, _) => Quote::None,
        };
    }
    quote == Quote::None
}

/// Drops a fix that is not safe to paste, and says why in the summary. Checked: the
/// subject's and the subnet's names are Kubernetes names, no command was refused by its
/// builder, and each command (from `kubectl` on) is inert in a shell but for itself.
pub fn vet(alert: &mut Alert) {
    let Some(fix) = &alert.fix else {
        return;
    };
    // Only fixes with commands name objects for a shell; prose is read, not run.
    let has_commands = commands(fix).next().is_some();
    let why = if fix.contains(NO_COMMAND) {
        Some("a name in the events is not a valid Kubernetes name".to_owned())
    } else if !has_commands {
        None
    } else if !is_subject_name(&alert.subject_kind, &alert.subject_name) {
        Some(format!(
            "the {}'s name is not a valid Kubernetes name",
            alert.subject_kind
        ))
    } else if alert.subnet.as_deref().is_some_and(|s| !is_object_key(s)) {
        Some("the subnet's or pool's name is not a valid Kubernetes name".to_owned())
    } else if commands(fix).any(|command| !is_inert_in_shell(command)) {
        Some("the command would not be safe to paste into a shell".to_owned())
    } else {
        None
    };
    if let Some(why) = why {
        alert.fix = None;
        alert
            .summary
            .push_str(&format!(" (no fix command is given: {why})"));
    }
}

/// Whether an alert's subject is named by Kubernetes names: an object key, or for an
/// allocation of a pool (`POOL/ADDRESS`, e.g. `kube-system/10.200.0.0-16/10.200.5.12`) the
/// pool's key and an IP address.
fn is_subject_name(kind: &str, name: &str) -> bool {
    match (kind, name.rsplit_once('/')) {
        ("Allocation", Some((pool, address))) => {
            is_object_key(pool) && address.parse::<std::net::IpAddr>().is_ok()
        }
        _ => is_object_key(name),
    }
}

/// Why a rule's alert carries no cleanup the collector can run; `None` when it carries
/// one (ip-stuck-terminating, ip-without-pod on whereabouts and spiderpool records).
pub fn report_only_reason(rule: &str, subject_kind: &str) -> Option<&'static str> {
    Some(match rule {
        "duplicate-ip" | "ip-released-while-pod-alive" => {
            "which holder keeps the address is a person's decision"
        }
        "allocation-records-disagree" => {
            "which record is wrong is a person's decision (once a pod is gone past the grace, its records' own ip-without-pod alerts carry cleanups)"
        }
        "ip-orphaned" => {
            "whether its pod still needs the address is a person's decision (the ipaudit plugin's release deletes an orphaned IP on request, guarded)"
        }
        "subnet-deleted-before-ip" => {
            "recreating the subnet or pool, or deleting the pod, is a person's decision (an IP then deleted and stuck on its finalizer gets ip-stuck-terminating, which carries the cleanup)"
        }
        "subnet-stuck-terminating" => {
            "a subnet or pool is released by its IPAM once nothing uses it (the alerts of what still uses it carry their cleanups)"
        }
        "ip-without-pod" if subject_kind == "IP" => {
            "kube-ovn releases the address once the IP is deleted (the command above)"
        }
        "ip-without-pod" if subject_kind == "Address" => {
            "a CiliumNode's used addresses are its agent's to release (its status is the agent's own record)"
        }
        "ip-without-handle" => {
            "whether to release the address or recreate its handle depends on whether its pod still runs, a person's decision"
        }
        "handle-without-ip" => {
            "a handle counting too many addresses is rewritten by hand, with the counts its blocks show (an orphan handle's alert carries its deletion)"
        }
        "block-of-missing-node" => {
            "what keeps a gone node's blocks is an allocation only a person can judge (Calico's kube-controllers and Cilium's operator release the rest)"
        }
        _ => return None,
    })
}

/// Appends to a fix why its alert carries no cleanup, once, after the last command (a
/// `; ` ends a command, so the note is never pasted with one). Applied to every transition
/// as it leaves the alert book, firing or resolved, so that an alert restored from an older
/// release's checkpoint resolves with the same text as one fired now.
pub fn explain_report_only(alert: &mut Alert) {
    if alert.cleanup.is_some() {
        return;
    }
    let Some(why) = report_only_reason(&alert.rule, &alert.subject_kind) else {
        return;
    };
    if let Some(fix) = alert.fix.as_mut().filter(|f| !f.contains(REPORT_ONLY)) {
        fix.push_str(&format!("; {REPORT_ONLY} {why}"));
    }
}

/// What [`explain_report_only`] writes before the reason.
const REPORT_ONLY: &str = "report-only: ipaudit sends no cleanup, as";

/// The commands in a fix text: each from `kubectl ` to the end of its sentence (`; ` or
/// the end of the text).
pub fn commands(fix: &str) -> impl Iterator<Item = &str> {
    fix.match_indices("kubectl ").map(move |(start, _)| {
        let rest = &fix[start..];
        command_end(rest).map_or(rest, |end| &rest[..end])
    })
}

/// Where a command ends: at a `; ` outside quotes.
fn command_end(command: &str) -> Option<usize> {
    let (mut single, mut double, mut escaped) = (false, false, false);
    let bytes = command.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if escaped {
            escaped = false;
            continue;
        }
        match b {
            b'\\' if !single => escaped = true,
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b';' if !single && !double && bytes.get(i + 1) == Some(&b' ') => return Some(i),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_either_carries_a_cleanup_or_says_why_not() {
        // The rules whose alerts carry cleanups the collector runs (cleanup/src, the ipaudit-cleanup crate):
        // every record of ip-stuck-terminating, and ip-without-pod's whereabouts and
        // spiderpool records; a kube-ovn IP's ip-without-pod has a reason.
        let with_cleanup = ["ip-stuck-terminating", "ip-without-pod"];
        for rule in crate::analysis::rules::all() {
            let name = rule.name();
            assert!(
                with_cleanup.contains(&name) || report_only_reason(name, "Address").is_some(),
                "{name}: neither a cleanup nor a reason"
            );
        }
        assert!(report_only_reason("ip-without-pod", "IP").is_some());
        assert!(report_only_reason("ip-without-pod", "Allocation").is_none());
        for reason in ["duplicate-ip", "ip-orphaned", "subnet-stuck-terminating"]
            .map(|rule| report_only_reason(rule, "IP").unwrap_or_default())
        {
            assert!(
                !reason.contains("kubectl "),
                "a reason is no command: {reason}"
            );
        }
    }

    #[test]
    fn the_report_only_note_comes_once_after_the_last_command() {
        let mut alert = Alert {
            alert_id: "a1".into(),
            cluster_id: "c".into(),
            rule: "ip-orphaned".into(),
            severity: ipaudit_schemas::Severity::Critical,
            status: ipaudit_schemas::AlertStatus::Firing,
            subject_kind: "IP".into(),
            subject_name: "a".into(),
            subject_uid: "u".into(),
            subnet: None,
            summary: String::new(),
            fix: Some("Recreate it, or delete it: kubectl delete ip a".into()),
            epoch: 0,
            fired_at_ms: 0,
            resolved_at_ms: None,
            fired_resource_version: "1".into(),
            resolved_resource_version: None,
            evidence: Vec::new(),
            cleanup: None,
            url: None,
            namespace: None,
        };
        explain_report_only(&mut alert);
        explain_report_only(&mut alert);
        let fix = alert.fix.clone().unwrap();
        assert_eq!(fix.matches("report-only").count(), 1, "{fix}");
        assert_eq!(commands(&fix).collect::<Vec<_>>(), ["kubectl delete ip a"]);
        alert.cleanup = Some(ipaudit_schemas::Cleanup {
            action: ipaudit_schemas::CleanupAction::Delete,
            target_stream: ipaudit_schemas::Stream::Ip,
            target_name: "a".into(),
            target_namespace: None,
            target_uid: "u".into(),
            resource_version: "1".into(),
            finalizer: String::new(),
            pool: String::new(),
            address: None,
        });
        alert.fix = Some("x".into());
        explain_report_only(&mut alert);
        assert_eq!(
            alert.fix.as_deref(),
            Some("x"),
            "an alert with a cleanup is not report-only"
        );
    }

    #[test]
    fn kubernetes_names_are_told_from_others() {
        for good in [
            "ip1",
            "a.b-c",
            "10.0.0.5",
            "test-vm-1.ns.net.ns.ovn",
            "fd00--5",
        ] {
            assert!(is_object_name(good), "{good}");
        }
        for bad in [
            "",
            "IP1",
            "ip1$(id>&2)",
            "-a",
            "a-",
            "a b",
            "a;b",
            "a'b",
            &"a".repeat(254),
        ] {
            assert!(!is_object_name(bad), "{bad}");
        }
        assert!(is_object_key("ns/pod-1"));
        assert!(!is_object_key("n.s/pod-1"));
        assert!(!is_object_key("ns/pod/1"));
        assert!(is_resource_version("1120"));
        assert!(!is_resource_version("12 3"));
        assert!(!is_resource_version("1$(id)"));
    }

    #[test]
    fn a_finalizer_patch_splits_into_exactly_its_arguments() {
        let finalizer = "kube-ovn-controller'$(id)\"";
        let command = remove_finalizer("ip", "ip-1.ns", "1120", 0, finalizer);
        let argv = shlex::split(&command).unwrap();
        assert_eq!(
            argv[..6],
            ["kubectl", "patch", "ip", "ip-1.ns", "--type=json", "-p"]
        );
        assert_eq!(argv.len(), 7);
        let patch: serde_json::Value = serde_json::from_str(&argv[6]).unwrap();
        assert_eq!(patch[0]["value"], "1120");
        assert_eq!(patch[1]["value"], finalizer);
        assert_eq!(
            patch[2],
            json!({"op": "remove", "path": "/metadata/finalizers/0"})
        );
        assert!(is_inert_in_shell(&command), "{command}");
    }

    #[test]
    fn an_invalid_name_or_version_gives_no_command() {
        assert_eq!(delete("ip", "ip1$(id>&2)"), NO_COMMAND);
        assert_eq!(remove_finalizer("ip", "ip1", "1$(id)", 0, "f"), NO_COMMAND);
        assert_eq!(delete("pod", "n s/p"), NO_COMMAND);
        assert_eq!(
            shlex::split(&delete("pod", "ns/p")).unwrap(),
            ["kubectl", "delete", "pod", "-n", "ns", "p"]
        );
    }

    #[test]
    fn shell_active_text_is_found() {
        assert!(is_inert_in_shell("kubectl delete ip 'a b'"));
        assert!(!is_inert_in_shell("kubectl delete ip a$(id)"));
        assert!(!is_inert_in_shell("kubectl delete ip \"$(id)\""));
        assert!(!is_inert_in_shell("kubectl delete ip a>&2"));
        assert!(!is_inert_in_shell("kubectl delete ip 'a"));
        assert!(is_inert_in_shell("kubectl delete ip \"a\\$b\" c\\&"));
    }

    #[test]
    fn commands_are_found_in_prose() {
        let fix = "Recreate it, or delete it: kubectl delete ip a; if it stays, kubectl patch ip a -p '[{\"a\": \"; \"}]'";
        let found: Vec<&str> = commands(fix).collect();
        assert_eq!(
            found,
            [
                "kubectl delete ip a",
                "kubectl patch ip a -p '[{\"a\": \"; \"}]'"
            ]
        );
    }
}
