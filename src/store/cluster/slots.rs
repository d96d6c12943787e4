//! What `CLUSTER SLOTS` says, and which slot a key is in.

use crate::store::error::{ProtocolError, StoreError};
use crate::store::resp::{self, Value};

pub(super) use crate::store::slot::SLOTS;

/// One range of `CLUSTER SLOTS`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct SlotRange {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) master: (String, u16),
    pub(super) replicas: Vec<(String, u16)>,
}

/// `CLUSTER SLOTS`: `[[start, end, [host, port, id, ...], replica...], ...]`. A node whose
/// host is empty is the one asked (`asked`); one whose endpoint is unknown (`?`) is skipped.
pub(super) fn parse_slots(frame: &[u8], asked: &str) -> Result<Vec<SlotRange>, StoreError> {
    let bad = |what| StoreError::Protocol(ProtocolError::BadSlots { what });
    let Value::Array(entries) = resp::tree(frame)? else {
        return Err(bad("not an array"));
    };
    let mut ranges = Vec::new();
    for entry in entries {
        let Value::Array(items) = entry else {
            return Err(bad("a range that is not an array"));
        };
        let (Some(Value::Integer(start)), Some(Value::Integer(end))) =
            (items.first(), items.get(1))
        else {
            return Err(bad("a range without its bounds"));
        };
        let (start, end) = match (usize::try_from(*start), usize::try_from(*end)) {
            (Ok(start), Ok(end)) if start <= end && end < SLOTS => (start, end),
            _ => {
                let (start, end) = (*start, *end);
                return Err(ProtocolError::BadSlotRange { start, end }.into());
            }
        };
        let mut nodes = items[2..].iter().map(|node| endpoint(node, asked));
        let Some(master) = nodes.next().transpose()? else {
            return Err(bad("a range without a master"));
        };
        let Some(master) = master else { continue };
        let replicas = nodes.filter_map(Result::ok).flatten().collect();
        ranges.push(SlotRange {
            start,
            end,
            master,
            replicas,
        });
    }
    Ok(ranges)
}

/// A node of `CLUSTER SLOTS`: None when its endpoint is unknown.
fn endpoint(node: &Value, asked: &str) -> Result<Option<(String, u16)>, StoreError> {
    let bad = || {
        let what = "a node that is not [host, port, ...]";
        StoreError::Protocol(ProtocolError::BadSlots { what })
    };
    let Value::Array(fields) = node else {
        return Err(bad());
    };
    let (Some(Value::Bulk(host)), Some(Value::Integer(port))) = (fields.first(), fields.get(1))
    else {
        return Err(bad());
    };
    let port = u16::try_from(*port).map_err(|_| bad())?;
    let host = String::from_utf8(host.clone()).map_err(|_| bad())?;
    Ok(match host.as_str() {
        "?" => None,
        "" => Some((asked.to_string(), port)),
        _ => Some((host, port)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> String {
        format!("${}\r\n{text}\r\n", text.len())
    }

    #[test]
    fn cluster_slots_give_each_range_its_master_and_replicas() {
        let node = |host: &str, port: u16| format!("*3\r\n{}:{port}\r\n{}", bulk(host), bulk("id"));
        let reply = format!(
            "*3\r\n*4\r\n:0\r\n:5460\r\n{}{}*3\r\n:5461\r\n:10922\r\n{}*3\r\n:10923\r\n:16383\r\n{}",
            node("10.0.0.1", 7000),
            node("10.0.0.4", 7003),
            node("", 7001),
            node("?", 7002),
        );
        let ranges = parse_slots(reply.as_bytes(), "10.0.0.2").unwrap();
        assert_eq!(
            ranges,
            [
                SlotRange {
                    start: 0,
                    end: 5460,
                    master: ("10.0.0.1".into(), 7000),
                    replicas: vec![("10.0.0.4".into(), 7003)],
                },
                SlotRange {
                    start: 5461,
                    end: 10922,
                    master: ("10.0.0.2".into(), 7001),
                    replicas: vec![],
                },
            ]
        );
        for bad in ["+OK\r\n", "*1\r\n*2\r\n:0\r\n:16384\r\n", "*1\r\n:3\r\n"] {
            assert!(
                matches!(
                    parse_slots(bad.as_bytes(), "h"),
                    Err(StoreError::Protocol(_))
                ),
                "{bad}"
            );
        }
    }
}
