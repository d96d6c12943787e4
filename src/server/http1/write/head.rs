//! A response's fields for its head, from wherever they are kept: the header map, what the
//! body sets, an upstream's fields and the gateway's added fields. The head itself is written
//! by `crate::http1::encode::encode_response_head`.

use http::HeaderMap;
use http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};

use super::OutgoingBody;
use crate::fields::added::AddedFields;
use crate::fields::upstream::UpstreamFields;
use crate::http1::encode::{ResponseHeadFields, encode_field, encode_length};

/// A response's fields, from wherever they are kept.
pub(super) struct Fields<'a> {
    /// The response's header map: a generated response's fields.
    pub(super) own: &'a HeaderMap,
    /// The content type a generated body sets itself (`ResponseBody::content_type`).
    pub(super) content_type: Option<&'static str>,
    /// An upstream response's fields, hop-by-hop and framing ones already left out.
    pub(super) upstream: Option<&'a UpstreamFields>,
    pub(super) added: &'a AddedFields,
}

impl<'a> Fields<'a> {
    /// A response's fields: its header map's and what its body holds.
    pub(super) fn of(headers: &'a HeaderMap, body: &'a impl OutgoingBody) -> Fields<'a> {
        Fields {
            own: headers,
            content_type: body.content_type(),
            upstream: body.upstream_fields(),
            added: body.added(),
        }
    }
}

impl ResponseHeadFields for Fields<'_> {
    /// The response's own and upstream fields, less the framing, `Connection`, a
    /// `Content-Type` the body sets and those the added fields replace.
    fn encode_fields(&self, out: &mut Vec<u8>, keeps_length: bool) -> bool {
        for (name, value) in self.own {
            // The framing and `Connection` are written by `encode_response_head`.
            let kept = if name == TRANSFER_ENCODING || name == CONNECTION {
                false
            } else if name == CONTENT_TYPE {
                self.content_type.is_none()
            } else if name == CONTENT_LENGTH {
                keeps_length
            } else {
                !self.added.replaces(name.as_str().as_bytes())
            };
            if kept {
                encode_field(out, name.as_str(), value.as_bytes());
            }
        }
        let mut has_date = self.own.contains_key(http::header::DATE);
        if let Some(upstream) = self.upstream {
            upstream.write_lines(out, self.added);
            has_date |= upstream.has_date();
            if let Some(declared) = upstream.content_length().filter(|_| keeps_length) {
                encode_length(out, declared);
            }
        }
        has_date
    }

    fn content_type(&self) -> Option<&'static str> {
        self.content_type
    }

    /// The gateway's added fields.
    fn lines_after_framing(&self) -> &[u8] {
        self.added.lines()
    }
}
