use super::*;

async fn connected() -> (Connection, tokio::net::TcpStream) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
    let (client, accepted) = tokio::join!(client, listener.accept());
    (
        Connection::new(Stream::Plain(client.unwrap()), ExchangeDeadlines::default()),
        accepted.unwrap().0,
    )
}

#[tokio::test]
async fn an_idle_connection_keeps_small_buffers_only() {
    let (mut connection, _peer) = connected().await;
    connection.read_buf.reserve(MAX_READ);
    connection.read_size = MAX_READ;
    connection.write_buf.reserve(100 * 1024);
    connection.release_buffers();
    assert!(connection.read_buf.capacity() <= 2 * FIRST_READ);
    assert_eq!(connection.read_size, FIRST_READ);
    assert!(connection.write_buf.capacity() <= 2 * IDLE_WRITE_BUFFER);
    // An ordinary exchange's buffers are kept for the next one.
    connection.read_buf.reserve(FIRST_READ);
    let kept = connection.read_buf.capacity();
    connection.release_buffers();
    assert_eq!(connection.read_buf.capacity(), kept);
}

/// Whether `connection` reports itself closed within half a second: what the peer did
/// reaches the socket's readiness once the runtime has polled the reactor.
async fn reported_closed(connection: &mut Connection) -> bool {
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        if !connection.is_open() {
            return true;
        }
    }
    false
}

#[tokio::test]
async fn an_idle_connection_the_peer_closed_or_wrote_to_is_not_open() {
    let (mut connection, peer) = connected().await;
    assert!(connection.is_open());
    drop(peer);
    assert!(reported_closed(&mut connection).await);
    let (mut connection, mut peer) = connected().await;
    tokio::io::AsyncWriteExt::write_all(&mut peer, b"unasked")
        .await
        .unwrap();
    assert!(reported_closed(&mut connection).await);
}

/// After a request with a body, bytes the upstream sent are found at once, before the
/// event loop has seen them: they may answer a request hidden in that body.
#[tokio::test]
async fn after_a_body_bytes_the_event_loop_has_not_seen_yet_close_the_connection() {
    let (mut connection, peer) = connected().await;
    assert!(connection.is_open());
    connection.sent_body = true;
    let mut peer = peer.into_std().unwrap();
    std::io::Write::write_all(&mut peer, b"HTTP/1.1 200 OK\r\n").unwrap();
    // Delivered on loopback, but no await since: tokio's readiness still says nothing came.
    let waiting = || !nothing_waiting(connection.stream.tcp());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while !waiting() && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert!(!connection.is_open());
}

/// The head parser's tests (`crate::http1::response_head`) keep fields of their own; this one
/// reads into the client's own, as the client gets them.
#[test]
fn lines_ended_by_a_bare_lf_go_on_ended_by_crlf() {
    let wire = b"HTTP/1.1 200 OK\nX-A:1\nx-b:  two  \ncontent-length: 0\n\n";
    let head = parse_head(&mut BytesMut::from(&wire[..]), false)
        .unwrap()
        .unwrap();
    let mut out = Vec::new();
    head.fields
        .write_lines(&mut out, &crate::fields::added::AddedFields::default());
    assert_eq!(out, b"X-A: 1\r\nx-b: two\r\n");
}
