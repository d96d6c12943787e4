//! `${NAME}` in the values a deployment supplies rather than writes down: the store's URLs
//! (which may hold a Redis password), `store.hash_secret` and upstream servers. Only these
//! keys are expanded, after the TOML is parsed, so a variable's value is never read as TOML
//! and the config text itself (what /config shows) never holds the secret. `$${` is a literal
//! `${`; any other `$` is itself. A variable that is not set is a problem at the key's path.
//! `${file:/absolute/path}` is the content of a file instead (a mounted secret), less the
//! line ending at its end.

use super::problems::{Problems, echo};
use super::raw::RawConfig;
use super::{ConfigError, Problem};

/// Where a variable's value comes from: the process environment, or a test's own map.
pub(super) type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Why a value's `${…}` cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ExpandError {
    #[error("environment variable {0} is not set")]
    Unset(String),
    #[error("\"${{\" without a closing \"}}\": expected ${{NAME}} (or $${{ for a literal ${{)")]
    Unterminated,
    #[error(
        "${{{}}}: expected a variable name of letters, digits and _, not starting with a digit",
        echo(.0)
    )]
    BadName(String),
    #[error("${{file:{}}}: expected an absolute path", echo(.0))]
    RelativeFile(String),
    #[error("${{file:{path}}}: cannot read the file: {reason}", path = echo(.0), reason = .1)]
    Unreadable(String, String),
}

/// `value` with each `${NAME}` replaced by `lookup(NAME)`.
pub(crate) fn expand(value: &str, lookup: Lookup<'_>) -> Result<String, ExpandError> {
    let mut expanded = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        if rest[..at].ends_with('$') {
            // `$${`: the first `$` escapes the reference.
            expanded.push_str(&rest[..at - 1]);
            expanded.push_str("${");
            rest = &rest[at + 2..];
            continue;
        }
        expanded.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end = after.find('}').ok_or(ExpandError::Unterminated)?;
        let name = &after[..end];
        if let Some(path) = name.strip_prefix("file:") {
            expanded.push_str(&file_content(path)?);
            rest = &after[end + 1..];
            continue;
        }
        if !is_variable_name(name) {
            return Err(ExpandError::BadName(name.to_string()));
        }
        let variable = lookup(name).ok_or_else(|| ExpandError::Unset(name.to_string()))?;
        expanded.push_str(&variable);
        rest = &after[end + 1..];
    }
    expanded.push_str(rest);
    Ok(expanded)
}

/// A secret file's content, less the line ending an editor or `echo` leaves at its end.
fn file_content(path: &str) -> Result<String, ExpandError> {
    if !std::path::Path::new(path).is_absolute() {
        return Err(ExpandError::RelativeFile(path.to_string()));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|error| ExpandError::Unreadable(path.to_string(), error.to_string()))?;
    Ok(text.trim_end_matches(['\n', '\r']).to_string())
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Expands the keys that take `${NAME}` in place; a value that cannot be expanded is left as
/// written and reported at its key path.
pub(super) fn expand_config(raw: &mut RawConfig, lookup: Lookup<'_>) -> Vec<Problem> {
    let mut values: Vec<(String, &mut String)> = Vec::new();
    if let Some(store) = raw.store.as_mut() {
        values.extend(store.url.as_mut().map(|url| ("store.url".to_string(), url)));
        for (i, url) in store.urls.iter_mut().flatten().enumerate() {
            values.push((format!("store.urls[{i}]"), url));
        }
        let secret = store.hash_secret.as_mut();
        values.extend(secret.map(|secret| ("store.hash_secret".to_string(), secret)));
    }
    for (i, upstream) in raw.upstreams.iter_mut().enumerate() {
        for (j, server) in upstream.servers.iter_mut().enumerate() {
            values.push((format!("upstreams[{i}].servers[{j}]"), server));
        }
    }
    let mut problems = Vec::new();
    for (path, value) in values {
        match expand(value, lookup) {
            Ok(expanded) => *value = expanded,
            Err(error) => problems.push(Problem {
                path,
                message: error.to_string(),
            }),
        }
    }
    problems
}

/// Validation's outcome with the expansion's problems first. A value left unexpanded would
/// also fail validation at the same path ("expected a URL, got \"${…}\""); that second,
/// misleading line is dropped.
pub(super) fn with_problems<T>(
    validated: Result<T, ConfigError>,
    expansion: Vec<Problem>,
    source: &str,
) -> Result<T, ConfigError> {
    if expansion.is_empty() {
        return validated;
    }
    let (validation, omitted) = match validated {
        Ok(_) => (Vec::new(), 0),
        Err(ConfigError::Invalid {
            problems, omitted, ..
        }) => (problems, omitted),
        Err(other) => return Err(other),
    };
    let mut all = Problems::default();
    let unexpanded = |path: &str| expansion.iter().any(|p| p.path == path);
    let validation = validation.into_iter().filter(|p| !unexpanded(&p.path));
    for problem in expansion.iter().cloned().chain(validation) {
        all.push(problem.path, problem.message);
    }
    let (problems, more, _, _) = all.into_parts();
    Err(ConfigError::Invalid {
        file: source.to_string(),
        problems,
        omitted: omitted + more,
    })
}

/// The environment of the tests: they never change the process's own, which tests running
/// in parallel threads share.
#[cfg(test)]
fn tests_env(name: &str) -> Option<String> {
    match name {
        "RLP_UPSTREAM" => Some("http://api:8080".into()),
        "REDIS_PASSWORD" | "HASH_SECRET" => Some("s3cret".into()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::tests_env as env;
    use super::*;

    #[test]
    fn references_are_replaced_and_the_rest_kept() {
        let cases = [
            ("${RLP_UPSTREAM}", "http://api:8080"),
            (
                "redis://gw:${REDIS_PASSWORD}@redis:6379/0",
                "redis://gw:s3cret@redis:6379/0",
            ),
            ("a${EMPTY}b", "ab"),
            ("no references", "no references"),
            ("pa$$word$", "pa$$word$"),
            ("$${RLP_UPSTREAM}", "${RLP_UPSTREAM}"),
            ("x$${A}${REDIS_PASSWORD}", "x${A}s3cret"),
        ];
        for (value, expected) in cases {
            assert_eq!(expand(value, &env).as_deref(), Ok(expected), "{value}");
        }
    }

    #[test]
    fn unset_unterminated_and_bad_names_are_errors() {
        assert_eq!(
            expand("${NOPE}", &env),
            Err(ExpandError::Unset("NOPE".into()))
        );
        assert_eq!(
            expand("x${RLP_UPSTREAM", &env),
            Err(ExpandError::Unterminated)
        );
        assert_eq!(
            expand("${}", &env),
            Err(ExpandError::BadName(String::new()))
        );
        assert_eq!(
            expand("${1X}", &env),
            Err(ExpandError::BadName("1X".into()))
        );
        assert_eq!(
            expand("${A-B}", &env).unwrap_err().to_string(),
            "${\"A-B\"}: expected a variable name of letters, digits and _, not starting with a digit"
        );
    }

    #[test]
    fn a_file_reference_is_the_files_content_less_its_line_ending() {
        let dir = std::env::temp_dir().join(format!("rlp-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secret = dir.join("secret");
        std::fs::write(&secret, "s3cret\n").unwrap();
        let path = secret.to_str().unwrap();
        let value = format!("redis://gw:${{file:{path}}}@redis:6379");
        assert_eq!(
            expand(&value, &env).as_deref(),
            Ok("redis://gw:s3cret@redis:6379")
        );
        assert_eq!(
            expand("${file:secret}", &env),
            Err(ExpandError::RelativeFile("secret".into()))
        );
        let missing = dir.join("missing");
        let error = expand(&format!("${{file:{}}}", missing.display()), &env).unwrap_err();
        assert!(matches!(error, ExpandError::Unreadable(..)), "{error}");
        assert!(
            error.to_string().contains("cannot read the file"),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_the_named_keys_are_expanded_and_failures_name_their_path() {
        let text = r#"
[store]
backend = "redis"
url = "redis://gw:${REDIS_PASSWORD}@redis:6379/0"
hash_secret = "${MISSING_SECRET}"
[[upstreams]]
name = "${RLP_UPSTREAM}"
servers = ["http://a:1", "${RLP_UPSTREAM}", "${UNSET_UPSTREAM}"]
"#;
        let mut raw: RawConfig = toml::from_str(text).unwrap();
        let problems = expand_config(&mut raw, &env);
        let store = raw.store.as_ref().unwrap();
        assert_eq!(store.url.as_deref(), Some("redis://gw:s3cret@redis:6379/0"));
        assert_eq!(raw.upstreams[0].name, "${RLP_UPSTREAM}");
        assert_eq!(raw.upstreams[0].servers[1], "http://api:8080");
        let rendered: Vec<String> = problems
            .iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect();
        assert_eq!(
            rendered,
            [
                "store.hash_secret: environment variable MISSING_SECRET is not set",
                "upstreams[0].servers[2]: environment variable UNSET_UPSTREAM is not set",
            ]
        );
    }
}

#[cfg(test)]
mod parse_tests {
    use super::super::parse_with_environment;
    use super::tests_env as env;

    const CONFIG: &str = r#"
[store]
hash_secret = "${HASH_SECRET}"
[[upstreams]]
name = "api"
servers = ["${RLP_UPSTREAM}"]
[[routes]]
name = "default"
upstream = "api"
"#;

    #[test]
    fn a_config_takes_its_upstream_and_secret_from_the_environment() {
        let config = parse_with_environment(CONFIG, "gw.toml", &env).unwrap();
        assert_eq!(
            config.upstreams[0].servers[0].to_string(),
            "http://api:8080"
        );
        assert_eq!(config.store.hash_secret.as_deref(), Some("s3cret"));
        let shown = config.document.to_string();
        assert!(shown.contains("${RLP_UPSTREAM}"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn unset_variables_are_reported_with_every_other_problem() {
        let text = CONFIG
            .replace("RLP_UPSTREAM", "NOT_SET")
            .replace("upstream = \"api\"", "upstream = \"apii\"");
        let error = parse_with_environment(&text, "gw.toml", &env).unwrap_err();
        assert_eq!(
            error.to_string(),
            "gw.toml: upstreams[0].servers[0]: environment variable NOT_SET is not set\n\
             gw.toml: routes[0].upstream: unknown upstream \"apii\"; expected one of [\"api\"]"
        );
    }
}
