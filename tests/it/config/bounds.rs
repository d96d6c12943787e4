//! Huge invalid configs give a bounded report: at most `MAX_PROBLEMS` problems and then how many
//! more, and no value echoed whole, through `check` and through a reload of a running gateway.

use crate::support;

use http::StatusCode;
use ratelimit_proxy::testing::{MAX_PROBLEMS, parse_str};
use support::*;

const VALID: &str = r#"
[server]
listen = ["127.0.0.1:0"]
[[upstreams]]
name = "api"
servers = ["http://127.0.0.1:9001"]
[[routes]]
name = "default"
upstream = "api"
"#;

/// `count` entries that are not CIDRs, as an inline TOML array.
fn bad_inline_list(count: usize) -> String {
    let entries: Vec<String> = (0..count).map(|i| format!("\"10.0.{i}.0/99\"")).collect();
    format!("[ip_lists]\nhuge = [{}]\n", entries.join(","))
}

fn write_in_dir(dir: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rlp-{dir}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir
}

#[test]
fn a_list_of_many_bad_entries_reports_the_first_hundred_and_counts_the_rest() {
    let text = format!("{VALID}\n{}", bad_inline_list(100_000));
    let error = parse_str(&text, "gw.toml").unwrap_err();
    assert_eq!(error.problems().len(), MAX_PROBLEMS);
    let rendered = error.to_string();
    let lines: Vec<&str> = rendered.lines().collect();
    assert_eq!(lines.len(), MAX_PROBLEMS + 1, "{}", lines[MAX_PROBLEMS]);
    assert!(lines[0].starts_with("gw.toml: ip_lists.huge[0]: expected a CIDR"));
    assert_eq!(
        lines[MAX_PROBLEMS],
        "gw.toml: and 99900 more problems (only the first 100 are listed)"
    );
    assert!(rendered.len() < 32 * 1024, "{} bytes", rendered.len());
}

#[test]
fn a_huge_value_is_echoed_cut_with_its_length() {
    let huge = "9".repeat(5 << 20) + "s!";
    let text = VALID.replace("[server]", &format!("[server]\nidle_timeout = \"{huge}\""));
    let rendered = parse_str(&text, "gw.toml").unwrap_err().to_string();
    assert!(rendered.len() < 1024, "{} bytes", rendered.len());
    assert!(
        rendered.starts_with("gw.toml: server.idle_timeout: expected a duration like"),
        "{rendered}"
    );
    assert!(rendered.ends_with("(5242882 bytes in all)"), "{rendered}");

    // A value of the wrong type is a syntax error, whose message quotes it too.
    let text = VALID.replace("[server]", &format!("[server]\nworkers = \"{huge}\""));
    let rendered = parse_str(&text, "gw.toml").unwrap_err().to_string();
    assert!(
        rendered.len() < 1024,
        "{} bytes: {}",
        rendered.len(),
        &rendered[..200]
    );
    assert!(rendered.contains("server.workers"), "{rendered}");
    assert!(rendered.contains("bytes left out"), "{rendered}");
}

/// Names are metric labels: a 50 MB route name made every `/metrics` scrape 1 GB.
#[test]
fn a_name_longer_than_128_bytes_is_refused() {
    let long = "r".repeat(129);
    let text = format!(
        "{VALID}\n[[upstreams]]\nname = \"up2\"\nservers = [\"http://127.0.0.1:1\"]\n\n[[routes]]\nname = \"{long}\"\nupstream = \"up2\"\n"
    );
    let rendered = parse_str(&text, "gw.toml").unwrap_err().to_string();
    assert!(
        rendered.contains(".name: expected a name of at most 128 bytes"),
        "{rendered}"
    );
    let fits = text.replace(&long, &"r".repeat(128));
    parse_str(&fits, "gw.toml").unwrap();
}

#[test]
fn check_on_a_huge_bad_list_file_and_a_huge_inline_list_prints_a_bounded_report() {
    let mut list = String::new();
    for i in 0..300_000 {
        list.push_str(&format!("192.0.{}.{}/40\n", i / 256 % 256, i % 256));
    }
    list.push_str(&"x".repeat(2 << 20));
    list.push('\n');
    let config = format!("{VALID}\n[ip_lists]\nfrom_file = {{ file = \"bad.txt\" }}\n");
    let dir = write_in_dir("bounds-check", &[("gw.toml", &config), ("bad.txt", &list)]);
    let (ok, text) = check_config(&dir.join("gw.toml"));
    assert!(!ok);
    assert!(text.len() < 8 * 1024, "{} bytes", text.len());
    assert!(text.contains("bad.txt line 1: expected a CIDR"), "{text}");
    assert!(text.contains("bad.txt: 299996 more bad lines"), "{text}");

    let inline = format!("{VALID}\n{}", bad_inline_list(200_000));
    let dir = write_in_dir("bounds-inline", &[("gw.toml", &inline)]);
    let (ok, text) = check_config(&dir.join("gw.toml"));
    assert!(!ok);
    assert!(text.len() < 32 * 1024, "{} bytes", text.len());
    assert!(text.contains("and 199900 more problems"), "{text}");
}

#[tokio::test]
async fn a_reload_to_a_huge_bad_list_fails_with_a_bounded_error_and_serving_goes_on() {
    let upstream = TestUpstream::ok("ok").await;
    let routes = one_route_config(&[upstream.url()], "");
    let (gateway, path) = TestGateway::start_in_dir("bounds-reload", &[], &routes).await;
    let bad = format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n{routes}\n{}",
        bad_inline_list(200_000)
    );
    std::fs::write(&path, bad).unwrap();
    let reloader = gateway.reloader.clone();
    let error = tokio::task::spawn_blocking(move || reloader.reload())
        .await
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(error.len() < 32 * 1024, "{} bytes", error.len());
    assert!(error.contains("and 199900 more problems"), "{error}");
    let (response, body) = get(&gateway.url("/")).await;
    assert_answer(
        &response,
        &body,
        StatusCode::OK,
        "ok",
        "after the failed reload",
    );
}
