//! The real `ratelimit-proxy` binary serving a config file, with its stderr (the logs)
//! collected line by line, for the tests of what it logs.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct RunningBinary {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// Writes `config` to `gw.toml` in a fresh directory named after `name`; its path.
pub fn config_file(name: &str, config: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlp-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gw.toml");
    std::fs::write(&path, config).unwrap();
    path
}

impl RunningBinary {
    /// `ratelimit-proxy --config PATH` with `RUST_LOG=rust_log` and stderr piped (so not a
    /// terminal).
    pub fn start(config: &Path, rust_log: &str) -> RunningBinary {
        RunningBinary::start_with_env(config, rust_log, &[])
    }

    /// `start` with `env` added to the child's environment (never this process's, which
    /// tests running in parallel share).
    pub fn start_with_env(config: &Path, rust_log: &str, env: &[(&str, &str)]) -> RunningBinary {
        // Read with option_env!, as `check_config` does: examples share this harness.
        let Some(binary) = option_env!("CARGO_BIN_EXE_ratelimit-proxy") else {
            panic!("RunningBinary runs in integration tests, which cargo gives the binary's path");
        };
        let mut child = Command::new(binary)
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", rust_log)
            .envs(env.iter().copied())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let lines = Arc::new(Mutex::new(Vec::new()));
        let collected = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                collected.lock().unwrap().push(line);
            }
        });
        RunningBinary {
            child,
            lines,
            reader: Some(reader),
        }
    }

    /// Every line logged so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// The first line logged that `matches`, polled for up to `within`.
    pub async fn line_where(
        &self,
        within: Duration,
        matches: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let mut found = None;
        super::eventually(within, || {
            found = self.lines().into_iter().find(|l| matches(l));
            found.is_some()
        })
        .await;
        found
    }

    /// The proxy listener's address from the JSON `listening` line.
    pub async fn json_listen_addr(&self) -> String {
        let line = self
            .line_where(Duration::from_secs(20), |line| {
                json(line).is_some_and(|j| j["fields"]["message"] == "listening")
            })
            .await
            .expect("a listening line");
        json(&line).unwrap()["fields"]["addr"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// SIGTERM, then every line the process wrote until it exited, and whether it exited 0.
    pub fn stop(mut self) -> (Vec<String>, bool) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let status = self.child.wait().unwrap();
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        (self.lines(), status.success())
    }
}

impl Drop for RunningBinary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A JSON log line, parsed.
pub fn json(line: &str) -> Option<serde_json::Value> {
    serde_json::from_str(line).ok()
}
