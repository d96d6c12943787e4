//! The real binary out of file descriptors (`ulimit -n` low, filled by client connections):
//! the listeners pause instead of spinning (bounded CPU and warnings), an upstream connect that
//! fails with EMFILE is a 503 that names the cause and does not eject the only server, and all
//! of it is counted in `rlp_resource_exhausted_total`.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::redis_server::free_port;
use support::*;

/// The most descriptors the gateway may hold.
const DESCRIPTORS: u32 = 64;

struct Gateway {
    child: Child,
    data: u16,
    admin: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gateway {
    fn open_descriptors(&self) -> usize {
        let dir = format!("/proc/{}/fd", self.child.id());
        std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
    }

    /// User and system CPU time so far.
    fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        Duration::from_millis(ticks * 10)
    }

    fn warnings(&self, text: &str) -> usize {
        let lines = self.lines.lock().unwrap();
        lines.iter().filter(|l| l.contains(text)).count()
    }
}

fn start(upstream: &TestUpstream) -> Gateway {
    let (data, admin) = (free_port(), free_port());
    let config = format!(
        "[server]\nlisten = [\"127.0.0.1:{data}\"]\nworkers = 1\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [[upstreams]]\nname = \"api\"\nservers = [\"{}\"]\n\n\
         [[routes]]\nname = \"default\"\nupstream = \"api\"\n",
        upstream.url()
    );
    let path = support::binary::config_file("descriptors", &config);
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n {DESCRIPTORS} && exec \"$0\" --config \"$1\""
        ))
        .arg(env!("CARGO_BIN_EXE_ratelimit-proxy"))
        .arg(&path)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let collected = lines.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            collected.lock().unwrap().push(line);
        }
    });
    Gateway {
        child,
        data,
        admin,
        lines,
    }
}

/// One request on an open connection, the answer's head and body as text.
fn ask(stream: &mut TcpStream, path: &str) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nHost: gw\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") || !complete(&answer) {
        let read = stream.read(&mut buffer).expect("an answer within 5 s");
        assert!(read > 0, "closed: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buffer[..read]);
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// The answer holds its whole body (by content-length).
fn complete(answer: &[u8]) -> bool {
    let text = String::from_utf8_lossy(answer);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let length = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    body.len() >= length
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_gateway_pauses_accepting_answers_503_and_ejects_nothing() {
    let upstream = TestUpstream::ok("ok").await;
    let gateway = start(&upstream);
    let ready = eventually(Duration::from_secs(10), || {
        TcpStream::connect(("127.0.0.1", gateway.admin)).is_ok()
    })
    .await;
    assert!(ready, "the gateway never listened");
    // Two client connections, accepted while descriptors are left; no request has been
    // forwarded yet, so the first will need a new upstream connection.
    let mut first = TcpStream::connect(("127.0.0.1", gateway.data)).unwrap();
    let mut second = TcpStream::connect(("127.0.0.1", gateway.data)).unwrap();

    // Connections until the gateway holds every descriptor it may, and more in the backlog.
    let mut held = Vec::new();
    let full = eventually(Duration::from_secs(10), || {
        held.push(TcpStream::connect(("127.0.0.1", gateway.data)).unwrap());
        gateway.open_descriptors() >= DESCRIPTORS as usize
    })
    .await;
    assert!(full, "{} descriptors open", gateway.open_descriptors());
    for _ in 0..5 {
        held.push(TcpStream::connect(("127.0.0.1", gateway.data)).unwrap());
    }
    // A scrape waiting on the admin listener, which cannot accept it either.
    let scrape = TcpStream::connect(("127.0.0.1", gateway.admin)).unwrap();

    // Fixed: the cost of a listener out of descriptors shows only over time.
    let (cpu, started) = (gateway.cpu(), Instant::now());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spent = gateway.cpu() - cpu;
    let elapsed = started.elapsed();
    assert!(spent < elapsed / 10, "{spent:?} of CPU in {elapsed:?}");
    let warned = gateway.warnings("accept failed");
    assert!((1..=4).contains(&warned), "{warned} accept warnings");

    // The upstream connect fails for lack of a descriptor: 503, the cause named, no ejection.
    let answer = ask(&mut first, "/short");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("out of file descriptors"), "{answer}");

    drop(held);
    drop(scrape);
    let recovered = eventually(Duration::from_secs(5), || {
        ask(&mut second, "/after").starts_with("HTTP/1.1 200")
    })
    .await;
    assert!(recovered, "the only server was ejected");
    let metrics = get(&format!("http://127.0.0.1:{}/metrics", gateway.admin))
        .await
        .1;
    let metrics = String::from_utf8(metrics.to_vec()).unwrap();
    for site in ["accept", "admin_accept", "upstream_connect"] {
        let series = format!(
            "rlp_resource_exhausted_total{{resource=\"file_descriptors\",site=\"{site}\"}} "
        );
        let line = metrics.lines().find(|l| l.starts_with(&series));
        let count: u64 = line
            .unwrap_or_else(|| panic!("no {series}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(count >= 1, "{series}{count}");
    }
}
