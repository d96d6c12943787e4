//! Which text `/metrics` answers in: the classic Prometheus text format 0.0.4 by default, and
//! OpenMetrics 1.0 only to a scraper whose `Accept` prefers it (as client_golang negotiates).
//! prometheus-client writes only OpenMetrics, so the classic text is made from it: there a
//! counter family `x` is declared under the name of the samples it has, `x_total` (a classic
//! parser types samples by the name on their `# TYPE` line, so `# TYPE x counter` above
//! `x_total` left every counter untyped), and `# UNIT` and `# EOF` are left out.

/// A text exposition format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exposition {
    /// `text/plain; version=0.0.4`.
    Classic,
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
}

impl Exposition {
    /// The format for an `Accept` field: of the media ranges that name a format we write, the
    /// one with the highest q (the first of equals) wins; q=0 refuses. No such range (no
    /// field, `*/*`, an unknown version) gives the classic text.
    pub(crate) fn negotiate(accept: Option<&str>) -> Exposition {
        let mut best: Option<(f32, Exposition)> = None;
        for range in accept.unwrap_or("").split(',') {
            let Some((format, q)) = media_range(range) else {
                continue;
            };
            if q > 0.0 && best.is_none_or(|(best_q, _)| q > best_q) {
                best = Some((q, format));
            }
        }
        best.map_or(Exposition::Classic, |(_, format)| format)
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Exposition::Classic => "text/plain; version=0.0.4; charset=utf-8",
            Exposition::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The format one media range of `Accept` names, and its q; None for other media types and
/// versions we do not write.
fn media_range(range: &str) -> Option<(Exposition, f32)> {
    let mut parts = range.split(';');
    let media_type = parts.next()?.trim();
    let (mut q, mut version) = (1.0, None);
    for parameter in parts {
        let (name, value) = parameter.split_once('=')?;
        let value = value.trim().trim_matches('"');
        match name.trim() {
            name if name.eq_ignore_ascii_case("q") => q = value.parse().unwrap_or(0.0),
            name if name.eq_ignore_ascii_case("version") => version = Some(value),
            _ => {}
        }
    }
    let format = if media_type.eq_ignore_ascii_case("application/openmetrics-text") {
        matches!(version, None | Some("1.0.0" | "0.0.1")).then_some(Exposition::OpenMetrics)
    } else if media_type.eq_ignore_ascii_case("text/plain") {
        // 1.0.0 differs from 0.0.4 only in allowing UTF-8 names, which ours never need.
        matches!(version, None | Some("0.0.4" | "1.0.0")).then_some(Exposition::Classic)
    } else {
        None
    }?;
    Some((format, q))
}

/// The classic text of an OpenMetrics exposition as prometheus-client writes it (`# HELP`,
/// `# TYPE`, maybe `# UNIT`, then the samples of each family; `# EOF` last).
pub(super) fn classic_from_openmetrics(openmetrics: &str) -> String {
    let mut classic = String::with_capacity(openmetrics.len());
    // A family's HELP comes before its TYPE, which decides the name HELP must carry.
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush_help(&mut classic, help.replace(rest));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (family, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (name, kind) = classic_family(family, kind);
            if let Some(help) = help.take() {
                let text = help.split_once(' ').map_or("", |(_, text)| text);
                push_line(&mut classic, &format!("# HELP {name} {text}"));
            }
            push_line(&mut classic, &format!("# TYPE {name} {kind}"));
        } else if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        } else {
            flush_help(&mut classic, help.take());
            push_line(&mut classic, line);
        }
    }
    flush_help(&mut classic, help);
    classic
}

/// The classic name and type of an OpenMetrics family: its samples' name where that differs.
fn classic_family(family: &str, kind: &str) -> (String, &'static str) {
    match kind {
        "counter" => (format!("{family}_total"), "counter"),
        "info" => (format!("{family}_info"), "gauge"),
        "gauge" => (family.to_string(), "gauge"),
        "histogram" => (family.to_string(), "histogram"),
        "summary" => (family.to_string(), "summary"),
        _ => (family.to_string(), "untyped"),
    }
}

/// A HELP line that no TYPE followed, kept as it was.
fn flush_help(classic: &mut String, help: Option<&str>) {
    if let Some(help) = help {
        push_line(classic, &format!("# HELP {help}"));
    }
}

fn push_line(text: &mut String, line: &str) {
    text.push_str(line);
    text.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_text_is_the_default_and_openmetrics_must_be_preferred() {
        use Exposition::{Classic, OpenMetrics};
        let cases = [
            (None, Classic),
            (Some(""), Classic),
            (Some("*/*"), Classic),
            (Some("text/plain;version=0.0.4"), Classic),
            (Some("application/openmetrics-text"), OpenMetrics),
            (
                Some("application/openmetrics-text; version=1.0.0"),
                OpenMetrics,
            ),
            (
                Some("APPLICATION/OpenMetrics-Text;Version=\"1.0.0\""),
                OpenMetrics,
            ),
            // Prometheus 2's default scrape Accept.
            (
                Some(
                    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                     version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                ),
                OpenMetrics,
            ),
            // Prometheus with scrape_protocols preferring the classic text.
            (
                Some("text/plain;version=0.0.4;q=0.6,application/openmetrics-text;q=0.5"),
                Classic,
            ),
            (Some("text/plain, application/openmetrics-text"), Classic),
            (
                Some("application/openmetrics-text, text/plain"),
                OpenMetrics,
            ),
            (
                Some("application/openmetrics-text;q=0, text/plain;q=0.1"),
                Classic,
            ),
            (Some("application/openmetrics-text;q=0"), Classic),
            (Some("application/openmetrics-text;version=2.0.0"), Classic),
            (Some("application/openmetrics-text;q=oops"), Classic),
            (
                Some("application/openmetrics-text;q=0.3,*/*;q=0.9"),
                OpenMetrics,
            ),
        ];
        for (accept, expected) in cases {
            assert_eq!(Exposition::negotiate(accept), expected, "{accept:?}");
        }
    }

    #[test]
    fn counters_are_declared_under_their_sample_names_and_openmetrics_lines_dropped() {
        let openmetrics = "# HELP rlp_requests Requests answered.\n\
                           # TYPE rlp_requests counter\n\
                           rlp_requests_total{route=\"a\",code=\"200\"} 3\n\
                           # HELP rlp_in_flight In flight.\n\
                           # TYPE rlp_in_flight gauge\n\
                           rlp_in_flight{route=\"a\"} 1\n\
                           # HELP rlp_took_seconds Took.\n\
                           # TYPE rlp_took_seconds histogram\n\
                           # UNIT rlp_took_seconds seconds\n\
                           rlp_took_seconds_sum 0.5\n\
                           rlp_took_seconds_count 1\n\
                           rlp_took_seconds_bucket{le=\"+Inf\"} 1\n\
                           # HELP rlp_build Build.\n\
                           # TYPE rlp_build info\n\
                           rlp_build_info{version=\"1\"} 1\n\
                           # EOF\n";
        let expected = "# HELP rlp_requests_total Requests answered.\n\
                        # TYPE rlp_requests_total counter\n\
                        rlp_requests_total{route=\"a\",code=\"200\"} 3\n\
                        # HELP rlp_in_flight In flight.\n\
                        # TYPE rlp_in_flight gauge\n\
                        rlp_in_flight{route=\"a\"} 1\n\
                        # HELP rlp_took_seconds Took.\n\
                        # TYPE rlp_took_seconds histogram\n\
                        rlp_took_seconds_sum 0.5\n\
                        rlp_took_seconds_count 1\n\
                        rlp_took_seconds_bucket{le=\"+Inf\"} 1\n\
                        # HELP rlp_build_info Build.\n\
                        # TYPE rlp_build_info gauge\n\
                        rlp_build_info{version=\"1\"} 1\n";
        assert_eq!(classic_from_openmetrics(openmetrics), expected);
    }
}
