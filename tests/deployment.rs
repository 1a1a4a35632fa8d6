//! docker-compose.yml and deploy/ (the Helm chart rendered with its default values, checked
//! current by scripts/render-deploy --check; tests/helm_chart.rs checks the chart's other
//! choices) say what the code does: the services, topics, flags and
//! environment variables they use exist, and the collector's permissions are least
//! privilege.

use ipaudit_schemas::KINDS;
use ipaudit_tests::collector::workspace_binary;
use ipaudit_tests::manifests::{get, help, repo, strings, yaml_documents_of};
use serde_yaml_ng::Value;

fn yaml_documents(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    yaml_documents_of(&text, path)
}

/// Every `--flag` and `IPAUDIT_*` variable a service passes is one the binary knows.
fn assert_known(service: &str, command: &[String], env: &[String]) {
    let (binary, subcommand) = (command[0].as_str(), command[1].as_str());
    let help = help(binary, subcommand);
    assert!(
        !help.is_empty(),
        "{service}: `{binary} {subcommand} --help` printed nothing"
    );
    for flag in command.iter().filter(|a| a.starts_with("--")) {
        assert!(
            help.contains(flag.as_str()),
            "{service}: {binary} {subcommand} has no {flag}"
        );
    }
    for name in env.iter().filter(|n| n.starts_with("IPAUDIT_")) {
        assert!(
            help.contains(&format!("env: {name}")),
            "{service}: {binary} {subcommand} reads no {name}"
        );
    }
}

#[test]
fn docker_compose_runs_kafka_its_topics_the_collector_and_the_analyzer() {
    let compose = &yaml_documents("docker-compose.yml")[0];
    let services = compose["services"].as_mapping().expect("services");
    let names: Vec<&str> = services.keys().filter_map(Value::as_str).collect();
    assert_eq!(names, ["kafka", "kafka-init", "collector", "analyzer"]);
    assert!(compose["services"]["kafka"]["image"]
        .as_str()
        .is_some_and(|i| i.starts_with("apache/kafka:")));
    assert_eq!(
        compose["services"]["kafka"]["environment"]["KAFKA_PROCESS_ROLES"],
        "broker,controller"
    );
    let init = strings(&compose["services"]["kafka-init"]["command"]).join(" ");
    for topic in [
        "ipaudit.events",
        "ipaudit.schemas",
        "ipaudit.alerts",
        "ipaudit.commands",
    ] {
        assert!(init.contains(topic), "kafka-init does not create {topic}");
    }
    for service in ["collector", "analyzer"] {
        let spec = &compose["services"][service];
        assert_eq!(
            spec["build"], ".",
            "{service} is built from this repository"
        );
        let env: Vec<String> = spec["environment"].as_mapping().map_or_else(Vec::new, |m| {
            m.keys()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect()
        });
        assert_known(service, &strings(&spec["command"]), &env);
        assert_eq!(spec["environment"]["IPAUDIT_TOPIC"], "ipaudit.events");
    }
    // The topic the compose file uses is the binaries' default too.
    assert!(help("collector", "run").contains("[default: ipaudit.events]"));
    assert!(help("analyzer", "run").contains("[default: ipaudit.events]"));
    for program in ["collector", "analyzer"] {
        assert!(help(program, "run").contains("[default: ipaudit.schemas]"));
    }
}

/// One read-only rule per API group, each listing that group's plurals, in the order of
/// the kind table: what the collector may watch.
fn read_rules_of_the_kind_table() -> Vec<(Vec<String>, Vec<String>, Vec<String>)> {
    let read = vec!["get".to_owned(), "list".into(), "watch".into()];
    let mut rules: Vec<(Vec<String>, Vec<String>, Vec<String>)> = Vec::new();
    for kind in KINDS {
        match rules
            .iter_mut()
            .find(|(groups, _, _)| groups[0] == kind.group)
        {
            Some((_, resources, _)) => resources.push(kind.plural.to_owned()),
            None => rules.push((
                vec![kind.group.to_owned()],
                vec![kind.plural.to_owned()],
                read.clone(),
            )),
        }
    }
    rules
}

#[test]
fn the_collector_may_only_read_the_kinds_of_the_table() {
    let rbac = yaml_documents("deploy/rbac.yaml");
    let role = get(&rbac, "ClusterRole", "ipaudit-collector");
    let rules: Vec<(Vec<String>, Vec<String>, Vec<String>)> = role["rules"]
        .as_sequence()
        .expect("rules")
        .iter()
        .map(|r| {
            (
                strings(&r["apiGroups"]),
                strings(&r["resources"]),
                strings(&r["verbs"]),
            )
        })
        .collect();
    // A kind added to the table without its RBAC (or RBAC for a kind not watched) fails here.
    assert_eq!(rules, read_rules_of_the_kind_table());
    // ...and the binary watches the table: `--kinds` offers exactly its kinds.
    let help = help("collector", "run");
    for kind in KINDS {
        assert!(
            help.contains(&format!("  {} ({}, ", kind.resource(), kind.kind)),
            "collector run --help does not offer {}",
            kind.resource()
        );
    }
    // The remediation role is rendered only with remediation on: tests/helm_chart.rs.
}

#[test]
fn the_collector_deployment_probes_healthz_and_readyz_on_the_port_it_listens_on() {
    let docs = yaml_documents("deploy/collector.yaml");
    let deployment = get(&docs, "Deployment", "ipaudit-collector");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "ipaudit-collector");
    let container = &pod["containers"][0];
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    let env: Vec<(String, Option<String>)> = container["env"]
        .as_sequence()
        .expect("env")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_owned(),
                e["value"].as_str().map(str::to_owned),
            )
        })
        .collect();
    let listen = env
        .iter()
        .find(|(n, _)| n == "IPAUDIT_LISTEN")
        .and_then(|(_, v)| v.clone())
        .expect("IPAUDIT_LISTEN");
    let port = container["ports"][0]["containerPort"]
        .as_u64()
        .expect("port");
    assert!(listen.ends_with(&format!(":{port}")));
    let names: Vec<String> = env.into_iter().map(|(n, _)| n).collect();
    assert_known(
        "deploy/collector.yaml",
        &strings(&container["args"]),
        &names,
    );
}

/// Every document of every file under deploy/, with its file name.
fn deploy_documents() -> Vec<(String, Value)> {
    let mut files: Vec<String> = std::fs::read_dir(repo("deploy"))
        .expect("deploy/")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .flat_map(|file| {
            yaml_documents(&format!("deploy/{file}"))
                .into_iter()
                .map(move |doc| (file.clone(), doc))
        })
        .collect()
}

/// (file/name, labels, pod spec) of every workload under deploy/.
fn pod_templates() -> Vec<(String, Value, Value)> {
    deploy_documents()
        .into_iter()
        .filter(|(_, d)| {
            ["Deployment", "StatefulSet", "DaemonSet", "Job"]
                .contains(&d["kind"].as_str().unwrap_or_default())
        })
        .map(|(file, d)| {
            let name = format!(
                "{file}/{}",
                d["metadata"]["name"].as_str().unwrap_or_default()
            );
            let template = &d["spec"]["template"];
            (
                name,
                template["metadata"]["labels"].clone(),
                template["spec"].clone(),
            )
        })
        .collect()
}

#[test]
fn every_pod_in_deploy_meets_pod_security_restricted() {
    let pods = pod_templates();
    let names: Vec<&str> = pods.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "analyzer.yaml/ipaudit-analyzer",
            "collector.yaml/ipaudit-collector",
            "topics.yaml/ipaudit-topics"
        ]
    );
    for (name, _, pod) in &pods {
        let context = &pod["securityContext"];
        assert_eq!(
            context["seccompProfile"]["type"], "RuntimeDefault",
            "{name}: seccompProfile"
        );
        assert_eq!(context["runAsNonRoot"], true, "{name}: runAsNonRoot");
        for container in pod["containers"].as_sequence().expect("containers") {
            let c = &container["securityContext"];
            assert_eq!(c["allowPrivilegeEscalation"], false, "{name}");
            assert_eq!(strings(&c["capabilities"]["drop"]), ["ALL"], "{name}");
            assert_eq!(c["readOnlyRootFilesystem"], true, "{name}");
        }
    }
}

#[test]
fn only_the_collector_which_uses_the_api_gets_a_service_account_token() {
    for (name, _, pod) in pod_templates() {
        let uses_api = pod["containers"][0]["args"][0] == "collector";
        assert_eq!(
            pod["automountServiceAccountToken"].as_bool(),
            Some(uses_api),
            "{name}: automountServiceAccountToken must be set, true only where the API is used"
        );
    }
    let rbac = yaml_documents("deploy/rbac.yaml");
    let account = get(&rbac, "ServiceAccount", "ipaudit-collector");
    assert_eq!(
        account["automountServiceAccountToken"], false,
        "no token by default; the collector's pod asks for one"
    );
}

/// Asserts that `policy` admits only `port` of the pods labelled `labels`, from a selected
/// namespace rather than from everyone.
fn assert_admits_only_port_from_selected_namespaces(policy: &Value, labels: &Value, port: u64) {
    let name = policy["metadata"]["name"].as_str().unwrap_or_default();
    assert_eq!(
        &policy["spec"]["podSelector"]["matchLabels"], labels,
        "{name}"
    );
    assert_eq!(
        strings(&policy["spec"]["policyTypes"]),
        ["Ingress"],
        "{name}"
    );
    let rules = policy["spec"]["ingress"]
        .as_sequence()
        .expect("ingress rules");
    assert_eq!(rules.len(), 1, "{name}");
    let ports = rules[0]["ports"].as_sequence().expect("ports");
    assert_eq!(ports.len(), 1, "{name}");
    assert_eq!(ports[0]["port"].as_u64(), Some(port), "{name}");
    assert!(
        rules[0]["from"]
            .as_sequence()
            .is_some_and(|f| !f.is_empty()),
        "{name}: the metrics port is open to a selected namespace, not to everyone"
    );
}

#[test]
fn network_policies_admit_only_the_metrics_port_of_each_program() {
    let docs: Vec<Value> = deploy_documents().into_iter().map(|(_, d)| d).collect();
    for (workload, name, policy) in [
        (
            "Deployment",
            "ipaudit-collector",
            "ipaudit-collector-metrics",
        ),
        (
            "StatefulSet",
            "ipaudit-analyzer",
            "ipaudit-analyzer-metrics",
        ),
    ] {
        let set = get(&docs, workload, name);
        let labels = &set["spec"]["template"]["metadata"]["labels"];
        let port = set["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
            .as_u64()
            .expect("metrics port");
        assert_admits_only_port_from_selected_namespaces(
            get(&docs, "NetworkPolicy", policy),
            labels,
            port,
        );
    }
}

#[test]
fn deploy_creates_the_topics_with_replication_and_the_collector_does_not() {
    let topics = yaml_documents("deploy/topics.yaml");
    let job = get(&topics, "Job", "ipaudit-topics");
    let script = strings(&job["spec"]["template"]["spec"]["containers"][0]["args"]).join("\n");
    let factor: u32 = script
        .split("--replication-factor ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("a --replication-factor");
    assert!(factor > 1, "replication factor {factor}");
    assert!(script.contains("min.insync.replicas=2"));
    for topic in [
        "ipaudit.events",
        "ipaudit.schemas",
        "ipaudit.alerts",
        "ipaudit.commands",
    ] {
        assert!(
            script.contains(&format!("create {topic} ")),
            "{topic} not created"
        );
    }
    assert!(
        script.contains("create ipaudit.schemas 1 \"--config cleanup.policy=compact\""),
        "the schemas topic is compacted: one record per schema is kept for ever"
    );
    let collector = yaml_documents("deploy/collector.yaml");
    let container = &get(&collector, "Deployment", "ipaudit-collector")["spec"]["template"]["spec"]
        ["containers"][0];
    let env = container["env"].as_sequence().expect("env");
    let creation: Vec<&Value> = env
        .iter()
        .filter(|e| {
            e["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("IPAUDIT_CREATE_TOPIC"))
        })
        .collect();
    assert!(
        creation.is_empty(),
        "the collector must not create the topic (it does only when asked): {creation:?}"
    );
    assert!(
        !strings(&container["args"]).contains(&"--create-topic".to_owned()),
        "the collector must not create the topic"
    );
}

#[test]
fn the_analyzer_is_a_statefulset_whose_pod_name_is_its_static_group_member_id() {
    let docs = yaml_documents("deploy/analyzer.yaml");
    let set = get(&docs, "StatefulSet", "ipaudit-analyzer");
    assert!(
        !set["spec"]["volumeClaimTemplates"]
            .as_sequence()
            .expect("volumeClaimTemplates")
            .is_empty(),
        "each replica keeps its own state volume"
    );
    let pod = &set["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    let env = container["env"].as_sequence().expect("env");
    let instance = env
        .iter()
        .find(|e| e["name"] == "IPAUDIT_INSTANCE_ID")
        .expect("IPAUDIT_INSTANCE_ID");
    assert_eq!(
        instance["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name",
        "the pod name is stable across restarts: the member id"
    );
    let listen = env
        .iter()
        .find(|e| e["name"] == "IPAUDIT_LISTEN")
        .and_then(|e| e["value"].as_str())
        .expect("IPAUDIT_LISTEN");
    let port = container["ports"][0]["containerPort"]
        .as_u64()
        .expect("port");
    assert!(listen.ends_with(&format!(":{port}")));
    let state = env
        .iter()
        .find(|e| e["name"] == "IPAUDIT_STATE_DIR")
        .and_then(|e| e["value"].as_str())
        .expect("IPAUDIT_STATE_DIR");
    assert_eq!(container["volumeMounts"][0]["mountPath"], state);
    let names: Vec<String> = env
        .iter()
        .filter_map(|e| e["name"].as_str().map(str::to_owned))
        .collect();
    assert_known("deploy/analyzer.yaml", &strings(&container["args"]), &names);
}

#[test]
fn docker_compose_publishes_kafka_metrics_and_the_pages_on_localhost_only() {
    let compose = &yaml_documents("docker-compose.yml")[0];
    let mut published = 0;
    for (name, service) in compose["services"].as_mapping().expect("services") {
        for port in strings(&service["ports"]) {
            published += 1;
            assert!(
                port.starts_with("127.0.0.1:"),
                "{name:?} publishes {port} on every interface"
            );
        }
    }
    assert_eq!(
        published, 3,
        "Kafka, the collector's metrics and the analyzer's incident pages"
    );
}

#[test]
fn each_programs_about_text_names_every_ipam_of_the_kind_table() {
    let mut ipams: Vec<&str> = KINDS
        .iter()
        .filter_map(|k| k.ipam.map(|i| i.as_str()))
        .collect();
    ipams.dedup();
    assert!(ipams.len() >= 3, "{ipams:?}");
    for program in ["analyzer", "collector", "kubectl-ipaudit"] {
        let out = std::process::Command::new(workspace_binary(program))
            .arg("--help")
            .output()
            .expect("runs");
        let help = String::from_utf8_lossy(&out.stdout);
        let about = help.lines().next().unwrap_or_default();
        for ipam in &ipams {
            // Case aside: Calico and Cilium are proper names.
            assert!(
                about.to_lowercase().contains(ipam),
                "`{program} --help` names {ipam} in its first line: {about}"
            );
        }
    }
}
