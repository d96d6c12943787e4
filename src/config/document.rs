//! The config as /config shows it: the file's TOML as JSON, secrets redacted, with a version
//! (a hash of the text, so operators can tell which config each instance runs) and load time.

use std::hash::Hasher;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

const REDACTED: &str = "<redacted>";
/// Keys whose values are secrets wherever they appear.
const SECRET_KEYS: [&str; 3] = ["hash_secret", "password", "token"];

pub(super) fn describe(text: &str, source: &str) -> Value {
    let mut config = toml::from_str::<toml::Table>(text)
        .ok()
        .and_then(|table| serde_json::to_value(table).ok())
        .unwrap_or(Value::Null);
    redact(&mut config);
    let mut hasher = siphasher::sip::SipHasher13::new();
    hasher.write(text.as_bytes());
    let loaded_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    json!({ "source": source, "version": format!("{:016x}", hasher.finish()), "loaded_at": loaded_at, "config": config })
}

/// Replaces secret values and the credentials of URLs (`redis://user:pass@host`).
fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if SECRET_KEYS.contains(&key.as_str()) {
                    *value = Value::String(REDACTED.into());
                } else {
                    redact(value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        Value::String(text) => {
            if let Some((scheme, rest)) = text.split_once("://")
                && let Some((_credentials, host)) = rest.split_once('@')
            {
                *text = format!("{scheme}://{REDACTED}@{host}");
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_and_url_credentials_are_redacted() {
        let text = "[store]\nhash_secret = \"s3cret\"\nurl = \"redis://app:pw@10.0.0.1:6379/0\"\n[[upstreams]]\nname = \"api\"\n";
        let document = describe(text, "gw.toml");
        let rendered = document.to_string();
        assert!(
            !rendered.contains("s3cret") && !rendered.contains("pw@"),
            "{rendered}"
        );
        assert_eq!(
            document["config"]["store"]["url"],
            "redis://<redacted>@10.0.0.1:6379/0"
        );
        assert_eq!(document["config"]["upstreams"][0]["name"], "api");
        assert_eq!(document["version"].as_str().unwrap().len(), 16);
        assert_ne!(
            describe("a = 1", "x")["version"],
            describe("a = 2", "x")["version"]
        );
    }
}
