//! The admission guard's handling of one request body (`admission::Guard::answer`), in
//! deny mode with a synced view in which subnet `net1`, whereabouts pool
//! `kube-system/pool1` and SpiderIPPool `spool1` are named by live allocations: a verdict
//! or "allowed, unreadable", never a panic; a body it cannot read is allowed (and answered
//! with its uid when it has one); a denial is only ever of a DELETE of one of those three
//! objects, read from the body; the review sent back says what the verdict says.
#![no_main]

use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use ipaudit_collector::admission::Guard;
use ipaudit_collector::admission::guard::{Decision, GuardMode, Index};
use ipaudit_collector::health::Health;
use ipaudit_collector::metrics::Metrics;
use ipaudit_schemas::builders::EventBuilder;
use ipaudit_schemas::{EventType, Stream};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn guard() -> &'static Guard {
    static GUARD: OnceLock<Guard> = OnceLock::new();
    GUARD.get_or_init(|| {
        let streams = [
            Stream::Ip,
            Stream::Subnet,
            Stream::IpPool,
            Stream::SpiderIpPool,
        ];
        let mut index = Index::new(&streams);
        for stream in streams {
            index.apply(&EventBuilder::marker(stream, EventType::SyncStart, 1));
            index.apply(&EventBuilder::marker(stream, EventType::SyncEnd, 1));
        }
        index.apply(&EventBuilder::ip("a.ns", "net1").uid("u1").rv(2).added());
        index.apply(
            &EventBuilder::ip_pool("kube-system", "pool1", "10.9.0.0/24")
                .uid("u2")
                .allocation(1, "10.9.0.1", "ns/a")
                .rv(3)
                .added(),
        );
        index.apply(
            &EventBuilder::spider_pool("spool1", "10.8.0.0/24")
                .uid("u3")
                .entry("10.8.0.1", "ns/a", "pu1")
                .rv(4)
                .added(),
        );
        let health = Health::new(&streams, Duration::from_secs(3600), None);
        for stream in streams {
            health.watching(stream);
        }
        Guard::new(
            "fuzz".into(),
            Arc::new(RwLock::new(index)),
            health,
            Metrics::new(&streams),
            GuardMode::Deny,
        )
    })
}

fuzz_target!(|body: &[u8]| {
    let (review, _kind, verdict) = guard().answer(body);
    // The request as JSON; bytes that are not UTF-8 in a field the guard skips (serde
    // does not check what it skips) are replaced, not a reason to know nothing.
    let request = serde_json::from_slice::<Value>(body)
        .or_else(|_| serde_json::from_str::<Value>(&String::from_utf8_lossy(body)))
        .ok()
        .and_then(|v| v.get("request").cloned());
    let field = |name: &str| {
        request
            .as_ref()
            .and_then(|r| r.get(name))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    match verdict.decision {
        Decision::Denied => {
            assert!(!verdict.allowed);
            assert_eq!(
                field("operation").as_deref(),
                Some("DELETE"),
                "denied a non-DELETE"
            );
            let name = field("name").unwrap_or_default();
            assert!(
                ["net1", "pool1", "spool1"].contains(&name.as_str()),
                "denied the deletion of {name:?}, which nothing names"
            );
        }
        _ => assert!(verdict.allowed, "{verdict:?}"),
    }
    if verdict.decision == Decision::Error {
        // Unreadable: answered (allowed) when the body has a uid.
        if let Some(review) = &review {
            let response = review.response.as_ref().expect("a review answers");
            assert!(response.allowed, "an unreadable request was not allowed");
        }
    }
    if let Some(review) = &review {
        let response = review.response.as_ref().expect("a review answers");
        assert_eq!(response.allowed, verdict.allowed);
        if let Some(uid) = field("uid") {
            assert_eq!(response.uid, uid, "answered another request's uid");
        }
        serde_json::to_vec(review).expect("the review serialises");
    }
});
