//! `analyzer replay --format html`, opened as a person opens it: the real `analyzer` binary
//! writes report.html, and real headless Chromium (Debian's `chromium`; scripts/test
//! installs it) renders it to a screenshot and to its DOM.
//!
//! Build the binaries first (`cargo build --bins`). `IPAUDIT_CHROMIUM` names another
//! browser binary than `chromium` on the PATH; `IPAUDIT_KEEP_REPORTS=DIR` keeps the pages
//! and screenshots.

use std::path::{Path, PathBuf};
use std::process::Command;

use ipaudit_schemas::builders::EventBuilder;
use ipaudit_schemas::{Stream, WatchEvent};
use ipaudit_tests::browser::{self, elements, lanes, marks, tags, WINDOW};
use ipaudit_tests::collector::workspace_binary;
use ipaudit_tests::{incident, incident_files, write_recording};

const LEAKED_IP: &str =
    "test-vm-1.kube-ovn-dangling-ips.kube-ovn-dangling-ips-control-net.kube-ovn-dangling-ips.ovn";
const SUBNET: &str = "kube-ovn-dangling-ips-control-net";

/// Runs `analyzer replay --format html` on `files`; writes its output to `dir/report.html`.
fn report(dir: &Path, files: &[PathBuf]) -> PathBuf {
    let out = Command::new(workspace_binary("analyzer"))
        .args(["replay", "--no-progress", "--format", "html"])
        .args(files)
        .output()
        .expect("analyzer runs");
    assert_eq!(
        out.status.code(),
        Some(1),
        "replay finds leaks (exit 1); stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = dir.join("report.html");
    std::fs::write(&path, &out.stdout).expect("write report.html");
    path
}

/// The page's DOM after Chromium parsed and laid it out.
fn dump_dom(page: &Path) -> String {
    browser::dump_dom(&browser::file_url(page))
}

/// A screenshot of the page's first screenful, decoded: (width, height, RGB pixels).
fn screenshot(page: &Path, png_path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    browser::screenshot(&browser::file_url(page), png_path)
}

/// With `IPAUDIT_KEEP_REPORTS=DIR`, keeps a test's page and screenshot as
/// `DIR/NAME.html` and `DIR/NAME.png` (how book/src/images/report-screenshot.png is made).
fn keep(page: &Path, png: &Path, name: &str) {
    if let Some(dir) = std::env::var_os("IPAUDIT_KEEP_REPORTS") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("create IPAUDIT_KEEP_REPORTS");
        std::fs::copy(page, dir.join(format!("{name}.html"))).expect("keep the page");
        std::fs::copy(png, dir.join(format!("{name}.png"))).expect("keep the screenshot");
    }
}

/// `(object, kind, actor)` of every mark that names who made its request.
fn actors(dom: &str) -> Vec<(String, String, String)> {
    let mut actors: Vec<_> = elements(dom, "g")
        .into_iter()
        .filter_map(|a| {
            let actor = a.get("data-actor")?.clone();
            Some((a["data-object"].clone(), a["data-kind"].clone(), actor))
        })
        .collect();
    actors.sort();
    actors
}

/// The audit-log fixtures of the kube-ovn seed (see tests/fixtures/audit/).
fn audit_fixture(name: &str) -> Vec<PathBuf> {
    let dir = incident("").join("../audit").join(name);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("fixture dir entry").path())
        .collect();
    files.sort();
    files
}

fn count(pixels: &[[u8; 3]], colour: [u8; 3]) -> usize {
    pixels.iter().filter(|p| **p == colour).count()
}

/// The page as the browser built it loads nothing: no script, stylesheet link, image,
/// frame or font; every link is to an anchor on the page.
fn assert_self_contained(dom: &str) {
    for (tag, attrs) in tags(dom) {
        assert!(
            !["script", "link", "img", "iframe", "object", "embed", "image", "use"]
                .contains(&tag.as_str()),
            "the page has a <{tag}> element: {attrs:?}"
        );
        for (name, value) in &attrs {
            assert!(
                !name.starts_with("on"),
                "<{tag}> has a handler {name}={value:?}"
            );
            if name == "src" || name.ends_with("href") {
                assert!(value.starts_with('#'), "<{tag}> loads {value:?}");
            }
        }
    }
    let style = dom
        .split_once("<style>")
        .and_then(|(_, rest)| rest.split_once("</style>"))
        .map_or("", |(css, _)| css);
    assert!(
        !style.contains("url(") && !style.contains("@import"),
        "the style loads a resource"
    );
}

#[test]
fn the_kube_ovn_seed_report_renders_in_chromium_with_a_lane_per_object_and_its_marks() {
    let dir = tempfile::tempdir().unwrap();
    let page = report(dir.path(), &incident_files("kube-ovn-seed"));
    let dom = dump_dom(&page);
    assert_self_contained(&dom);
    let ip = format!("ip/{LEAKED_IP}");
    let subnet = format!("subnet/{SUBNET}");
    assert_eq!(lanes(&dom), [subnet.clone(), ip.clone()]);
    assert_eq!(
        marks(&dom),
        [
            (ip.clone(), "created".into(), "1032".into()),
            (subnet.clone(), "deletion-requested".into(), "1100".into()),
            (subnet.clone(), "deleted".into(), "1101".into()),
            (ip.clone(), "deletion-requested".into(), "1120".into()),
        ]
    );
    let causes: Vec<String> = elements(&dom, "g")
        .into_iter()
        .filter(|a| a.get("data-cause").is_some_and(|c| c == "true"))
        .map(|a| format!("{}@{}", a["data-object"], a["data-rv"]))
        .collect();
    assert_eq!(
        causes,
        [format!("{subnet}@1101")],
        "the subnet's deletion caused the leak"
    );
    let index_rows: Vec<_> = elements(&dom, "tr")
        .into_iter()
        .filter(|a| a.contains_key("data-incident"))
        .collect();
    assert_eq!(index_rows.len(), 1, "one incident in the index");
    assert_eq!(index_rows[0]["data-status"], "firing");
    let fixes: Vec<String> = elements(&dom, "div")
        .into_iter()
        .filter_map(|a| a.get("data-rule").cloned())
        .collect();
    assert_eq!(fixes, ["subnet-deleted-before-ip", "ip-stuck-terminating"]);
    assert!(
        dom.contains(r#""op":"remove","path":"/metadata/finalizers/0""#),
        "the fix is on the page"
    );

    let (width, height, pixels) = screenshot(&page, &dir.path().join("report.png"));
    assert_eq!((width, height), WINDOW);
    let mut colours: Vec<[u8; 3]> = pixels.clone();
    colours.sort_unstable();
    colours.dedup();
    assert!(
        colours.len() > 100,
        "a drawn page, not a blank one: {} colours",
        colours.len()
    );
    let white = count(&pixels, [255, 255, 255]);
    assert!(
        white < pixels.len() * 95 / 100,
        "{white} of {} pixels white",
        pixels.len()
    );
    // The marks' own colours (created, deletion requested, deleted) are drawn.
    for (what, colour) in [
        ("created", [0x2e, 0x7d, 0x32]),
        ("deletion requested", [0xe8, 0x71, 0x0a]),
        ("deleted", [0xb3, 0x26, 0x1e]),
    ] {
        assert!(count(&pixels, colour) > 20, "no {what} mark drawn");
    }
    keep(&page, &dir.path().join("report.png"), "kube-ovn-seed");
}

/// A subnet deleted under `ips` live IPs that then hang terminating; the first `healed`
/// of them are deleted at last (their alerts resolve): 1 + 2 x ips + healed events.
fn mass_leak(ips: usize, healed: usize) -> Vec<WatchEvent> {
    let name = |i: usize| format!("vm-{i:04}.tenant-a.net1.ovn");
    let mut events = vec![EventBuilder::subnet("net1").rv(10).at(1_000).added()];
    let mut rv = 100;
    let mut next = || {
        rv += 1;
        rv
    };
    for i in 0..ips {
        events.push(
            EventBuilder::ip(&name(i), "net1")
                .rv(next())
                .at(2_000 + i as i64)
                .added(),
        );
    }
    events.push(EventBuilder::subnet("net1").rv(next()).at(60_000).deleted());
    for i in 0..ips {
        let at = 120_000 + i as i64;
        events.push(
            EventBuilder::ip(&name(i), "net1")
                .rv(next())
                .at(at)
                .deleting(at)
                .modified(),
        );
    }
    for i in 0..healed {
        let at = 600_000 + i as i64 * 1_000;
        events.push(
            EventBuilder::ip(&name(i), "net1")
                .rv(next())
                .at(at)
                .deleting(at)
                .deleted(),
        );
    }
    events
}

#[test]
fn a_thousand_event_incident_renders_to_a_page_of_sane_size_with_every_mark() {
    let dir = tempfile::tempdir().unwrap();
    let recording = dir.path().join("mass.avro");
    let (ips, healed) = (400, 200);
    let events = mass_leak(ips, healed);
    assert!(events.len() > 1_000);
    write_recording(&recording, &events);
    let page = report(dir.path(), &[recording]);
    let size = std::fs::metadata(&page).unwrap().len();
    assert!(size < 3 * 1024 * 1024, "report.html is {size} bytes");
    let dom = dump_dom(&page);
    assert_self_contained(&dom);
    let marks = marks(&dom);
    // Every IP's creation and deletion request, the subnet's deletion, the healed IPs' end.
    let count_kind = |kind: &str| marks.iter().filter(|m| m.1 == kind).count();
    assert_eq!(count_kind("created"), ips);
    assert_eq!(count_kind("deletion-requested"), ips);
    assert_eq!(count_kind("deleted"), 1 + healed);
    let lanes = lanes(&dom);
    assert_eq!(lanes.len(), 1 + ips, "the subnet and each IP");
    // The healed IPs' lanes sit collapsed under the incident's open timeline.
    let healthy = elements(&dom, "div")
        .into_iter()
        .filter(|a| a.get("data-healthy").is_some_and(|h| h == "true"))
        .count();
    assert_eq!(healthy, healed);
    assert!(dom.contains(&format!("{healed} healthy object(s)")));
    // Same-second events of one kind share a column: the open timeline (creations,
    // the subnet's deletion, deletion requests) is 3 columns wide, not 601.
    let widths: Vec<u32> = elements(&dom, "svg")
        .into_iter()
        .filter(|a| a.get("role").is_some_and(|r| r == "img"))
        .map(|a| a["width"].parse().expect("svg width"))
        .collect();
    assert_eq!(widths.len(), 2, "the open and the collapsed timeline");
    assert!(widths[0] <= 4 * 64, "open timeline {} px wide", widths[0]);

    let (_, _, pixels) = screenshot(&page, &dir.path().join("mass.png"));
    keep(&page, &dir.path().join("mass.png"), "mass-leak");
    let mut colours = pixels.clone();
    colours.sort_unstable();
    colours.dedup();
    assert!(colours.len() > 100, "{} colours", colours.len());
}

#[test]
fn forged_object_names_stay_text_in_the_browser() {
    let dir = tempfile::tempdir().unwrap();
    let recording = dir.path().join("forged.avro");
    let hostile = r#"ip1"><script>document.title='pwned'</script><img src=x onerror="document.title='pwned'">"#;
    let events = vec![
        EventBuilder::bookmark(Stream::Pod, 1),
        EventBuilder::subnet("net1").rv(10).at(1_000).added(),
        EventBuilder::ip(hostile, "net1").rv(11).at(1_001).added(),
        EventBuilder::subnet("net1").rv(20).at(2_000).deleted(),
        EventBuilder::ip(hostile, "net1")
            .rv(21)
            .at(2_001)
            .deleting(2_001)
            .modified(),
    ];
    write_recording(&recording, &events);
    let page = report(dir.path(), &[recording]);
    let dom = dump_dom(&page);
    assert_self_contained(&dom);
    assert!(!dom.contains("<script"), "a script element was injected");
    assert!(!dom.contains("<img"), "an image element was injected");
    assert!(!dom.contains("pwned</title>"), "the title was rewritten");
    assert!(
        lanes(&dom).contains(&format!("ip/{hostile}")),
        "the name is kept, as data"
    );
    assert!(
        marks(&dom)
            .iter()
            .any(|m| m.0 == format!("ip/{hostile}") && m.2 == "21"),
        "the forged IP's marks are drawn"
    );
}

#[test]
fn the_seed_replayed_from_audit_logs_shows_who_did_each_step_beside_its_mark() {
    let ip = format!("ip/{LEAKED_IP}");
    let subnet = format!("subnet/{SUBNET}");
    let ovn = "system:serviceaccount:kube-system:ovn".to_owned();
    let expected = vec![
        (ip.clone(), "created".to_owned(), ovn.clone()),
        (
            ip.clone(),
            "deletion-requested".to_owned(),
            "bob@example.com".to_owned(),
        ),
        (subnet.clone(), "deleted".to_owned(), ovn.clone()),
        (
            subnet.clone(),
            "deletion-requested".to_owned(),
            "alice@example.com".to_owned(),
        ),
    ];

    // The audit logs alone (two HA API servers).
    let dir = tempfile::tempdir().unwrap();
    let page = report(dir.path(), &audit_fixture("kube-ovn-seed"));
    let dom = dump_dom(&page);
    assert_self_contained(&dom);
    assert_eq!(actors(&dom), expected);
    assert!(
        dom.contains("ordered by audit time"),
        "the page says how events were ordered"
    );
    let via: Vec<_> = elements(&dom, "g")
        .into_iter()
        .filter(|a| a.get("data-via").is_some_and(|v| v == "finalizer-removed"))
        .collect();
    assert_eq!(
        via.len(),
        1,
        "the subnet went when its last finalizer was removed"
    );
    let (_, _, pixels) = screenshot(&page, &dir.path().join("audit.png"));
    keep(&page, &dir.path().join("audit.png"), "kube-ovn-seed-audit");
    assert!(
        count(&pixels, [0x0b, 0x53, 0x94]) > 20,
        "the actors' names are drawn beside the marks"
    );

    // The watch recordings plus a Metadata-level audit log: the same actors.
    let dir = tempfile::tempdir().unwrap();
    let mut files = incident_files("kube-ovn-seed");
    files.extend(audit_fixture("kube-ovn-seed-metadata"));
    let dom = dump_dom(&report(dir.path(), &files));
    assert_eq!(actors(&dom), expected);
}
