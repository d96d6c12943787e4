//! RESP2 replies, read in place: where each reply starts and ends in the read buffer and
//! what kind it is, without building values (see `pipe`). The rare array replies a caller
//! needs the contents of (`CLUSTER SLOTS`) are read into a `Value` tree by `tree`.

use std::ops::Range;

use super::error::ProtocolError;

/// How deep arrays may nest in a reply (`CLUSTER SLOTS` nests three deep).
const MOST_NESTING: usize = 8;
/// The longest bulk reply taken: the gateway's replies are a few KiB at most (32 bytes a
/// window, 256 windows a merged call; a tier's name), so a longer one is a server that is not
/// answering what was asked, and is not buffered (Redis' own limit is 512 MiB).
pub(crate) const LONGEST_BULK: usize = 1024 * 1024;

/// One RESP2 reply, as positions in the buffer it was read from.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    Status(Range<usize>),
    Error(Range<usize>),
    Integer(i64),
    Bulk(Range<usize>),
    Nil,
    Array,
}

/// The first whole reply in `buffer` and its length; None while it is incomplete.
pub(crate) fn parse(buffer: &[u8]) -> Result<Option<(Frame, usize)>, ProtocolError> {
    parse_at(buffer, 0, 0)
}

fn parse_at(
    buffer: &[u8],
    at: usize,
    depth: usize,
) -> Result<Option<(Frame, usize)>, ProtocolError> {
    let Some(&kind) = buffer.get(at) else {
        return Ok(None);
    };
    let Some(line_end) = buffer[at..]
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| at + i)
    else {
        return Ok(None);
    };
    if line_end < at + 2 || buffer[line_end - 1] != b'\r' {
        return Err(ProtocolError::NoCrlf);
    }
    let line = at + 1..line_end - 1;
    let next = line_end + 1;
    let frame = match kind {
        b'+' => (Frame::Status(line), next),
        b'-' => (Frame::Error(line), next),
        b':' => (Frame::Integer(integer(&buffer[line])?), next),
        b'$' => match integer(&buffer[line])? {
            -1 => (Frame::Nil, next),
            length => {
                let length = usize::try_from(length)
                    .ok()
                    .filter(|&l| l <= LONGEST_BULK)
                    .ok_or(ProtocolError::BulkLength(length))?;
                let end = next + length;
                if buffer.len() < end + 2 {
                    return Ok(None);
                }
                if &buffer[end..end + 2] != b"\r\n" {
                    return Err(ProtocolError::BulkTooLong);
                }
                (Frame::Bulk(next..end), end + 2)
            }
        },
        b'*' => match integer(&buffer[line])? {
            -1 => (Frame::Nil, next),
            count if count < 0 => return Err(ProtocolError::ArrayLength(count)),
            _ if depth >= MOST_NESTING => return Err(ProtocolError::TooDeep),
            count => {
                let mut end = next;
                for _ in 0..count {
                    match parse_at(buffer, end, depth + 1)? {
                        Some((_, item_end)) => end = item_end,
                        None => return Ok(None),
                    }
                }
                (Frame::Array, end)
            }
        },
        other => return Err(ProtocolError::UnknownType(other as char)),
    };
    Ok(Some(frame))
}

/// A reply read whole, for the replies whose contents are arrays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Nil,
    Status(Vec<u8>),
    Error(Vec<u8>),
    Integer(i64),
    Bulk(Vec<u8>),
    Array(Vec<Value>),
}

/// The one whole reply `frame` holds (as `parse` delimited it).
pub(crate) fn tree(frame: &[u8]) -> Result<Value, ProtocolError> {
    match value_at(frame, 0, 0)? {
        Some((value, end)) if end == frame.len() => Ok(value),
        Some(_) => Err(ProtocolError::BytesAfter),
        None => Err(ProtocolError::CutShort),
    }
}

fn value_at(
    buffer: &[u8],
    at: usize,
    depth: usize,
) -> Result<Option<(Value, usize)>, ProtocolError> {
    let Some((frame, end)) = parse_at(buffer, at, depth)? else {
        return Ok(None);
    };
    let value = match frame {
        Frame::Status(range) => Value::Status(buffer[range].to_vec()),
        Frame::Error(range) => Value::Error(buffer[range].to_vec()),
        Frame::Integer(n) => Value::Integer(n),
        Frame::Bulk(range) => Value::Bulk(buffer[range].to_vec()),
        Frame::Nil => Value::Nil,
        Frame::Array => {
            // Whole, as `parse_at` checked: the header line, then each item in turn.
            let header_end = at + buffer[at..].iter().position(|&b| b == b'\n').unwrap_or(0);
            let mut items = Vec::new();
            let mut next = header_end + 1;
            while next < end {
                let Some((item, item_end)) = value_at(buffer, next, depth + 1)? else {
                    return Ok(None);
                };
                items.push(item);
                next = item_end;
            }
            Value::Array(items)
        }
    };
    Ok(Some((value, end)))
}

fn integer(text: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| ProtocolError::NotAnInteger(String::from_utf8_lossy(text).into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A reply as Redis would send it, for the parser to read back.
    #[derive(Debug, Clone)]
    enum Sent {
        Status(String),
        Error(String),
        Integer(i64),
        Bulk(Vec<u8>),
        Nil,
        Array(Vec<Sent>),
    }

    fn encode(sent: &Sent, out: &mut Vec<u8>) {
        match sent {
            Sent::Status(text) => out.extend_from_slice(format!("+{text}\r\n").as_bytes()),
            Sent::Error(text) => out.extend_from_slice(format!("-{text}\r\n").as_bytes()),
            Sent::Integer(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
            Sent::Bulk(bytes) => {
                out.extend_from_slice(format!("${}\r\n", bytes.len()).as_bytes());
                out.extend_from_slice(bytes);
                out.extend_from_slice(b"\r\n");
            }
            Sent::Nil => out.extend_from_slice(b"$-1\r\n"),
            Sent::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                items.iter().for_each(|item| encode(item, out));
            }
        }
    }

    fn sent_strategy() -> impl Strategy<Value = Sent> {
        let line = "[ -~]{0,20}";
        let leaf = prop_oneof![
            line.prop_map(Sent::Status),
            line.prop_map(Sent::Error),
            any::<i64>().prop_map(Sent::Integer),
            // Any bytes, CR and LF included: a bulk string is read by its length.
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(Sent::Bulk),
            Just(Sent::Nil),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            proptest::collection::vec(inner, 0..4).prop_map(Sent::Array)
        })
    }

    fn matches(frame: &Frame, sent: &Sent, buffer: &[u8]) -> bool {
        match (frame, sent) {
            (Frame::Status(r), Sent::Status(text)) | (Frame::Error(r), Sent::Error(text)) => {
                &buffer[r.clone()] == text.as_bytes()
            }
            (Frame::Integer(n), Sent::Integer(m)) => n == m,
            (Frame::Bulk(r), Sent::Bulk(bytes)) => &buffer[r.clone()] == bytes.as_slice(),
            (Frame::Nil, Sent::Nil) | (Frame::Array, Sent::Array(_)) => true,
            _ => false,
        }
    }

    proptest! {
        /// Replies back to back are read one at a time, each whole and only once complete:
        /// every shorter prefix of a reply is "not yet", never an error or another reply.
        #[test]
        fn replies_are_read_whole_one_after_another(replies in proptest::collection::vec(sent_strategy(), 1..6)) {
            let mut stream = Vec::new();
            replies.iter().for_each(|reply| encode(reply, &mut stream));
            let mut at = 0;
            for reply in &replies {
                let rest = &stream[at..];
                let (frame, length) = parse(rest).unwrap().expect("a whole reply");
                prop_assert!(matches(&frame, reply, rest), "{frame:?} for {reply:?}");
                let mut alone = Vec::new();
                encode(reply, &mut alone);
                prop_assert_eq!(length, alone.len());
                for cut in 0..length {
                    prop_assert_eq!(parse(&rest[..cut]), Ok(None), "cut at {}", cut);
                }
                at += length;
            }
            prop_assert_eq!(at, stream.len());
        }
    }

    fn as_value(sent: &Sent) -> Value {
        match sent {
            Sent::Status(text) => Value::Status(text.as_bytes().to_vec()),
            Sent::Error(text) => Value::Error(text.as_bytes().to_vec()),
            Sent::Integer(n) => Value::Integer(*n),
            Sent::Bulk(bytes) => Value::Bulk(bytes.clone()),
            Sent::Nil => Value::Nil,
            Sent::Array(items) => Value::Array(items.iter().map(as_value).collect()),
        }
    }

    proptest! {
        /// A whole reply reads back as the tree it was written from.
        #[test]
        fn a_reply_reads_back_as_its_tree(reply in sent_strategy()) {
            let mut frame = Vec::new();
            encode(&reply, &mut frame);
            prop_assert_eq!(tree(&frame), Ok(as_value(&reply)));
            if !frame.is_empty() {
                prop_assert!(tree(&frame[..frame.len() - 1]).is_err());
            }
        }
    }

    #[test]
    fn malformed_replies_are_errors_that_say_what_was_wrong() {
        let nested = format!("{}:1\r\n", "*1\r\n".repeat(MOST_NESTING + 1));
        for (reply, expected) in [
            (&b"?what\r\n"[..], "unknown type '?'"),
            (b"+OK\n", "without CRLF"),
            (b":12a\r\n", "\"12a\" is not an integer"),
            (b"$3\r\nabcd\r\n", "longer than it said"),
            (b"$-2\r\n", "a bulk string of -2 bytes"),
            (b"$999999999999\r\n", "a bulk string of 999999999999 bytes"),
            // Before a byte of it is buffered.
            (b"$400000000\r\n", "a bulk string of 400000000 bytes"),
            (b"*-5\r\n", "an array of -5 items"),
            (nested.as_bytes(), "nested too deep"),
        ] {
            let error = parse(reply).expect_err(&String::from_utf8_lossy(reply));
            assert!(
                error.to_string().contains(expected),
                "{error} for {reply:?}"
            );
        }
    }
}
