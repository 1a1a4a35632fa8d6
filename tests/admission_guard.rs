//! The collector's admission guard, end to end: the simulated API server holds Subnets,
//! kube-ovn IPs, whereabouts IPPools and a SpiderIPPool; the real `collector run` watches it
//! and serves the validating webhook over HTTPS with certificates made by `openssl`; the
//! test sends `AdmissionReview` requests as the API server sends them (POST
//! `/validate?timeout=2s`, JSON, the object being deleted as `oldObject`) and reads the
//! answers and `/metrics`.

use std::time::Duration;

use ipaudit_tests::collector::CollectorProcess;
use ipaudit_tests::scenario::{ip, subnet};
use ipaudit_tests::tls::Certs;
use ipaudit_tests::wait_for;
use ipaudit_tests::world::World;
use kube_sim::{Kind, KubeSim};
use serde_json::{json, Value};

/// Addresses the subnet `busy-net` holds: more than the ten an answer names.
const BUSY_IPS: usize = 12;

/// A cluster with something in use and something empty of each guarded kind.
fn populate(sim: &KubeSim) {
    sim.create(Kind::Subnet, "", subnet("busy-net", "10.16.0.0/16"))
        .unwrap();
    sim.create(Kind::Subnet, "", subnet("empty-net", "10.17.0.0/16"))
        .unwrap();
    for i in 0..BUSY_IPS {
        let pod = format!("web-{i:02}");
        sim.create(
            Kind::Ip,
            "",
            ip(
                &format!("{pod}.shop"),
                "busy-net",
                &pod,
                "shop",
                &format!("10.16.0.{}", i + 2),
                "",
            ),
        )
        .unwrap();
    }
    sim.create(
        Kind::IpPool,
        "kube-system",
        json!({"metadata": {"name": "10.9.0.0-24"},
            "spec": {"range": "10.9.0.0/24", "allocations": {
                "5": {"id": "c0ffee01", "podref": "default/db-0", "ifname": "net1"},
                "6": {"id": "c0ffee02", "podref": "default/db-1", "ifname": "net1"}}}}),
    )
    .unwrap();
    sim.create(
        Kind::IpPool,
        "kube-system",
        json!({"metadata": {"name": "10.9.1.0-24"},
            "spec": {"range": "10.9.1.0/24", "allocations": {}}}),
    )
    .unwrap();
    sim.create(
        Kind::SpiderIpPool,
        "",
        json!({"metadata": {"name": "pool-a", "finalizers": ["spiderpool.spidernet.io"]},
            "spec": {"subnet": "172.18.0.0/16", "ips": ["172.18.40.10-172.18.40.20"]},
            "status": {"allocatedIPCount": 1,
                "allocatedIPs": "{\"172.18.40.10\":{\"pod\":\"default/cache-0\",\"podUid\":\"9f1c\"}}"}}),
    )
    .unwrap();
}

/// The AdmissionReview the API server sends for `kubectl delete` of `object` (as the API
/// server holds it) of `kind`.
fn delete_review(uid: &str, kind: Kind, namespace: &str, object: &Value) -> Value {
    let spec = kind.spec().expect("a kind of the table");
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let mut request = json!({
        "uid": uid,
        "kind": {"group": spec.group, "version": spec.version, "kind": spec.kind},
        "resource": {"group": spec.group, "version": spec.version, "resource": spec.plural},
        "requestKind": {"group": spec.group, "version": spec.version, "kind": spec.kind},
        "requestResource": {"group": spec.group, "version": spec.version, "resource": spec.plural},
        "name": name,
        "operation": "DELETE",
        "userInfo": {"username": "kubernetes-admin",
            "groups": ["kubeadm:cluster-admins", "system:authenticated"]},
        "object": null,
        "oldObject": object,
        "dryRun": false,
        "options": {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1",
            "propagationPolicy": "Background"}
    });
    if !namespace.is_empty() {
        request["namespace"] = json!(namespace);
    }
    json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request})
}

/// An HTTPS client that trusts only `ca`, as the API server trusts the webhook's caBundle.
fn client(ca: &std::path::Path) -> reqwest::Client {
    let pem = std::fs::read(ca).expect("CA file");
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("CA PEM"))
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client")
}

/// POSTs `body` to the webhook; (HTTP status, JSON body or Null).
fn post(world: &World, client: &reqwest::Client, port: u16, body: Vec<u8>) -> (u16, Value) {
    world.runtime.block_on(async {
        let response = client
            .post(format!("https://127.0.0.1:{port}/validate?timeout=2s"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("the webhook answers over TLS");
        let status = response.status().as_u16();
        let body = response.json::<Value>().await.unwrap_or(Value::Null);
        (status, body)
    })
}

/// The `response` of the review for deleting the object `name` of `kind`.
fn review(
    world: &World,
    client: &reqwest::Client,
    port: u16,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> Value {
    let object = world.sim.get(kind, namespace, name).expect("object exists");
    let uid = format!("review-{name}");
    let body = delete_review(&uid, kind, namespace, &object);
    let (status, answer) = post(world, client, port, serde_json::to_vec(&body).unwrap());
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1", "{answer}");
    assert_eq!(answer["kind"], "AdmissionReview", "{answer}");
    let response = answer["response"].clone();
    assert_eq!(response["uid"], uid.as_str(), "the request's uid: {answer}");
    response
}

fn warnings(response: &Value) -> Vec<String> {
    response["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Polls the review until `done` holds (the index follows the watches a moment later).
fn review_until(
    what: &str,
    world: &World,
    client: &reqwest::Client,
    port: u16,
    (kind, namespace, name): (Kind, &str, &str),
    done: impl Fn(&Value) -> bool,
) -> Value {
    wait_for(what, Duration::from_secs(30), || {
        let response = review(world, client, port, kind, namespace, name);
        done(&response).then_some(response)
    })
}

fn reviews(collector: &CollectorProcess, kind: &str, decision: &str) -> f64 {
    collector.counter(&format!(
        "ipaudit_collector_admission_reviews_total{{kind=\"{kind}\",decision=\"{decision}\"}}"
    ))
}

#[test]
fn deny_refuses_deleting_a_subnet_or_pool_that_live_allocations_name_listing_them_and_allows_empty_ones(
) {
    let world = World::new("guard-deny", None);
    populate(&world.sim);
    let certs = Certs::generate();
    let (collector, port) =
        CollectorProcess::start_with_guard(&world.setup(), &certs, "deny", true);
    let client = client(&certs.ca);

    let busy = review_until(
        "the busy subnet is denied",
        &world,
        &client,
        port,
        (Kind::Subnet, "", "busy-net"),
        |r| r["allowed"] == false,
    );
    assert_eq!(busy["status"]["code"], 403, "{busy}");
    let message = busy["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!(
            "Subnet busy-net is still named by {BUSY_IPS} live IPs"
        )),
        "{message}"
    );
    for i in 0..10 {
        assert!(
            message.contains(&format!(
                "web-{i:02}.shop (10.16.0.{}, pod shop/web-{i:02})",
                i + 2
            )),
            "IP {i} is named: {message}"
        );
    }
    assert!(
        !message.contains("web-10.shop") && message.contains("and 2 more"),
        "ten named, the rest counted: {message}"
    );

    let empty = review(&world, &client, port, Kind::Subnet, "", "empty-net");
    assert_eq!(empty["allowed"], true, "{empty}");
    assert!(warnings(&empty).is_empty(), "{empty}");

    let pool = review(
        &world,
        &client,
        port,
        Kind::IpPool,
        "kube-system",
        "10.9.0.0-24",
    );
    assert_eq!(pool["allowed"], false, "{pool}");
    let message = pool["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("IPPool kube-system/10.9.0.0-24 is still named by 2 allocations")
            && message.contains("10.9.0.5 (pod default/db-0)")
            && message.contains("10.9.0.6 (pod default/db-1)"),
        "{message}"
    );
    let empty_pool = review(
        &world,
        &client,
        port,
        Kind::IpPool,
        "kube-system",
        "10.9.1.0-24",
    );
    assert_eq!(empty_pool["allowed"], true, "{empty_pool}");

    let spider = review(&world, &client, port, Kind::SpiderIpPool, "", "pool-a");
    assert_eq!(spider["allowed"], false, "{spider}");
    let message = spider["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("SpiderIPPool pool-a is still named by 1 allocations")
            && message.contains("172.18.40.10 (pod default/cache-0)"),
        "{message}"
    );

    // The index is live: once kube-ovn has released every IP, the subnet may go.
    for i in 0..BUSY_IPS {
        let name = format!("web-{i:02}.shop");
        world.sim.remove_finalizers(Kind::Ip, "", &name).unwrap();
        let _ = world.sim.delete(Kind::Ip, "", &name);
    }
    review_until(
        "the released subnet is allowed",
        &world,
        &client,
        port,
        (Kind::Subnet, "", "busy-net"),
        |r| r["allowed"] == true,
    );

    // A request it cannot read is allowed with its uid; a body without one is refused.
    let (status, answer) = post(
        &world,
        &client,
        port,
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-broken","operation":42}}"#.to_vec(),
    );
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["uid"], "u-broken", "{answer}");
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let (status, _) = post(&world, &client, port, b"not json".to_vec());
    assert_eq!(status, 400);

    let denied = reviews(&collector, "subnet", "denied");
    assert!(denied >= 1.0, "{}", collector.metrics());
    assert_eq!(reviews(&collector, "ippool", "denied"), 1.0);
    assert_eq!(reviews(&collector, "ippool", "allowed"), 1.0);
    assert_eq!(reviews(&collector, "spiderippool", "denied"), 1.0);
    assert!(reviews(&collector, "subnet", "allowed") >= 2.0);
    assert_eq!(reviews(&collector, "unknown", "error"), 2.0);
}

#[test]
fn warn_allows_deleting_a_subnet_that_live_ips_name_with_warnings_naming_them() {
    let world = World::new("guard-warn", None);
    let certs = Certs::generate();
    let (collector, port) =
        CollectorProcess::start_with_guard(&world.setup(), &certs, "warn", true);
    let client = client(&certs.ca);
    // Created while the collector watches: the index follows the watch events.
    populate(&world.sim);
    let busy = review_until(
        "the busy subnet is warned about",
        &world,
        &client,
        port,
        (Kind::Subnet, "", "busy-net"),
        |r| {
            warnings(r)
                .first()
                .is_some_and(|w| w.contains(&format!("named by {BUSY_IPS} live IPs")))
        },
    );
    assert_eq!(busy["allowed"], true, "{busy}");
    let warnings = warnings(&busy);
    assert_eq!(
        warnings[0],
        format!(
            "Subnet busy-net is still named by {BUSY_IPS} live IPs; deleting it now leaks them:"
        )
    );
    assert_eq!(warnings[1], "  web-00.shop (10.16.0.2, pod shop/web-00)");
    assert_eq!(warnings.len(), 1 + 10 + 1, "{warnings:?}");
    assert_eq!(warnings[11], "  and 2 more");
    let empty = review(&world, &client, port, Kind::Subnet, "", "empty-net");
    assert_eq!(empty["allowed"], true, "{empty}");
    assert!(empty["warnings"].is_null(), "{empty}");
    assert!(reviews(&collector, "subnet", "warned") >= 1.0);
    assert_eq!(reviews(&collector, "subnet", "denied"), 0.0);

    // Only a client trusting the webhook's CA gets through.
    let stranger = self::client(&certs.other_ca);
    let refused = world.runtime.block_on(async {
        stranger
            .post(format!("https://127.0.0.1:{port}/validate"))
            .body("{}")
            .send()
            .await
    });
    assert!(
        refused.is_err(),
        "a certificate from another CA is not trusted"
    );
}

#[test]
fn every_deletion_is_allowed_until_the_watches_are_synced_and_while_one_fails() {
    let world = World::new("guard-unsynced", None);
    populate(&world.sim);
    let guarded = [Kind::Ip, Kind::IpPool, Kind::SpiderIpPool];
    for kind in guarded {
        world.sim.fail_kind(kind);
    }
    let certs = Certs::generate();
    let (mut collector, port) =
        CollectorProcess::start_with_guard(&world.setup(), &certs, "deny", false);
    let client = client(&certs.ca);
    for (kind, namespace, name) in [
        (Kind::Subnet, "", "busy-net"),
        (Kind::IpPool, "kube-system", "10.9.0.0-24"),
        (Kind::SpiderIpPool, "", "pool-a"),
    ] {
        let response = review(&world, &client, port, kind, namespace, name);
        assert_eq!(response["allowed"], true, "{name}: {response}");
        let warnings = warnings(&response);
        assert!(
            warnings.len() == 1 && warnings[0].contains("has no synced view"),
            "{name}: {warnings:?}"
        );
    }
    assert_eq!(reviews(&collector, "subnet", "unsynced"), 1.0);
    assert_eq!(reviews(&collector, "ippool", "unsynced"), 1.0);
    assert_eq!(reviews(&collector, "spiderippool", "unsynced"), 1.0);
    assert!(collector.is_running(), "{}", collector.log_text());

    for kind in guarded {
        world.sim.heal(kind);
    }
    collector.wait_ready(Duration::from_secs(30));
    for (kind, namespace, name) in [
        (Kind::Subnet, "", "busy-net"),
        (Kind::IpPool, "kube-system", "10.9.0.0-24"),
        (Kind::SpiderIpPool, "", "pool-a"),
    ] {
        review_until(
            "denied once synced",
            &world,
            &client,
            port,
            (kind, namespace, name),
            |r| r["allowed"] == false,
        );
    }

    // A watch that fails later makes the view untrusted again until it recovers.
    world.sim.fail_kind(Kind::Ip);
    let response = review_until(
        "allowed while the ip watch fails",
        &world,
        &client,
        port,
        (Kind::Subnet, "", "busy-net"),
        |r| r["allowed"] == true,
    );
    assert!(
        warnings(&response)
            .first()
            .is_some_and(|w| w.contains("the ip watch is failing")),
        "{response}"
    );
    world.sim.heal(Kind::Ip);
    review_until(
        "denied once the watch recovers",
        &world,
        &client,
        port,
        (Kind::Subnet, "", "busy-net"),
        |r| r["allowed"] == false,
    );
}

#[test]
fn a_restarted_collector_relists_what_the_guard_reads_and_guards_again() {
    let world = World::new("guard-restart", None);
    populate(&world.sim);
    let certs = Certs::generate();
    let client = client(&certs.ca);
    let busy = (Kind::Subnet, "", "busy-net");
    let (collector, port) =
        CollectorProcess::start_with_guard(&world.setup(), &certs, "deny", true);
    review_until("denied", &world, &client, port, busy, |r| {
        r["allowed"] == false
    });
    let log = collector.log.clone();
    let stopped = collector.terminate(Duration::from_secs(30));
    assert!(
        stopped,
        "clean stop; log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // The outbox holds a resume point for every stream; the guard's index lived in memory
    // and must be rebuilt from a fresh list, not left empty by a resumed watch.
    let (collector, port) =
        CollectorProcess::start_with_guard(&world.setup(), &certs, "deny", true);
    let response = review_until(
        "denied after the restart",
        &world,
        &client,
        port,
        busy,
        |r| r["allowed"] == false,
    );
    assert!(
        response["status"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("named by {BUSY_IPS} live IPs"))),
        "{response}"
    );
    assert!(
        collector.counter("ipaudit_collector_relists_total{stream=\"ip\",reason=\"initial\"}")
            >= 1.0
    );
}
