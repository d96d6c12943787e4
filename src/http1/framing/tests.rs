use super::*;
use proptest::prelude::*;

/// The data, the trailers, and the bytes left over once the body ended.
type Decoded = (Vec<u8>, Option<HeaderMap>, Vec<u8>);

/// Feeds `wire` to `decode` in pieces of the given sizes.
fn decode_in_pieces(
    mut framing: Framing,
    wire: &[u8],
    pieces: &[usize],
) -> Result<Decoded, FramingError> {
    let (mut data, mut trailers) = (Vec::new(), None);
    let mut buf = BytesMut::new();
    let mut rest = wire;
    let mut sizes = pieces.iter().copied().cycle();
    loop {
        while let Some(frame) = decode(&mut framing, &mut buf)? {
            match frame.into_data() {
                Ok(bytes) => data.extend_from_slice(&bytes),
                Err(frame) => trailers = frame.into_trailers().ok(),
            }
        }
        if framing == Framing::Done || rest.is_empty() {
            return Ok((data, trailers, buf.to_vec()));
        }
        let n = sizes.next().unwrap_or(1).clamp(1, rest.len());
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
}

fn chunked(body_chunks: &[Vec<u8>], trailer: &str) -> Vec<u8> {
    let mut wire = Vec::new();
    for chunk in body_chunks.iter().filter(|c| !c.is_empty()) {
        wire.extend_from_slice(format!("{:x};ext=1\r\n", chunk.len()).as_bytes());
        wire.extend_from_slice(chunk);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(format!("0\r\n{trailer}\r\n").as_bytes());
    wire
}

proptest! {
    #[test]
    fn chunked_bodies_decode_whole_however_the_bytes_arrive(
        body_chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..8),
        pieces in prop::collection::vec(1usize..64, 1..16),
        with_trailer in any::<bool>(),
    ) {
        let trailer = if with_trailer { "x-sum: 7\r\n" } else { "" };
        let mut wire = chunked(&body_chunks, trailer);
        wire.extend_from_slice(b"HTTP/1.1 next");
        let (data, trailers, left) =
            decode_in_pieces(Framing::Chunked(Chunk::Size), &wire, &pieces).unwrap();
        prop_assert_eq!(data, body_chunks.concat());
        prop_assert_eq!(trailers.is_some(), with_trailer);
        if let Some(trailers) = trailers {
            prop_assert_eq!(&trailers["x-sum"], "7");
        }
        // What follows the body stays for whoever reads next.
        prop_assert!(b"HTTP/1.1 next".starts_with(&left));
    }

    #[test]
    fn length_delimited_bodies_stop_at_their_length(
        body in prop::collection::vec(any::<u8>(), 1..500),
        pieces in prop::collection::vec(1usize..64, 1..16),
    ) {
        let mut wire = body.clone();
        wire.extend_from_slice(b"extra");
        let (data, _, _) =
            decode_in_pieces(Framing::Length(body.len() as u64), &wire, &pieces).unwrap();
        prop_assert_eq!(data, body);
    }
}

#[test]
fn chunk_lines_must_be_hex_sizes_with_optional_extensions() {
    assert_eq!(chunk_size(b"1a"), Some(26));
    assert_eq!(chunk_size(b"1A ; name=\"v\""), Some(26));
    assert_eq!(chunk_size(b"0"), Some(0));
    // RFC 9112 §7.1: `1*HEXDIG`, as many as fit a u64, leading zeros and all (as hyper).
    assert_eq!(chunk_size(b"1000000000000000"), Some(1 << 60));
    assert_eq!(chunk_size(b"ffffffffffffffff"), Some(u64::MAX));
    assert_eq!(chunk_size(b"0000000000000000001"), Some(1));
    assert_eq!(chunk_size(&[b'0'; 200]), Some(0));
    assert_eq!(
        chunk_size(b"00000000000000000000ffffffffffffffff;x"),
        Some(u64::MAX)
    );
    for bad in [
        &b""[..],
        b"x",
        b"-1",
        b"1 2",
        b"+5",
        b"10000000000000000",
        b"1ffffffffffffffff",
        b" 5",
    ] {
        assert_eq!(chunk_size(bad), None, "{:?}", String::from_utf8_lossy(bad));
    }
    let cases: [(&[u8], &str); 6] = [
        (b"zz\r\n", "invalid chunk size line"),
        (b"5\nhello", "bare LF in chunk line"),
        (b"5\rhello", "bare CR in chunk line"),
        (b"3\r\nabcXX", "chunk data not followed by CRLF"),
        // Found by fuzz/response_head against hyper, which ends the section at CRLF CRLF
        // only: here ours ended it at the bare LF's empty line.
        (
            b"0\r\nx-a: 1\n\nx-b: 2\r\n\r\n",
            "bare LF in the trailer section",
        ),
        (
            b"0\r\nx-a: 1\r\nx-b: 2\n\r\n",
            "bare LF in the trailer section",
        ),
    ];
    for (wire, reason) in cases {
        let error = decode_in_pieces(Framing::Chunked(Chunk::Size), wire, &[64]).unwrap_err();
        assert!(
            matches!(error, FramingError::Framing(r) if r == reason),
            "{error} for {:?}",
            String::from_utf8_lossy(wire)
        );
    }
    let endless_line = vec![b'1'; MAX_CHUNK_LINE + 1];
    assert!(decode_in_pieces(Framing::Chunked(Chunk::Size), &endless_line, &[512]).is_err());
}

#[test]
fn content_lengths_are_read_up_to_the_largest_u64_and_no_further() {
    assert_eq!(parse_decimal(b"0"), Some(0));
    assert_eq!(parse_decimal(b"003"), Some(3));
    // Found by fuzz/request_head: hyper reads 19 digits; so does the own reader now.
    assert_eq!(
        parse_decimal(b"3333333322222222221"),
        Some(3_333_333_322_222_222_221)
    );
    assert_eq!(parse_decimal(b"18446744073709551615"), Some(u64::MAX));
    for bad in [
        &b"18446744073709551616"[..],
        b"",
        b"+1",
        b"-1",
        b" 1",
        b"1 ",
        b"0x1",
    ] {
        assert_eq!(
            parse_decimal(bad),
            None,
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn a_chunk_size_of_sixteen_digits_or_more_leading_zeros_is_read_and_an_overflow_refused() {
    let wire =
        b"0000000000000005\r\nhello\r\n00000000000000000000001\r\n!\r\n0000000000000000\r\n\r\n";
    let (data, _, after) = decode_in_pieces(Framing::Chunked(Chunk::Size), wire, &[3, 7]).unwrap();
    assert_eq!((&data[..], &after[..]), (&b"hello!"[..], &b""[..]));
    // The largest size: the data that came is a frame, the rest is waited for.
    let (data, _, _) = decode_in_pieces(
        Framing::Chunked(Chunk::Size),
        b"ffffffffffffffff\r\nab",
        &[64],
    )
    .unwrap();
    assert_eq!(data, b"ab");
    let error = decode_in_pieces(
        Framing::Chunked(Chunk::Size),
        b"10000000000000000\r\n",
        &[64],
    )
    .unwrap_err();
    assert!(
        matches!(error, FramingError::Framing("invalid chunk size line")),
        "{error}"
    );
}
