//! Real `redis-server` processes for tests, each on its own free port, gone when dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
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
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start redis-server ({e}); these tests need a real one: \
                 install it with `apt-get install -y redis-server` (it must be on PATH)"
            )
        });
        self.child = Some(child);
        self.wait_until_ready(&log)
    }

    fn wait_until_ready(&mut self, log: &std::path::Path) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let log_text = || std::fs::read_to_string(log).unwrap_or_default();
        while Instant::now() < deadline {
            let child = self.child.as_mut().expect("spawned");
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Err(format!(
                    "port {}: redis-server exited ({status}): {}",
                    self.port,
                    log_text()
                ));
            }
            if log_text().contains("Ready to accept connections") {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
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

/// Three masters joined into a cluster with `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                let bus = free_port().to_string();
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    &bus,
                    "--cluster-node-timeout",
                    "5000",
                ])
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run redis-cli ({e}): install it with `apt-get install -y redis-tools`"
                )
            });
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

    fn wait_until_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        'waiting: while Instant::now() < deadline {
            for node in &self.nodes {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut node.connection())
                    .unwrap_or_default();
                if !info.contains("cluster_state:ok") {
                    std::thread::sleep(Duration::from_millis(100));
                    continue 'waiting;
                }
            }
            return;
        }
        panic!("the test cluster did not reach cluster_state:ok within 20 s");
    }
}
