//! `[log]` end to end through the real binary: JSON lines, one access line per request with the
//! request id of its response, and no API keys or Authorization values anywhere in the logs.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use http::{Request, StatusCode};

#[tokio::test]
async fn access_lines_are_json_with_the_request_id_and_never_show_secrets() {
    let upstream = TestUpstream::ok("ok").await;
    let dir = std::env::temp_dir().join(format!("rlp-access-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[log]\nformat = \"json\"\naccess = true\n[edge]\nrate = \"2/h\"\nburst = 2\n[[limits]]\nname = \"per-key\"\nkey = [\"header:x-api-key\"]\nrates = [{{ limit = 1, per = \"1h\" }}]\n{}",
        one_route_config(&[upstream.url()], "").replace(
            "upstream = \"api\"\n",
            "upstream = \"api\"\nlimits = [\"per-key\"]\n"
        )
    );
    std::fs::write(dir.join("gw.toml"), config).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ratelimit-proxy"))
        .arg("--config")
        .arg(dir.join("gw.toml"))
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let collected = lines.clone();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if let Ok(json) = serde_json::from_str::<serde_json::Value>(&line)
                && json["fields"]["message"] == "listening"
            {
                let _ = addr_tx.send(
                    json["fields"]["addr"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                );
            }
            collected.lock().unwrap().push(line);
        }
    });
    let addr = addr_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("listening line");

    let mut ids = Vec::new();
    // Allowed; refused by the per-key limit (the edge's second token); refused by the edge.
    let refusals = [StatusCode::TOO_MANY_REQUESTS; 2];
    for expected in [StatusCode::OK].into_iter().chain(refusals) {
        let request = Request::get(format!("http://{addr}/orders?token=query-secret"))
            .header("x-api-key", "api-key-secret")
            .header("authorization", "Bearer bearer-secret")
            .body(empty())
            .unwrap();
        let (response, _) = send(request).await;
        assert_eq!(response.status(), expected);
        ids.push(
            response.headers()["x-request-id"]
                .to_str()
                .unwrap()
                .to_string(),
        );
    }
    // The access line is written as the response goes out; give the log pipe a moment.
    let mut access = Vec::new();
    for _ in 0..100 {
        access = lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|j| j["target"] == "access")
            .collect();
        if access.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();

    let all = lines.lock().unwrap().join("\n");
    for secret in ["api-key-secret", "bearer-secret", "query-secret"] {
        assert!(
            !all.contains(secret),
            "{secret} leaked into the logs:\n{all}"
        );
    }
    assert!(
        lines
            .lock()
            .unwrap()
            .iter()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()),
        "a log line is not JSON"
    );
    assert_eq!(access.len(), 3, "{all}");
    for (line, id) in access.iter().zip(&ids) {
        let fields = &line["fields"];
        assert_eq!(fields["request_id"], id.as_str());
        assert_eq!(fields["method"], "GET");
        assert_eq!(fields["path"], "/orders");
        assert_eq!(fields["route"], "default");
        assert_eq!(fields["client_ip"], "127.0.0.1");
        assert!(fields["duration_ms"].as_f64().is_some());
        assert!(line["timestamp"].as_str().is_some());
    }
    assert_eq!(access[0]["fields"]["status"], 200);
    assert_eq!(access[0]["fields"]["upstream"], upstream.url());
    assert_eq!(access[0]["fields"]["remaining"], 0);
    assert_eq!(access[1]["fields"]["status"], 429);
    assert_eq!(access[1]["fields"]["refused_by"], "per-key");
    assert_eq!(access[2]["fields"]["status"], 429);
    assert_eq!(access[2]["fields"]["refused_by"], "edge");
}
