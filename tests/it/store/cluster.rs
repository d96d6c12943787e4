//! Gateways on a real Redis Cluster started by each test: a first burst right after start is
//! exact with no store error; a master killed under load fails only the identities on it
//! (each master has its own breaker) until its replica takes over; a failover mid-window
//! forgets at most the counts in flight on the dead master; a slot migrated under load (ASK,
//! then MOVED) keeps every count; a timeout is logged with the timeout and the node.

use crate::support;

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use http::{Request, StatusCode};
use support::fleet::*;
use support::redis_server::RedisCluster;
use support::*;

/// One cluster test at a time: five clusters of six servers at once, beside their gateways and
/// load on two cores, starve Redis past its 50 ms timeout (the machine failing, not the store).
static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Which of `masters` holds the keys of `api_key`'s identity: the one that runs the script
/// for its first request (the gateways are warm and idle).
async fn master_of(
    cluster: &RedisCluster,
    masters: &[usize],
    gateway: &TestGateway,
    path: &str,
    api_key: &str,
) -> usize {
    let calls = || -> Vec<u64> {
        (masters.iter())
            .map(|&m| cluster.nodes[m].calls("evalsha"))
            .collect()
    };
    let before = calls();
    assert_eq!(status(gateway, path, api_key).await, StatusCode::OK);
    let after = calls();
    let ran: Vec<usize> = (0..masters.len())
        .filter(|&i| after[i] > before[i])
        .collect();
    assert_eq!(ran.len(), 1, "{api_key}: {before:?} -> {after:?}");
    masters[ran[0]]
}

/// A load's answers so far: when each came and how.
type Answers = Arc<Mutex<Vec<(Instant, StatusCode)>>>;

/// Requests in a loop (`keep_calling`): the answers so far, read while they go on.
struct Calls {
    answers: Answers,
    task: tokio::task::JoinHandle<()>,
}

impl Calls {
    fn count(&self) -> usize {
        self.answers.lock().unwrap().len()
    }

    fn last(&self) -> Option<StatusCode> {
        self.answers
            .lock()
            .unwrap()
            .last()
            .map(|(_, status)| *status)
    }

    /// Every answer, once the loop has seen `stop`.
    async fn finish(self) -> Vec<(Instant, StatusCode)> {
        self.task.await.unwrap();
        std::mem::take(&mut *self.answers.lock().unwrap())
    }
}

/// Until each of `load` has been answered `more` times since it had `since` answers.
async fn each_answered<'a>(
    load: impl IntoIterator<Item = &'a Calls> + Clone,
    since: &[usize],
    more: usize,
) -> bool {
    eventually(Duration::from_secs(20), || {
        (load.clone().into_iter())
            .zip(since)
            .all(|(calls, &since)| calls.count() >= since + more)
    })
    .await
}

fn counts<'a>(load: impl IntoIterator<Item = &'a Calls>) -> Vec<usize> {
    load.into_iter().map(Calls::count).collect()
}

/// Requests for `api_key` in a loop, alternating over `gateways`, `pause` apart, until
/// `stop`: when each was answered and how.
fn keep_calling(
    gateways: Arc<Vec<TestGateway>>,
    path: &'static str,
    api_key: String,
    pause: Duration,
    stop: Arc<AtomicBool>,
) -> Calls {
    let answers = Answers::default();
    let kept = answers.clone();
    let task = tokio::spawn(async move {
        let client = client();
        let mut turn = 0;
        while !stop.load(Ordering::Relaxed) {
            let gateway = &gateways[turn % gateways.len()];
            turn += 1;
            let request = Request::get(gateway.url(path))
                .header("x-api-key", &api_key)
                .body(empty())
                .unwrap();
            let answer = tokio::time::timeout(Duration::from_secs(10), client.request(request))
                .await
                .expect("answered in time")
                .expect("request failed");
            kept.lock().unwrap().push((Instant::now(), answer.status()));
            tokio::time::sleep(pause).await;
        }
    });
    Calls { answers, task }
}

async fn start_ready(text: &str, count: usize) -> Arc<Vec<TestGateway>> {
    let mut gateways = Vec::new();
    for _ in 0..count {
        let gateway = TestGateway::start(text).await;
        assert!(ready_within(&gateway, Duration::from_secs(10)).await);
        gateways.push(gateway);
    }
    Arc::new(gateways)
}

/// The cold start: two gateways, and right after they start (not waiting for
/// `/readyz`), 4000 requests for 100 tenants. Reading the slots and connecting are not part
/// of a call's timeout: every tenant gets exactly its limit, no call fails, nothing falls
/// back (with `on_error = "allow"` a fallback would let requests through).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_gateways_first_burst_is_exact_without_a_store_error() {
    let _one_at_a_time = ONE_CLUSTER_AT_A_TIME.lock().await;
    let cluster = RedisCluster::start();
    let upstream = TestUpstream::ok("ok").await;
    let store = cluster_store(&cluster.urls(), "cold:", "");
    let limits = limit(
        "per-key",
        "token_bucket",
        "[{ limit = 20, per = \"1h\" }]",
        "on_error = \"allow\"",
    );
    let text = config(&upstream, &store, &[("/", "per-key")], &limits);
    let gateways = Arc::new(vec![
        TestGateway::start(&text).await,
        TestGateway::start(&text).await,
    ]);
    let tenants: Arc<Vec<String>> = Arc::new((0..100).map(|t| format!("tenant-{t}")).collect());
    let statuses = burst(&gateways, "/", tenants.clone(), 4000, 100).await;
    let mut allowed = vec![0; tenants.len()];
    for (tenant, status) in statuses {
        if status == StatusCode::OK {
            allowed[tenant] += 1;
        }
    }
    assert!(allowed.iter().all(|&n| n == 20), "{allowed:?}");
    assert_eq!(fallbacks_and_errors(&gateways).await, (0, 0));
}

/// `kill -9` of one master under load, its replica promoted by the cluster: the tenants on
/// the other masters never see a store error (each master has a breaker of its own, and a
/// dead master holds up only the calls for its slots); the tenants on the dead one follow
/// `on_error` (deny: 503) until the gateways find the new master, by themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_fails_only_its_own_tenants_until_its_replica_takes_over() {
    let _one_at_a_time = ONE_CLUSTER_AT_A_TIME.lock().await;
    let mut cluster = RedisCluster::start_with(1, 1000);
    let upstream = TestUpstream::ok("ok").await;
    // A generous timeout: this test is about which tenants a dead master affects, and on a
    // loaded 2-core machine running six redis-servers a healthy one may be descheduled for
    // tens of milliseconds.
    let store = cluster_store(
        &cluster.urls(),
        "kill:",
        "on_error = \"deny\"\nready_requires_redis = true\ntimeout = \"500ms\"",
    );
    let limits = limit(
        "per-key",
        "token_bucket",
        "[{ limit = 100000, per = \"1h\" }]",
        "",
    );
    let gateways = start_ready(&config(&upstream, &store, &[("/", "per-key")], &limits), 2).await;
    let masters = cluster.masters(0);
    let mut placed = Vec::new();
    for t in 0..24 {
        let tenant = format!("tenant-{t}");
        let master = master_of(&cluster, &masters, &gateways[0], "/", &tenant).await;
        placed.push((tenant, master));
    }
    let doomed = placed[0].1;
    assert!(
        placed.iter().any(|(_, m)| *m != doomed),
        "tenants on other masters too"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = (placed.iter())
        .map(|(tenant, master)| {
            let calls = keep_calling(
                gateways.clone(),
                "/",
                tenant.clone(),
                Duration::ZERO,
                stop.clone(),
            );
            (*master, calls)
        })
        .collect();
    let every = || load.iter().map(|(_, calls)| calls);
    assert!(
        each_answered(every(), &vec![0; load.len()], 3).await,
        "the load runs"
    );
    let killed_at = Instant::now();
    cluster.nodes[doomed].kill();
    // The dead master's breaker opens; the others' stay closed.
    let breaker = |node: usize, open: u8| {
        let port = cluster.nodes[node].port;
        format!("rlp_store_breaker_open{{node=\"127.0.0.1:{port}\"}} {open}")
    };
    let seen_open = eventually_async(Duration::from_secs(1), async || {
        let text = metrics(&gateways[0]).await;
        let open = text.contains(&breaker(doomed, 1));
        if open {
            for &other in masters.iter().filter(|&&m| m != doomed) {
                assert!(text.contains(&breaker(other, 0)), "{text}");
            }
        }
        open
    })
    .await;
    assert!(
        seen_open,
        "the dead master's breaker opened within a second"
    );
    // Until the doomed master's tenants are served again (a replica promoted), 20 s at most.
    let back = || async {
        let probe = placed.iter().find(|(_, m)| *m == doomed).unwrap();
        status(&gateways[1], "/", &probe.0).await == StatusCode::OK
    };
    let within = Duration::from_secs(20).saturating_sub(killed_at.elapsed());
    let served = eventually_async(within, back).await;
    let recovered = served.then(|| killed_at.elapsed());
    let recovered = recovered.expect("the dead master's tenants were served again");
    // Until each of the dead master's tenants has been answered again since, the last time 200.
    let failing_over = || (load.iter()).filter(|(m, _)| *m == doomed).map(|(_, c)| c);
    let since = counts(failing_over());
    let again = eventually(Duration::from_secs(10), || {
        (failing_over().zip(&since)).all(|(calls, &since)| {
            calls.count() >= since + 2 && calls.last() == Some(StatusCode::OK)
        })
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    assert!(again, "each of the dead master's tenants was served again");
    let (mut healthy, mut failed_over) = (Vec::new(), Vec::new());
    for (master, calls) in load {
        let answers = calls.finish().await;
        if master == doomed {
            failed_over.extend(answers);
        } else {
            healthy.extend(answers);
        }
    }
    let not_ok: Vec<_> = (healthy.iter())
        .filter(|(_, s)| *s != StatusCode::OK)
        .collect();
    let mut errors = Vec::new();
    for gateway in gateways.iter() {
        let text = metrics(gateway).await;
        errors.extend(
            (text.lines())
                .filter(|l| l.starts_with("rlp_store_errors_total{"))
                .map(str::to_string),
        );
    }
    assert!(
        not_ok.is_empty(),
        "tenants on healthy masters: {} of {} answers were not 200, e.g. {:?} ({:?} after the kill); store errors: {errors:?}",
        not_ok.len(),
        healthy.len(),
        not_ok.first().map(|(_, status)| status),
        not_ok
            .first()
            .map(|(at, _)| at.saturating_duration_since(killed_at)),
    );
    let unavailable = (failed_over.iter())
        .filter(|(at, s)| *at > killed_at && *s == StatusCode::SERVICE_UNAVAILABLE)
        .count();
    assert!(
        unavailable > 0,
        "the dead master's tenants followed on_error"
    );
    let last = failed_over.last().unwrap();
    assert_eq!(last.1, StatusCode::OK, "and were served again at the end");
    println!(
        "kill -9 of a master: {} answers to its tenants were 503, served again {recovered:?} after the kill; {} answers to the others, all 200",
        unavailable,
        healthy.len()
    );
}

/// A master killed mid-window: Redis replicates asynchronously, so its replica may lack the
/// last counts the master acknowledged. At most the calls in flight on it are forgotten
/// (Redis writes the replication stream in the same pass as the replies): here 8 clients,
/// so at most 8 requests beyond the limit pass in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_mid_window_forgets_at_most_the_calls_in_flight() {
    let _one_at_a_time = ONE_CLUSTER_AT_A_TIME.lock().await;
    const CLIENTS: usize = 8;
    const LIMIT: usize = 1000;
    let mut cluster = RedisCluster::start_with(1, 1000);
    let upstream = TestUpstream::ok("ok").await;
    let store = cluster_store(
        &cluster.urls(),
        "loss:",
        "on_error = \"deny\"\nready_requires_redis = true",
    );
    let limits = limit(
        "log",
        "sliding_log",
        &format!("[{{ limit = {LIMIT}, per = \"1h\" }}]"),
        "",
    );
    let gateways = start_ready(&config(&upstream, &store, &[("/", "log")], &limits), 2).await;
    let masters = cluster.masters(0);
    let doomed = master_of(&cluster, &masters, &gateways[0], "/", "hot").await;
    let replica = (0..cluster.nodes.len())
        .find(|&n| cluster.replica_of(n) == Some(doomed))
        .expect("the master's replica");

    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = (0..CLIENTS)
        .map(|_| {
            keep_calling(
                gateways.clone(),
                "/",
                "hot".into(),
                Duration::ZERO,
                stop.clone(),
            )
        })
        .collect();
    // Mid-window: once about 400 of the 1000 have passed.
    let mid = eventually(Duration::from_secs(20), || {
        log_size(&cluster, doomed) >= 400
    })
    .await;
    assert!(mid, "load too slow");
    cluster.nodes[doomed].kill();
    // Until the promoted replica has counted the limit full and denies.
    let full = eventually(Duration::from_secs(20), || {
        log_size(&cluster, replica) >= LIMIT as u64
    })
    .await;
    assert!(full, "never full again");
    // And each client has been answered again since, against the full limit.
    let since = counts(&load);
    assert!(each_answered(&load, &since, 2).await, "the load went on");
    stop.store(true, Ordering::Relaxed);
    let mut passed = 0;
    for calls in load {
        passed += (calls.finish().await.iter())
            .filter(|(_, s)| *s == StatusCode::OK)
            .count();
    }
    // The first request, which found the master, passed too.
    let passed = passed + 1;
    assert_eq!(log_size(&cluster, replica), LIMIT as u64);
    assert!(
        passed <= LIMIT + CLIENTS,
        "{passed} passed of a limit of {LIMIT} with {CLIENTS} clients"
    );
    println!(
        "failover mid-window: {passed} passed against a limit of {LIMIT}: {} counts forgotten",
        passed.saturating_sub(LIMIT)
    );
}

/// The size of the sorted set of `loss:log:*` on `node` (0 when there is none, or it is down).
fn log_size(cluster: &RedisCluster, node: usize) -> u64 {
    let Ok(mut connection) =
        redis::Client::open(format!("redis://127.0.0.1:{}/0", cluster.nodes[node].port))
            .and_then(|c| c.get_connection())
    else {
        return 0;
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("loss:log:*")
        .query(&mut connection)
        .unwrap_or_default();
    keys.first().map_or(0, |key| {
        redis::cmd("ZCARD")
            .arg(key)
            .query(&mut connection)
            .unwrap_or(0)
    })
}

/// A slot migrated under load: while the key is on its way the old master answers `ASK`
/// (the call goes to the new one after `ASKING`), then `MOVED`; each is followed, and every
/// count lands once: the log holds exactly the requests that passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_under_load_keeps_every_count() {
    let _one_at_a_time = ONE_CLUSTER_AT_A_TIME.lock().await;
    let cluster = RedisCluster::start();
    let upstream = TestUpstream::ok("ok").await;
    let store = cluster_store(
        &cluster.urls(),
        "move:",
        "on_error = \"deny\"\nready_requires_redis = true",
    );
    let limits = limit("log", "sliding_log", "[{ limit = 1000, per = \"1h\" }]", "");
    let gateways = start_ready(&config(&upstream, &store, &[("/", "log")], &limits), 2).await;
    let masters = cluster.masters(0);
    let source = master_of(&cluster, &masters, &gateways[0], "/", "mover").await;
    let target = *masters.iter().find(|&&m| m != source).unwrap();
    let node = |n: usize| cluster.nodes[n].connection();
    let id = |n: usize| -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut node(n))
            .unwrap()
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("move:log:*")
        .query(&mut node(source))
        .unwrap();
    let key = keys[0].clone();
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(&key)
        .query(&mut node(source))
        .unwrap();
    let setslot = |n: usize, state: &str, owner: usize| {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(state)
            .arg(id(owner))
            .query(&mut node(n))
            .unwrap();
    };

    let stop = Arc::new(AtomicBool::new(false));
    // Paced, so that the log's 1000 are not reached: about 600 requests at most.
    let pause = Duration::from_millis(3);
    let load: Vec<_> = (0..2)
        .map(|_| keep_calling(gateways.clone(), "/", "mover".into(), pause, stop.clone()))
        .collect();
    // Each phase lasts until each client has been answered 10 times in it.
    let phase = async |load: &[Calls]| {
        let since = counts(load);
        assert!(each_answered(load, &since, 10).await, "the load went on");
    };
    phase(&load).await;
    setslot(target, "IMPORTING", source);
    setslot(source, "MIGRATING", target);
    phase(&load).await;
    let _: () = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(cluster.nodes[target].port)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(&key)
        .query(&mut node(source))
        .unwrap();
    // The key is on the target, the slot still the source's: ASK, followed at least once.
    phase(&load).await;
    let asked = eventually(Duration::from_secs(20), || {
        cluster.nodes[target].calls("asking") > 0
    })
    .await;
    assert!(asked, "ASK was followed");
    setslot(target, "NODE", target);
    setslot(source, "NODE", target);
    // Now MOVED, until the gateways have read the slots again.
    phase(&load).await;
    stop.store(true, Ordering::Relaxed);
    let mut answers = Vec::new();
    for calls in load {
        answers.extend(calls.finish().await);
    }
    let passed = answers.iter().filter(|(_, s)| *s == StatusCode::OK).count();
    let mut texts = String::new();
    for gateway in gateways.iter() {
        texts += &metrics(gateway).await;
    }
    let errors: Vec<&str> = (texts.lines())
        .filter(|l| l.starts_with("rlp_store_errors_total{"))
        .collect();
    assert_eq!(passed, answers.len(), "every request passed: {errors:?}");
    let counted: usize = redis::cmd("ZCARD")
        .arg(&key)
        .query(&mut node(target))
        .unwrap();
    assert_eq!(counted, passed + 1, "each count once, on the new master");
    assert!(
        cluster.nodes[target].calls("asking") > 0,
        "ASK was followed"
    );
    assert!(answers.len() > 50, "{} requests", answers.len());
}

/// Logs of the whole test binary, from the first test that asks.
fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
        logs
    })
    .clone()
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A master that stops answering (SIGSTOP): the breaker that opens says which node and
/// after how long: the configured timeout, never `0ns`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_timeout_is_logged_with_the_timeout_and_the_node() {
    let _one_at_a_time = ONE_CLUSTER_AT_A_TIME.lock().await;
    let logs = captured_logs();
    let cluster = RedisCluster::start();
    let upstream = TestUpstream::ok("ok").await;
    let store = cluster_store(
        &cluster.urls(),
        "slow:",
        "timeout = \"100ms\"\nready_requires_redis = true",
    );
    let limits = limit("per-key", "gcra", "[{ limit = 1000, per = \"1h\" }]", "");
    let gateways = start_ready(&config(&upstream, &store, &[("/", "per-key")], &limits), 1).await;
    let masters = cluster.masters(0);
    let stopped = master_of(&cluster, &masters, &gateways[0], "/", "slow").await;
    cluster.nodes[stopped].stop();
    for _ in 0..8 {
        status(&gateways[0], "/", "slow").await;
    }
    cluster.nodes[stopped].resume();
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    let node = format!("127.0.0.1:{}", cluster.nodes[stopped].port);
    let line = text
        .lines()
        .find(|l| l.contains("circuit breaker open") && l.contains(&node))
        .unwrap_or_else(|| panic!("no breaker line for {node}:\n{text}"));
    assert!(line.contains("no answer within 100ms"), "{line}");
    assert!(!text.contains("0ns"), "{text}");
}
