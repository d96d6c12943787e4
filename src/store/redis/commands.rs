//! The commands the store sends besides the script call (`SCRIPT LOAD` at warm-up, `HGET` of a
//! tier), and reading the replies it expects.

use std::time::Duration;

use bytes::Bytes;

use super::StoreError;
use crate::store::error::ProtocolError;
use crate::store::node::NodePipe;
use crate::store::pipe::{self, Reply};
use crate::store::script::SCRIPT;

/// `SCRIPT LOAD`: Redis answers with the script's SHA1, which must be ours.
pub(super) async fn load_script(
    pipe: &NodePipe,
    wait: Duration,
    sha: &str,
) -> Result<(), StoreError> {
    let load = |out: &mut Vec<u8>| {
        pipe::Command::new(out, 3)
            .arg(b"SCRIPT")
            .arg(b"LOAD")
            .arg(SCRIPT.as_bytes());
    };
    match pipe.call(wait, load).await? {
        Reply::Bulk(loaded) if loaded.as_ref() == sha.as_bytes() => Ok(()),
        other => Err(unexpected(&other, "the script's SHA1")),
    }
}

pub(super) fn bulk(reply: Reply) -> Result<Bytes, StoreError> {
    match reply {
        Reply::Bulk(numbers) => Ok(numbers),
        other => Err(unexpected(&other, "a bulk string")),
    }
}

pub(super) fn tier_of(reply: Reply) -> Result<Option<String>, StoreError> {
    match reply {
        Reply::Nil => Ok(None),
        Reply::Bulk(value) => String::from_utf8(value.to_vec())
            .map(Some)
            .map_err(|_| ProtocolError::NotUtf8 { what: "a tier" }.into()),
        other => Err(unexpected(&other, "a tier or nil")),
    }
}

pub(super) async fn hget_on_pipe(
    pipe: &NodePipe,
    wait: Duration,
    hash: &str,
    field: &[u8],
) -> Result<Reply, StoreError> {
    let hget = |out: &mut Vec<u8>| {
        pipe::Command::new(out, 3)
            .arg(b"HGET")
            .arg(hash.as_bytes())
            .arg(field);
    };
    pipe.call(wait, hget).await
}

fn unexpected(reply: &Reply, expected: &'static str) -> StoreError {
    ProtocolError::Unexpected {
        expected,
        got: reply.kind(),
    }
    .into()
}
