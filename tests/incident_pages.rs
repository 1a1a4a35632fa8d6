//! The analyzer's incident pages, live: simulated API server -> collector (remediation in
//! dry-run) -> Apache Kafka -> `analyzer run --ui-listen` -> pages read by real headless
//! Chromium, an Alertmanager and a webhook receiver (real HTTP servers in the test), and
//! the JSON API over HTTP.
//!
//! `IPAUDIT_KEEP_REPORTS=DIR` keeps the list's and an incident page's screenshots.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use ipaudit_schemas::{decode, Alert};
use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::broker::{create_topic, free_port, read_topic};
use ipaudit_tests::browser::{self, elements, lanes, marks, tags};
use ipaudit_tests::collector::{http_request, workspace_binary};
use ipaudit_tests::receiver::{Received, Receiver};
use ipaudit_tests::scenario::{ip, play_kube_ovn_seed, subnet};
use ipaudit_tests::wait_for;
use ipaudit_tests::world::World;
use kube_sim::Kind;
use serde_json::Value;

/// The path prefix the pages are served under, as an ingress would route them.
const BASE: &str = "/ipaudit";

/// An analyzer serving its pages on `ui_port` under [`BASE`], linking alerts to them, with
/// a webhook and an Alertmanager at `receiver` and cleanup commands on.
fn analyzer(world: &World, receiver: &Receiver, ui_port: u16, more: &[&str]) -> AnalyzerProcess {
    let ui_listen = format!("127.0.0.1:{ui_port}");
    let ui_url = format!("http://127.0.0.1:{ui_port}{BASE}");
    let commands = world.commands_topic();
    world
        .runtime
        .block_on(create_topic(&world.brokers, &commands));
    let (hook, am) = (
        format!("{}/hook", receiver.url),
        format!("{}/am", receiver.url),
    );
    let flags: Vec<&str> = [
        "--webhook-url",
        &hook,
        "--alertmanager-url",
        &am,
        "--cleanup-commands",
        "--commands-topic",
        &commands,
        "--ui-listen",
        &ui_listen,
        "--ui-base-path",
        BASE,
        "--ui-url",
        &ui_url,
    ]
    .into_iter()
    .chain(more.iter().copied())
    .collect();
    // Members of one group, each with its own store (`--instance-id` given: the default,
    // the host name, is the same for every process of a test).
    let member = format!("member-{ui_port}");
    let flags: Vec<&str> = flags
        .into_iter()
        .chain(["--instance-id", &member])
        .collect();
    let process = AnalyzerProcess::start(
        &world.brokers,
        &world.topic,
        &format!("ipaudit-pages-{}-{}", world.topic, std::process::id()),
        &world.dir.path().join(&member),
        &flags,
    );
    process.wait_joined(Duration::from_secs(30));
    process
}

/// GET `path` on the pages' port, with a bearer token if given: (status, body).
fn get(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = bearer
        .iter()
        .map(|b| ("Authorization", b.as_str()))
        .collect();
    http_request(port, "GET", path, &headers).expect("the pages answer")
}

/// GET `path` as another member asks (answered from the store alone): (status, body).
fn get_as_peer(port: u16, path: &str) -> (u16, String) {
    http_request(port, "GET", path, &[("x-ipaudit-peer", "1")]).expect("the pages answer")
}

fn api(port: u16, path: &str) -> Value {
    let (status, body) = get(port, path, None);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).expect("the API answers JSON")
}

/// The rows of the incident list as Chromium built the page: (alert id, attributes).
fn rows(dom: &str) -> HashMap<String, HashMap<String, String>> {
    elements(dom, "tr")
        .into_iter()
        .filter_map(|a| Some((a.get("data-alert-id")?.clone(), a)))
        .collect()
}

fn page_url(port: u16, path_and_query: &str) -> String {
    format!("http://127.0.0.1:{port}{path_and_query}")
}

fn rule_of(r: &Received) -> &str {
    r.body["rule"].as_str().unwrap_or_default()
}

/// With `IPAUDIT_KEEP_REPORTS=DIR`, a screenshot of `url` as `DIR/NAME.png`.
fn keep_screenshot(url: &str, name: &str) {
    if let Some(dir) = std::env::var_os("IPAUDIT_KEEP_REPORTS") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("create IPAUDIT_KEEP_REPORTS");
        browser::screenshot(url, &dir.join(format!("{name}.png")));
    }
}

#[test]
fn a_live_incident_is_listed_its_link_opens_its_timeline_and_it_moves_to_resolved() {
    let world = World::new("pages", None);
    let receiver = Receiver::start(&world.runtime);
    let collector = world.remediating_collector("dry-run", &[]);
    let ui_port = free_port();
    let alerts = format!("{}.alerts", world.topic);
    world
        .runtime
        .block_on(create_topic(&world.brokers, &alerts));
    let analyzer = analyzer(&world, &receiver, ui_port, &["--alerts-topic", &alerts]);
    let seed = play_kube_ovn_seed(&world.sim, false);

    // Alertmanager's "Source" link and the webhook's url are the incident's page.
    let am = wait_for("the alert at Alertmanager", Duration::from_secs(20), || {
        receiver
            .received("/am/api/v2/alerts")
            .into_iter()
            .find(|r| r.body[0]["labels"]["alertname"] == "subnet-deleted-before-ip")
    });
    let alert_id = am.body[0]["annotations"]["alert_id"]
        .as_str()
        .expect("alert id annotation")
        .to_owned();
    let page = format!("http://127.0.0.1:{ui_port}{BASE}/incidents/{alert_id}");
    assert_eq!(am.body[0]["generatorURL"], page.as_str());
    assert_eq!(am.body[0]["annotations"]["incident_url"], page.as_str());
    let stuck = wait_for(
        "the stuck-IP alert at the webhook",
        Duration::from_secs(20),
        || {
            receiver
                .received("/hook")
                .into_iter()
                .find(|r| rule_of(r) == "ip-stuck-terminating")
        },
    );
    let on_kafka = read_topic(&world.brokers, &alerts, Duration::from_secs(15), |p| {
        !p.is_empty()
    });
    let first: Alert = decode(&on_kafka[0]).expect("an Avro Alert");
    assert_eq!(
        first.url.as_deref(),
        Some(
            format!(
                "http://127.0.0.1:{ui_port}{BASE}/incidents/{}",
                first.alert_id
            )
            .as_str()
        ),
        "the alerts topic's records link to their page (Alert v5)"
    );
    let stuck_id = stuck.body["alert_id"]
        .as_str()
        .expect("alert id")
        .to_owned();
    assert_eq!(
        stuck.body["url"],
        format!("http://127.0.0.1:{ui_port}{BASE}/incidents/{stuck_id}").as_str()
    );

    // The list shows both incidents firing; the subject links to the incident page.
    let dom = browser::dump_dom(&page_url(ui_port, &format!("{BASE}/")));
    let listed = rows(&dom);
    assert_eq!(listed[&alert_id]["data-state"], "firing", "{dom}");
    assert_eq!(listed[&stuck_id]["data-state"], "firing");
    let link = elements(&dom, "a")
        .into_iter()
        .filter_map(|a| a.get("href").cloned())
        .find(|href| href.ends_with(&alert_id))
        .expect("the incident's row links to its page");
    assert_eq!(link, format!("{BASE}/incidents/{alert_id}"));
    keep_screenshot(&page_url(ui_port, &format!("{BASE}/")), "incidents-list");

    // Its page draws the report's timeline: a lane per object, the subnet's deletion and
    // the IP's deletion request among its marks.
    let incident = browser::dump_dom(&page_url(ui_port, &link));
    let drawn = lanes(&incident);
    assert!(
        drawn.contains(&format!("subnet/{}", seed.subnet))
            && drawn.contains(&format!("ip/{}", seed.leaked_ip)),
        "lanes {drawn:?}"
    );
    let kinds: Vec<(String, String)> = marks(&incident)
        .into_iter()
        .map(|(object, kind, _)| (object, kind))
        .collect();
    assert!(
        kinds.contains(&(format!("subnet/{}", seed.subnet), "deleted".to_owned())),
        "marks {kinds:?}"
    );

    // What happened to it: delivered to each sink, and the collector's dry run of its
    // cleanup command.
    let logged = wait_for(
        "the dry run on the incident",
        Duration::from_secs(20),
        || {
            let one = api(ui_port, &format!("{BASE}/api/v1/incidents/{stuck_id}"));
            let log = one["log"].as_array().cloned().unwrap_or_default();
            log.iter()
                .any(|l| {
                    l["what"] == "cleanup"
                        && l["detail"].as_str().is_some_and(|d| d.contains("dry_run"))
                })
                .then_some(log)
        },
    );
    let delivered: Vec<&str> = logged
        .iter()
        .filter(|l| l["what"] == "delivered")
        .filter_map(|l| l["detail"].as_str())
        .collect();
    assert!(
        delivered.iter().any(|d| d.contains("webhook"))
            && delivered.iter().any(|d| d.contains("alertmanager")),
        "delivered {delivered:?}; collector log:\n{}",
        collector.log_text()
    );
    let stuck_page = browser::dump_dom(&page_url(ui_port, &format!("{BASE}/incidents/{stuck_id}")));
    assert!(
        elements(&stuck_page, "tr")
            .iter()
            .any(|a| a.get("data-what").is_some_and(|w| w == "cleanup")),
        "the page lists the cleanup outcome"
    );
    keep_screenshot(
        &page_url(ui_port, &format!("{BASE}/incidents/{alert_id}")),
        "incident-page",
    );

    // Filters narrow the list.
    let by_rule = rows(&browser::dump_dom(&page_url(
        ui_port,
        &format!("{BASE}/?rule=ip-stuck-terminating"),
    )));
    assert_eq!(by_rule.keys().collect::<Vec<_>>(), [&stuck_id]);
    let by_text = rows(&browser::dump_dom(&page_url(
        ui_port,
        &format!("{BASE}/?q=172.19.0.12"),
    )));
    assert!(
        by_text.contains_key(&stuck_id),
        "the address finds its incident"
    );
    let elsewhere = browser::dump_dom(&page_url(ui_port, &format!("{BASE}/?cluster=elsewhere")));
    assert!(rows(&elsewhere).is_empty() && elsewhere.contains("No incident matches"));

    // `kubectl ipaudit incidents` lists them from the running analyzer: exit 1 while some
    // listed incident fires.
    let ui_url = format!("http://127.0.0.1:{ui_port}{BASE}");
    let kubectl = |args: &[&str]| {
        let out = std::process::Command::new(workspace_binary("kubectl-ipaudit"))
            .args(["incidents", "--url", &ui_url])
            .args(args)
            .output()
            .expect("kubectl-ipaudit runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, table) = kubectl(&["--state", "firing"]);
    assert_eq!(code, Some(1), "{table}");
    assert!(table.contains("2 of 2 incident(s)"), "{table}");

    // The operator removes the finalizer by hand: the IP goes, its alert resolves and the
    // incident moves to resolved.
    world
        .sim
        .remove_finalizers(Kind::Ip, "", seed.leaked_ip)
        .expect("remove the finalizer");
    wait_for(
        "the stuck-IP alert resolves",
        Duration::from_secs(20),
        || {
            receiver
                .received("/hook")
                .into_iter()
                .find(|r| r.body["alert_id"] == stuck_id.as_str() && r.body["status"] == "RESOLVED")
        },
    );
    let resolved = rows(&browser::dump_dom(&page_url(
        ui_port,
        &format!("{BASE}/?state=resolved"),
    )));
    assert_eq!(
        resolved.get(&stuck_id).map(|a| a["data-state"].as_str()),
        Some("resolved"),
        "analyzer log:\n{}",
        analyzer.log_text()
    );

    // The API answers with its documented fields.
    let list = api(ui_port, &format!("{BASE}/api/v1/incidents?state=resolved"));
    assert_eq!(list["schema"], "ipaudit.incident-list.v1");
    let item = list["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["alert_id"] == stuck_id.as_str()))
        .expect("the resolved incident in the API's list");
    for field in [
        "alert_id",
        "cluster_id",
        "rule",
        "severity",
        "state",
        "subject_kind",
        "subject_name",
        "namespace",
        "pool",
        "address",
        "summary",
        "fired_at_ms",
        "resolved_at_ms",
        "url",
    ] {
        assert!(item.get(field).is_some(), "list item lacks {field}: {item}");
    }
    assert_eq!(item["state"], "resolved");
    assert_eq!(item["address"], "172.19.0.12");
    let one = api(ui_port, &format!("{BASE}/api/v1/incidents/{stuck_id}"));
    assert_eq!(one["schema"], "ipaudit.incident.v1");
    assert!(one["fired"]["evidence"]
        .as_array()
        .is_some_and(|e| !e.is_empty()));
    assert_eq!(one["resolved"]["status"], "RESOLVED");
    let (status, _) = get(
        ui_port,
        &format!("{BASE}/api/v1/incidents?state=open"),
        None,
    );
    assert_eq!(
        status, 400,
        "an unknown filter value is refused, not ignored"
    );

    let (code, table) = kubectl(&["--state", "resolved"]);
    assert_eq!(code, Some(0), "nothing firing among those listed: {table}");
    assert!(
        table.contains(&format!("{ui_url}/incidents/{stuck_id}")),
        "{table}"
    );
    let (code, table) = kubectl(&["--rule", "subnet-deleted-before-ip"]);
    assert_eq!(code, Some(0), "{table}");
    assert!(table.contains(seed.leaked_ip) && !table.contains("ip-stuck-terminating"));
    let (code, json) = kubectl(&["-o", "json", "-q", "172.19.0.12"]);
    assert_eq!(code, Some(0));
    let listed: Value = serde_json::from_str(&json).expect("-o json is the API's JSON");
    assert_eq!(listed["total"], 2);
    let (code, _) = kubectl(&["--state", "open"]);
    assert_eq!(code, Some(2), "a refused filter is an error");
}

#[test]
fn a_hostile_object_name_stays_text_on_the_pages_and_the_api_asks_for_its_token() {
    let world = World::new("pages-hostile", None);
    let receiver = Receiver::start(&world.runtime);
    let _collector = world.collector();
    let ui_port = free_port();
    let token_file = world.dir.path().join("ui-token");
    std::fs::write(&token_file, "s3cret-token\n").expect("token file");
    let token_flag = token_file.display().to_string();
    let analyzer = analyzer(
        &world,
        &receiver,
        ui_port,
        &["--ui-api-token-file", &token_flag],
    );
    let hostile_subnet = "net\"><img src=x onerror=alert(1)>";
    let hostile_ip = "ip<script>document.title='owned'</script>";
    let ok = |r: Result<Value, kube_sim::ApiError>| r.expect("the simulated API server accepts it");
    ok(world
        .sim
        .create(Kind::Subnet, "", subnet(hostile_subnet, "10.99.0.0/24")));
    ok(world.sim.create(
        Kind::Ip,
        "",
        ip(
            hostile_ip,
            hostile_subnet,
            "pod-x",
            "ns-x",
            "10.99.0.7",
            "Pod",
        ),
    ));
    ok(world.sim.delete(Kind::Subnet, "", hostile_subnet));
    ok(world
        .sim
        .remove_finalizers(Kind::Subnet, "", hostile_subnet));
    wait_for("the alert at the webhook", Duration::from_secs(20), || {
        receiver
            .received("/hook")
            .into_iter()
            .find(|r| rule_of(r) == "subnet-deleted-before-ip")
    });
    let dom = browser::dump_dom(&page_url(ui_port, &format!("{BASE}/")));
    let shown: Vec<String> = elements(&dom, "a")
        .into_iter()
        .filter_map(|a| a.get("title").cloned())
        .collect();
    assert!(
        !shown.is_empty(),
        "the incident is listed: {dom}; log:\n{}",
        analyzer.log_text()
    );
    for (tag, _) in tags(&dom) {
        assert!(
            !["script", "img"].contains(&tag.as_str()),
            "the name became a <{tag}>"
        );
    }
    assert!(
        dom.contains("ip&lt;script&gt;"),
        "the name is shown as text"
    );
    let id = rows(&dom).into_keys().next().expect("a row");
    let incident = browser::dump_dom(&page_url(ui_port, &format!("{BASE}/incidents/{id}")));
    for (tag, _) in tags(&incident) {
        assert!(
            !["script", "img"].contains(&tag.as_str()),
            "the name became a <{tag}> on the incident page"
        );
    }
    assert!(incident.contains("<title>ipaudit: subnet-deleted-before-ip ip&lt;script&gt;"));

    // The API asks for the token; the pages (for browsers) rely on the network.
    let (status, body) = get(ui_port, &format!("{BASE}/api/v1/incidents"), None);
    assert_eq!(status, 401, "{body}");
    assert!(!body.contains("s3cret"), "the token is never echoed");
    let (status, _) = get(ui_port, &format!("{BASE}/api/v1/incidents"), Some("wrong"));
    assert_eq!(status, 401);
    let (status, body) = get(
        ui_port,
        &format!("{BASE}/api/v1/incidents"),
        Some("s3cret-token"),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&id));
    // Read-only: no route writes.
    let (status, body) = http_request(
        ui_port,
        "DELETE",
        &format!("{BASE}/api/v1/incidents/{id}"),
        &[("Authorization", "Bearer s3cret-token")],
    )
    .expect("the pages answer");
    assert_eq!(status, 405, "{body}");
}

#[test]
fn a_member_that_does_not_hold_an_incident_answers_with_the_data_of_the_one_that_does_which_keeps_it_across_a_restart(
) {
    let world = World::new("pages-peers", None);
    let receiver = Receiver::start(&world.runtime);
    let _collector = world.collector();
    // The range assignor gives the one partition to the member whose id sorts first; the
    // members' ids start with their instance ids, `member-<port>`, of five digits each.
    let (a, b) = (free_port(), free_port());
    let (owner_port, other_port) = (a.min(b), a.max(b));
    let peer = |port: u16| format!("http://127.0.0.1:{port}{BASE}");
    // Every member lists every replica, itself too (as the chart does): its own answers
    // are told apart by the member header and not counted twice.
    let everyone = format!("{},{}", peer(owner_port), peer(other_port));
    let owner = analyzer(&world, &receiver, owner_port, &["--ui-peers", &everyone]);
    play_kube_ovn_seed(&world.sim, false);
    let hook = wait_for("the alert at the webhook", Duration::from_secs(20), || {
        receiver
            .received("/hook")
            .into_iter()
            .find(|r| rule_of(r) == "subnet-deleted-before-ip")
    });
    let id = hook.body["alert_id"].as_str().expect("alert id").to_owned();
    // A second member joins: the topic's one partition stays with the first, so the
    // second's store holds nothing; the Service in front of both may send a click to it.
    let other = analyzer(
        &world,
        &receiver,
        other_port,
        &["--ui-peers", &peer(owner_port)],
    );
    let (status, own) = get_as_peer(other_port, &format!("{BASE}/api/v1/incidents"));
    assert_eq!(status, 200);
    assert!(
        !own.contains(&id),
        "the second member's store does not hold it: {own}"
    );
    // Its list is the group's: the owner's incidents merged in, once each.
    let listed = rows(&browser::dump_dom(&page_url(
        other_port,
        &format!("{BASE}/"),
    )));
    assert_eq!(listed[&id]["data-state"], "firing");
    let merged = api(other_port, &format!("{BASE}/api/v1/incidents"));
    assert_eq!(
        merged["total"], 2,
        "two incidents, each counted once: {merged}"
    );
    let at_owner = api(owner_port, &format!("{BASE}/api/v1/incidents"));
    assert_eq!(
        at_owner["total"], 2,
        "the owner's own answer is not merged in again"
    );
    let page = browser::dump_dom(&page_url(other_port, &format!("{BASE}/incidents/{id}")));
    let note = elements(&page, "p")
        .into_iter()
        .find(|a| a.get("id").is_some_and(|i| i == "from-peer"))
        .unwrap_or_else(|| {
            panic!(
                "the page says where it was read from: {page}\nlog:\n{}",
                other.log_text()
            )
        });
    assert_eq!(note["data-peer"], peer(owner_port));
    assert!(
        lanes(&page).contains(&"subnet/vm-net".to_owned()),
        "with its timeline"
    );
    let one = api(other_port, &format!("{BASE}/api/v1/incidents/{id}"));
    assert_eq!(one["alert_id"], id.as_str());
    let (status, _) = get(
        other_port,
        &format!("{BASE}/incidents/0000000000000000"),
        None,
    );
    assert_eq!(status, 404, "an id no member holds is not found");

    // The incident lives in the owner's store file: it is there after a restart.
    let log = owner.log.clone();
    assert!(
        owner.terminate(Duration::from_secs(20)),
        "a clean exit; log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let owner = analyzer(
        &world,
        &receiver,
        owner_port,
        &["--ui-peers", &peer(other_port)],
    );
    let again = api(owner_port, &format!("{BASE}/api/v1/incidents/{id}"));
    assert_eq!(again["alert_id"], id.as_str());
    assert_eq!(again["fired"], one["fired"], "the same evidence");
    drop(owner);
}
