//! The docs book's reference pages are what the code generates today: a flag, metric or
//! schema field changed without `scripts/book generate` fails here, naming the page.

use std::sync::OnceLock;

use ipaudit_tests::manifests::repo;

/// The pages as the code generates them now, generated once for every test here (each
/// generation runs the three programs).
fn pages() -> &'static [(String, String)] {
    static PAGES: OnceLock<Vec<(String, String)>> = OnceLock::new();
    PAGES.get_or_init(|| ipaudit_tests::book::reference_pages(&repo("")))
}

/// One generated page, by file name.
fn page(name: &str) -> &'static str {
    &pages()
        .iter()
        .find(|(file, _)| file == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .1
}

#[test]
fn every_reference_page_of_the_book_is_current() {
    let dir = repo("book/src/reference");
    let mut stale = Vec::new();
    for (name, page) in pages() {
        let path = dir.join(name);
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        if checked_in != *page {
            stale.push(name);
        }
    }
    assert!(
        stale.is_empty(),
        "stale pages in book/src/reference: {stale:?}; run scripts/book generate and commit them"
    );
}

#[test]
fn the_flag_reference_lists_every_subcommand_of_each_program() {
    for heading in [
        "## `collector run`",
        "## `collector record`",
        "## `collector generate man`",
    ] {
        assert!(
            page("collector.md").contains(heading),
            "collector.md lacks {heading}"
        );
    }
    for heading in [
        "## `analyzer replay`",
        "## `analyzer run`",
        "## `analyzer dead-letters list`",
    ] {
        assert!(
            page("analyzer.md").contains(heading),
            "analyzer.md lacks {heading}"
        );
    }
    assert!(page("kubectl-ipaudit.md").contains("## `kubectl-ipaudit release`"));
    // Flags show their environment variable, never a value the generating machine had.
    assert!(page("collector.md").contains("[env: IPAUDIT_STATE_DIR]"));
}

#[test]
fn the_metrics_page_lists_the_metrics_the_alert_rules_read() {
    let metrics = page("metrics.md");
    for series in [
        "ipaudit_collector_events_total",
        "ipaudit_collector_outbox_bytes",
        "ipaudit_analyzer_firing_alerts",
    ] {
        assert!(
            metrics.contains(&format!("`{series}`")),
            "metrics.md lacks {series}"
        );
    }
    assert!(metrics.contains("`stream`: "), "label values are listed");
}

#[test]
fn the_schemas_page_has_every_schema_and_each_version_change() {
    let schemas = page("schemas.md");
    for heading in [
        "## `watch_event` (v5",
        "## `alert` (v7",
        "## `cleanup_command` (v3",
    ] {
        assert!(schemas.contains(heading), "schemas.md lacks {heading}");
    }
    // WatchEvent v5 added Calico's and Cilium's parts; Alert v5 added the incident page's
    // url, v6 the pod's namespace.
    assert!(schemas.contains("`WatchEvent.calico_block`"), "{schemas}");
    assert!(schemas.contains("- v5: added `"), "{schemas}");
    assert!(schemas.contains(".url`"), "{schemas}");
    assert!(
        schemas.contains("- v6: added `Alert.namespace`"),
        "{schemas}"
    );
}
