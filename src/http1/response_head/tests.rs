use super::*;

use crate::http1::framing::decode;
use http::HeaderMap;
use http::header::CONTENT_LENGTH;

/// The fields as these tests keep them: pairs in order, and the Content-Length passed on.
#[derive(Debug, Default)]
struct Fields {
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    content_length: Option<u64>,
}

impl ResponseFields for Fields {
    fn with_capacity(_: usize) -> Fields {
        Fields::default()
    }

    fn push(&mut self, name: &[u8], value: &[u8]) {
        self.pairs.push((name.to_vec(), value.to_vec()));
    }

    fn retain(&mut self, keep: impl Fn(&[u8]) -> bool) {
        self.pairs.retain(|(name, _)| keep(name));
    }

    fn set_content_length(&mut self, length: Option<u64>) {
        self.content_length = length;
    }
}

impl Fields {
    fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.pairs
            .iter()
            .map(|(name, value)| (&name[..], &value[..]))
    }

    fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    /// The fields and the Content-Length passed on, as a header map.
    fn into_map(self) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in self.iter() {
            let name = http::HeaderName::from_bytes(name).unwrap();
            map.append(name, http::HeaderValue::from_bytes(value).unwrap());
        }
        if let Some(length) = self.content_length {
            map.insert(CONTENT_LENGTH, http::HeaderValue::from(length));
        }
        map
    }
}

/// The head at the start of `buf`, as the upstream client reads it (64 KiB at most).
fn parse_head(
    buf: &mut BytesMut,
    head_request: bool,
) -> Result<Option<ResponseHead<Fields>>, ResponseHeadError> {
    parse_response(buf, head_request, 64 * 1024)
}

/// Reads a whole response from `wire` as the connection would: head, then body frames.
fn read_response(wire: &[u8], head_request: bool) -> Result<Option<Vec<u8>>, String> {
    let mut buf = BytesMut::from(wire);
    let Some(head) = parse_head(&mut buf, head_request).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let mut framing = head.framing;
    let mut body = Vec::new();
    while let Some(frame) = decode(&mut framing, &mut buf).map_err(|e| e.to_string())? {
        if let Ok(data) = frame.into_data() {
            body.extend_from_slice(&data);
        }
    }
    Ok(Some(body))
}

const VALID: &[u8] = b"HTTP/1.1 200 OK\r\nx-empty:\r\nx-list: a, b\r\n\
    transfer-encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\nx-sum: 1\r\n\r\n";

#[test]
fn a_valid_response_with_an_empty_field_reads_whole() {
    let mut buf = BytesMut::from(VALID);
    let head = parse_head(&mut buf, false).unwrap().unwrap();
    let fields: Vec<_> = head.fields.iter().collect();
    assert_eq!(fields, [(&b"x-empty"[..], &b""[..]), (b"x-list", b"a, b")]);
    assert!(head.keep_alive);
    assert_eq!(read_response(VALID, false).unwrap().unwrap(), b"body");
    // A head split anywhere is simply not complete yet.
    for cut in 0..VALID.iter().position(|&b| b == b'4').unwrap() {
        assert!(
            parse_head(&mut BytesMut::from(&VALID[..cut]), false)
                .unwrap()
                .is_none()
        );
    }
}

/// The head of a response with `status_line` and `fields`, as parsed.
fn head_of(
    status_line: &str,
    head_request: bool,
    fields: &[(&str, &str)],
) -> Result<ResponseHead<Fields>, ResponseHeadError> {
    let mut wire = format!("{status_line}\r\n");
    for (name, value) in fields {
        wire.push_str(&format!("{name}: {value}\r\n"));
    }
    wire.push_str("\r\n");
    let head = parse_head(&mut BytesMut::from(wire.as_bytes()), head_request)?;
    Ok(head.expect("a whole head"))
}

fn framing_of(
    status: u16,
    head_request: bool,
    fields: &[(&str, &str)],
) -> Result<Framing, ResponseHeadError> {
    let line = format!("HTTP/1.1 {status} Whatever");
    head_of(&line, head_request, fields).map(|head| head.framing)
}

#[test]
fn response_bodies_are_framed_as_rfc_9112_says() {
    let length = |n| Ok::<_, ResponseHeadError>(Framing::Length(n));
    assert_eq!(
        framing_of(200, false, &[("content-length", "5")]).ok(),
        length(5).ok()
    );
    assert_eq!(
        framing_of(200, false, &[("content-length", "5, 5")]).ok(),
        length(5).ok()
    );
    assert_eq!(
        framing_of(200, false, &[("content-length", "0")]).ok(),
        Some(Framing::Done)
    );
    assert_eq!(
        framing_of(200, true, &[("content-length", "5")]).ok(),
        Some(Framing::Done)
    );
    for status in [204, 304, 103] {
        assert_eq!(
            framing_of(status, false, &[("content-length", "5")]).ok(),
            Some(Framing::Done)
        );
    }
    assert_eq!(framing_of(101, false, &[]).ok(), Some(Framing::Upgraded));
    assert_eq!(framing_of(200, false, &[]).ok(), Some(Framing::UntilClose));
    assert_eq!(
        framing_of(
            200,
            false,
            &[("transfer-encoding", "Chunked"), ("content-length", "9")]
        )
        .ok(),
        Some(Framing::Chunked(Chunk::Size))
    );
    assert_eq!(
        framing_of(200, false, &[("transfer-encoding", "identity")]).ok(),
        Some(Framing::UntilClose)
    );
    // Found by attacking the gateway: only chunked is decoded, so a body under another
    // coding would reach the client as if it had none. Chunked before it, after it or not at
    // all, and a value with a byte that is not text (which names no coding), all are refused.
    for codings in [
        "gzip, chunked",
        "chunked, gzip",
        "gzip",
        "g\u{e9}zip, chunked",
    ] {
        let framing = framing_of(200, false, &[("transfer-encoding", codings)]);
        assert!(
            matches!(framing, Err(ResponseHeadError::Framing(reason)) if reason.contains("other than chunked")),
            "{codings}: {framing:?}"
        );
    }
    // RFC 9110 §15: a status over 599 is no HTTP status.
    for status in [600, 999] {
        assert!(framing_of(status, false, &[]).is_err(), "{status}");
    }
    // Found by fuzz/response_head against hyper: Transfer-Encoding in HTTP/1.0 is faulty
    // framing (RFC 9112 §6.1), not a chunked body after which the connection is reused.
    let keep_alive = [
        ("transfer-encoding", "chunked"),
        ("connection", "keep-alive"),
    ];
    assert!(head_of("HTTP/1.0 200 OK", false, &keep_alive).is_err());
    // Without a body to frame, the field frames nothing and is left out.
    assert!(head_of("HTTP/1.0 204 No Content", false, &keep_alive).is_ok());
    for bad in ["5, 6", "-5", "+5", "5 5", "0x5", "", "99999999999999999999"] {
        assert!(
            framing_of(200, false, &[("content-length", bad)]).is_err(),
            "{bad:?}"
        );
    }
    assert!(
        framing_of(
            200,
            false,
            &[("content-length", "5"), ("content-length", "6")]
        )
        .is_err()
    );
}

#[test]
fn keep_alive_follows_the_version_and_the_connection_field() {
    let keeps = |version: &str, connection: &[&str]| {
        let fields: Vec<_> = connection.iter().map(|v| ("Connection", *v)).collect();
        let head = head_of(&format!("HTTP/{version} 204 No Content"), false, &fields);
        head.unwrap().keep_alive
    };
    assert!(keeps("1.1", &[]));
    assert!(!keeps("1.1", &["Close"]));
    assert!(!keeps("1.1", &["x-trace, close"]));
    assert!(!keeps("1.1", &["x-trace", "close"]));
    assert!(keeps("1.1", &["closed"]));
    assert!(!keeps("1.0", &[]));
    assert!(keeps("1.0", &["Keep-Alive"]));
    // Close wins in HTTP/1.0 too (RFC 9112 §9.3), as the server reads a request.
    assert!(!keeps("1.0", &["keep-alive, close"]));
    assert!(!keeps("1.0", &["close", "Keep-Alive"]));
    // A body that only the close ends leaves nothing to reuse.
    let until_close = head_of("HTTP/1.1 200 OK", false, &[]).unwrap();
    assert!(!until_close.keep_alive);
}

fn kept(head: &ResponseHead<Fields>) -> Vec<(String, String)> {
    let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).unwrap();
    head.fields
        .iter()
        .map(|(name, value)| (text(name), text(value)))
        .collect()
}

#[test]
fn hop_by_hop_and_framing_fields_stay_behind_in_any_case() {
    let head = head_of(
        "HTTP/1.1 200 OK",
        false,
        &[
            ("Content-Type", "text/plain"),
            ("CONNECTION", "X-Hop, close"),
            ("x-hop", "1"),
            ("Keep-Alive", "timeout=5"),
            ("Proxy-Authenticate", "Basic"),
            ("TE", "trailers"),
            ("Trailer", "x-sum"),
            ("Upgrade", "h2c"),
            ("Content-Length", "2"),
            ("Set-Cookie", "a=1"),
            ("set-cookie", "b=2"),
            ("x-proxy", "kept"),
        ],
    )
    .unwrap();
    let expected = [
        ("Content-Type", "text/plain"),
        ("Set-Cookie", "a=1"),
        ("set-cookie", "b=2"),
        ("x-proxy", "kept"),
    ];
    let expected: Vec<_> = expected
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    assert_eq!(kept(&head), expected);
    assert_eq!(head.fields.content_length(), Some(2));
    assert_eq!(head.framing, Framing::Length(2));
    assert!(!head.keep_alive);
}

#[test]
fn content_length_is_passed_on_only_when_it_frames_nothing_else() {
    let length = |status: &str, head_request, fields: &[(&str, &str)]| {
        head_of(status, head_request, fields)
            .unwrap()
            .fields
            .content_length()
    };
    let chunked = [("transfer-encoding", "chunked"), ("content-length", "9")];
    assert_eq!(length("HTTP/1.1 200 OK", false, &chunked), None);
    assert_eq!(
        length("HTTP/1.1 200 OK", true, &[("content-length", "7")]),
        Some(7)
    );
    let not_modified = "HTTP/1.1 304 Not Modified";
    assert_eq!(
        length(not_modified, false, &[("content-length", "7")]),
        Some(7)
    );
    // Framing nothing, a bad length is not an error: it is left out.
    assert_eq!(
        length(not_modified, false, &[("content-length", "x")]),
        None
    );
    assert_eq!(
        length("HTTP/1.1 200 OK", true, &[("content-length", "1, 2")]),
        None
    );
}

#[test]
fn a_101_keeps_its_upgrade_and_says_connection_upgrade() {
    let fields = [
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("x-a", "1"),
    ];
    let head = head_of("HTTP/1.1 101 Switching Protocols", false, &fields).unwrap();
    let names: Vec<_> = kept(&head)
        .into_iter()
        .map(|(n, v)| format!("{n}: {v}"))
        .collect();
    assert_eq!(
        names,
        ["Upgrade: websocket", "x-a: 1", "connection: upgrade"]
    );
    assert_eq!(head.framing, Framing::Upgraded);
    let head = head_of("HTTP/1.1 200 OK", false, &fields).unwrap();
    assert_eq!(kept(&head), [("x-a".to_string(), "1".to_string())]);
}

mod properties;
