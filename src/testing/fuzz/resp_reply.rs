//! The store pipe's RESP2 reply reader on arbitrary bytes, read as its driver reads them: each
//! whole reply taken off the buffer as soon as it is there. The replies (and the error that
//! ends the connection, if any) are the same however the bytes are split; each reply reads as
//! a tree of the same kind and contents; a bulk string over `LONGEST_BULK` is refused as soon
//! as its length line is there, before any of it is buffered.

use crate::store::error::ProtocolError;
use crate::store::{Frame, LONGEST_BULK, ReplyValue as Value, parse_reply, reply_tree};

/// A reply as the driver hands it to its call: its kind and bytes.
#[derive(Debug, PartialEq)]
enum Reply {
    Status(Vec<u8>),
    Error(Vec<u8>),
    Integer(i64),
    Bulk(Vec<u8>),
    Nil,
    /// The whole frame.
    Array(Vec<u8>),
}

/// `bytes`: two piece sizes, then what Redis sent.
pub fn resp_reply(bytes: &[u8]) {
    let [a, b, wire @ ..] = bytes else {
        return;
    };
    let whole = read(wire, &[wire.len().max(1)]);
    let split = read(wire, &[usize::from(*a) + 1, usize::from(*b) + 1]);
    assert_eq!(whole, split);
}

/// The replies in `wire` arriving in pieces of `pieces` sizes in turn, and the error that
/// ended the reading, if any.
fn read(wire: &[u8], pieces: &[usize]) -> (Vec<Reply>, Option<ProtocolError>) {
    let mut replies = Vec::new();
    let mut buf = Vec::new();
    let mut sizes = pieces.iter().cycle();
    let mut rest = wire;
    while !rest.is_empty() {
        let n = (*sizes.next().expect("a size")).min(rest.len());
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        loop {
            match parse_reply(&buf) {
                Ok(Some((frame, length))) => {
                    replies.push(checked(frame, &buf[..length]));
                    buf.drain(..length);
                }
                Ok(None) => {
                    assert!(!refuses_a_bulk(&buf), "waits for {:?}", head_of(&buf));
                    break;
                }
                Err(error) => return (replies, Some(error)),
            }
        }
    }
    (replies, None)
}

/// The reply `frame` delimits in `bytes` (exactly its bytes), checked against its tree.
fn checked(frame: Frame, bytes: &[u8]) -> Reply {
    let tree = reply_tree(bytes).expect("a delimited reply reads as a tree");
    let reply = match frame {
        Frame::Status(range) => Reply::Status(bytes[range].to_vec()),
        Frame::Error(range) => Reply::Error(bytes[range].to_vec()),
        Frame::Integer(n) => Reply::Integer(n),
        Frame::Bulk(range) => {
            assert!(range.len() <= LONGEST_BULK);
            Reply::Bulk(bytes[range].to_vec())
        }
        Frame::Nil => Reply::Nil,
        Frame::Array => Reply::Array(bytes.to_vec()),
    };
    let same = match (&reply, &tree) {
        (Reply::Status(a), Value::Status(b))
        | (Reply::Error(a), Value::Error(b))
        | (Reply::Bulk(a), Value::Bulk(b)) => a == b,
        (Reply::Integer(a), Value::Integer(b)) => a == b,
        (Reply::Nil, Value::Nil) | (Reply::Array(_), Value::Array(_)) => true,
        _ => false,
    };
    assert!(same, "{reply:?} vs tree {tree:?}");
    reply
}

/// Whether `buf` starts with the whole length line of a bulk string longer than
/// `LONGEST_BULK`, which must be refused, not waited on.
fn refuses_a_bulk(buf: &[u8]) -> bool {
    let Some(line) = head_of(buf).strip_prefix(b"$") else {
        return false;
    };
    let length = std::str::from_utf8(line)
        .ok()
        .and_then(|l| l.parse::<i64>().ok());
    length.is_some_and(|l| l > LONGEST_BULK as i64)
}

/// The first line of `buf` without its CRLF, or nothing if it is not whole.
fn head_of(buf: &[u8]) -> &[u8] {
    match buf.windows(2).position(|w| w == b"\r\n") {
        Some(end) if !buf[..end].contains(&b'\n') => &buf[..end],
        _ => &[],
    }
}
