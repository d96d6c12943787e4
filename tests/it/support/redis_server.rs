//! Real `redis-server` processes for tests, each on its own free port, gone when dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Fails the test with what to run when `program` is not on PATH, before anything is started:
/// the first failure a newcomer sees says what is missing and how to get it.
pub fn require(program: &str) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if !std::env::split_paths(&path).any(|dir| dir.join(program).is_file()) {
        panic!(
            "{program} is not on PATH: these tests start real Redis processes; \
             run tools/test-deps.sh (it installs redis-server and redis-tools), \
             or run the suite with tools/test.sh"
        );
    }
}

pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    /// Serves TLS only (on `port`), with these PEM files in `dir`.
    tls: bool,
    child: Option<Child>,
}

/// A port nobody listens on now (the OS picks it), for a server to take.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl RedisServer {
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// With extra `redis-server` arguments (`--requirepass x`, TLS, cluster mode...).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::start_in_mode(extra, None)
    }

    /// With one ACL user allowed everything and the default user off: clients must log in.
    pub fn start_with_user(user: &str, password: &str) -> RedisServer {
        let password = format!(">{password}");
        RedisServer::start_with(&[
            "--user", user, "on", &password, "~*", "+@all", "--user", "default", "off",
        ])
    }

    /// TLS only, with a certificate for 127.0.0.1 from a CA of its own; the CA's PEM.
    pub fn start_tls_with_private_ca() -> (RedisServer, String) {
        let ca = private_ca();
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let server = RedisServer::start_tls(&leaf.pem(), &key.serialize_pem());
        (server, ca.pem())
    }

    /// TLS only, with a certificate chain and key (PEM); clients need no certificate.
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> RedisServer {
        RedisServer::start_in_mode(&[], Some((cert_pem, key_pem)))
    }

    fn start_in_mode(extra: &[&str], tls: Option<(&str, &str)>) -> RedisServer {
        let mut attempts = Vec::new();
        // A port found free can be taken by another test's listener before redis-server binds
        // it; then redis-server exits and the next port is tried.
        for _ in 0..5 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!("rlp-redis-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("a scratch directory");
            let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            if let Some((cert, key)) = tls {
                std::fs::write(dir.join("server.crt"), cert).unwrap();
                std::fs::write(dir.join("server.key"), key).unwrap();
                for (option, file) in [
                    ("--tls-cert-file", "server.crt"),
                    ("--tls-key-file", "server.key"),
                ] {
                    extra.push(option.to_string());
                    extra.push(dir.join(file).display().to_string());
                }
                extra.extend(["--tls-auth-clients", "no"].map(String::from));
            }
            let mut server = RedisServer {
                port,
                dir,
                extra,
                tls: tls.is_some(),
                child: None,
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(why) => attempts.push(why),
            }
        }
        panic!("redis-server did not start: {attempts:#?}");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// A plain synchronous connection for the test to look inside.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .expect("a connection to the test redis")
    }

    /// SIGKILL: gone at once, nothing flushed, as a crashed host.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP: the process stops answering; the kernel still accepts connections for it.
    pub fn stop(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after `stop`.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("a running redis-server");
        let status = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()
            .expect("kill(1)");
        assert!(status.success(), "kill {signal} failed");
    }

    /// Starts again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(why) = self.spawn() {
            panic!("redis-server did not restart: {why}");
        }
    }

    /// How many times `command` ran (INFO commandstats).
    pub fn calls(&self, command: &str) -> u64 {
        self.all_calls().get(command).copied().unwrap_or(0)
    }

    /// Every command's call count (INFO commandstats), by lowercase name.
    pub fn all_calls(&self) -> std::collections::HashMap<String, u64> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.connection())
            .expect("INFO commandstats");
        info.lines()
            .filter_map(|line| {
                let (command, rest) = line.strip_prefix("cmdstat_")?.split_once(":calls=")?;
                let calls = rest.split(',').next()?.parse().ok()?;
                Some((command.to_string(), calls))
            })
            .collect()
    }

    /// Starts redis-server and waits until its log says it listens: a connection alone could
    /// reach another test's listener on a port redis-server failed to bind.
    fn spawn(&mut self) -> Result<(), String> {
        let port = self.port.to_string();
        let log = self.dir.join("redis.log");
        let _ = std::fs::remove_file(&log);
        let mut command = Command::new("redis-server");
        if self.tls {
            command.args(["--port", "0", "--tls-port", &port]);
        } else {
            command.args(["--port", &port]);
        }
        command
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        require("redis-server");
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
        self.child = Some(child);
        self.wait_until_ready(&log)
    }

    fn wait_until_ready(&mut self, log: &std::path::Path) -> Result<(), String> {
        let log_text = || std::fs::read_to_string(log).unwrap_or_default();
        let child = self.child.as_mut().expect("spawned");
        let mut exited = None;
        let ready = super::eventually_blocking(Duration::from_secs(10), || {
            exited = child.try_wait().ok().flatten();
            exited.is_some() || log_text().contains("Ready to accept connections")
        });
        if let Some(status) = exited {
            self.child = None;
            return Err(format!(
                "port {}: redis-server exited ({status}): {}",
                self.port,
                log_text()
            ));
        }
        if ready {
            return Ok(());
        }
        self.kill();
        Err(format!(
            "port {}: not ready within 10 s: {}",
            self.port,
            log_text()
        ))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A certificate authority of the test's own.
pub fn private_ca() -> rcgen::CertifiedIssuer<'static, rcgen::KeyPair> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap()).unwrap()
}

/// Three masters joined into a cluster with `redis-cli --cluster create`, each with a replica
/// when asked (`nodes[3..]`, paired by redis-cli: see `replica_of`).
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(0, 5000)
    }

    /// Three masters and `replicas` replicas of each; a node is failed over once the others
    /// have not heard from it for `node_timeout_ms`. A master's failure does not stop the
    /// others (`cluster-require-full-coverage no`, as docs/design/redis.md recommends).
    pub fn start_with(replicas: usize, node_timeout_ms: u64) -> RedisCluster {
        let node_timeout = node_timeout_ms.to_string();
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|_| {
                let bus = free_port().to_string();
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    &bus,
                    "--cluster-node-timeout",
                    &node_timeout,
                    "--cluster-require-full-coverage",
                    "no",
                ])
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        require("redis-cli");
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli: {e}"));
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_until_ok();
        cluster
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect()
    }

    /// Waits until every node says the cluster is ok and every replica is in sync with its
    /// master and known as such to every node (a failover needs the masters' votes).
    fn wait_until_ok(&self) {
        let replicas = self.nodes.len() - 3;
        let ok = super::eventually_blocking(Duration::from_secs(20), || {
            self.nodes.iter().all(|node| {
                let mut connection = node.connection();
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut connection)
                    .unwrap_or_default();
                let nodes: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query(&mut connection)
                    .unwrap_or_default();
                let replication: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut connection)
                    .unwrap_or_default();
                let known_replicas = (nodes.lines())
                    .filter(|l| l.split(' ').nth(2).is_some_and(|f| f.contains("slave")))
                    .count();
                let in_sync = !replication.contains("role:slave")
                    || replication.contains("master_link_status:up");
                info.contains("cluster_state:ok") && known_replicas == replicas && in_sync
            })
        });
        assert!(
            ok,
            "the test cluster did not reach cluster_state:ok within 20 s"
        );
    }

    /// The node `node` is a replica of, by index into `nodes`; None for a master.
    pub fn replica_of(&self, node: usize) -> Option<usize> {
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.nodes[node].connection())
            .expect("CLUSTER NODES");
        let myself = nodes.lines().find(|l| l.contains("myself"))?;
        let master_id = myself.split(' ').nth(3).filter(|id| *id != "-")?;
        let master = nodes.lines().find(|l| l.starts_with(master_id))?;
        let port: u16 = master
            .split(' ')
            .nth(1)?
            .split(['@', ':'])
            .nth(1)?
            .parse()
            .ok()?;
        self.nodes.iter().position(|n| n.port == port)
    }

    /// The indices of the nodes that serve slots now, by what `asked` says.
    pub fn masters(&self, asked: usize) -> Vec<usize> {
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.nodes[asked].connection())
            .expect("CLUSTER NODES");
        let serving = nodes.lines().filter(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            fields.len() > 8 && fields[2].contains("master") && !fields[2].contains("fail")
        });
        let ports: Vec<u16> = serving
            .filter_map(|l| l.split(' ').nth(1)?.split(['@', ':']).nth(1)?.parse().ok())
            .collect();
        (0..self.nodes.len())
            .filter(|&i| ports.contains(&self.nodes[i].port))
            .collect()
    }
}
