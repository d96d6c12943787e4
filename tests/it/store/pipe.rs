//! The worker's pipelined Redis connection: replies reach the calls they answer, in order,
//! under concurrency, after timeouts and given-up calls; sessions follow the URL; peers that
//! misbehave (silent, garbage, cut short, gone) fail the calls with what went wrong and the
//! next call connects again.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use ratelimit_proxy::testing::NodePipe as Pipe;
use ratelimit_proxy::testing::ScriptCall;
use ratelimit_proxy::testing::WindowRequest;
use ratelimit_proxy::testing::{Algorithm, Rate};
use ratelimit_proxy::testing::{Command, Reply, Settings, Tls};
use ratelimit_proxy::testing::{ConnectionError, ProtocolError, StoreError};
use support::redis_server::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

fn settings(port: u16) -> Settings {
    Settings {
        host: "127.0.0.1".into(),
        port,
        username: None,
        password: None,
        db: 0,
        connect_timeout: Duration::from_secs(2),
        timeout: Duration::from_secs(2),
        tls: None,
        merge: true,
    }
}

/// How long a call that should be answered may wait.
fn soon() -> Duration {
    Duration::from_secs(2)
}

async fn call(pipe: &Pipe, wait: Duration, arguments: &[&[u8]]) -> Result<Reply, StoreError> {
    pipe.call(wait, |out| {
        let mut command = Command::new(out, arguments.len());
        for argument in arguments {
            command.arg(argument);
        }
    })
    .await
}

/// A status reply (`+PONG`), as a call gets it.
fn status(text: &'static str) -> Result<Reply, StoreError> {
    Ok(Reply::Status(Bytes::from_static(text.as_bytes())))
}

fn bulk(text: &str) -> Reply {
    Reply::Bulk(Bytes::copy_from_slice(text.as_bytes()))
}

#[tokio::test]
async fn concurrent_calls_each_get_their_own_reply_of_every_kind() {
    let server = RedisServer::start();
    let pipe = Pipe::new(settings(server.port));
    let calls = (0..600).map(|i| {
        let pipe = &pipe;
        async move {
            let text = i.to_string();
            let reply = match i % 6 {
                0 => call(pipe, soon(), &[b"ECHO", text.as_bytes()]).await,
                1 => call(pipe, soon(), &[b"SET", text.as_bytes(), b"v"]).await,
                2 => call(pipe, soon(), &[b"INCRBY", b"counter", text.as_bytes()]).await,
                3 => call(pipe, soon(), &[b"GET", b"missing"]).await,
                4 => call(pipe, soon(), &[b"NOSUCHCOMMAND", text.as_bytes()]).await,
                _ => call(pipe, soon(), &[b"MGET", b"a", text.as_bytes()]).await,
            };
            (i, reply)
        }
    });
    let mut counter = 0;
    for (i, reply) in join_all(calls).await {
        match i % 6 {
            0 => assert_eq!(reply, Ok(bulk(&i.to_string()))),
            1 => assert_eq!(reply, status("OK")),
            2 => {
                counter += i;
                assert_eq!(reply, Ok(Reply::Integer(counter)), "call {i}");
            }
            3 => assert_eq!(reply, Ok(Reply::Nil)),
            4 => assert!(
                matches!(&reply, Err(StoreError::Server(e)) if e.text().contains("unknown command")),
                "{reply:?}"
            ),
            _ => assert!(
                matches!(&reply, Ok(Reply::Array(frame)) if frame.starts_with(b"*2\r\n")),
                "{reply:?}"
            ),
        }
    }
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(
        clients.lines().count(),
        2,
        "one connection for all: {clients}"
    );
}

#[tokio::test]
async fn the_session_takes_the_urls_user_password_and_database() {
    let server = RedisServer::start_with_user("gateway", "s3cret-pw");
    let pipe = Pipe::new(Settings {
        username: Some("gateway".into()),
        password: Some("s3cret-pw".into()),
        db: 3,
        ..settings(server.port)
    });
    let reply = call(&pipe, soon(), &[b"SET", b"where", b"db3"]).await;
    assert_eq!(reply, status("OK"));
    let mut inside = redis::Client::open(format!(
        "redis://gateway:s3cret-pw@127.0.0.1:{}/3",
        server.port
    ))
    .unwrap()
    .get_connection()
    .unwrap();
    let stored: Option<String> = redis::cmd("GET").arg("where").query(&mut inside).unwrap();
    assert_eq!(stored.as_deref(), Some("db3"));

    let refused = Pipe::new(Settings {
        username: Some("gateway".into()),
        password: Some("wrong-pw".into()),
        ..settings(server.port)
    });
    let error = call(&refused, soon(), &[b"PING"]).await.unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(
            &error,
            StoreError::Connection(ConnectionError::Refused { command: "AUTH", reply })
                if reply.code() == "WRONGPASS"
        ),
        "{error:?}"
    );
    assert!(
        text.contains("AUTH refused") && text.contains("WRONGPASS"),
        "{text}"
    );
    assert!(!text.contains("wrong-pw"), "{text}");
}

/// A Redis that misbehaves as each test scripts it, on a port of its own.
struct Fake {
    listener: TcpListener,
}

/// What a fake does with one connection: reads `pings` PINGs, writes `answer`, then closes
/// the connection if `close`, or keeps it open for the rest of the test.
struct Turn {
    pings: usize,
    answer: &'static [u8],
    close: bool,
}

/// A pipe to a fake server that answers `turns`, one connection each, in order.
async fn pipe_to_fake(turns: Vec<Turn>) -> (Pipe, tokio::task::JoinHandle<()>) {
    let (fake, port) = Fake::start().await;
    (Pipe::new(settings(port)), fake.serve_in_turn(turns))
}

impl Fake {
    async fn start() -> (Fake, u16) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        (Fake { listener }, port)
    }

    async fn accept(&self) -> TcpStream {
        self.listener.accept().await.unwrap().0
    }

    /// Takes one connection per turn, in order.
    fn serve_in_turn(self, turns: Vec<Turn>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut open = Vec::new();
            for turn in turns {
                let mut stream = self.accept().await;
                read_pings(&mut stream, turn.pings).await;
                stream.write_all(turn.answer).await.unwrap();
                if !turn.close {
                    open.push(stream);
                }
            }
            tokio::time::sleep(Duration::from_secs(30)).await;
        })
    }
}

fn turn(pings: usize, answer: &'static [u8]) -> Turn {
    Turn {
        pings,
        answer,
        close: false,
    }
}

/// Reads until `commands` whole PING commands (14 bytes each) have arrived.
async fn read_pings(stream: &mut TcpStream, commands: usize) {
    let mut buffer = vec![0; 14 * commands];
    stream.read_exact(&mut buffer).await.unwrap();
    assert!(buffer.starts_with(b"*1\r\n$4\r\nPING\r\n"));
}

async fn ping(pipe: &Pipe, wait: Duration) -> Result<Reply, StoreError> {
    call(pipe, wait, &[b"PING"]).await
}

#[tokio::test]
async fn a_silent_server_times_calls_out_at_the_timeout() {
    let (fake, port) = Fake::start().await;
    let pipe = Pipe::new(Settings {
        timeout: Duration::from_millis(150),
        ..settings(port)
    });
    let server = tokio::spawn(async move {
        let mut stream = fake.accept().await;
        read_pings(&mut stream, 3).await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let started = Instant::now();
    let replies = join_all((0..3).map(|_| ping(&pipe, soon()))).await;
    let waited = started.elapsed();
    for reply in replies {
        assert_eq!(reply, Err(StoreError::Timeout(Duration::from_millis(150))));
    }
    assert!(waited >= Duration::from_millis(150), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    server.abort();
}

/// A server that stays silent long past a deadline is given up: 2 s after the deadline of
/// the oldest call it owes, the connection is closed (no call need come to notice), and the
/// next call connects again, here to a server that answers.
#[tokio::test]
async fn a_connection_silent_long_past_a_deadline_is_replaced() {
    let (fake, port) = Fake::start().await;
    let pipe = Pipe::new(settings(port));
    let (closed, closing) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(async move {
        let mut silent = fake.accept().await;
        read_pings(&mut silent, 1).await;
        let _ = closed.send(silent.read(&mut [0; 16]).await.ok());
        let mut answering = fake.accept().await;
        read_pings(&mut answering, 1).await;
        answering.write_all(b"+PONG\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let deadline = Instant::now() + Duration::from_millis(100);
    assert!(matches!(
        ping(&pipe, Duration::from_millis(100)).await,
        Err(StoreError::Timeout(_))
    ));
    assert_eq!(closing.await.unwrap(), Some(0), "closed by the gateway");
    let waited = deadline.elapsed();
    assert!(waited >= Duration::from_secs(2), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    let answered = ping(&pipe, soon()).await;
    assert_eq!(answered, status("PONG"));
    server.abort();
}

/// The reply to a call that timed out is not handed to the call after it.
#[tokio::test]
async fn a_late_reply_goes_to_the_call_it_answers_not_the_next() {
    let (fake, port) = Fake::start().await;
    let pipe = Pipe::new(settings(port));
    let (late, answer) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let mut stream = fake.accept().await;
        read_pings(&mut stream, 2).await;
        let _ = answer.await;
        stream
            .write_all(b"$5\r\nfirst\r\n$6\r\nsecond\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let first = ping(&pipe, Duration::from_millis(50)).await;
    assert!(matches!(first, Err(StoreError::Timeout(_))), "{first:?}");
    let second = tokio::spawn(async move { ping(&pipe, soon()).await });
    // The server writes both replies only once it has read the second call: no wait here.
    late.send(()).unwrap();
    assert_eq!(second.await.unwrap(), Ok(bulk("second")));
    server.abort();
}

/// A caller that gives up (its request went away) keeps its place in the order.
#[tokio::test]
async fn a_call_given_up_keeps_its_place_in_the_order() {
    let server = RedisServer::start();
    let pipe = Pipe::new(settings(server.port));
    let given_up = call(&pipe, soon(), &[b"ECHO", b"nobody"]);
    let kept = call(&pipe, soon(), &[b"ECHO", b"me"]);
    // The first is polled once (its command queued), then dropped.
    let mut given_up = Box::pin(given_up);
    assert!(futures_util::poll!(given_up.as_mut()).is_pending());
    drop(given_up);
    assert_eq!(kept.await, Ok(bulk("me")));
    assert_eq!(
        call(&pipe, soon(), &[b"ECHO", b"next"]).await,
        Ok(bulk("next"))
    );
}

#[tokio::test]
async fn garbage_or_a_cut_reply_fails_the_calls_and_the_next_call_connects_again() {
    let (pipe, server) = pipe_to_fake(vec![
        turn(1, b"hello\r\n"),
        Turn {
            close: true,
            ..turn(1, b"$10\r\nabc")
        },
        turn(1, b"+PONG\r\n"),
    ])
    .await;
    let garbage = ping(&pipe, soon()).await;
    assert!(
        matches!(
            &garbage,
            Err(StoreError::Protocol(ProtocolError::UnknownType('h')))
        ),
        "{garbage:?}"
    );
    let cut = ping(&pipe, soon()).await;
    assert!(
        matches!(&cut, Err(StoreError::Connection(e)) if e.to_string().contains("closed")),
        "{cut:?}"
    );
    let good = ping(&pipe, soon()).await;
    assert_eq!(good, status("PONG"));
    server.abort();
}

/// A reply to no command means the order is lost: the connection is dropped, and the next
/// call connects again.
#[tokio::test]
async fn a_reply_nobody_asked_for_closes_the_connection() {
    let (pipe, server) = pipe_to_fake(vec![
        turn(2, b"+ONE\r\n+TWO\r\n+THREE\r\n"),
        turn(1, b"+AGAIN\r\n"),
    ])
    .await;
    let (one, two) = tokio::join!(ping(&pipe, soon()), ping(&pipe, soon()));
    assert_eq!((one, two), (status("ONE"), status("TWO")));
    assert_eq!(ping(&pipe, soon()).await, status("AGAIN"));
    server.abort();
}

/// After a failover the old primary answers writes with READONLY: the call gets that error
/// and the next call connects again (to whatever the name resolves to now).
#[tokio::test]
async fn a_replica_answering_readonly_is_left_for_a_new_connection() {
    let (pipe, server) = pipe_to_fake(vec![
        turn(
            1,
            b"-READONLY You can't write against a read only replica.\r\n",
        ),
        turn(1, b"+PONG\r\n"),
    ])
    .await;
    let refused = ping(&pipe, soon()).await;
    assert!(
        matches!(&refused, Err(StoreError::Server(e)) if e.is_readonly()),
        "{refused:?}"
    );
    let answered = ping(&pipe, soon()).await;
    assert_eq!(answered, status("PONG"));
    server.abort();

    // A real replica says it the same way, scripts included.
    let primary = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    // Until its first sync is over a replica may answer LOADING instead.
    let synced = || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut replica.connection())
            .unwrap();
        info.contains("master_link_status:up")
    };
    assert!(
        support::eventually(Duration::from_secs(10), synced).await,
        "replica never synced"
    );
    let pipe = Pipe::new(settings(replica.port));
    let script = b"return redis.call('SET', KEYS[1], '1')";
    let refused = call(&pipe, soon(), &[b"EVAL", script, b"1", b"k"]).await;
    assert!(
        matches!(&refused, Err(StoreError::Server(e)) if e.is_readonly()),
        "{refused:?}"
    );
    let accepted = || -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query(&mut replica.connection())
            .unwrap();
        let line = info
            .lines()
            .find(|l| l.starts_with("total_connections_received:"));
        line.and_then(|l| l.split(':').nth(1)?.trim().parse().ok())
            .unwrap()
    };
    let before = accepted();
    assert_eq!(ping(&pipe, soon()).await, status("PONG"));
    assert_eq!(
        accepted() - before,
        2,
        "the pipe's new connection and this look"
    );
}

#[tokio::test]
async fn nothing_listening_is_a_connection_error_naming_the_address() {
    let port = support::redis_server::free_port();
    let pipe = Pipe::new(settings(port));
    let error = ping(&pipe, soon()).await.unwrap_err();
    assert!(
        matches!(
            &error,
            StoreError::Connection(ConnectionError::Connect { address, .. })
                if **address == *format!("127.0.0.1:{port}")
        ) && error
            .to_string()
            .contains(&format!("cannot connect to 127.0.0.1:{port}")),
        "{error:?}"
    );
}

/// A connection's driver runs on the event loop of the call that opened it; when that loop
/// stops, the next call, from another loop, opens the connection again there.
#[test]
fn a_connection_whose_event_loop_stopped_is_opened_again_by_the_next_call() {
    let server = RedisServer::start();
    let pipe = Pipe::new(settings(server.port));
    let first = support::event_loop();
    let reply = first.block_on(call(&pipe, soon(), &[b"ECHO", b"first"]));
    assert_eq!(reply, Ok(bulk("first")));
    drop(first);
    let second = support::event_loop();
    let reply = second.block_on(async {
        let call = call(&pipe, soon(), &[b"ECHO", b"second"]);
        tokio::time::timeout(Duration::from_secs(5), call).await
    });
    assert_eq!(reply, Ok(Ok(bulk("second"))), "answered, not left waiting");
}

/// `rediss://`: the server's certificate is verified against the given roots, and calls
/// pipeline over TLS as over plain TCP; a certificate from another CA is refused.
#[tokio::test]
async fn over_tls_the_server_is_verified_and_calls_keep_their_replies() {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let (server, ca_pem) = RedisServer::start_tls_with_private_ca();
    let tls = |ca_pem: &str| {
        let roots = ratelimit_proxy::testing::UpstreamTls {
            ca_certs: vec![CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap()],
            ..Default::default()
        };
        Some(Tls {
            config: Arc::new(ratelimit_proxy::testing::client_config(&roots).unwrap()),
            name: ServerName::try_from("127.0.0.1").unwrap(),
        })
    };
    let pipe = Pipe::new(Settings {
        tls: tls(&ca_pem),
        ..settings(server.port)
    });
    let calls = (0..200).map(|i: usize| {
        let pipe = &pipe;
        async move {
            let text = i.to_string();
            (i, call(pipe, soon(), &[b"ECHO", text.as_bytes()]).await)
        }
    });
    for (i, reply) in join_all(calls).await {
        assert_eq!(reply, Ok(bulk(&i.to_string())));
    }

    let stranger = support::redis_server::private_ca().pem();
    let refused = Pipe::new(Settings {
        tls: tls(&stranger),
        ..settings(server.port)
    });
    let error = call(&refused, soon(), &[b"PING"]).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Connection(ConnectionError::Tls { .. }))
            && error.to_string().contains("TLS with 127.0.0.1")
            && error.to_string().contains("invalid peer certificate"),
        "{error:?}"
    );
}

/// A stalled Redis with calls arriving faster than the breaker opens: at most 10 000 calls
/// wait on one connection, and the next fails at once instead of growing the queue. Given up,
/// they still hold their places (their replies are owed) until the connection counts as
/// stalled; then it is replaced and calls are taken again.
#[tokio::test]
async fn calls_beyond_the_most_that_may_wait_fail_at_once() {
    let (_silent, port) = Fake::start().await;
    let pipe = Pipe::new(settings(port));
    let deadline = Instant::now() + Duration::from_millis(300);
    let mut waiting = Vec::new();
    for _ in 0..10_000 {
        let mut call = Box::pin(ping(&pipe, Duration::from_millis(300)));
        assert!(futures_util::poll!(call.as_mut()).is_pending());
        waiting.push(call);
    }
    let refused = ping(&pipe, soon()).await;
    assert!(
        matches!(&refused, Err(StoreError::Connection(e)) if e.to_string().contains("10000 calls already waiting")),
        "{refused:?}"
    );
    drop(waiting);
    // The stall is noticed 2 s after the deadline; half a second of margin for a busy machine.
    tokio::time::sleep_until(deadline + Duration::from_millis(2500)).await;
    let after = ping(&pipe, Duration::from_millis(50)).await;
    assert!(
        matches!(after, Err(StoreError::Timeout(_))),
        "room again: {after:?}"
    );
}

/// Polled off any tokio event loop, a call has nowhere to start its driver: an error, not a
/// panic; the same pipe works on an event loop afterwards.
#[test]
fn a_call_off_an_event_loop_is_an_error() {
    let server = RedisServer::start();
    let pipe = Pipe::new(settings(server.port));
    let mut call = std::pin::pin!(ping(&pipe, soon()));
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    let answer = std::future::Future::poll(call.as_mut(), &mut context);
    assert!(
        matches!(
            &answer,
            std::task::Poll::Ready(Err(StoreError::Connection(ConnectionError::NoEventLoop)))
        ),
        "{answer:?}"
    );
    let runtime = support::event_loop();
    let reply = runtime.block_on(ping(&pipe, soon()));
    assert_eq!(reply, status("PONG"));
}

/// One window of a token bucket of 10 a second for `identity`.
fn window(identity: u128) -> WindowRequest {
    WindowRequest {
        identity,
        limit_identity: identity,
        algorithm: Algorithm::TokenBucket,
        rate: Rate {
            limit: 10,
            per: Duration::from_secs(1),
            burst: 10,
        },
        cost: 1,
        max_delay: Duration::ZERO,
        group: 0,
        window: 0,
        shadow: false,
    }
}

const SHA: &str = "0123456789012345678901234567890123456789";

async fn script_call(pipe: &Pipe, requests: &[WindowRequest]) -> Result<Reply, StoreError> {
    let limits = vec!["limit"; requests.len()];
    let call = ScriptCall {
        sha: SHA,
        key_prefix: "p:",
        requests,
        limits: &limits,
        now: None,
    };
    pipe.call_merged(soon(), &call).await
}

/// A window's remaining count in a script's reply (four little-endian doubles a window).
fn remaining(reply: &Result<Reply, StoreError>) -> f64 {
    match reply {
        Ok(Reply::Bulk(numbers)) if numbers.len() == 32 => {
            f64::from_le_bytes(numbers[8..16].try_into().unwrap())
        }
        other => panic!("not one window's numbers: {other:?}"),
    }
}

/// Script calls made together go out as one EVALSHA; each gets its own piece of the one
/// reply, in the order they were made, a caller that gave up included (its piece is dropped,
/// its request was still counted: it reached Redis).
#[tokio::test]
async fn script_calls_made_together_are_one_evalsha_each_answered_with_its_piece() {
    let server = RedisServer::start();
    let pipe = Pipe::new(settings(server.port));
    let load = |out: &mut Vec<u8>| {
        Command::new(out, 3)
            .arg(b"SCRIPT")
            .arg(b"LOAD")
            .arg(ratelimit_proxy::testing::SCRIPT.as_bytes());
    };
    let Ok(Reply::Bulk(sha)) = pipe.call(soon(), load).await else {
        panic!("the script was not loaded");
    };
    let sha = String::from_utf8(sha.to_vec()).unwrap();
    let limits = ["limit"];
    let call = |identity| {
        let requests = [window(identity)];
        let (pipe, sha) = (&pipe, &sha);
        async move {
            let call = ScriptCall {
                sha,
                key_prefix: "p:",
                requests: &requests,
                limits: &limits,
                now: None,
            };
            pipe.call_merged(soon(), &call).await
        }
    };
    let mut given_up = Box::pin(call(1));
    assert!(futures_util::poll!(given_up.as_mut()).is_pending());
    let (second, other, third) = tokio::join!(call(1), call(2), call(1));
    drop(given_up);
    assert_eq!(remaining(&second), 8.0, "after the call given up");
    assert_eq!(remaining(&other), 9.0, "another identity's own bucket");
    assert_eq!(remaining(&third), 7.0);
    assert_eq!(server.calls("evalsha"), 1, "four requests, one call");
    assert_eq!(server.calls("set"), 2, "one write per key");
}

/// An error for a merged call is every merged caller's error; a reply of the wrong length
/// fails them all, as no piece of it can be trusted.
#[tokio::test]
async fn a_merged_calls_error_or_a_reply_of_the_wrong_length_fails_each_caller() {
    let (fake, port) = Fake::start().await;
    let pipe = Pipe::new(settings(port));
    let server = tokio::spawn(async move {
        let mut stream = fake.accept().await;
        for answer in [
            &b"-ERR script failed\r\n"[..],
            b"$40\r\n0123456789012345678901234567890123456789\r\n",
        ] {
            let mut buffer = vec![0; 64 * 1024];
            let read = stream.read(&mut buffer).await.unwrap();
            assert!(buffer[..read].windows(7).any(|w| w == b"EVALSHA"));
            assert_eq!(
                buffer[..read]
                    .windows(7)
                    .filter(|w| w == b"EVALSHA")
                    .count(),
                1
            );
            stream.write_all(answer).await.unwrap();
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let (one, two) = ([window(1)], [window(2), window(3)]);
    let three = || async {
        tokio::join!(
            script_call(&pipe, &one),
            script_call(&pipe, &two),
            script_call(&pipe, &one),
        )
    };
    let (a, b, c) = three().await;
    for reply in [a, b, c] {
        assert!(
            matches!(&reply, Err(StoreError::Server(e)) if e.text() == "ERR script failed"),
            "{reply:?}"
        );
    }
    let (a, b, c) = three().await;
    for reply in [a, b, c] {
        assert!(
            matches!(
                &reply,
                Err(StoreError::Protocol(ProtocolError::MergedLength {
                    got: 40,
                    expected: 128
                }))
            ) && reply.as_ref().is_err_and(|e| e
                .to_string()
                .contains("a reply of 40 bytes to calls of 128")),
            "{reply:?}"
        );
    }
    server.abort();
}

/// The timeout is Redis' time, not the gateway's queue: calls queued behind others that Redis
/// keeps answering wait their turn, however long the line, and none times out; Redis falling
/// silent for the timeout then fails every call still waiting.
#[tokio::test]
async fn calls_behind_calls_redis_keeps_answering_do_not_time_out() {
    let (fake, port) = Fake::start().await;
    let timeout = Duration::from_millis(150);
    let pipe = Pipe::new(Settings {
        timeout,
        ..settings(port)
    });
    let server = tokio::spawn(async move {
        let mut stream = fake.accept().await;
        read_pings(&mut stream, 10).await;
        // One reply every 50 ms: the last comes 500 ms after the calls, 3 timeouts later.
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            stream.write_all(b"+PONG\r\n").await.unwrap();
        }
        read_pings(&mut stream, 2).await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let started = Instant::now();
    let replies = join_all((0..10).map(|_| ping(&pipe, soon()))).await;
    assert!(started.elapsed() >= Duration::from_millis(450));
    for reply in replies {
        assert_eq!(reply, status("PONG"));
    }
    let silent = Instant::now();
    let replies = join_all((0..2).map(|_| ping(&pipe, soon()))).await;
    for reply in replies {
        assert_eq!(reply, Err(StoreError::Timeout(timeout)));
    }
    let waited = silent.elapsed();
    assert!(
        waited >= timeout && waited < Duration::from_secs(1),
        "{waited:?}"
    );
    server.abort();
}

/// A worker whose event loop was busy past a call's time (here, spinning for 300 ms right
/// after the call was written) finds Redis' answer waiting: the call did not time out.
#[test]
fn an_answer_waiting_when_a_busy_event_loop_comes_back_is_not_a_timeout() {
    let server = RedisServer::start();
    let runtime = support::event_loop();
    let pipe = Pipe::new(Settings {
        timeout: Duration::from_millis(50),
        ..settings(server.port)
    });
    runtime.block_on(async {
        assert_eq!(ping(&pipe, soon()).await, status("PONG"), "connected");
        let mut call = Box::pin(call(&pipe, soon(), &[b"ECHO", b"late"]));
        assert!(futures_util::poll!(call.as_mut()).is_pending());
        // The driver writes the command, then the loop is busy.
        tokio::task::yield_now().await;
        let busy = std::time::Instant::now();
        while busy.elapsed() < Duration::from_millis(300) {
            std::hint::spin_loop();
        }
        // Back on the event loop: the driver's timer has fired and the answer is readable.
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(call.await, Ok(bulk("late")));
    });
}

/// A burst's calls queue on their worker's event loop before the driver writes them: that
/// wait is the worker's, not Redis', and a call is timed only once it is written. (A burst of
/// 300 requests at once timed calls out before their commands reached Redis.) Here Redis is
/// busy with a first call for 100 ms while the worker's loop is busy too, past the second
/// call's timeout: the second is written when the loop is back, and answered.
#[test]
fn a_call_queued_while_its_event_loop_is_busy_is_timed_from_when_it_is_written() {
    const BUSY_100_MS: &[u8] = b"local t = redis.call('TIME') local s = t[1] * 1e6 + t[2] \
        repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - s > 100000 return 1";
    let server = RedisServer::start();
    let runtime = support::event_loop();
    let pipe = Pipe::new(Settings {
        timeout: Duration::from_millis(50),
        ..settings(server.port)
    });
    runtime.block_on(async {
        assert_eq!(ping(&pipe, soon()).await, status("PONG"), "connected");
        let mut first = Box::pin(call(&pipe, soon(), &[b"EVAL", BUSY_100_MS, b"0"]));
        assert!(futures_util::poll!(first.as_mut()).is_pending());
        // The driver writes the first call; Redis is busy with it from now on.
        tokio::task::yield_now().await;
        let mut second = Box::pin(call(&pipe, soon(), &[b"ECHO", b"queued"]));
        assert!(futures_util::poll!(second.as_mut()).is_pending());
        // The loop is busy past the second call's timeout before the driver runs again.
        let busy = std::time::Instant::now();
        while busy.elapsed() < Duration::from_millis(70) {
            std::hint::spin_loop();
        }
        assert_eq!(second.await, Ok(bulk("queued")));
        drop(first);
    });
}

/// `ASKING` goes right before the call that follows an `ASK` redirection, and its own reply
/// (here an error: this Redis is no cluster node) is nobody's: each call gets its own.
#[tokio::test]
async fn a_call_after_asking_gets_its_own_reply() {
    let server = RedisServer::start();
    let pipe = Pipe::new(settings(server.port));
    let echo = |text: &'static [u8]| {
        move |out: &mut Vec<u8>| {
            Command::new(out, 2).arg(b"ECHO").arg(text);
        }
    };
    let (before, asked, after) = tokio::join!(
        pipe.call(soon(), echo(b"before")),
        pipe.call_with(soon(), true, echo(b"asked")),
        pipe.call(soon(), echo(b"after")),
    );
    assert_eq!(
        (before, asked, after),
        (Ok(bulk("before")), Ok(bulk("asked")), Ok(bulk("after")))
    );
    assert_eq!(server.calls("asking"), 1);
}

/// A cluster's connections do not merge script calls (their keys may be in other slots):
/// made together, each is an EVALSHA of its own.
#[tokio::test]
async fn without_merging_each_script_call_is_its_own_evalsha() {
    let server = RedisServer::start();
    let pipe = Pipe::new(Settings {
        merge: false,
        ..settings(server.port)
    });
    let load = |out: &mut Vec<u8>| {
        Command::new(out, 3)
            .arg(b"SCRIPT")
            .arg(b"LOAD")
            .arg(ratelimit_proxy::testing::SCRIPT.as_bytes());
    };
    let Ok(Reply::Bulk(sha)) = pipe.call(soon(), load).await else {
        panic!("the script was not loaded");
    };
    let sha = String::from_utf8(sha.to_vec()).unwrap();
    let limits = ["limit"];
    let call = |identity| {
        let requests = [window(identity)];
        let (pipe, sha) = (&pipe, &sha);
        async move {
            let call = ScriptCall {
                sha,
                key_prefix: "p:",
                requests: &requests,
                limits: &limits,
                now: None,
            };
            pipe.call_merged(soon(), &call).await
        }
    };
    let (first, second, third) = tokio::join!(call(1), call(1), call(2));
    assert_eq!(
        (remaining(&first), remaining(&second), remaining(&third)),
        (9.0, 8.0, 9.0)
    );
    assert_eq!(server.calls("evalsha"), 3);
}
