//! The parser on its own, into a request type of the test's; the server's tests
//! (`server::http1`) compare what it reads with hyper's HTTP/1 server.

use super::*;

/// A request as these tests build it: the parts, as given.
struct Parts {
    method: Method,
    uri: Uri,
    version: Version,
    fields: RequestFields,
}

impl FromParts for Parts {
    fn from_parts(method: Method, uri: Uri, version: Version, fields: RequestFields) -> Parts {
        Parts {
            method,
            uri,
            version,
            fields,
        }
    }
}

fn parsed(head: &str) -> Arriving<Parts> {
    match parse_request(&mut BytesMut::from(head), 1024) {
        Parsed::Request(arriving) => arriving,
        Parsed::Partial => panic!("{head:?}: partial"),
        Parsed::Refused(error) => panic!("{head:?}: {error}"),
    }
}

#[test]
fn a_head_is_read_into_the_callers_request_with_what_it_says_of_its_body_and_connection() {
    let head = "POST /a?b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\
                Connection: Upgrade, close\r\nUpgrade: websocket\r\nTE: trailers\r\n\r\n";
    let arriving = parsed(head);
    let request = &arriving.request;
    assert_eq!(
        (&request.method, request.uri.to_string(), request.version),
        (&Method::POST, "/a?b".to_owned(), Version::HTTP_11)
    );
    assert_eq!(request.fields.pairs()[0], ("host".into(), "x".into()));
    assert_eq!(arriving.body, BodyLength::Exactly(3));
    assert!(!arriving.keep_alive);
    assert!(arriving.expects_continue && arriving.asks_upgrade && arriving.takes_trailers);
    let plain = parsed("GET / HTTP/1.0\r\nConnection: keep-alive\r\nExpect: 100-continue\r\n\r\n");
    assert_eq!(plain.body, BodyLength::None);
    assert!(plain.keep_alive);
    assert!(
        !plain.expects_continue,
        "HTTP/1.0 and no body: nothing to continue"
    );
}

#[test]
fn a_head_split_anywhere_is_partial_and_one_over_the_limit_is_refused() {
    let head = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    for cut in 0..head.len() {
        let partial = parse_request::<Parts>(&mut BytesMut::from(&head[..cut]), 1024);
        assert!(matches!(partial, Parsed::Partial), "{cut}");
    }
    let large = parse_request::<Parts>(&mut BytesMut::from(head), 10);
    assert!(matches!(large, Parsed::Refused(HeadError::TooLarge(10))));
}

#[test]
fn a_higher_minor_version_is_read_as_http11_and_another_major_version_is_refused() {
    let higher = parsed("GET / HTTP/1.2\r\nHost: x\r\n\r\n");
    assert_eq!(higher.request.version, Version::HTTP_11);
    assert!(higher.keep_alive, "HTTP/1.1's default");
    let head = "GET / HTTP/1.9\r\nHost: x\r\n\r\n";
    for cut in 0..head.len() {
        let partial = parse_request::<Parts>(&mut BytesMut::from(&head[..cut]), 1024);
        assert!(matches!(partial, Parsed::Partial), "{cut}");
    }
    let refused = |head: &str| match parse_request::<Parts>(&mut BytesMut::from(head), 1024) {
        Parsed::Refused(error) => error,
        _ => panic!("{head:?} not refused"),
    };
    for other in ["HTTP/2.0", "HTTP/3.0"] {
        let error = refused(&format!("GET / {other}\r\nHost: x\r\n\r\n"));
        assert!(matches!(error, HeadError::Version), "{other}: {error}");
    }
    for malformed in [
        "HTTP/1.x",
        "HTTP/1",
        "http/1.1",
        "HTTP/1.10",
        "HTTP/2",
        "",
        "HTTP/1.1 ",
    ] {
        let error = refused(&format!("GET / {malformed}\r\nHost: x\r\n\r\n"));
        assert!(
            matches!(error, HeadError::Malformed(_)),
            "{malformed}: {error}"
        );
    }
    // The rest of a line that may still be a version is waited for.
    let cut = parse_request::<Parts>(&mut BytesMut::from("GET / HTTP/2.0\r"), 1024);
    assert!(matches!(cut, Parsed::Partial));
}
