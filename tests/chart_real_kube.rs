//! The Helm chart charts/ipaudit installed by the real helm into a real kube-apiserver on
//! etcd (`scripts/kube`, a server of this test's own: the operators' CRDs it applies are
//! cluster-wide), with the defaults and with each values file of charts/ipaudit/ci/. It
//! proves that `helm install` succeeds and that every object it lists (`helm get
//! manifest`) is then on the server: the server's own validation and admission accepted
//! each one, without a warning. And that `helm uninstall` removes them all, cluster-scoped
//! ones (ClusterRole, ClusterRoleBinding, ValidatingWebhookConfiguration) included, with
//! the release's record. There is no kubelet and no controller, so no pod runs: this is
//! about what the chart sends to the API, not about what runs. The objects of Prometheus
//! Operator and cert-manager (ServiceMonitor, PrometheusRule, Certificate, Issuer) go into
//! structural stand-ins of their CRDs (tests/fixtures/operator-crds), so the server checks
//! their metadata, not their spec (tests/helm_chart.rs checks that).

use std::path::Path;
use std::process::{Command, Output};

use ipaudit_tests::kube::KubeServer;
use ipaudit_tests::manifests::{chart_ci_values_files, helm, repo, yaml_documents_of};
use serde_json::Value;

/// The finalizer kube-apiserver's admission puts on every PersistentVolumeClaim; the PVC
/// protection controller of kube-controller-manager removes it once no pod uses the claim.
/// There is no such controller here.
const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";

/// `helm ARGS` against the server.
fn helm_on(kube: &KubeServer, args: &[&str]) -> Output {
    Command::new(helm())
        .args(args)
        .arg("--kubeconfig")
        .arg(&kube.kubeconfig)
        .output()
        .unwrap_or_else(|e| panic!("{} (install it: scripts/tools install): {e}", helm()))
}

/// `helm ARGS`, which must succeed; its stdout and stderr.
#[track_caller]
fn helm_ok(kube: &KubeServer, args: &[&str]) -> (String, String) {
    let out = helm_on(kube, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "helm {args:?} failed:\n{stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// The objects of `manifest` that the server holds, as `kubectl get -f` reads them one by
/// one (`namespace` for those that name none).
fn on_server(kube: &KubeServer, manifest: &Path, namespace: &str) -> Vec<Value> {
    let out = kube.kubectl(
        &[
            "get",
            "-f",
            manifest.to_str().expect("UTF-8 path"),
            "-n",
            namespace,
            "--ignore-not-found",
            "-o",
            "json",
        ],
        None,
    );
    if out.trim().is_empty() {
        return Vec::new();
    }
    let got: Value = serde_json::from_str(&out).expect("kubectl prints JSON");
    match got["kind"].as_str() {
        Some("List") => got["items"].as_array().cloned().unwrap_or_default(),
        _ => vec![got],
    }
}

/// `Kind/name` of an object.
fn id(kind: &str, name: &str) -> String {
    format!("{kind}/{name}")
}

fn id_of(object: &Value) -> String {
    id(
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default(),
    )
}

/// Installs the chart as `release` into its namespace with `values` (helm arguments),
/// checks what the server holds, uninstalls it and checks that nothing is left.
fn install_and_uninstall(kube: &KubeServer, release: &str, values: &[&str], work: &Path) {
    let chart = repo("charts/ipaudit");
    let chart = chart.to_str().expect("UTF-8 path");
    let namespace = release;
    let mut install = vec![
        "install",
        release,
        chart,
        "--namespace",
        namespace,
        "--create-namespace",
        "--wait=false",
    ];
    install.extend_from_slice(values);
    let (_, stderr) = helm_ok(kube, &install);
    // helm prints the server's warnings (deprecated or duplicated fields and the like).
    assert!(
        !stderr.contains("Warning:"),
        "{release}: the server warned about the chart's objects:\n{stderr}"
    );
    let (status, _) = helm_ok(kube, &["status", release, "-n", namespace, "-o", "json"]);
    let status: Value = serde_json::from_str(&status).expect("helm status prints JSON");
    assert_eq!(status["info"]["status"], "deployed", "{release}: {status}");

    // Every object of the release is on the server, as this release's.
    let (manifest, _) = helm_ok(kube, &["get", "manifest", release, "-n", namespace]);
    let mut listed: Vec<String> = yaml_documents_of(&manifest, "helm get manifest")
        .iter()
        .filter(|doc| !doc.is_null())
        .map(|doc| {
            id(
                doc["kind"].as_str().expect("kind"),
                doc["metadata"]["name"].as_str().expect("name"),
            )
        })
        .collect();
    listed.sort();
    assert!(
        listed.len() >= 5,
        "{release}: helm get manifest lists {listed:?}"
    );
    let manifest_file = work.join(format!("{release}.yaml"));
    std::fs::write(&manifest_file, &manifest).expect("write the manifest");
    let stored = on_server(kube, &manifest_file, namespace);
    let mut found: Vec<String> = stored.iter().map(id_of).collect();
    found.sort();
    assert_eq!(
        found, listed,
        "{release}: the release's objects on the server"
    );
    for object in &stored {
        assert_eq!(
            object["metadata"]["annotations"]["meta.helm.sh/release-name"],
            release,
            "{release}: {} is not this release's",
            id_of(object)
        );
    }

    let (_, stderr) = helm_ok(kube, &["uninstall", release, "-n", namespace]);
    assert!(
        !stderr.contains("Warning:"),
        "{release}: the server warned on uninstall:\n{stderr}"
    );

    // Gone, but for the claim held by its protection finalizer: helm deleted it (it is
    // terminating) and no pod uses it, so the PVC protection controller would remove the
    // finalizer; this test does it in the controller's stead and the claim goes too.
    for object in on_server(kube, &manifest_file, namespace) {
        let what = id_of(&object);
        let finalizers = &object["metadata"]["finalizers"];
        assert!(
            object["kind"] == "PersistentVolumeClaim"
                && object["metadata"]["deletionTimestamp"].is_string()
                && *finalizers == serde_json::json!([PVC_PROTECTION]),
            "{release}: {what} is left after helm uninstall: {object}"
        );
        kube.kubectl(
            &[
                "patch",
                "persistentvolumeclaim",
                object["metadata"]["name"].as_str().expect("name"),
                "-n",
                namespace,
                "--type",
                "json",
                "-p",
                &serde_json::json!([
                    {"op": "test", "path": "/metadata/finalizers", "value": [PVC_PROTECTION]},
                    {"op": "remove", "path": "/metadata/finalizers"}
                ])
                .to_string(),
            ],
            None,
        );
    }
    let left: Vec<String> = on_server(kube, &manifest_file, namespace)
        .iter()
        .map(id_of)
        .collect();
    assert!(left.is_empty(), "{release}: left after uninstall: {left:?}");

    // And the release's record (helm's Secret in its namespace).
    let records = kube.kubectl(
        &[
            "get",
            "secrets",
            "-n",
            namespace,
            "-l",
            &format!("owner=helm,name={release}"),
            "-o",
            "name",
        ],
        None,
    );
    assert!(
        records.trim().is_empty(),
        "{release}: helm's record is left: {records}"
    );
}

#[test]
fn every_ci_values_file_installs_into_a_real_api_server_and_uninstalls_cleanly() {
    let kube = KubeServer::start();
    let crds = repo("tests/fixtures/operator-crds");
    let crds = crds.to_str().expect("UTF-8 path");
    kube.kubectl(&["apply", "-f", crds], None);
    kube.kubectl(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            crds,
        ],
        None,
    );

    let work = tempfile::tempdir().expect("temp dir");
    // One release at a time, each in a namespace of its own and removed before the next:
    // every object's name starts with the release's, so none would clash anyway.
    install_and_uninstall(&kube, "defaults", &[], work.path());
    for file in chart_ci_values_files() {
        let release = file
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a file name")
            .to_owned();
        let path = file.to_str().expect("UTF-8 path");
        install_and_uninstall(&kube, &release, &["-f", path], work.path());
    }
}
