//! Consumer group scale (issue 30, item 5), on Apache Kafka with the real `collector` and
//! `analyzer` binaries: 30 clusters write to one events topic of 12 partitions, and a
//! consumer group of two analyzers at a time (one killed and one started in each round)
//! delivers their alerts to one webhook receiver (issue 41, item 3: exact takeover).
//!
//! Each cluster is a simulated API server of its own (in this process, serving kube-ovn's
//! Pods, IPs and Subnets, bookmarks every second) watched by a `collector run` process of
//! its own, with its own cluster and collector id: 30 real collectors. They are cheap
//! enough for a 2-core machine: the whole test (collectors, analyzers, API servers; not
//! the broker) used about 15 s of CPU in 25 s before the kills were added. Cluster ids are chosen so that each
//! partition carries two or three clusters (the collector keys its messages by cluster id;
//! checked on the topic), so every partition that changes hands carries clusters.
//!
//! The analyzers are static members (`--instance-id`, as `deploy/analyzer.yaml` runs them),
//! each with its own state directory and its own path on the receiver, so that every
//! delivery names its sender. Two members start; then in each of three rounds every
//! cluster plays the kube-ovn incident "subnet deleted under a live IP", and at a random
//! moment of the round (0 to 1.5 s after it was played: before, during or after its alerts
//! are delivered) a random member is SIGKILLed for good and a new member (a new instance
//! id, no state) is started. The dead member's partitions have no owner until its session
//! expires; then the survivor and the new member share them. The seed is printed, and
//! `IPAUDIT_TEST_SEED` plays the same kills again. Each round has new subnet and IP names.
//!
//! What holds, checked on every webhook request: each cluster's alert of each round is
//! one alert that fires once and, when every IP is finally cleaned up, resolves once (one
//! `Idempotency-Key` each), also the alerts fired by a member that died; the group delivers
//! nothing else: no other rule about these leaks, no second transition of one incident, no
//! transition lost, no key sent twice by one member nor with different contents. And every
//! partition a killed member owned was taken over from its handover in the checkpoints
//! topic (the log line of the member that took it), not rebuilt from a snapshot.
//!
//! Between round 1 and round 2 every cluster relists (a watch gap ended by 410 Gone, as
//! `--snapshot-interval` also makes): the topic then holds a snapshot taken after round 1's
//! incidents, which shows their outcome (an IP naming a subnet that is not there), not the
//! deletions that made them; a takeover that rebuilt from it would report round 1's leaks
//! again as `ip-orphaned` and never resolve the first alerts.
//!
//! Exactly once is by `Idempotency-Key`, as documented ("every sink delivers every
//! transition at least once, with the transition id as Idempotency-Key"): a key is never
//! delivered twice by one member, but the member that takes a partition over reads again
//! what its previous owner read after its last handover, and delivers again (same key,
//! same body) what that owner delivered meanwhile.
//!
//! Measured on a 2-core machine (one run, seed 3854378264929107371): the 30 collectors
//! ready in 2.3 s; each kill was followed by the first delivery of the dead member's
//! clusters by their new owner 13.3 to 13.7 s later (the 10 s session, then one rebalance
//! and the handover read); every alert resolved 1.4 s after the clean-up; 222 webhook
//! requests for 180 transitions (42 sent again by a new owner); the survivors wrote 24
//! handovers, 565 kB; 56 s in all.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ipaudit_tests::analyzer::AnalyzerProcess;
use ipaudit_tests::broker::partitions_of_keys;
use ipaudit_tests::collector::{CollectorProcess, CollectorSetup};
use ipaudit_tests::receiver::Receiver;
use ipaudit_tests::scenario::play_subnet_deleted_under_live_ip;
use ipaudit_tests::world::World;
use ipaudit_tests::{poll_until, wait_for};
use kube_sim::{Kind, KubeSim, SimConfig};
use serde_json::{json, Value};

/// Partitions of the events topic.
const PARTITIONS: i32 = 12;

/// Clusters, each with its own API server and collector.
const CLUSTERS: usize = 30;

/// The analyzer's consumer session (`session.timeout.ms` of the runtime's group
/// consumers): how long the coordinator waits before it gives a dead member's partitions
/// away.
const SESSION: Duration = Duration::from_secs(10);

/// The rule the incident fires.
const RULE: &str = "subnet-deleted-before-ip";

/// The analyzers, by `--instance-id`: the two first, and the one started when a member is
/// killed in each round.
const FIRST: &str = "analyzer-0";
const SECOND: &str = "analyzer-1";
const MEMBERS: [&str; 5] = [FIRST, SECOND, "analyzer-r1", "analyzer-r2", "analyzer-r3"];

/// One cluster: its API server and the collector watching it.
struct Cluster {
    id: String,
    // Dropped before the API server it watches.
    collector: CollectorProcess,
    sim: KubeSim,
}

/// CRC-32 (IEEE), what librdkafka's default partitioner (`consistent_random`) hashes a key
/// with.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFF_u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// 30 cluster ids spread two or three to a partition by the collector's message key (the
/// cluster id), so that every partition, wherever it moves, carries clusters.
fn cluster_ids() -> Vec<String> {
    let mut per_partition = [0usize; PARTITIONS as usize];
    let mut ids = Vec::new();
    for n in 0.. {
        let id = format!("cluster-{n:03}");
        let partition = (crc32(id.as_bytes()) % PARTITIONS as u32) as usize;
        let cap = if per_partition.iter().all(|c| *c >= 2) {
            3
        } else {
            2
        };
        if per_partition[partition] < cap {
            per_partition[partition] += 1;
            ids.push(id);
        }
        if ids.len() == CLUSTERS {
            break;
        }
    }
    ids
}

/// Starts an API server serving kube-ovn's kinds and a collector for each cluster id, and
/// waits until every collector watches. The API servers first, then the collectors: a
/// collector's metrics port is picked free and bound a moment later, and one that another
/// process took meanwhile is picked again.
fn start_clusters(world: &World, ids: &[String]) -> Vec<Cluster> {
    let sims: Vec<KubeSim> = ids
        .iter()
        .map(|_| {
            let config = SimConfig {
                bookmark_interval: Duration::from_secs(1),
                ..SimConfig::serving(&[Kind::Pod, Kind::Ip, Kind::Subnet])
            };
            world
                .runtime
                .block_on(KubeSim::start(config))
                .expect("simulated API server")
        })
        .collect();
    let start = |id: &str, sim: &KubeSim| {
        let dir = world.dir.path().join(id);
        std::fs::create_dir_all(&dir).expect("cluster dir");
        let kubeconfig = dir.join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        // A collector id of its own, as each cluster's collector pod has.
        let collector_id = format!("collector-{id}");
        CollectorProcess::start_unready(
            &CollectorSetup {
                kubeconfig: &kubeconfig,
                brokers: &world.brokers,
                topic: &world.topic,
                state_dir: &dir,
                cluster_id: id,
            },
            &["--collector-id", &collector_id],
        )
    };
    let mut collectors: Vec<CollectorProcess> = ids
        .iter()
        .zip(&sims)
        .map(|(id, sim)| start(id, sim))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    for ((id, sim), collector) in ids.iter().zip(&sims).zip(&mut collectors) {
        while collector.readyz().is_none_or(|(code, _)| code != 200) {
            if !collector.is_running() {
                let log = collector.log_text();
                assert!(
                    log.contains("Address already in use"),
                    "the collector of {id} exited; log:\n{log}"
                );
                *collector = start(id, sim);
            }
            assert!(
                Instant::now() < deadline,
                "the collector of {id} is not ready; log:\n{}",
                collector.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    ids.iter()
        .zip(collectors)
        .zip(sims)
        .map(|((id, collector), sim)| Cluster {
            id: id.clone(),
            collector,
            sim,
        })
        .collect()
}

/// `analyzer run` in `group` as static member `instance`, with its own state directory,
/// delivering to the receiver's `/hook/<instance>`.
fn member(world: &World, receiver: &Receiver, group: &str, instance: &str) -> AnalyzerProcess {
    AnalyzerProcess::start(
        &world.brokers,
        &world.topic,
        group,
        &world.dir.path().join(instance),
        &[
            "--instance-id",
            instance,
            "--webhook-url",
            &format!("{}/hook/{instance}", receiver.url),
        ],
    )
}

/// The member's partitions as its latest rebalance callback logged them: `None` before
/// its first assignment and after a revocation (in the middle of a rebalance).
fn assignment(process: &AnalyzerProcess) -> Option<BTreeSet<i32>> {
    let log = process.log_text();
    let line = log
        .lines()
        .rfind(|l| l.contains("partitions assigned") || l.contains("partitions revoked"))?;
    let (_, starts) = line.split_once("partitions assigned starts=[")?;
    // `(0, Snapshot(12)), (1, Checkpoint(3)), (2, Beginning)]`
    Some(
        starts
            .split('(')
            .filter_map(|piece| piece.split_once(',')?.0.trim().parse().ok())
            .collect(),
    )
}

/// Each member's partitions, once every member of `members` holds some and together they
/// hold every partition exactly once (the group settled on one assignment).
fn owning_all(members: &[(&str, &AnalyzerProcess)]) -> Option<BTreeMap<String, BTreeSet<i32>>> {
    let mut owners = BTreeMap::new();
    let mut union = BTreeSet::new();
    for (name, process) in members {
        let partitions = assignment(process).filter(|p| !p.is_empty())?;
        for partition in &partitions {
            if !union.insert(*partition) {
                return None;
            }
        }
        owners.insert((*name).to_owned(), partitions);
    }
    (union.len() == PARTITIONS as usize).then_some(owners)
}

/// Whether the member has delivered every transition it stored to every sink.
fn delivered_all(process: &AnalyzerProcess) -> bool {
    let metrics = process.metrics();
    metrics.contains("ipaudit_analyzer_sink_backlog_transitions{")
        && metrics
            .lines()
            .filter(|l| l.starts_with("ipaudit_analyzer_sink_backlog_transitions{"))
            .all(|l| l.ends_with(" 0"))
}

/// One webhook request of the group.
#[derive(Debug, Clone)]
struct Delivery {
    /// Who sent it (the path it came on).
    member: String,
    cluster: String,
    subnet: String,
    rule: String,
    status: String,
    /// Its `Idempotency-Key` (the transition id).
    key: String,
    body: Value,
    at: Instant,
}

/// Every webhook request of the members so far.
fn deliveries(receiver: &Receiver) -> Vec<Delivery> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    MEMBERS
        .iter()
        .flat_map(|member| {
            receiver
                .received(&format!("/hook/{member}"))
                .into_iter()
                .map(|r| Delivery {
                    member: (*member).to_owned(),
                    cluster: text(&r.body["cluster_id"]),
                    subnet: text(&r.body["subnet"]),
                    rule: text(&r.body["rule"]),
                    status: text(&r.body["status"]),
                    key: r
                        .headers
                        .get("idempotency-key")
                        .cloned()
                        .unwrap_or_default(),
                    body: r.body,
                    at: r.at,
                })
        })
        .collect()
}

/// The subnet (and IP name prefix) of round `round`.
fn subnet_of(round: u8) -> String {
    format!("round-{round}")
}

/// Every cluster plays the incident of `round`.
fn play_round(clusters: &[Cluster], round: u8) {
    for cluster in clusters {
        play_subnet_deleted_under_live_ip(&cluster.sim, &subnet_of(round), 100 + round);
    }
}

/// Whether `d` is the transition to `status` (`FIRING`, `RESOLVED`) of the alert about
/// `cluster`'s incident of `round`.
fn is_transition(d: &Delivery, cluster: &str, round: u8, status: &str) -> bool {
    d.cluster == cluster && d.subnet == subnet_of(round) && d.rule == RULE && d.status == status
}

/// Waits until the transition to `status` of every cluster's alert of each of `rounds`
/// arrived; when the last one's first delivery came. Fails naming the ones still missing,
/// with the members' rebalances and deliveries (`logs`: each member's log file).
fn wait_for_transitions(
    receiver: &Receiver,
    clusters: &[Cluster],
    rounds: &[u8],
    status: &str,
    timeout: Duration,
    logs: &[(&str, PathBuf)],
) -> Instant {
    let wanted: Vec<(&str, u8)> = clusters
        .iter()
        .flat_map(|c| rounds.iter().map(move |r| (c.id.as_str(), *r)))
        .collect();
    let first = |all: &[Delivery], (cluster, round): (&str, u8)| {
        all.iter()
            .filter(|d| is_transition(d, cluster, round, status))
            .map(|d| d.at)
            .min()
    };
    poll_until(timeout, || {
        let all = deliveries(receiver);
        wanted
            .iter()
            .map(|w| first(&all, *w))
            .collect::<Option<Vec<Instant>>>()
            .and_then(|firsts| firsts.into_iter().max())
    })
    .unwrap_or_else(|| {
        let all = deliveries(receiver);
        let missing: Vec<&(&str, u8)> = wanted
            .iter()
            .filter(|w| first(&all, **w).is_none())
            .collect();
        // The collectors of the missing clusters say whether their events left them.
        let collectors: String = clusters
            .iter()
            .filter(|c| missing.iter().any(|(id, _)| *id == c.id))
            .map(|c| {
                let log = c.collector.log_text();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("collector of {}:\n{}\n", c.id, tail.join("\n"))
            })
            .collect();
        panic!(
            "no {status} transition after {timeout:?} of (cluster, round) {missing:?}; the members' rebalances and deliveries, and what they logged of those clusters:\n{}\n{collectors}",
            group_story(logs, &missing.iter().map(|(id, _)| *id).collect::<Vec<_>>())
        )
    })
}

/// The members' rebalance callbacks, snapshot choices, alert deliveries and warnings,
/// from their logs.
fn group_story(logs: &[(&str, PathBuf)], clusters: &[&str]) -> String {
    let mut story = String::new();
    for (name, path) in logs {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for line in text.lines().filter(|l| {
            l.contains("partitions assigned")
                || l.contains("partitions revoked")
                || l.contains("rebuilding")
                || l.contains(" WARN ")
                || l.contains(" ERROR ")
                || clusters
                    .iter()
                    .any(|cluster| l.contains(&format!("cluster={cluster}")))
        }) {
            story.push_str(&format!("{name}: {line}\n"));
        }
    }
    story
}

/// A watch gap in every cluster, ended by 410 Gone: the collectors' watches are cut, a pod
/// is scheduled meanwhile, the API server compacts its history, and each collector
/// relists every stream: a complete snapshot of every cluster in the topic. Waits until
/// every collector relisted and the group read and committed past the relists.
fn relist_every_cluster(clusters: &[Cluster]) {
    for cluster in clusters {
        cluster.sim.pause();
    }
    std::thread::sleep(Duration::from_millis(500));
    for cluster in clusters {
        cluster
            .sim
            .create(
                Kind::Pod,
                "apps",
                json!({"metadata": {"name": "scheduled-in-the-gap"},
                    "spec": {"nodeName": "node-1"}, "status": {"phase": "Running"}}),
            )
            .expect("the simulated API server accepts the pod");
        cluster.sim.expire_history();
        cluster.sim.resume();
    }
    for cluster in clusters {
        wait_for(
            &format!("{} relists after 410 Gone", cluster.id),
            Duration::from_secs(30),
            || {
                ["pod", "ip", "subnet"]
                    .iter()
                    .all(|stream| {
                        cluster.collector.counter(&format!(
                            "ipaudit_collector_relists_total{{stream=\"{stream}\",reason=\"expired\"}}"
                        )) >= 1.0
                    })
                    .then_some(())
            },
        );
    }
    // Produced, consumed, checkpointed and committed (every second).
    std::thread::sleep(Duration::from_secs(4));
}

/// Every cluster cleans up the IP of each round as the alert's fix says: kube-ovn's
/// finalizer removed, then the IP deleted. Each leak ends.
fn clean_up(clusters: &[Cluster]) {
    for cluster in clusters {
        for round in 1..=3 {
            let ip = format!("{}-ip.ns", subnet_of(round));
            let sim = &cluster.sim;
            sim.remove_finalizers(Kind::Ip, "", &ip)
                .and_then(|_| sim.delete(Kind::Ip, "", &ip))
                .expect("the simulated API server deletes the IP");
        }
    }
}

/// A member killed at a random moment of a round, and the one started in its place.
struct Kill {
    round: u8,
    victim: String,
    /// Its partitions when it died.
    partitions: BTreeSet<i32>,
    at: Instant,
    replacement: String,
}

/// The scenario of the module doc.
#[test]
fn thirty_clusters_alerts_reach_the_webhook_once_each_across_a_relist_and_a_member_killed_at_a_random_moment_of_every_round(
) {
    let name = "group-scale";
    let seed = std::env::var("IPAUDIT_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("group scale: seed {seed} (IPAUDIT_TEST_SEED={seed} plays the same kills)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();
    let world = World::partitioned(name, PARTITIONS);
    let receiver = Receiver::start(&world.runtime);
    let ids = cluster_ids();
    let clusters = start_clusters(&world, &ids);
    let ready = started.elapsed();

    let group = format!("ipaudit-{name}-{}", std::process::id());
    let mut live: Vec<(String, AnalyzerProcess)> = [FIRST, SECOND]
        .iter()
        .map(|m| (m.to_string(), member(&world, &receiver, &group, m)))
        .collect();
    let mut logs: Vec<(String, PathBuf)> = live
        .iter()
        .map(|(m, p)| (m.clone(), p.log.clone()))
        .collect();
    let owners = |live: &[(String, AnalyzerProcess)]| {
        let members: Vec<(&str, &AnalyzerProcess)> =
            live.iter().map(|(m, p)| (m.as_str(), p)).collect();
        owning_all(&members)
    };
    wait_for(
        "the two first members share the partitions",
        Duration::from_secs(60),
        || owners(&live),
    );

    let mut kills = Vec::new();
    let mut partition_of = BTreeMap::new();
    let mut steady = Duration::ZERO;
    for round in 1..=3u8 {
        if round == 2 {
            // Snapshots taken after round 1's incidents: a takeover must not rebuild
            // from them.
            relist_every_cluster(&clusters);
        }
        // The round plays; at a random moment of it (before, during or after its alerts
        // are delivered) a random member dies for good, and a new one is started.
        let played = Instant::now();
        play_round(&clusters, round);
        std::thread::sleep(Duration::from_millis(rng.u64(0..1500)));
        let (victim, process) = live.remove(rng.usize(..live.len()));
        let partitions = assignment(&process).unwrap_or_default();
        process.kill();
        let at = Instant::now();
        let replacement = format!("analyzer-r{round}");
        let added = member(&world, &receiver, &group, &replacement);
        logs.push((replacement.clone(), added.log.clone()));
        live.push((replacement.clone(), added));
        eprintln!(
            "round {round}: {victim} (partitions {partitions:?}) killed {:?} after the round was played; {replacement} started",
            at.duration_since(played)
        );
        let log_refs: Vec<(&str, PathBuf)> =
            logs.iter().map(|(m, p)| (m.as_str(), p.clone())).collect();
        wait_for(
            "the survivor and the new member share every partition",
            SESSION + Duration::from_secs(60),
            || owners(&live),
        );
        let last = wait_for_transitions(
            &receiver,
            &clusters,
            &[round],
            "FIRING",
            SESSION + Duration::from_secs(60),
            &log_refs,
        );
        if round == 1 {
            steady = last.duration_since(played);
            partition_of = partitions_of_keys(
                &world.brokers,
                &world.topic,
                PARTITIONS,
                &ids,
                Duration::from_secs(30),
            );
        }
        kills.push(Kill {
            round,
            victim,
            partitions,
            at,
            replacement,
        });
    }
    let mut clusters_of: BTreeMap<i32, Vec<&str>> = BTreeMap::new();
    for (cluster, partition) in &partition_of {
        clusters_of.entry(*partition).or_default().push(cluster);
    }
    assert!(
        partition_of.len() == CLUSTERS && clusters_of.len() == PARTITIONS as usize,
        "every cluster in a partition, every partition with clusters: {clusters_of:?}"
    );

    // Every leak is cleaned up: the members resolve every alert, also those a member
    // fired before it died.
    let cleaned = Instant::now();
    clean_up(&clusters);
    let log_refs: Vec<(&str, PathBuf)> =
        logs.iter().map(|(m, p)| (m.as_str(), p.clone())).collect();
    let last = wait_for_transitions(
        &receiver,
        &clusters,
        &[1, 2, 3],
        "RESOLVED",
        Duration::from_secs(60),
        &log_refs,
    );
    let resolved = last.duration_since(cleaned);

    // Every transition the members stored is delivered; then a margin for stragglers.
    wait_for(
        "the members deliver what they stored",
        Duration::from_secs(60),
        || live.iter().all(|(_, p)| delivered_all(p)).then_some(()),
    );
    std::thread::sleep(Duration::from_secs(2));
    let all = deliveries(&receiver);
    let mut per_key: BTreeMap<&str, Vec<&Delivery>> = BTreeMap::new();
    for d in &all {
        per_key.entry(&d.key).or_default().push(d);
    }
    let resent = all.len() - per_key.len();
    let survivors_metric = |name: &str| -> f64 {
        live.iter()
            .map(|(_, p)| {
                p.metrics()
                    .lines()
                    .find(|l| l.starts_with(name))
                    .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .unwrap_or(0.0)
            })
            .sum()
    };
    let (written, written_bytes) = (
        survivors_metric("ipaudit_analyzer_handovers_written_total "),
        survivors_metric("ipaudit_analyzer_handover_written_bytes_total "),
    );
    let members_for = started.elapsed();
    let mut takeovers = String::new();
    for kill in &kills {
        let orphaned: Vec<&str> = kill
            .partitions
            .iter()
            .flat_map(|p| clusters_of.get(p).cloned().unwrap_or_default())
            .collect();
        let first = all
            .iter()
            .filter(|d| {
                d.at > kill.at && d.member != kill.victim && orphaned.contains(&d.cluster.as_str())
            })
            .map(|d| d.at.duration_since(kill.at))
            .min();
        takeovers.push_str(&format!(
            "round {}: {} killed, first delivery of its clusters by a new owner {first:?} after the kill; ",
            kill.round, kill.victim
        ));
    }
    eprintln!(
        "group scale ({name}, seed {seed}): {CLUSTERS} collectors ready in {ready:?}; round 1 alerted {steady:?} after it was played; \
         {takeovers}every alert resolved {resolved:?} after the clean-up; \
         {} webhook requests, {} transitions, {resent} sent again by a new owner; \
         the survivors wrote {written} handovers, {written_bytes} bytes; {members_for:?} in all",
        all.len(),
        per_key.len(),
    );

    // Each cluster's alert of each round is one alert, firing once and resolved once.
    let mut expected = BTreeSet::new();
    for cluster in &clusters {
        for round in 1..=3 {
            let mut alert_ids = BTreeSet::new();
            for status in ["FIRING", "RESOLVED"] {
                let keys: BTreeSet<&str> = all
                    .iter()
                    .filter(|d| is_transition(d, &cluster.id, round, status))
                    .map(|d| {
                        alert_ids.insert(d.body["alert_id"].to_string());
                        d.key.as_str()
                    })
                    .collect();
                assert_eq!(
                    keys.len(),
                    1,
                    "{} round {round}: {status} transitions {keys:?}",
                    cluster.id
                );
                expected.extend(keys);
            }
            assert_eq!(
                alert_ids.len(),
                1,
                "{} round {round}: alerts {alert_ids:?}",
                cluster.id
            );
        }
    }
    // And the group delivers nothing else.
    let unexpected: Vec<(&str, &str, &str, &str, &str)> = all
        .iter()
        .filter(|d| !expected.contains(d.key.as_str()))
        .map(|d| {
            (
                d.member.as_str(),
                d.cluster.as_str(),
                d.subnet.as_str(),
                d.rule.as_str(),
                d.key.as_str(),
            )
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "{} deliveries beyond one transition per cluster and round (member, cluster, subnet, rule, key): {unexpected:#?}\n{}",
        unexpected.len(),
        group_story(&log_refs, &[])
    );
    // A transition comes again only from another member, and the same.
    for (key, sent) in &per_key {
        let senders: BTreeSet<&str> = sent.iter().map(|d| d.member.as_str()).collect();
        assert_eq!(
            senders.len(),
            sent.len(),
            "{key} delivered twice by one member: {senders:?}"
        );
        assert!(
            sent.iter().all(|d| d.body == sent[0].body),
            "{key} delivered with different contents: {:#?}",
            sent.iter().map(|d| &d.body).collect::<Vec<_>>()
        );
    }
    // Every partition a killed member owned was taken over from its handover, not
    // rebuilt from a snapshot.
    for kill in &kills {
        for partition in &kill.partitions {
            let taken = logs.iter().any(|(member, path)| {
                *member != kill.victim
                    && std::fs::read_to_string(path)
                        .unwrap_or_default()
                        .lines()
                        .any(|l| {
                            l.contains(
                                "taking the partition over from its previous owner's handover",
                            ) && l.contains(&format!("partition={partition} "))
                        })
            });
            assert!(
                taken,
                "round {}: partition {partition} of {} (replaced by {}) was not taken over from a handover\n{}",
                kill.round,
                kill.victim,
                kill.replacement,
                group_story(&log_refs, &[])
            );
        }
    }
}
