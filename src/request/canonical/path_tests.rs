use super::*;
use proptest::prelude::*;

fn canonical(path: &str) -> Result<String, PathError> {
    normalize(path, EscapedSlashes::Keep).map(|changed| changed.unwrap_or_else(|| path.into()))
}

#[test]
fn canonical_paths_are_used_as_they_are() {
    for path in [
        "/",
        "/login",
        "/v1/search/",
        "/a.b/c..d/.well-known/x.",
        "/a;b=c/d",
        "/~user/a-b_c!$&'()*+,=:@",
        "/v1/items/123",
    ] {
        assert_eq!(normalize(path, EscapedSlashes::Keep), Ok(None), "{path}");
    }
}

#[test]
fn every_spelling_of_login_is_login() {
    for path in [
        "//login",
        "///login",
        "/./login",
        "/x/../login",
        "/x/y/../../login",
        "/../login",
        "/%6cogin",
        "/%6Cogin",
        "/%2e/login",
        "/%2E%2E/login",
        "/x/%2e%2e/login",
        "/x//..//login",
        "/login/.",
        "/login/x/..",
    ] {
        let got = canonical(path).unwrap();
        assert!(got == "/login" || got == "/login/", "{path} -> {got}");
    }
}

#[test]
fn dot_segments_follow_rfc_3986_and_slashes_merge_first() {
    for (path, expected) in [
        ("/a/b/c/./../../g", "/a/g"),
        ("/a/b/..", "/a/"),
        ("/a/b/.", "/a/b/"),
        ("/..", "/"),
        ("/.", "/"),
        ("/a//../b", "/b"),
        ("/a/", "/a/"),
        ("/a//", "/a/"),
        ("/a/...", "/a/..."),
        ("/a/.b/..c", "/a/.b/..c"),
    ] {
        assert_eq!(canonical(path).unwrap(), expected, "{path}");
    }
}

#[test]
fn encodings_are_decoded_when_unreserved_and_upper_cased_otherwise() {
    for (path, expected) in [
        ("/%41%7a%30%2D%2e%5F%7E", "/Az0-._~"),
        ("/a%2fb", "/a%2Fb"),
        ("/a%5cb", "/a%5Cb"),
        ("/%3f%23%25", "/%3F%23%25"),
        ("/caf\u{e9}", "/caf%C3%A9"),
        ("/caf%c3%a9", "/caf%C3%A9"),
        ("/a b", "/a%20b"),
        ("/%20", "/%20"),
        ("/a%2f..%2fb", "/a%2F..%2Fb"),
    ] {
        assert_eq!(canonical(path).unwrap(), expected, "{path}");
    }
}

#[test]
fn malformed_paths_are_refused() {
    for (path, error) in [
        ("login", PathError::NotOriginForm),
        ("*", PathError::NotOriginForm),
        ("", PathError::NotOriginForm),
        ("/a%", PathError::InvalidPercentEncoding),
        ("/a%4", PathError::InvalidPercentEncoding),
        ("/a%zz", PathError::InvalidPercentEncoding),
        ("/a%+1", PathError::InvalidPercentEncoding),
        ("/a%00b", PathError::Nul),
        ("//\u{8}\0in", PathError::Nul),
        ("/a\\b", PathError::Backslash),
        ("/x/..;/login", PathError::DotSegmentWithParameters),
        ("/x/.;a/login", PathError::DotSegmentWithParameters),
        ("/..;", PathError::DotSegmentWithParameters),
    ] {
        assert_eq!(normalize(path, EscapedSlashes::Keep), Err(error), "{path}");
    }
}

#[test]
fn segment_parameters_are_not_matched() {
    for (path, matched) in [
        ("/login", "/login"),
        ("/login;jsessionid=1", "/login"),
        ("/;x/login", "/login"),
        ("/;/login", "/login"),
        ("/a;x/b;y/", "/a/b/"),
        ("/a/;x", "/a/"),
        ("/;x", "/"),
        ("/a;b=c;d/e", "/a/e"),
    ] {
        assert_eq!(without_parameters(path), matched, "{path}");
    }
    assert!(matches!(without_parameters("/v1/items"), Cow::Borrowed(_)));
}

#[test]
fn escaped_slashes_are_kept_or_refused() {
    assert!(canonical("/a%252Fb").is_ok());
    for path in [
        "/a%2Fb",
        "/a%2fb",
        "/a%5Cb",
        "/a%5c",
        "/a%252Fb",
        "/a%255c",
        "/%252%665",
        "/%25%32F",
    ] {
        assert!(canonical(path).is_ok(), "{path}");
        assert_eq!(
            normalize(path, EscapedSlashes::Reject),
            Err(PathError::EscapedSlash),
            "{path}"
        );
    }
}

/// One segment of a generated path: names, dots, empty (for `//`), and encodings.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9_~-]{1,6}",
        Just(".".to_string()),
        Just("..".to_string()),
        Just(String::new()),
        Just("%2e".to_string()),
        Just("%2E%2e".to_string()),
        Just("%2F".to_string()),
        Just("%6c%6F".to_string()),
        Just("a%20b".to_string()),
        Just("\u{e9}".to_string()),
        Just("x;y=1".to_string()),
    ]
}

proptest! {
    /// The canonical form is a fixed point, has no `//`, no dot segments and only pchar bytes
    /// and upper-case encodings.
    #[test]
    fn the_canonical_form_is_canonical(segments in proptest::collection::vec(segment(), 0..8)) {
        let path = format!("/{}", segments.join("/"));
        let once = canonical(&path).unwrap();
        prop_assert_eq!(normalize(&once, EscapedSlashes::Keep), Ok(None), "{} -> {}", path, once);
        prop_assert!(once.starts_with('/') && !once.contains("//"));
        for segment in once.split('/') {
            prop_assert!(segment != "." && segment != "..", "{}", once);
        }
        for encoded in once.split('%').skip(1) {
            let hex = encoded.get(..2).unwrap_or_default();
            prop_assert!(hex.len() == 2 && hex.bytes().all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b)), "{}", once);
        }
    }

    /// Any bytes: an answer or a refusal, never a panic; an answer is origin-form ASCII.
    #[test]
    fn any_text_gets_an_answer(path in "/[ -~\u{e9}]{0,24}") {
        if let Ok(Some(changed)) = normalize(&path, EscapedSlashes::Keep) {
            prop_assert!(changed.starts_with('/') && changed.is_ascii());
        }
    }
}

/// How an upstream that decodes a path before it resolves it reads one (Go's `path.Clean`
/// after unescaping, Python's `posixpath.normpath` after `unquote`): every `%XX` decoded once
/// but `%2F` and `%5C`, then empty and `.` segments dropped and `..` taking the one before.
/// Written apart from `normalize`, as an oracle for it.
fn resolved_by_upstream(path: &str) -> Vec<Vec<u8>> {
    let bytes = path.as_bytes();
    let mut decoded = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let escape = bytes.get(i + 1..i + 3).filter(|_| bytes[i] == b'%');
        match escape.and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()) {
            Some(b'/') | Some(b'\\') => {
                decoded.extend_from_slice(&bytes[i..i + 3].to_ascii_uppercase());
                i += 3;
            }
            Some(byte) => {
                decoded.push(byte);
                i += 3;
            }
            None => {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
    }
    let mut segments: Vec<Vec<u8>> = Vec::new();
    for segment in decoded.split(|&b| b == b'/') {
        match segment {
            b"" | b"." => {}
            b".." => {
                segments.pop();
            }
            _ => segments.push(segment.to_vec()),
        }
    }
    segments
}

fn route_of(router: &crate::request::route::Router, path: &str) -> Option<String> {
    let route = router.find(None, path, &http::Method::GET)?;
    Some(route.name.clone())
}

fn router() -> crate::request::route::Router {
    let route = |name: &str, prefix: &str| crate::config::RouteConfig {
        name: name.into(),
        host: None,
        path_prefix: prefix.into(),
        case_sensitive: true,
        methods: None,
        upgrades: Vec::new(),
        upstream: 0,
        limits: Vec::new(),
        cost: 1,
        max_in_flight: None,
    };
    crate::request::route::Router::new(&[
        route("login", "/login"),
        route("admin", "/admin/"),
        route("encoded", "/a%2Fb"),
        route("unicode", "/caf%C3%A9"),
        route("default", "/"),
    ])
}

/// A segment an attacker might write: a route's name in pieces and encodings, dots in every
/// spelling, empty segments, encoded slashes.
fn spelling() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("login".to_string()),
        Just("l%6Fgin".to_string()),
        Just("%6c%6f%67%69%6e".to_string()),
        Just("admin".to_string()),
        Just("%61dmin".to_string()),
        Just("caf\u{e9}".to_string()),
        Just("caf%c3%a9".to_string()),
        Just("a%2fb".to_string()),
        Just("a".to_string()),
        Just("x".to_string()),
        Just(".".to_string()),
        Just("..".to_string()),
        Just("%2e".to_string()),
        Just("%2E%2e".to_string()),
        Just(".%2e".to_string()),
        Just(String::new()),
    ]
}

proptest! {
    /// The route a path gets is the route of the path an upstream resolves it to, and the
    /// canonical path (what the upstream receives) resolves to that same path: no spelling
    /// reaches a resource by another route than the one its plain spelling takes.
    #[test]
    fn the_route_judged_is_the_route_of_what_the_upstream_resolves(
        segments in proptest::collection::vec(spelling(), 0..6),
        trailing_slash in any::<bool>(),
    ) {
        let mut path = format!("/{}", segments.join("/"));
        if trailing_slash {
            path.push('/');
        }
        let sent = canonical(&path).unwrap();
        let resolved = resolved_by_upstream(&path);
        prop_assert_eq!(resolved_by_upstream(&sent), resolved.clone(), "{} -> {}", path, sent);
        // The plain spelling of what the upstream resolves, in canonical form.
        let plain: Vec<String> = resolved.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect();
        let plain = canonical(&format!("/{}", plain.join("/"))).unwrap();
        let router = router();
        let (judged, upstreams) = (route_of(&router, &sent), route_of(&router, &plain));
        // A trailing slash may differ (`/admin` vs `/admin/`), as it does to upstreams.
        if !sent.ends_with('/') || plain.ends_with('/') {
            prop_assert_eq!(judged, upstreams, "{} -> {} / {}", path, sent, plain);
        }
    }
}
