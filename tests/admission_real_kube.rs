//! The admission guard called by a real kube-apiserver (`scripts/kube`, a server of the
//! test's own: webhook configurations are cluster-wide). The chart's
//! ValidatingWebhookConfiguration, as `helm template` renders it, is registered with a test
//! CA's caBundle and, since the server has no Service to route to, a URL on 127.0.0.1 where
//! the collector serves the webhook; everything else (rules, failure policy, timeout) is the
//! chart's. Deletions go through the API with kubectl: the server sends its own
//! AdmissionReview over TLS, and kubectl shows what the guard answered.

use std::process::Command;
use std::time::Duration;

use ipaudit_tests::collector::{CollectorProcess, CollectorSetup};
use ipaudit_tests::kube::KubeServer;
use ipaudit_tests::tls::Certs;
use ipaudit_tests::wait_for;
use ipaudit_tests::world::World;
use serde_json::{json, Value};

/// The chart's ValidatingWebhookConfiguration for the guard in `mode`, its client config
/// pointed at `https://127.0.0.1:port/validate` and trusting `certs`' CA.
fn charts_webhook(certs: &Certs, port: u16) -> Value {
    let ca = std::fs::read(&certs.ca).expect("CA");
    let ca = base64_of(&ca);
    let chart = ipaudit_tests::manifest_dir().join("../charts/ipaudit");
    let out = Command::new(ipaudit_tests::manifests::helm())
        .args(["template", "ipaudit"])
        .arg(&chart)
        .args(["--namespace", "ipaudit", "--kube-version", "1.34.4"])
        .args(["--set", "collector.admissionGuard.mode=deny"])
        .args([
            "--set",
            "collector.admissionGuard.certManager.enabled=false",
        ])
        .args(["--set", "collector.admissionGuard.existingSecret=guard-tls"])
        .args(["--set", &format!("collector.admissionGuard.caBundle={ca}")])
        .args(["--show-only", "templates/admission.yaml"])
        .output()
        .expect("helm (scripts/tools install; scripts/test puts it on PATH)");
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    let mut webhook: Value = ipaudit_tests::manifests::yaml_documents_of(&text, "admission.yaml")
        .into_iter()
        .map(|doc| serde_json::to_value(doc).expect("YAML as JSON"))
        .find(|doc| doc["kind"] == "ValidatingWebhookConfiguration")
        .expect("the chart renders the webhook configuration");
    let config = &mut webhook["webhooks"][0]["clientConfig"];
    assert_eq!(config["caBundle"], ca.as_str(), "the chart's caBundle");
    assert!(config["service"].is_object(), "{config}");
    config
        .as_object_mut()
        .expect("clientConfig")
        .remove("service");
    config["url"] = json!(format!("https://127.0.0.1:{port}/validate"));
    webhook
}

fn base64_of(bytes: &[u8]) -> String {
    let out = Command::new("openssl")
        .args(["base64", "-A"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child.stdin.take().expect("stdin").write_all(bytes)?;
            child.wait_with_output()
        })
        .expect("openssl base64");
    String::from_utf8(out.stdout)
        .expect("base64")
        .trim()
        .to_owned()
}

/// `kubectl delete RESOURCE NAME ARGS`: whether it succeeded, and what kubectl printed on
/// stderr (the guard's message or warnings).
fn delete(kube: &KubeServer, resource: &str, name: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kube.kubeconfig)
        .args(["delete", resource, name, "--wait=false"])
        .args(args)
        .output()
        .expect("kubectl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const SUBNETS: &str = "subnets.kubeovn.io";
const IP_POOLS: &str = "ippools.whereabouts.cni.cncf.io";
const SPIDER_POOLS: &str = "spiderippools.spiderpool.spidernet.io";
const CALICO_POOLS: &str = "ippools.crd.projectcalico.org";
const CALICO_V3_POOLS: &str = "ippools.projectcalico.org";

/// A subnet, a whereabouts pool and a spiderpool pool in use, and an empty subnet.
fn pools_in_use(kube: &KubeServer) {
    for (name, cidr) in [("busy-net", "10.16.0.0/16"), ("empty-net", "10.17.0.0/16")] {
        kube.create(&json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
            "metadata": {"name": name},
            "spec": {"cidrBlock": cidr, "protocol": "IPv4", "provider": "ovn"}}));
    }
    kube.create(&json!({"apiVersion": "kubeovn.io/v1", "kind": "IP",
        "metadata": {"name": "web-1.shop", "labels": {"ovn.kubernetes.io/subnet": "busy-net"}},
        "spec": {"podName": "web-1", "namespace": "shop", "subnet": "busy-net",
            "ipAddress": "10.16.0.2", "v4IpAddress": "10.16.0.2", "podType": ""}}));
    kube.create(
        &json!({"apiVersion": "whereabouts.cni.cncf.io/v1alpha1", "kind": "IPPool",
        "metadata": {"name": "10.9.0.0-24", "namespace": "kube-system"},
        "spec": {"range": "10.9.0.0/24", "allocations": {
            "5": {"id": "c0ffee01", "podref": "default/db-0", "ifname": "net1"}}}}),
    );
    kube.create(
        &json!({"apiVersion": "spiderpool.spidernet.io/v2beta1", "kind": "SpiderIPPool",
        "metadata": {"name": "pool-a"},
        "spec": {"subnet": "172.18.0.0/16", "ips": ["172.18.40.10-172.18.40.20"]}}),
    );
    kube.patch_status(
        SPIDER_POOLS,
        "pool-a",
        &json!({"status": {"allocatedIPCount": 1,
            "allocatedIPs": "{\"172.18.40.10\":{\"pod\":\"default/cache-0\",\"podUid\":\"9f1c\"}}"}}),
    );
    // Calico: a pool whose block holds a pod's address, an idle pool with an empty block,
    // and the same in Calico 3.32's v3 group (where a v1 pool's blocks do not count).
    for (api_version, busy, idle) in [
        ("crd.projectcalico.org/v1", "10.244.0.0/16", "10.98.0.0/16"),
        ("projectcalico.org/v3", "10.245.0.0/16", "10.97.0.0/16"),
    ] {
        for (name, cidr) in [("busy-pool", busy), ("idle-pool", idle)] {
            kube.create(&json!({"apiVersion": api_version, "kind": "IPPool",
                "metadata": {"name": name}, "spec": {"cidr": cidr, "blockSize": 26}}));
        }
        let block = |cidr: &str, allocations: Value, attributes: Value| {
            json!({"apiVersion": api_version, "kind": "IPAMBlock",
                "metadata": {"name": cidr.replace(['.', '/'], "-")},
                "spec": {"cidr": cidr, "affinity": "host:worker-1", "allocations": allocations,
                    "attributes": attributes, "unallocated": [], "sequenceNumber": 1}})
        };
        let base = busy.trim_end_matches(".0.0/16");
        kube.create(&block(
            &format!("{base}.1.0/26"),
            json!([null, 0]),
            json!([{"handle_id": "k8s-pod-network.c0ffee",
                "secondary": {"namespace": "shop", "pod": "api-0", "node": "worker-1"}}]),
        ));
        let idle_base = idle.trim_end_matches(".0.0/16");
        kube.create(&block(
            &format!("{idle_base}.1.0/26"),
            json!([null, null]),
            json!([]),
        ));
    }
}

/// Registers (or replaces) the guard's webhook and waits until the server calls it: a
/// server-side dry run of deleting the busy subnet shows the guard's answer.
fn register(kube: &KubeServer, webhook: &Value, answered: impl Fn(bool, &str) -> bool) {
    kube.kubectl(&["apply", "-f", "-"], Some(webhook));
    wait_for(
        "the API server calls the guard",
        Duration::from_secs(30),
        || {
            let (ok, said) = delete(kube, SUBNETS, "busy-net", &["--dry-run=server"]);
            answered(ok, &said).then_some(())
        },
    );
}

#[test]
fn the_real_api_server_calls_the_charts_webhook_deny_refuses_pools_in_use_warn_allows_with_warnings_and_a_guard_down_blocks_nothing(
) {
    let kube = KubeServer::start();
    let world = World::new("guard-real", None);
    let certs = Certs::generate();
    pools_in_use(&kube);
    let setup = CollectorSetup {
        kubeconfig: &kube.kubeconfig,
        ..world.setup()
    };

    // Deny: the server refuses the deletions, with the guard's message.
    let (collector, port) = CollectorProcess::start_with_guard(&setup, &certs, "deny", true);
    register(&kube, &charts_webhook(&certs, port), |ok, said| {
        !ok && said.contains("denied the request")
    });
    let (ok, said) = delete(&kube, SUBNETS, "busy-net", &[]);
    assert!(!ok, "{said}");
    assert!(
        said.contains(r#"admission webhook "guard.ipaudit.io" denied the request: Subnet busy-net is still named by 1 live IPs"#)
            && said.contains("web-1.shop (10.16.0.2, pod shop/web-1)"),
        "{said}"
    );
    let (ok, said) = delete(&kube, IP_POOLS, "10.9.0.0-24", &["-n", "kube-system"]);
    assert!(
        !ok && said.contains("IPPool kube-system/10.9.0.0-24 is still named by 1 allocations"),
        "{said}"
    );
    let (ok, said) = delete(&kube, SPIDER_POOLS, "pool-a", &[]);
    assert!(
        !ok && said.contains("SpiderIPPool pool-a is still named by 1 allocations"),
        "{said}"
    );
    for (pools, address) in [
        (CALICO_POOLS, "10.244.1.1"),
        (CALICO_V3_POOLS, "10.245.1.1"),
    ] {
        let (ok, said) = delete(&kube, pools, "busy-pool", &[]);
        assert!(
            !ok && said.contains("IPPool busy-pool is still named by 1 allocations of its blocks")
                && said.contains(&format!("{address} (pod shop/api-0)")),
            "{pools}: {said}"
        );
        let (ok, said) = delete(&kube, pools, "idle-pool", &[]);
        assert!(
            ok,
            "{pools}: a pool whose blocks hold nothing may go: {said}"
        );
    }
    let (ok, said) = delete(&kube, SUBNETS, "empty-net", &[]);
    assert!(ok, "an empty subnet may go: {said}");
    assert!(kube.exists(SUBNETS, "busy-net", &[]));

    // The guard down: the chart's failurePolicy Ignore lets the server admit the deletion.
    assert!(collector.terminate(Duration::from_secs(30)), "clean stop");
    let (ok, said) = delete(&kube, IP_POOLS, "10.9.0.0-24", &["-n", "kube-system"]);
    assert!(ok, "a guard that is down blocks nothing: {said}");
    assert!(!kube.exists(IP_POOLS, "10.9.0.0-24", &["-n", "kube-system"]));

    // Warn: the deletion goes through, and kubectl shows the guard's warning.
    let (collector, port) = CollectorProcess::start_with_guard(&setup, &certs, "warn", true);
    register(&kube, &charts_webhook(&certs, port), |ok, said| {
        ok && said.contains("Warning:")
    });
    let (ok, said) = delete(&kube, SUBNETS, "busy-net", &[]);
    assert!(ok, "{said}");
    assert!(
        said.contains("Warning:") && said.contains("Subnet busy-net is still named by 1 live IPs"),
        "{said}"
    );
    assert!(!kube.exists(SUBNETS, "busy-net", &[]));
    drop(collector);
}
