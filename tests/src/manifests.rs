//! Readers of the deployment files for the tests that check them (`tests/deployment.rs` on
//! deploy/ and docker-compose.yml, `tests/helm_chart.rs` on the chart's renderings,
//! `tests/chart_real_kube.rs` on its installs).

use std::path::PathBuf;
use std::process::Command;

use serde_yaml_ng::Value;

use crate::collector::workspace_binary;

/// A path of the repository.
pub fn repo(path: &str) -> PathBuf {
    crate::manifest_dir().join("..").join(path)
}

/// The helm of the tests: `$IPAUDIT_HELM`, or `helm` on PATH (scripts/tools install).
pub fn helm() -> String {
    std::env::var("IPAUDIT_HELM").unwrap_or_else(|_| "helm".to_owned())
}

/// The values files of charts/ipaudit/ci/ (the choices the chart is checked with), sorted.
pub fn chart_ci_values_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo("charts/ipaudit/ci"))
        .expect("charts/ipaudit/ci")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "the values files: {files:?}");
    files
}

/// Every YAML document of `text` (`what` names it in a failure).
pub fn yaml_documents_of(text: &str, what: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| {
            <Value as serde::Deserialize>::deserialize(doc)
                .unwrap_or_else(|e| panic!("{what}: {e}"))
        })
        .collect()
}

/// The strings of a YAML sequence (none when it is not one).
pub fn strings(value: &Value) -> Vec<String> {
    value
        .as_sequence()
        .map(|s| {
            s.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The object of this kind and name among `docs`.
pub fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

/// The object of this kind and name among `docs`; the test fails without it.
pub fn get<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    find(docs, kind, name).unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// `binary subcommand --help`, as the program prints it.
pub fn help(binary: &str, subcommand: &str) -> String {
    let out = Command::new(workspace_binary(binary))
        .args([subcommand, "--help"])
        .output()
        .expect("runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
