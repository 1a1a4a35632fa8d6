//! The Helm chart charts/ipaudit, rendered by the real helm (scripts/tools install; `helm`
//! on PATH or $IPAUDIT_HELM) with each values file of charts/ipaudit/ci/ and with the
//! choices an operator makes: what it grants, mounts and runs. scripts/test also
//! validates every rendered object against Kubernetes' OpenAPI schemas.

use std::process::Command;

use ipaudit_cleanup::WRITES;
use ipaudit_schemas::KINDS;
use ipaudit_tests::manifests::{
    self, chart_ci_values_files, find, get, helm, repo, strings, yaml_documents_of,
};
use serde_yaml_ng::Value;

fn helm_template(args: &[&str]) -> std::process::Output {
    let chart = repo("charts/ipaudit");
    Command::new(helm())
        .args(["template", "ipaudit"])
        .arg(&chart)
        .args(["--namespace", "ipaudit", "--kube-version", "1.37.0"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{} (install it: scripts/tools install): {e}", helm()))
}

/// The chart's objects rendered with these helm arguments (`-f FILE`, `--set K=V`).
fn render(args: &[&str]) -> Vec<Value> {
    let out = helm_template(args);
    assert!(
        out.status.success(),
        "helm template {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    yaml_documents_of(&text, "helm template")
        .into_iter()
        .filter(|doc| !doc.is_null())
        .collect()
}

/// helm's error for choices the chart must refuse.
fn refusal(args: &[&str]) -> String {
    let out = helm_template(args);
    assert!(!out.status.success(), "helm template {args:?} rendered");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `[]` (the defaults) and `-f` of every values file in charts/ipaudit/ci/.
fn every_values_file() -> Vec<Vec<String>> {
    std::iter::once(Vec::new())
        .chain(
            chart_ci_values_files()
                .into_iter()
                .map(|f| vec!["-f".to_owned(), f.to_string_lossy().into_owned()]),
        )
        .collect()
}

fn args(owned: &[String]) -> Vec<&str> {
    owned.iter().map(String::as_str).collect()
}

/// (apiGroups, resources, verbs) of each rule of a role.
type Rule = (Vec<String>, Vec<String>, Vec<String>);

/// The rules of a role; none when it has none (a remediation role of IPAMs without
/// cleanups yet).
fn rules(role: &Value) -> Vec<Rule> {
    role["rules"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                strings(&r["apiGroups"]),
                strings(&r["resources"]),
                strings(&r["verbs"]),
            )
        })
        .collect()
}

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> Rule {
    (
        vec![group.to_owned()],
        resources.iter().map(|r| (*r).to_owned()).collect(),
        verbs.iter().map(|v| (*v).to_owned()).collect(),
    )
}

/// The chart's IPAM values, their API groups, and whether their rules read Nodes.
const IPAMS: [(&str, &[&str], bool); 5] = [
    ("kubeOvn", &["kubeovn.io"], false),
    ("whereabouts", &["whereabouts.cni.cncf.io"], false),
    ("spiderpool", &["spiderpool.spidernet.io"], false),
    (
        "calico",
        &["crd.projectcalico.org", "projectcalico.org"],
        true,
    ),
    ("cilium", &["cilium.io"], true),
];

/// The writes the cleanups make (cleanup/src, the ipaudit-cleanup crate), per API group.
fn remediation_writes(group: &str) -> Vec<Rule> {
    // The collector's own table of its cleanup writes: the chart grants exactly those.
    let rules: Vec<Rule> = WRITES
        .iter()
        .filter_map(|write| {
            let kind = KINDS.iter().find(|k| k.stream == write.stream)?;
            let resource = match write.subresource {
                Some(sub) => format!("{}/{sub}", kind.plural),
                None => kind.plural.to_owned(),
            };
            (kind.group == group).then(|| rule(group, &[&resource], &[write.verb]))
        })
        .collect();
    rules
}

/// The pool kind the admission guard reviews, per API group (none for Cilium, which has
/// no pool holding allocations).
fn guarded_pool(group: &str) -> Option<&'static str> {
    match group {
        "kubeovn.io" => Some("subnets"),
        "whereabouts.cni.cncf.io" => Some("ippools"),
        "spiderpool.spidernet.io" => Some("spiderippools"),
        "crd.projectcalico.org" | "projectcalico.org" => Some("ippools"),
        "cilium.io" => None,
        other => panic!("no IPAM has group {other}"),
    }
}

fn container<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    &get(docs, kind, name)["spec"]["template"]["spec"]["containers"][0]
}

fn env_value(container: &Value, name: &str) -> Option<String> {
    container["env"]
        .as_sequence()
        .expect("env")
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e["value"].as_str().unwrap_or_default().to_owned())
}

#[test]
fn each_ipam_choice_grants_reads_writes_and_reviews_of_exactly_its_api_groups() {
    for choice in 1..(1u8 << IPAMS.len()) {
        let chosen: Vec<(&str, &[&str], bool)> = IPAMS
            .iter()
            .enumerate()
            .filter(|(i, _)| choice & (1 << i) != 0)
            .map(|(_, ipam)| *ipam)
            .collect();
        let mut set: Vec<String> = IPAMS
            .iter()
            .map(|(name, _, _)| {
                let on = chosen.iter().any(|(c, _, _)| c == name);
                format!("ipams.{name}={on}")
            })
            .collect();
        set.extend([
            "collector.remediation=on".to_owned(),
            "collector.admissionGuard.mode=warn".to_owned(),
        ]);
        let mut helm_args = Vec::new();
        for s in &set {
            helm_args.extend(["--set", s.as_str()]);
        }
        let docs = render(&helm_args);
        let groups: Vec<&str> = chosen
            .iter()
            .flat_map(|(_, g, _)| g.iter().copied())
            .collect();

        // Read: Pods, Nodes when a chosen IPAM reads them, and the kinds of the table of
        // the chosen groups, one rule per group.
        let core: &[&str] = if chosen.iter().any(|(_, _, nodes)| *nodes) {
            &["pods", "nodes"]
        } else {
            &["pods"]
        };
        let mut expected = vec![rule("", core, &["get", "list", "watch"])];
        for group in &groups {
            let plurals: Vec<&str> = KINDS
                .iter()
                .filter(|k| k.group == *group)
                .map(|k| k.plural)
                .collect();
            assert!(!plurals.is_empty(), "the kind table has no {group}");
            expected.push(rule(group, &plurals, &["get", "list", "watch"]));
        }
        let role = get(&docs, "ClusterRole", "ipaudit-collector");
        assert_eq!(rules(role), expected, "{set:?}: read rules");

        // Write: only what the chosen IPAMs' cleanups change.
        let expected: Vec<Rule> = groups.iter().flat_map(|g| remediation_writes(g)).collect();
        let role = get(&docs, "ClusterRole", "ipaudit-collector-remediate");
        assert_eq!(rules(role), expected, "{set:?}: remediation rules");

        // Review: the DELETE of the chosen IPAMs' pools.
        let webhook = &get(&docs, "ValidatingWebhookConfiguration", "ipaudit-guard")["webhooks"][0];
        // None when no chosen IPAM has a guarded pool kind.
        let reviewed: Vec<(String, Vec<String>)> = webhook["rules"]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    strings(&r["apiGroups"])[0].clone(),
                    strings(&r["resources"]),
                )
            })
            .collect();
        let expected: Vec<(String, Vec<String>)> = groups
            .iter()
            .filter_map(|g| Some(((*g).to_owned(), vec![guarded_pool(g)?.to_owned()])))
            .collect();
        assert_eq!(reviewed, expected, "{set:?}: guarded pools");

        // Watch: every kind the API server serves when all are chosen, else exactly
        // the chosen kinds (the collector must not try a kind its role cannot read).
        let kinds = env_value(
            container(&docs, "Deployment", "ipaudit-collector"),
            "IPAUDIT_KINDS",
        );
        if chosen.len() == IPAMS.len() {
            assert_eq!(kinds, None, "all IPAMs: watch what the API server serves");
        } else {
            let expected: Vec<String> = KINDS
                .iter()
                .filter(|k| groups.contains(&k.group))
                .map(|k| format!("{}.{}", k.plural, k.group))
                .collect();
            assert_eq!(kinds, Some(expected.join(",")), "{set:?}: --kinds");
        }
    }
    assert!(refusal(&[
        "--set",
        "ipams.kubeOvn=false",
        "--set",
        "ipams.whereabouts=false",
        "--set",
        "ipams.spiderpool=false",
        "--set",
        "ipams.calico=false",
        "--set",
        "ipams.cilium=false"
    ])
    .contains("choose at least one"));
}

/// Variables whose value is a secret: the chart must never set them (a file instead).
const SECRET_VALUES: [&str; 5] = [
    "IPAUDIT_KAFKA_SASL_PASSWORD",
    "IPAUDIT_COMMANDS_KEY",
    "IPAUDIT_WEBHOOK_BEARER_TOKEN",
    "IPAUDIT_WEBHOOK_HMAC_SECRET",
    "IPAUDIT_KAFKA_OPTIONS",
];

/// Variables that carry a secret and have no file option: only from a Secret's key.
const SECRET_REFERENCES: [&str; 2] = ["IPAUDIT_WEBHOOK_URL", "IPAUDIT_ALERTMANAGER_URL"];

/// (name, pod spec) of every workload.
fn pods(docs: &[Value]) -> Vec<(String, Value)> {
    docs.iter()
        .filter(|d| {
            ["Deployment", "StatefulSet", "DaemonSet", "Job"]
                .contains(&d["kind"].as_str().unwrap_or_default())
        })
        .map(|d| {
            (
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                d["spec"]["template"]["spec"].clone(),
            )
        })
        .collect()
}

#[test]
fn no_secret_value_is_in_any_environment_variable_and_secret_files_are_mounted_secrets() {
    let mut references = 0;
    let mut files = 0;
    for values in every_values_file() {
        let docs = render(&args(&values));
        assert!(
            !docs.iter().any(|d| d["kind"] == "Secret"),
            "{values:?}: the chart renders no Secret: secrets come from existing ones"
        );
        for (name, pod) in pods(&docs) {
            let volumes = pod["volumes"].as_sequence().cloned().unwrap_or_default();
            for container in pod["containers"].as_sequence().expect("containers") {
                let mounts = container["volumeMounts"]
                    .as_sequence()
                    .cloned()
                    .unwrap_or_default();
                for env in container["env"].as_sequence().cloned().unwrap_or_default() {
                    let var = env["name"].as_str().unwrap_or_default();
                    assert!(
                        !SECRET_VALUES.contains(&var),
                        "{values:?} {name}: {var} puts a secret in the environment"
                    );
                    if SECRET_REFERENCES.contains(&var) {
                        references += 1;
                        assert!(
                            env.get("value").is_none()
                                && env["valueFrom"]["secretKeyRef"]["name"].is_string(),
                            "{values:?} {name}: {var} must come from a Secret: {env:?}"
                        );
                    }
                    // Every *_FILE / *_CERT / *_KEY path is in a mounted Secret volume.
                    let is_file = var.ends_with("_FILE");
                    if !is_file {
                        continue;
                    }
                    files += 1;
                    let path = env["value"].as_str().unwrap_or_default();
                    let mount = mounts
                        .iter()
                        .find(|m| {
                            m["mountPath"]
                                .as_str()
                                .is_some_and(|dir| path.starts_with(&format!("{dir}/")))
                        })
                        .unwrap_or_else(|| {
                            panic!("{values:?} {name}: {var}={path} is not mounted")
                        });
                    assert_eq!(mount["readOnly"], true, "{values:?} {name}: {var}");
                    let volume = volumes
                        .iter()
                        .find(|v| v["name"] == mount["name"])
                        .expect("the mount's volume");
                    assert!(
                        volume["secret"]["secretName"].is_string(),
                        "{values:?} {name}: {var} is read from a Secret"
                    );
                }
            }
        }
    }
    // The values files do choose secrets: the checks above did check something.
    assert!(references >= 2 && files >= 6, "{references} {files}");
}

#[test]
fn every_pod_of_every_values_file_meets_pod_security_restricted() {
    for values in every_values_file() {
        let docs = render(&args(&values));
        let pods = pods(&docs);
        assert!(pods.len() >= 2, "{values:?}");
        for (name, pod) in &pods {
            let context = &pod["securityContext"];
            assert_eq!(
                context["seccompProfile"]["type"], "RuntimeDefault",
                "{name}"
            );
            assert_eq!(context["runAsNonRoot"], true, "{name}");
            assert_eq!(
                pod["automountServiceAccountToken"].as_bool(),
                Some(name == "ipaudit-collector"),
                "{values:?} {name}: only the collector uses the API"
            );
            for container in pod["containers"].as_sequence().expect("containers") {
                let c = &container["securityContext"];
                assert_eq!(c["allowPrivilegeEscalation"], false, "{values:?} {name}");
                assert_eq!(
                    strings(&c["capabilities"]["drop"]),
                    ["ALL"],
                    "{values:?} {name}"
                );
                assert_eq!(c["readOnlyRootFilesystem"], true, "{values:?} {name}");
                assert!(
                    c.get("privileged").is_none() && c.get("runAsUser") != Some(&Value::from(0)),
                    "{values:?} {name}"
                );
            }
            for volume in pod["volumes"].as_sequence().cloned().unwrap_or_default() {
                assert!(
                    volume.get("hostPath").is_none(),
                    "{values:?} {name}: restricted forbids hostPath"
                );
            }
        }
    }
}

fn help(binary: &str) -> String {
    manifests::help(binary, "run")
}

#[test]
fn every_flag_and_variable_the_chart_passes_is_one_the_program_reads() {
    let helps = [
        ("collector", help("collector")),
        ("analyzer", help("analyzer")),
    ];
    for values in every_values_file() {
        let docs = render(&args(&values));
        for (_, pod) in pods(&docs) {
            let container = &pod["containers"][0];
            let command = strings(&container["args"]);
            let Some((_, help)) = helps
                .iter()
                .find(|(b, _)| command.first() == Some(&(*b).to_owned()))
            else {
                continue; // the topics Job runs Kafka's tools
            };
            assert_eq!(command[1], "run");
            for flag in command.iter().filter(|a| a.starts_with("--")) {
                assert!(
                    help.contains(flag.as_str()),
                    "{values:?}: no {flag} in {command:?}"
                );
            }
            for env in container["env"].as_sequence().expect("env") {
                let name = env["name"].as_str().unwrap_or_default();
                assert!(
                    help.contains(&format!("env: {name}")),
                    "{values:?}: {} reads no {name}",
                    command[0]
                );
            }
        }
    }
}

#[test]
fn remediation_rbac_is_granted_only_with_remediation_on_and_commands_are_signed() {
    for (mode, granted) in [
        ("off", false),
        ("dry-run", false),
        ("on", true),
        ("true", true),
    ] {
        let set = format!("collector.remediation={mode}");
        let docs = render(&["--set", &set, "--set", "analyzer.cleanupCommands=true"]);
        assert_eq!(
            find(&docs, "ClusterRole", "ipaudit-collector-remediate").is_some(),
            granted,
            "{mode}"
        );
        let collector = container(&docs, "Deployment", "ipaudit-collector");
        let expected = if mode == "true" { "on" } else { mode };
        assert_eq!(
            env_value(collector, "IPAUDIT_REMEDIATE").as_deref(),
            Some(expected)
        );
        assert_eq!(
            env_value(collector, "IPAUDIT_COMMANDS_KEY_FILE").is_some(),
            mode != "off",
            "{mode}: a remediating collector checks signatures"
        );
        let analyzer = container(&docs, "StatefulSet", "ipaudit-analyzer");
        assert!(env_value(analyzer, "IPAUDIT_COMMANDS_KEY_FILE").is_some());
    }
    // values.schema.json refuses it before the template's own check could.
    assert!(refusal(&["--set", "collector.remediation=maybe"])
        .contains("at '/collector/remediation': value must be one of 'off', 'dry-run', 'on'"));
    assert!(refusal(&[
        "--set",
        "collector.remediation=on",
        "--set",
        "commandsKey.existingSecret="
    ])
    .contains("commandsKey.existingSecret"));
}

/// (a `--set` of a bad value, what helm's refusal must say: where, and what is wrong).
const SCHEMA_REFUSALS: [(&str, &str); 12] = [
    (
        "collector.remedation=on",
        "at '/collector': additional properties 'remedation' not allowed",
    ),
    (
        "kafka.tls.enable=true",
        "at '/kafka/tls': additional properties 'enable' not allowed",
    ),
    ("replicas=3", "at '': additional properties 'replicas' not allowed"),
    (
        "collector.remediation=yes",
        "at '/collector/remediation': value must be one of 'off', 'dry-run', 'on'",
    ),
    (
        "collector.admissionGuard.mode=block",
        "at '/collector/admissionGuard/mode': value must be one of 'off', 'warn', 'deny'",
    ),
    (
        "kafka.securityProtocol=TLS",
        "at '/kafka/securityProtocol': value must be one of",
    ),
    (
        "kafka.sasl.mechanism=SCRAM-SHA-1",
        "at '/kafka/sasl/mechanism': value must be one of 'PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512'",
    ),
    (
        "image.pullPolicy=always",
        "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'",
    ),
    ("analyzer.replicas=0", "at '/analyzer/replicas': minimum: got 0, want 1"),
    (
        "analyzer.replicas=two",
        "at '/analyzer/replicas': got string, want integer",
    ),
    (
        "topics.replicationFactor=0",
        "at '/topics/replicationFactor': minimum: got 0, want 1",
    ),
    ("ipams.kubeOvn=yes", "at '/ipams/kubeOvn': got string, want boolean"),
];

#[test]
fn a_misspelt_or_mistyped_value_is_refused_by_the_values_schema_naming_the_key() {
    for (set, expected) in SCHEMA_REFUSALS {
        let error = refusal(&["--set", set]);
        assert!(
            error.contains("values don't meet the specifications of the schema")
                && error.contains(expected),
            "--set {set}: expected {expected:?} in helm's refusal: {error}"
        );
    }
    // A librdkafka option that is not KEY=VALUE, and a number where a string belongs
    // (a values file's bare `tag: 1.0` is a number too: the image tag must be quoted).
    let error = refusal(&["--set", "kafka.options={socket.keepalive.enable}"]);
    assert!(
        error.contains("at '/kafka/options/0': 'socket.keepalive.enable' does not match"),
        "{error}"
    );
    let error = refusal(&["--set-json", "image.tag=1.0"]);
    assert!(
        error.contains("at '/image/tag': got number, want string"),
        "{error}"
    );
    // The free-form maps and lists stay open, and a bare YAML on/off (a boolean) is still
    // taken for remediation and the guard's mode.
    let docs = render(&[
        "--set",
        "collector.resources.limits.cpu=1",
        "--set",
        "collector.extraArgs={--watch-timeout,290s}",
        "--set",
        "monitoring.serviceMonitor.enabled=true",
        "--set",
        "monitoring.serviceMonitor.labels.team=net",
        "--set",
        "collector.admissionGuard.certManager.issuerRef.kind=ClusterIssuer",
        "--set",
        "collector.admissionGuard.certManager.issuerRef.name=my-ca",
        "--set",
        "collector.remediation=true",
        "--set",
        "collector.admissionGuard.mode=false",
    ]);
    let collector = container(&docs, "Deployment", "ipaudit-collector");
    assert_eq!(collector["resources"]["limits"]["cpu"], 1);
    assert!(
        strings(&collector["args"]).ends_with(&["--watch-timeout".to_owned(), "290s".to_owned()])
    );
    assert_eq!(
        env_value(collector, "IPAUDIT_REMEDIATE").as_deref(),
        Some("on")
    );
    assert_eq!(
        get(&docs, "ServiceMonitor", "ipaudit-collector")["metadata"]["labels"]["team"],
        "net"
    );
    // Every values file of charts/ipaudit/ci/ passes the schema (render asserts success).
    for values in every_values_file() {
        render(&args(&values));
    }
}

#[test]
fn the_admission_guard_serves_the_certificate_cert_manager_issues_or_the_one_given() {
    let denying = repo("charts/ipaudit/ci/guard-deny-cert-manager.yaml");
    let docs = render(&["-f", &denying.to_string_lossy()]);
    let certificate = get(&docs, "Certificate", "ipaudit-collector-admission");
    let secret = certificate["spec"]["secretName"]
        .as_str()
        .expect("secretName");
    assert!(strings(&certificate["spec"]["dnsNames"])
        .contains(&"ipaudit-collector-admission.ipaudit.svc".to_owned()));
    assert_eq!(
        certificate["spec"]["issuerRef"]["name"],
        "ipaudit-selfsigned"
    );
    get(&docs, "Issuer", "ipaudit-selfsigned");
    let webhook = get(&docs, "ValidatingWebhookConfiguration", "ipaudit-guard");
    assert_eq!(
        webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "ipaudit/ipaudit-collector-admission"
    );
    let hooks = webhook["webhooks"].as_sequence().expect("webhooks");
    assert_eq!(hooks.len(), 1);
    let hook = &hooks[0];
    assert_eq!(
        hook["failurePolicy"], "Ignore",
        "never block the IPAMs' own deletions"
    );
    assert_eq!(hook["timeoutSeconds"], 2);
    assert_eq!(hook["sideEffects"], "None");
    assert!(
        hook["objectSelector"].is_null(),
        "no object may opt out by its labels"
    );
    assert_eq!(strings(&hook["admissionReviewVersions"]), ["v1"]);
    // DELETE of exactly the pools the guard reviews (the simulated API server's kinds).
    let mut reviewed = Vec::new();
    for rule in hook["rules"].as_sequence().expect("rules") {
        assert_eq!(strings(&rule["operations"]), ["DELETE"], "DELETE only");
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                reviewed.push((group.clone(), resource));
            }
        }
    }
    let guarded: Vec<(String, String)> = [
        kube_sim::Kind::Subnet,
        kube_sim::Kind::IpPool,
        kube_sim::Kind::SpiderIpPool,
        kube_sim::Kind::CalicoIpPool,
        kube_sim::Kind::CalicoV3IpPool,
    ]
    .iter()
    .filter_map(|k| k.spec())
    .map(|s| (s.group.to_owned(), s.plural.to_owned()))
    .collect();
    assert_eq!(reviewed, guarded);
    let client = &hook["clientConfig"]["service"];
    assert_eq!(client["name"], "ipaudit-collector-admission");
    assert_eq!(client["namespace"], "ipaudit");
    assert_eq!(client["path"], "/validate");
    let deployment = get(&docs, "Deployment", "ipaudit-collector");
    let pod = &deployment["spec"]["template"]["spec"];
    let collector = &pod["containers"][0];
    assert_eq!(
        env_value(collector, "IPAUDIT_GUARD").as_deref(),
        Some("deny")
    );
    let listen = env_value(collector, "IPAUDIT_ADMISSION_LISTEN").expect("admission listen");
    let port = collector["ports"]
        .as_sequence()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == "admission")
        .and_then(|p| p["containerPort"].as_u64())
        .expect("admission port");
    assert!(listen.ends_with(&format!(":{port}")));
    let service = get(&docs, "Service", "ipaudit-collector-admission");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "admission");
    assert_eq!(client["port"], service["spec"]["ports"][0]["port"]);
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["template"]["metadata"]["labels"]
    );
    let volume = pod["volumes"]
        .as_sequence()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "admission-tls")
        .expect("admission-tls volume");
    assert_eq!(volume["secret"]["secretName"], secret);

    let given = repo("charts/ipaudit/ci/guard-warn-certificate.yaml");
    let docs = render(&["-f", &given.to_string_lossy()]);
    assert!(find(&docs, "Certificate", "ipaudit-collector-admission").is_none());
    let webhook = get(&docs, "ValidatingWebhookConfiguration", "ipaudit-guard");
    assert!(webhook["webhooks"][0]["clientConfig"]["caBundle"].is_string());
    assert!(webhook["metadata"]["annotations"].is_null());
    assert!(refusal(&[
        "--set",
        "collector.admissionGuard.mode=warn",
        "--set",
        "collector.admissionGuard.certManager.enabled=false"
    ])
    .contains("collector.admissionGuard"));
    // Off: no webhook at all.
    let docs = render(&[]);
    assert!(!docs
        .iter()
        .any(|d| d["kind"] == "ValidatingWebhookConfiguration"));
}

#[test]
fn the_monitoring_objects_carry_the_rules_and_the_dashboard_of_the_chart_files() {
    let values = repo("charts/ipaudit/ci/monitoring.yaml");
    let docs = render(&["-f", &values.to_string_lossy()]);
    let rule = get(&docs, "PrometheusRule", "ipaudit");
    let file = std::fs::read_to_string(repo("charts/ipaudit/files/prometheus-rules.yaml"))
        .expect("rules file")
        .replace(
            "RUNBOOK_BASE_URL",
            "https://ipaudit.example/book/operators/runbooks.html",
        );
    let file: Value = serde_yaml_ng::from_str(&file).expect("rules YAML");
    assert_eq!(rule["spec"], file);
    let dashboard = get(&docs, "ConfigMap", "ipaudit-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let rendered: serde_json::Value =
        serde_json::from_str(dashboard["data"]["ipaudit.json"].as_str().expect("JSON"))
            .expect("dashboard JSON");
    let file: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo("charts/ipaudit/files/grafana-dashboard.json"))
            .expect("dashboard file"),
    )
    .expect("dashboard JSON");
    assert_eq!(rendered, file);
    for component in ["collector", "analyzer"] {
        let monitor = get(&docs, "ServiceMonitor", &format!("ipaudit-{component}"));
        let selector = &monitor["spec"]["selector"]["matchLabels"];
        // The ServiceMonitor selects a Service of that program with its metrics port.
        let service = docs
            .iter()
            .find(|d| {
                d["kind"] == "Service"
                    && d["metadata"]["labels"]["app.kubernetes.io/name"]
                        == selector["app.kubernetes.io/name"]
                    && d["spec"]["ports"][0]["name"] == monitor["spec"]["endpoints"][0]["port"]
            })
            .unwrap_or_else(|| panic!("no Service for the {component} ServiceMonitor"));
        assert_eq!(service["spec"]["selector"], *selector);
    }
    assert!(
        refusal(&["--set", "monitoring.prometheusRule.enabled=true"]).contains("runbookBaseUrl")
    );
}

#[test]
fn the_incident_pages_list_every_replica_as_a_peer_and_admit_only_the_chosen_namespaces() {
    let values = repo("charts/ipaudit/ci/pages.yaml");
    let docs = render(&["-f", values.to_str().expect("UTF-8 path")]);
    let analyzer = container(&docs, "StatefulSet", "ipaudit-analyzer");
    let peers = env_value(analyzer, "IPAUDIT_UI_PEERS").expect("IPAUDIT_UI_PEERS");
    assert_eq!(
        peers.split(',').collect::<Vec<_>>(),
        (0..3)
            .map(|i| format!(
                "http://ipaudit-analyzer-{i}.ipaudit-analyzer.ipaudit.svc:9091/ipaudit"
            ))
            .collect::<Vec<_>>(),
        "every replica, under the base path"
    );
    assert_eq!(
        env_value(analyzer, "IPAUDIT_UI_URL").as_deref(),
        Some("https://ops.example.com/ipaudit")
    );
    let policy = get(&docs, "NetworkPolicy", "ipaudit-analyzer-pages");
    let from = &policy["spec"]["ingress"][0]["from"];
    assert_eq!(
        from[0]["namespaceSelector"]["matchLabels"],
        serde_yaml_ng::from_str::<Value>("kubernetes.io/metadata.name: ingress-nginx")
            .expect("YAML"),
        "the operator's labels replace the default"
    );
    assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["port"], 9091);
    let defaults = render(&[]);
    let policy = get(&defaults, "NetworkPolicy", "ipaudit-analyzer-pages");
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]
            ["ipaudit.io/incident-pages"],
        "allowed"
    );
    let off = render(&["--set", "analyzer.pages.enabled=false"]);
    assert!(find(&off, "Service", "ipaudit-analyzer-pages").is_none());
    assert_eq!(
        env_value(
            container(&off, "StatefulSet", "ipaudit-analyzer"),
            "IPAUDIT_UI_LISTEN"
        )
        .as_deref(),
        Some(""),
        "pages off: the analyzer serves none"
    );
}

/// mdBook's id of a heading: lower case, spaces to `-`, other punctuation dropped.
fn heading_id(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_alert_rule_links_a_section_of_the_books_runbooks_page() {
    let page =
        std::fs::read_to_string(repo("book/src/operators/runbooks.md")).expect("runbooks page");
    let ids: Vec<String> = page
        .lines()
        .filter_map(|line| line.strip_prefix('#'))
        .map(|line| heading_id(line.trim_start_matches('#')))
        .collect();
    let rules = std::fs::read_to_string(repo("charts/ipaudit/files/prometheus-rules.yaml"))
        .expect("rules file");
    let anchors: Vec<&str> = rules
        .lines()
        .filter_map(|line| line.split_once("RUNBOOK_BASE_URL#"))
        .map(|(_, anchor)| anchor.trim_end_matches('"'))
        .collect();
    assert!(
        anchors.len() >= 18,
        "every rule has a runbook link: {anchors:?}"
    );
    for anchor in anchors {
        assert!(
            ids.iter().any(|id| id == anchor),
            "no runbook section #{anchor} in book/src/operators/runbooks.md"
        );
    }
}
