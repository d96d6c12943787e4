//! A response head's fields, read in one pass: those that frame the body and decide the
//! connection's fate, and the end-to-end ones the recipient passes on (RFC 9110 §7.6.1). Their
//! tests read whole heads, in `response_head`.

use http::StatusCode;
use smallvec::SmallVec;

use super::ResponseFields;
use crate::http1::connection::ConnectionOptions;
use crate::http1::fields::{Role, is_visible_text, list_items, role};
use crate::http1::framing::add_content_length;

pub(super) struct ReadFields<'h, F> {
    pub(super) connection: ConnectionOptions,
    /// Options of the Connection fields other than `close` and `keep-alive`: names of fields
    /// meant for this connection only.
    listed: SmallVec<[&'h [u8]; 2]>,
    /// The last coding of the last Transfer-Encoding field, if any.
    pub(super) transfer_coding: Option<&'h [u8]>,
    /// A Transfer-Encoding field names a coding other than chunked (or the obsolete identity).
    pub(super) other_coding: bool,
    /// Every Content-Length value, which must agree.
    pub(super) content_length: Result<Option<u64>, &'static str>,
    /// All but hop-by-hop and framing fields. A 101 keeps its Upgrade and says
    /// `Connection: upgrade`, as the tunnel needs.
    pub(super) kept: F,
}

impl<'h, F: ResponseFields> ReadFields<'h, F> {
    /// The `fields` of a response with `status`, which fill a head of `head_length` bytes.
    pub(super) fn of(
        status: StatusCode,
        fields: &[httparse::Header<'h>],
        head_length: usize,
    ) -> ReadFields<'h, F> {
        let upgrading = status == StatusCode::SWITCHING_PROTOCOLS;
        // Whether a 101 kept an Upgrade field: none is taken out below (`retain` keeps them).
        let mut kept_upgrade = false;
        let mut read = ReadFields {
            connection: ConnectionOptions::default(),
            listed: SmallVec::new(),
            transfer_coding: None,
            other_coding: false,
            content_length: Ok(None),
            kept: F::with_capacity(head_length),
        };
        for field in fields {
            let name = field.name.as_bytes();
            match role(name) {
                Role::EndToEnd | Role::Host | Role::Override => read.kept.push(name, field.value),
                Role::Upgrade if upgrading => {
                    kept_upgrade = true;
                    read.kept.push(name, field.value);
                }
                Role::Connection => {
                    for option in list_items(field.value) {
                        if !read.connection.note(option) && !option.is_empty() {
                            read.listed.push(option);
                        }
                    }
                }
                Role::TransferEncoding => {
                    // A value that is not text (obs-text) holds no coding that can be named:
                    // not chunked, so only the close ends the body and nothing reuses the
                    // connection, as hyper reads it.
                    let last = match is_visible_text(field.value) {
                        true => field.value.rsplit(|&b| b == b',').next().unwrap_or(&[]),
                        false => &[],
                    };
                    read.transfer_coding = Some(last.trim_ascii());
                    read.other_coding |= list_items(field.value).any(|coding| {
                        !coding.is_empty()
                            && !coding.eq_ignore_ascii_case(b"chunked")
                            && !coding.eq_ignore_ascii_case(b"identity")
                    });
                }
                Role::ContentLength => add_content_length(&mut read.content_length, field.value),
                Role::Upgrade | Role::HopByHop => {}
            }
        }
        // Rare: most responses list no field in Connection.
        if !read.listed.is_empty() {
            let listed = &read.listed;
            let lists = |name: &[u8]| listed.iter().any(|l| l.eq_ignore_ascii_case(name));
            let upgrade = |name: &[u8]| upgrading && role(name) == Role::Upgrade;
            read.kept.retain(|name| upgrade(name) || !lists(name));
        }
        if kept_upgrade {
            read.kept.push(b"connection", b"upgrade");
        }
        read
    }
}
