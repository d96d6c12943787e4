//! Validation of `[client_ip]`'s `remove_fields`, `set_x_real_ip` and `set_forwarded`: the
//! fields naming the client that a request loses on its way upstream, and those the gateway
//! writes itself. Every entry is a field name a client may send end to end, given once.

use http::HeaderName;

use super::problems::{Problems, echo};
use super::raw::RawClientIp;
use crate::http1::fields::{Role, role};
use crate::request::client_fields::{ClientFields, REMOVED_BY_DEFAULT, Writes};
use crate::request::client_ip::ForwardHeader;

/// Longer names are refused: the set is bucketed by length, and no client-address field
/// comes near it.
const MAX_NAME_BYTES: usize = 128;

/// The fields the gateway sets on every request itself: a client's never reach the upstream.
const GATEWAY_OWN: &[&str] = &[
    "host",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-request-id",
];

/// The `ClientFields` of `[client_ip]` (none: the defaults), whose `header` is `source`.
pub(super) fn client_fields(
    raw: Option<&RawClientIp>,
    source: ForwardHeader,
    problems: &mut Problems,
) -> ClientFields {
    let Some(raw) = raw else {
        return ClientFields::default();
    };
    let writes = Writes {
        x_real_ip: raw.set_x_real_ip.unwrap_or(false),
        forwarded: raw.set_forwarded.unwrap_or(false),
    };
    let listed = match &raw.remove_fields {
        None => REMOVED_BY_DEFAULT
            .iter()
            .copied()
            .map(HeaderName::from_static)
            .collect(),
        Some(names) => removed(names, problems),
    };
    ClientFields::new(listed, source, writes)
}

/// The names of `remove_fields`, each checked; those refused are reported and left out.
fn removed(names: &[String], problems: &mut Problems) -> Vec<HeaderName> {
    let mut listed: Vec<HeaderName> = Vec::with_capacity(names.len());
    for (i, text) in names.iter().enumerate() {
        let path = format!("client_ip.remove_fields[{i}]");
        match removable(text) {
            Ok(name) if listed.contains(&name) => problems.push(
                path,
                format!("{name} is listed twice (names are case-insensitive)"),
            ),
            Ok(name) => listed.push(name),
            Err(message) => problems.push(path, message),
        }
    }
    listed
}

/// `text` as the name of a field a client may send end to end, or why it is not one.
fn removable(text: &str) -> Result<HeaderName, String> {
    if text.len() > MAX_NAME_BYTES {
        return Err(format!(
            "expected a field name of at most {MAX_NAME_BYTES} bytes, got {}",
            echo(text)
        ));
    }
    let name = HeaderName::from_bytes(text.as_bytes()).map_err(|_| {
        format!(
            "expected a field name (letters, digits and !#$%&'*+-.^_`|~), got {}",
            echo(text)
        )
    })?;
    if GATEWAY_OWN.contains(&name.as_str()) {
        return Err(format!(
            "{name} is set by the gateway: a client's never reaches the upstream, so it cannot \
             be listed"
        ));
    }
    if role(name.as_str().as_bytes()) != Role::EndToEnd {
        return Err(format!(
            "{name} frames the message or is hop-by-hop: the gateway handles it itself, so it \
             cannot be listed"
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::super::parse_str;

    const BASE: &str = "[server]\nlisten = [\"127.0.0.1:0\"]\n[[upstreams]]\nname = \"api\"\n\
        servers = [\"http://127.0.0.1:1\"]\n[[routes]]\nname = \"default\"\nupstream = \"api\"\n";

    fn problems(client_ip: &str) -> String {
        let text = format!("{BASE}[client_ip]\n{client_ip}\n");
        match parse_str(&text, "gw.toml") {
            Ok(_) => String::new(),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn a_list_of_field_names_given_once_each_is_taken() {
        let fine = "remove_fields = [\"True-Client-IP\", \"x-my-client\"]\n\
                    set_x_real_ip = true\nset_forwarded = true";
        assert_eq!(problems(fine), "");
        assert_eq!(problems("remove_fields = []"), "");
    }

    #[test]
    fn each_refused_entry_names_the_file_its_key_path_and_what_was_expected() {
        let refused = "remove_fields = [\"x ip\", \"X-Forwarded-For\", \"Connection\", \
                       \"client-ip\", \"Client-IP\", \"Host\"]";
        let text = problems(refused);
        for expected in [
            "gw.toml",
            "client_ip.remove_fields[0]: expected a field name",
            "client_ip.remove_fields[1]: x-forwarded-for is set by the gateway",
            "client_ip.remove_fields[2]: connection frames the message or is hop-by-hop",
            "client_ip.remove_fields[4]: client-ip is listed twice",
            "client_ip.remove_fields[5]: host is set by the gateway",
        ] {
            assert!(text.contains(expected), "{expected:?} not in {text}");
        }
        assert!(!text.contains("remove_fields[3]"), "{text}");
        let long = format!("remove_fields = [\"{}\"]", "x".repeat(129));
        assert!(problems(&long).contains("at most 128 bytes"));
        let wrong_type = problems("set_forwarded = \"yes\"");
        assert!(wrong_type.contains("set_forwarded"), "{wrong_type}");
    }
}
