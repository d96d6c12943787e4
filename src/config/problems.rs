//! Collecting what is wrong with a config, bounded: a file of millions of bad entries, or one
//! value of megabytes, must give a readable report in bounded memory (not one line per entry,
//! nor the value echoed whole), whether it comes from `check` or from a reload.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use super::{Problem, parse_duration};

/// Problems kept and reported; beyond this they are only counted ("and N more").
pub const MAX_PROBLEMS: usize = 100;
/// Characters of a value echoed in a message; a longer one is cut, with its length said.
const MAX_ECHOED_CHARS: usize = 64;
/// Bytes of a message or key path kept whole; a longer one keeps its start and its end.
const MAX_MESSAGE_BYTES: usize = 512;

#[derive(Default)]
pub(super) struct Problems {
    found: Vec<Problem>,
    /// Problems beyond `MAX_PROBLEMS`, counted only.
    omitted: usize,
    warnings: Vec<String>,
    files: Vec<std::path::PathBuf>,
}

impl Problems {
    /// A file the config read (a list, plans, a certificate): a change to it means a reload.
    pub(super) fn watch(&mut self, path: &Path) {
        self.files.push(path.to_path_buf());
    }

    /// Something that does not stop the config from loading but an operator should see.
    pub(super) fn warn(&mut self, path: impl Into<String>, warning: Option<String>) {
        if let Some(warning) = warning
            && self.warnings.len() < MAX_PROBLEMS
        {
            self.warnings
                .push(clip(&format!("{}: {warning}", path.into())));
        }
    }

    pub(super) fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        if self.found.len() >= MAX_PROBLEMS {
            self.omitted += 1;
            return;
        }
        self.found.push(Problem {
            path: clip(&path.into()),
            message: clip(&message.into()),
        });
    }

    pub(super) fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    /// The problems kept, how many more there were, the warnings and the files read.
    pub(super) fn into_parts(self) -> (Vec<Problem>, usize, Vec<String>, Vec<std::path::PathBuf>) {
        (self.found, self.omitted, self.warnings, self.files)
    }

    /// A duration at `path`, or `default` when absent; records a problem when unparsable.
    pub(super) fn duration(
        &mut self,
        path: String,
        value: Option<&str>,
        default: Duration,
    ) -> Duration {
        match value.map(parse_duration) {
            None => default,
            Some(Ok(d)) if d.is_zero() => {
                self.push(path, "expected a duration greater than zero");
                default
            }
            Some(Ok(d)) => d,
            Some(Err(message)) => {
                self.push(path, message);
                default
            }
        }
    }

    /// A whole number in `range` at `path`, or `default` when absent.
    pub(super) fn number(
        &mut self,
        path: String,
        value: Option<i64>,
        range: (i64, i64),
        default: i64,
    ) -> i64 {
        match value {
            None => default,
            Some(n) if n >= range.0 && n <= range.1 => n,
            Some(n) => {
                self.push(
                    path,
                    format!(
                        "expected a whole number from {} to {}, got {n}",
                        range.0, range.1
                    ),
                );
                default
            }
        }
    }
}

/// A value from the file as a message quotes it: `{:?}` of at most 64 characters, then how
/// long it really was.
pub(super) fn echo(value: &str) -> Echo<'_> {
    Echo(value)
}

pub(super) struct Echo<'a>(&'a str);

impl fmt::Display for Echo<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.char_indices().nth(MAX_ECHOED_CHARS) {
            None => write!(f, "{:?}", self.0),
            Some((end, _)) => write!(f, "{:?}… ({} bytes in all)", &self.0[..end], self.0.len()),
        }
    }
}

/// `text` whole when short; else its start and its end around a note of what was left out,
/// so that both a quoted value's beginning and "expected …" after it stay readable.
pub(super) fn clip(text: &str) -> String {
    if text.len() <= MAX_MESSAGE_BYTES {
        return text.to_string();
    }
    let head_end = floor_char_boundary(text, MAX_MESSAGE_BYTES / 2);
    let tail_start = floor_char_boundary(text, text.len() - MAX_MESSAGE_BYTES / 4);
    format!(
        "{}… ({} bytes left out) …{}",
        &text[..head_end],
        tail_start - head_end,
        &text[tail_start..]
    )
}

fn floor_char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_value_is_echoed_cut_with_its_length() {
        assert_eq!(echo("10 seconds").to_string(), "\"10 seconds\"");
        let long = "é".repeat(1000);
        let shown = echo(&long).to_string();
        assert!(
            shown.starts_with(&format!("\"{}\"…", "é".repeat(64))),
            "{shown}"
        );
        assert!(shown.ends_with("(2000 bytes in all)"), "{shown}");
    }

    #[test]
    fn a_long_message_keeps_its_start_and_end() {
        let message = format!(
            "invalid type: string \"{}\", expected u64",
            "x".repeat(10_000)
        );
        let clipped = clip(&message);
        assert!(clipped.len() < MAX_MESSAGE_BYTES + 64, "{}", clipped.len());
        assert!(clipped.starts_with("invalid type: string \"xxx"));
        assert!(clipped.ends_with("xxx\", expected u64"));
        assert!(clipped.contains("bytes left out"));
        assert_eq!(clip("short"), "short");
    }

    #[test]
    fn problems_beyond_the_cap_are_counted_not_kept() {
        let mut problems = Problems::default();
        for i in 0..MAX_PROBLEMS + 7 {
            problems.push(format!("list[{i}]"), "bad");
        }
        let (found, omitted, _, _) = problems.into_parts();
        assert_eq!((found.len(), omitted), (MAX_PROBLEMS, 7));
        assert_eq!(found[0].path, "list[0]");
    }
}
