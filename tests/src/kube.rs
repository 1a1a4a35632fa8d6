//! The real Kubernetes API server of the tests: kube-apiserver on etcd, built and started by
//! `scripts/kube`. A test uses the run's shared server (from `scripts/test`, its kubeconfig
//! in `IPAUDIT_TEST_KUBECONFIG`) or, run alone, starts one of its own. Tests on the shared
//! server keep out of each other's way by name prefixes for cluster-scoped objects and by
//! namespaces for the others. Writes go through kubectl, as a user's or a controller's
//! would go through the API.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// A running server: the shared one, or one this test started (stopped when dropped).
pub struct KubeServer {
    /// An admin kubeconfig (token, group system:masters).
    pub kubeconfig: PathBuf,
    /// The server's directory, when this test started it.
    own: Option<tempfile::TempDir>,
}

/// `scripts/kube` of the checkout the tests run from.
pub fn kube_script() -> PathBuf {
    crate::manifest_dir().join("../scripts/kube")
}

impl KubeServer {
    /// The run's shared server, or a new one of this test's.
    pub fn shared_or_start() -> KubeServer {
        match std::env::var("IPAUDIT_TEST_KUBECONFIG") {
            Ok(path) if !path.is_empty() => KubeServer {
                kubeconfig: PathBuf::from(path),
                own: None,
            },
            _ => Self::start(),
        }
    }

    /// Starts a server of this test's own (`scripts/kube start`).
    pub fn start() -> KubeServer {
        Self::start_with(&[])
    }

    /// [`KubeServer::start`] with `scripts/kube start` options (`--no-watch-cache`).
    pub fn start_with(options: &[&str]) -> KubeServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("kube");
        script("start", &path, options);
        KubeServer {
            kubeconfig: path.join("kubeconfig"),
            own: Some(dir),
        }
    }

    /// Runs `kubectl ARGS` against the server with `stdin`; its stdout, or a panic naming
    /// what it said.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&Value>) -> String {
        let input = stdin.map(Value::to_string).unwrap_or_default();
        self.kubectl_with_input(args, input.as_bytes())
    }

    /// [`KubeServer::kubectl`] with raw bytes (YAML) on stdin.
    pub fn kubectl_with_input(&self, args: &[&str], input: &[u8]) -> String {
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl (scripts/test installs it)");
        if !input.is_empty() {
            let mut pipe = child.stdin.take().expect("stdin");
            pipe.write_all(input).expect("write to kubectl");
        }
        drop(child.stdin.take());
        let output = child.wait_with_output().expect("kubectl runs");
        assert!(
            output.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Creates `object` (its kind and apiVersion say what); returns it as the server stored it.
    pub fn create(&self, object: &Value) -> Value {
        let out = self.kubectl(&["create", "-f", "-", "-o", "json"], Some(object));
        serde_json::from_str(&out).expect("kubectl prints the object")
    }

    /// Merge-patches the object `resource/name` (`ips.kubeovn.io/a`); returns it.
    pub fn patch(&self, resource: &str, name: &str, patch: &Value) -> Value {
        self.merge_patch(resource, name, &[], patch)
    }

    /// Merge-patches the status subresource of `resource/name`, the way a controller writes
    /// status (a create ignores `status` where the CRD has that subresource); returns it.
    pub fn patch_status(&self, resource: &str, name: &str, patch: &Value) -> Value {
        self.merge_patch(resource, name, &["--subresource", "status"], patch)
    }

    /// `kubectl patch RESOURCE NAME OPTIONS --type merge -p PATCH`; the object it returns.
    fn merge_patch(&self, resource: &str, name: &str, options: &[&str], patch: &Value) -> Value {
        let patch = patch.to_string();
        let mut args = vec!["patch", resource, name];
        args.extend_from_slice(options);
        args.extend(["--type", "merge", "-p", &patch, "-o", "json"]);
        serde_json::from_str(&self.kubectl(&args, None)).expect("kubectl prints the object")
    }

    /// Whether `kubectl get RESOURCE NAME ARGS` finds the object.
    pub fn exists(&self, resource: &str, name: &str, args: &[&str]) -> bool {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["get", resource, name])
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// `kubectl get RESOURCE NAME ARGS -o json`.
    pub fn get(&self, resource: &str, name: &str, args: &[&str]) -> Value {
        let mut all = vec!["get", resource, name, "-o", "json"];
        all.extend_from_slice(args);
        serde_json::from_str(&self.kubectl(&all, None)).expect("kubectl prints the object")
    }

    /// Deletes `resource/name` (one with finalizers is only marked), without waiting.
    pub fn delete(&self, resource: &str, name: &str) {
        self.kubectl(&["delete", resource, name, "--wait=false"], None);
    }

    /// The server's directory, when this test started it.
    pub fn dir(&self) -> Option<PathBuf> {
        self.own.as_ref().map(|d| d.path().join("kube"))
    }

    /// The server's directory: this test's own, or the run's shared one's
    /// (`IPAUDIT_TEST_KUBE_DIR`).
    pub fn any_dir(&self) -> PathBuf {
        self.dir().unwrap_or_else(|| {
            PathBuf::from(
                std::env::var("IPAUDIT_TEST_KUBE_DIR")
                    .expect("IPAUDIT_TEST_KUBE_DIR beside IPAUDIT_TEST_KUBECONFIG"),
            )
        })
    }

    /// The server's `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        let env = std::fs::read_to_string(self.any_dir().join("kube.env")).expect("kube.env");
        env.lines()
            .find_map(|l| l.strip_prefix("IPAUDIT_TEST_KUBE_URL="))
            .expect("the URL in kube.env")
            .to_owned()
    }

    /// The CA of the server's certificate (PEM).
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.any_dir().join("pki/ca.pem")).expect("pki/ca.pem")
    }

    /// The admin's bearer token.
    pub fn admin_token(&self) -> String {
        std::fs::read_to_string(self.any_dir().join("pki/admin.token"))
            .expect("pki/admin.token")
            .trim()
            .to_owned()
    }

    /// Compacts etcd's history up to `revision` (the resourceVersion counter), as the API
    /// server does every few minutes: a watch from before it then gets 410 Gone at once
    /// from a server started with `--no-watch-cache`.
    pub fn compact(&self, revision: i64) {
        let dir = self
            .dir()
            .expect("only a server of this test's own is compacted");
        let env = std::fs::read_to_string(dir.join("kube.env")).expect("kube.env");
        let etcd = env
            .lines()
            .find_map(|l| l.strip_prefix("IPAUDIT_TEST_KUBE_ETCD="))
            .expect("etcd's URL in kube.env");
        let body = serde_json::json!({"revision": revision.to_string(), "physical": true});
        let output = Command::new("curl")
            .args(["-sS", "--fail", "-X", "POST"])
            .arg(format!("{etcd}/v3/kv/compaction"))
            .args(["-d", &body.to_string()])
            .output()
            .expect("curl");
        assert!(
            output.status.success(),
            "etcd compaction failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Stops kube-apiserver and starts it again on the same port and etcd (a server of this
    /// test's own only: the shared one serves other tests), and waits until it is ready.
    pub fn restart_apiserver(&self) {
        let dir = self
            .dir()
            .expect("only a server of this test's own is restarted");
        script("restart", &dir, &[]);
    }
}

impl Drop for KubeServer {
    fn drop(&mut self) {
        if let Some(dir) = self.dir() {
            let _ = Command::new(kube_script()).arg("stop").arg(dir).output();
        }
    }
}

/// The namespace the chart's ServiceAccounts are applied to.
pub const CHART_NAMESPACE: &str = "ipaudit";

impl KubeServer {
    /// Applies the collector's ServiceAccount, ClusterRoles and bindings as the chart
    /// renders them (`helm template`, release `ipaudit` in [`CHART_NAMESPACE`]; with
    /// `remediation`, of `ci/remediation-on.yaml`, which adds the cleanup writes), and
    /// returns a kubeconfig of that ServiceAccount, its token from the TokenRequest API.
    pub fn chart_collector_kubeconfig(&self, remediation: bool, dir: &Path) -> PathBuf {
        let chart = crate::manifest_dir().join("../charts/ipaudit");
        let mut helm = Command::new(crate::manifests::helm());
        helm.args(["template", "ipaudit"])
            .arg(&chart)
            .args(["--namespace", CHART_NAMESPACE, "--kube-version", "1.34.4"])
            .args(["--show-only", "templates/rbac.yaml"]);
        if remediation {
            helm.arg("-f")
                .arg(chart.join("ci/remediation-on.yaml"))
                .args(["--show-only", "templates/rbac-remediate.yaml"]);
        }
        let rendered = helm
            .output()
            .expect("helm (scripts/tools install; scripts/test puts it on PATH)");
        assert!(
            rendered.status.success(),
            "helm template: {}",
            String::from_utf8_lossy(&rendered.stderr)
        );
        if !self.exists("namespace", CHART_NAMESPACE, &[]) {
            self.kubectl(&["create", "namespace", CHART_NAMESPACE], None);
        }
        self.kubectl_with_input(&["apply", "-f", "-"], &rendered.stdout);
        self.service_account_kubeconfig(CHART_NAMESPACE, "ipaudit-collector", dir)
    }

    /// A kubeconfig (written under `dir`) of the ServiceAccount `namespace/name`, with a
    /// token from the TokenRequest API (`kubectl create token`), as a pod would get it.
    pub fn service_account_kubeconfig(&self, namespace: &str, name: &str, dir: &Path) -> PathBuf {
        let token = self.kubectl(&["create", "token", name, "-n", namespace], None);
        let path = dir.join(format!("kubeconfig-{namespace}-{name}"));
        let config = serde_json::json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": self.url(),
                "certificate-authority": self.any_dir().join("pki/ca.pem")}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": name}}],
            "current-context": "test",
            "users": [{"name": name, "user": {"token": token.trim()}}],
        });
        std::fs::write(&path, config.to_string()).expect("write kubeconfig");
        path
    }

    /// Whether the credentials of `kubeconfig` may `verb` the `resource` (`ips.kubeovn.io`),
    /// or its `subresource`, in every namespace: the server's own answer (`kubectl auth
    /// can-i`, a SelfSubjectAccessReview).
    pub fn can(
        &self,
        kubeconfig: &Path,
        verb: &str,
        resource: &str,
        subresource: Option<&str>,
    ) -> bool {
        let mut command = Command::new("kubectl");
        command.arg("--kubeconfig").arg(kubeconfig).args([
            "auth",
            "can-i",
            verb,
            resource,
            "--all-namespaces",
        ]);
        if let Some(sub) = subresource {
            command.arg(format!("--subresource={sub}"));
        }
        let output = command.output().expect("kubectl");
        match String::from_utf8_lossy(&output.stdout).trim() {
            "yes" => true,
            "no" => false,
            other => panic!(
                "kubectl auth can-i {verb} {resource}: {other} {}",
                String::from_utf8_lossy(&output.stderr)
            ),
        }
    }
}

/// Runs `scripts/kube COMMAND DIR OPTIONS` to its end, or panics with what it said.
fn script(command: &str, dir: &Path, options: &[&str]) {
    let output = Command::new(kube_script())
        .arg(command)
        .arg(dir)
        .args(options)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", kube_script().display()));
    assert!(
        output.status.success(),
        "scripts/kube {command} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The resourceVersion of an object the server returned.
pub fn resource_version(object: &Value) -> i64 {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|rv| rv.parse().ok())
        .expect("a numeric resourceVersion")
}
