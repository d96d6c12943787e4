//! The config loader on arbitrary text: it never panics, its report is bounded (at most
//! `MAX_PROBLEMS` problems, each key path and message cut to a bounded length, so a file of
//! megabytes never echoes back megabytes), and a config it loads can be shown.

use crate::config::{ConfigError, MAX_PROBLEMS, parse_str};

/// The name the fuzzed text goes by in every message.
const SOURCE: &str = "fuzz.toml";
/// Longest message line: a key path and a message, each cut to 512 bytes (`problems::clip`,
/// plus the few bytes that say how much was cut), the file name, a location and separators.
const MOST_LINE_BYTES: usize = 2 * 600 + SOURCE.len() + 64;

pub fn config(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    match parse_str(text, SOURCE) {
        Ok(config) => {
            let _ = format!("{config:?}");
        }
        Err(error) => check_report(&error),
    }
}

fn check_report(error: &ConfigError) {
    let report = error.to_string();
    let lines: Vec<&str> = report.lines().collect();
    // The problems, and the line that says how many more there were.
    assert!(lines.len() <= MAX_PROBLEMS + 1, "{} lines", lines.len());
    assert!(error.problems().len() <= MAX_PROBLEMS);
    for line in lines {
        assert!(
            line.len() <= MOST_LINE_BYTES,
            "a line of {} bytes",
            line.len()
        );
        assert!(line.starts_with(SOURCE), "{line:?} does not name the file");
    }
}
