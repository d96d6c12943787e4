use super::*;

fn facts<'a>(fields: &'a RequestFields, query: Option<&'a str>) -> RequestFacts<'a> {
    RequestFacts {
        client_ip: "198.51.100.7".parse().unwrap(),
        route: "search",
        method: &Method::GET,
        host: Some(b"api.example.com"),
        path: "/v1/Search",
        path_in_any_case: false,
        query,
        fields,
    }
}

fn text(value: Result<Option<PartValue<'_>>, Repeated>) -> Option<String> {
    match value.expect("not repeated")? {
        PartValue::Text(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        PartValue::Ip(ip) => Some(ip.to_string()),
    }
}

#[test]
fn parses_every_part_and_rejects_others() {
    assert_eq!(KeyPart::parse("ip"), Ok(KeyPart::Ip));
    assert_eq!(
        KeyPart::parse("header:X-Api-Key"),
        Ok(KeyPart::Header(HeaderName::from_static("x-api-key")))
    );
    assert_eq!(
        KeyPart::parse("query:key"),
        Ok(KeyPart::Query("key".into()))
    );
    assert_eq!(
        KeyPart::parse("cookie:session"),
        Ok(KeyPart::Cookie("session".into()))
    );
    for bad in ["", "ips", "header:", "header:bad name", "query:", "body:x"] {
        assert!(KeyPart::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn extracts_headers_queries_and_cookies() {
    let mut headers = http::HeaderMap::new();
    headers.insert("x-api-key", "k-123".parse().unwrap());
    headers.append("cookie", "a=1; session=s-9".parse().unwrap());
    let lines = crate::http1::request_fields::tests::lines_like(&headers);
    for fields in [RequestFields::Map(headers), lines] {
        extracts_from(&fields);
    }
}

fn extracts_from(fields: &RequestFields) {
    let f = facts(fields, Some("q=rust&key=abc&empty="));
    assert_eq!(
        text(f.value(&KeyPart::parse("header:x-api-key").unwrap())),
        Some("k-123".into())
    );
    assert_eq!(
        text(f.value(&KeyPart::Query("key".into()))),
        Some("abc".into())
    );
    assert_eq!(text(f.value(&KeyPart::Query("empty".into()))), None);
    assert_eq!(text(f.value(&KeyPart::Query("nope".into()))), None);
    assert_eq!(
        text(f.value(&KeyPart::Cookie("session".into()))),
        Some("s-9".into())
    );
    assert_eq!(text(f.value(&KeyPart::Cookie("sess".into()))), None);
    assert_eq!(text(f.value(&KeyPart::Ip)), Some("198.51.100.7".into()));
    assert_eq!(
        text(f.value(&KeyPart::Header(HeaderName::from_static("x-other")))),
        None
    );
}

#[test]
fn identities_depend_on_secret_limit_tier_parts_and_window() {
    let ip = PartValue::Ip("198.51.100.7".parse().unwrap());
    let identity =
        |secret: Option<&str>, limit: &str, tier: &str, window: usize, fallback: bool| {
            let mut builder = IdentityHasher::new(secret).start(limit, tier);
            builder.add(&KeyPart::Ip, &ip, fallback);
            window_identity(builder.finish(), window)
        };
    let base = identity(Some("s"), "per-ip", "", 0, false);
    assert_eq!(
        base,
        identity(Some("s"), "per-ip", "", 0, false),
        "stable across calls and instances"
    );
    for other in [
        identity(Some("t"), "per-ip", "", 0, false),
        identity(None, "per-ip", "", 0, false),
        identity(Some("s"), "per-key", "", 0, false),
        identity(Some("s"), "per-ip", "pro", 0, false),
        identity(Some("s"), "per-ip", "", 1, false),
        identity(Some("s"), "per-ip", "", 0, true),
    ] {
        assert_ne!(base, other);
    }
}

/// Identities name the Redis keys every instance shares: a change to how they are hashed
/// would split a limit's count across a rolling upgrade. This pins one.
#[test]
fn an_identity_is_the_same_in_every_build() {
    let mut builder = IdentityHasher::new(Some("secret")).start("per-key", "pro");
    builder.add_policy("sliding_window", [(100, 60_000_000_000, 100)].into_iter());
    let key = PartValue::Text(Cow::Borrowed(b"k-0123456789abcdef"));
    builder.add(
        &KeyPart::Header(HeaderName::from_static("x-api-key")),
        &key,
        false,
    );
    builder.add(
        &KeyPart::Ip,
        &PartValue::Ip("2001:db8::7".parse().unwrap()),
        true,
    );
    builder.add(
        &KeyPart::Route,
        &PartValue::Text(Cow::Borrowed(&[b'r'; 100])),
        false,
    );
    assert_eq!(builder.finish(), 0xae26_7ebd_9fd5_81e6_8d41_d6dc_7e48_afda);
}

#[test]
fn field_boundaries_matter() {
    let hasher = IdentityHasher::new(None);
    let mut a = hasher.start("l", "");
    let part = |text: &'static [u8]| PartValue::Text(Cow::Borrowed(text));
    a.add(&KeyPart::Route, &part(b"ab"), false);
    a.add(&KeyPart::Path, &part(b"c"), false);
    let mut b = hasher.start("l", "");
    b.add(&KeyPart::Route, &part(b"a"), false);
    b.add(&KeyPart::Path, &part(b"bc"), false);
    assert_ne!(a.finish(), b.finish());
}

#[test]
fn a_key_part_given_twice_is_repeated_wherever_it_comes_from() {
    let fields = crate::http1::request_fields::tests::lines_of(
        b"GET / HTTP/1.1\r\nX-Api-Key: a\r\nCookie: s=1\r\nx-api-key: b\r\nCookie: t=2; s=3\r\n\r\n",
    );
    let f = facts(&fields, Some("key=a&x=1&k%65y=b"));
    for part in ["header:x-api-key", "cookie:s", "query:key"] {
        let part = KeyPart::parse(part).unwrap();
        assert!(matches!(f.value(&part), Err(Repeated)), "{part:?}");
    }
    assert_eq!(
        text(f.value(&KeyPart::Cookie("t".into()))),
        Some("2".into())
    );
    assert_eq!(text(f.value(&KeyPart::Query("x".into()))), Some("1".into()));
}

#[test]
fn query_names_and_values_are_read_as_upstreams_decode_them() {
    let fields = RequestFields::Map(http::HeaderMap::new());
    for (query, expected) in [
        ("k%65y=%61bc", Some("abc")),
        ("key=a+b%20c", Some("a b c")),
        ("key=%zz%4", Some("%zz%4")),
        ("key=", None),
        ("key", None),
        ("other=1", None),
    ] {
        let f = facts(&fields, Some(query));
        assert_eq!(
            text(f.value(&KeyPart::Query("key".into()))).as_deref(),
            expected,
            "{query}"
        );
    }
}

#[test]
fn quoted_cookies_empty_headers_and_paths_in_any_case_have_one_value() {
    let fields = crate::http1::request_fields::tests::lines_of(
        b"GET / HTTP/1.1\r\nCookie: s=\"abc\"\r\nX-Api-Key:\r\n\r\n",
    );
    let mut f = facts(&fields, None);
    assert_eq!(
        text(f.value(&KeyPart::Cookie("s".into()))),
        Some("abc".into())
    );
    let key = KeyPart::Header(HeaderName::from_static("x-api-key"));
    assert_eq!(text(f.value(&key)), None, "empty is absent");
    assert_eq!(text(f.value(&KeyPart::Path)), Some("/v1/Search".into()));
    f.path_in_any_case = true;
    assert_eq!(text(f.value(&KeyPart::Path)), Some("/v1/search".into()));
}

#[test]
fn head_is_counted_as_get_and_other_methods_as_sent() {
    let fields = crate::http1::request_fields::tests::lines_of(b"GET / HTTP/1.1\r\n\r\n");
    for (method, counted) in [
        (Method::GET, "GET"),
        (Method::HEAD, "GET"),
        (Method::POST, "POST"),
        (Method::OPTIONS, "OPTIONS"),
    ] {
        let mut f = facts(&fields, None);
        f.method = &method;
        assert_eq!(text(f.value(&KeyPart::Method)), Some(counted.into()));
    }
}
