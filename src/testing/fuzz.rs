//! What the fuzz targets (`fuzz/`) call, built for them (`--cfg fuzzing`) and for the tests,
//! which run every committed seed through them: each checks the invariants of one parser of
//! untrusted bytes on whatever bytes it is given, and panics when one does not hold. The
//! canonical request step's are here; each other parser's in its own module, so that moving a
//! parser changes only its target's module.

use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue, Method};

use crate::http1::request_fields::RequestFields;
use crate::http1::request_head::version::{LineVersion, line_version};
use crate::http1::request_head::{ReadRequest, read_for_fuzzing};
use crate::request::canonical::ProxyRequest;
use crate::request::canonical::path::{self, EscapedSlashes};
use crate::request::canonical::{
    BadRequest, Policy, Request, TrailerFilter, Underscores, canonicalize, host,
};
use crate::upstream::headers::{Role, role};

mod config;
mod forwarded;
mod key_values;
pub mod request_head;
mod resp_reply;
mod response_head;
mod usage_scan;

pub use config::config;
pub use forwarded::forwarded;
pub use key_values::key_values;
pub use request_head::request_head;
pub use resp_reply::resp_reply;
pub use response_head::response_head;
pub use usage_scan::usage_scan;

/// A target in `fuzz/` and the function it calls.
pub type Target = (&'static str, fn(&[u8]));

/// Every target in `fuzz/`.
pub const TARGETS: [Target; 10] = [
    ("canonical_path", path),
    ("canonical_host", host),
    ("canonical_request", request),
    ("request_head", request_head),
    ("response_head", response_head),
    ("resp_reply", resp_reply),
    ("forwarded_walk", forwarded),
    ("config", config),
    ("usage_scan", usage_scan),
    ("key_values", key_values),
];

/// One event loop for every input of a run, for the targets that drive hyper over an
/// in-memory pipe: building one per input would cost more than the parse.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("an event loop")
    })
}

/// A path's canonical form is canonical, ASCII and origin-form.
pub fn path(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    for slashes in [EscapedSlashes::Keep, EscapedSlashes::Reject] {
        if let Ok(Some(canonical)) = path::normalize(text, slashes) {
            assert!(
                canonical.starts_with('/') && canonical.is_ascii(),
                "{canonical:?}"
            );
            assert!(!canonical.contains("//"), "{canonical:?}");
            assert_eq!(path::normalize(&canonical, slashes), Ok(None), "{text:?}");
        }
    }
}

/// A host's canonical form is canonical, and its name a prefix of it.
pub fn host(bytes: &[u8]) {
    host::check_the_fast_path(bytes);
    if let Ok(canonical) = host::canonical(bytes) {
        let text = canonical.text.as_ref();
        assert!(canonical.name_len <= text.len() && canonical.name_len > 0);
        let again = host::canonical(text).expect("a canonical host is valid");
        assert_eq!(again.text.as_ref(), text);
        assert_eq!(again.name_len, canonical.name_len);
    }
}

/// A request head read by the own server (when it serves it) and as hyper's map: both give the
/// same canonical request or the same refusal, and a canonical request keeps the invariants of
/// `crate::request::canonical`.
pub fn request(bytes: &[u8]) {
    let ReadRequest::Request(own, _) = read_for_fuzzing::<ProxyRequest>(bytes) else {
        return;
    };
    let mapped = as_map(&own, bytes);
    let policy = Policy {
        escaped_slashes: EscapedSlashes::Keep,
        underscores: Underscores::Drop,
        allow_trace: false,
        trailers: Arc::new(TrailerFilter::new(Vec::new(), Underscores::Drop)),
    };
    let own = canonicalize(own, &policy).map(facts);
    let mapped = canonicalize(mapped, &policy).map(facts);
    match (&own, &mapped) {
        (Ok(own), Ok(mapped)) => {
            assert_eq!(own, mapped);
            check(own);
        }
        (Err(own), Err(mapped)) => assert_eq!(kind(own), kind(mapped)),
        _ => panic!("own {own:?} vs map {mapped:?}"),
    }
}

/// What a canonical request says: method, host, target and fields.
type Facts = (Method, Option<String>, String, Vec<(String, String)>);

/// The fields in order of name: the order of different names carries no meaning (RFC 9110
/// §5.3), and hyper's map does not keep it; a stable sort keeps each name's values in order.
fn facts(request: Request) -> Facts {
    let host = (request.host.as_ref()).map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned());
    let mut fields = request.fields.pairs();
    fields.sort_by(|a, b| a.0.cmp(&b.0));
    (
        request.method.clone(),
        host,
        request.target.as_str().to_owned(),
        fields,
    )
}

fn kind(error: &BadRequest) -> std::mem::Discriminant<BadRequest> {
    std::mem::discriminant(error)
}

fn check((method, host, target, fields): &Facts) {
    assert!(
        method
            .as_str()
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b == b'_' || b == b'-')
    );
    if let Some(host) = host {
        assert_eq!(
            host::canonical(host.as_bytes()).map(|h| h.text.into_owned()),
            Ok(host.as_bytes().to_vec())
        );
    }
    let path = target.split('?').next().unwrap_or_default();
    assert_eq!(
        path::normalize(path, EscapedSlashes::Keep),
        Ok(None),
        "{target}"
    );
    for (name, _) in fields {
        assert!(
            matches!(role(name.as_bytes()), Role::EndToEnd),
            "{name} left in"
        );
        assert!(!name.contains('_'), "{name} left in");
    }
}

/// The same request as hyper would hand it over: the head's fields in a map.
fn as_map(request: &ProxyRequest, bytes: &[u8]) -> ProxyRequest {
    // HTTP/1.2 to 1.9, which the own server reads as HTTP/1.1 (RFC 9110 §2.5), as httparse
    // then reads them.
    let mut bytes = bytes.to_vec();
    if let LineVersion::HigherMinor(at) = line_version(&bytes) {
        bytes[at] = b'1';
    }
    let mut fields = [httparse::EMPTY_HEADER; 100];
    let mut parsed = httparse::Request::new(&mut fields);
    let _ = parsed.parse(&bytes);
    let mut map = HeaderMap::new();
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes());
        let value = HeaderValue::from_bytes(field.value);
        if let (Ok(name), Ok(value)) = (name, value) {
            map.append(name, value);
        }
    }
    ProxyRequest {
        method: request.method.clone(),
        uri: request.uri.clone(),
        version: request.version,
        fields: RequestFields::Map(map),
        upgrade: None,
        body: crate::request::canonical::ArrivingBody::None,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::TARGETS;

    /// CI's run of the fuzz targets (building them takes longer than the rest of CI): each
    /// committed seed through its target's checks, once.
    #[test]
    fn every_committed_seed_keeps_its_targets_invariants() {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
        let mut seeded: Vec<String> = std::fs::read_dir(&corpus)
            .expect("fuzz/corpus")
            .map(|entry| {
                entry
                    .expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into()
            })
            .collect();
        seeded.sort();
        let mut targets: Vec<&str> = TARGETS.iter().map(|(name, _)| *name).collect();
        targets.sort();
        assert_eq!(
            seeded, targets,
            "a target without seeds or seeds without a target"
        );
        for (target, check) in TARGETS {
            for entry in std::fs::read_dir(corpus.join(target)).expect("a seed directory") {
                let path = entry.expect("an entry").path();
                let bytes = std::fs::read(&path).expect("a seed");
                let held = std::panic::catch_unwind(|| check(&bytes));
                assert!(held.is_ok(), "{} fails its checks", path.display());
            }
        }
    }
}
