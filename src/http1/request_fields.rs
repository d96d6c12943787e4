//! A request's fields as the gateway reads them. hyper hands over a `HeaderMap`; the own
//! HTTP/1.1 server's head parser (`request_head`) leaves the fields where they arrived, in the
//! request's head, and records their places. Building a map cost every proxied request a name lookup, a
//! value check httparse had already made, a hash and an insert per field, and two allocations
//! and their release (docs/PERFORMANCE.md, "Design decisions that keep it fast"). A lookup
//! here walks the few places comparing names in any case, and the upstream head copies the
//! lines that stay as they are.

use bytes::Bytes;
use http::header::ValueIter;
use http::{HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

use crate::http1::encode::encode_field;
use crate::http1::fields::{self, Role, same_name, visible_text};

#[derive(Clone, Debug)]
pub enum RequestFields {
    /// hyper's (HTTP/2), and an HTTP/1 head whose lines do not fit `FieldLines`' places.
    Map(HeaderMap),
    /// The own server's.
    Lines(FieldLines),
}

/// Fields read in place from a request head of at most 64 KiB.
#[derive(Clone, Debug, Default)]
pub struct FieldLines {
    head: Bytes,
    places: SmallVec<[Place; 10]>,
    /// Whether a name has a `_` (noted as fields are pushed, so most requests skip a search).
    underscored: bool,
}

/// One field: offsets into the head, kept to 8 bytes as the request is moved a dozen times.
#[derive(Clone, Copy, Debug)]
struct Place {
    name_start: u16,
    value_start: u16,
    value_end: u16,
    /// At most 255: a head with a longer name keeps its fields as a map.
    name_len: u8,
    role: Role,
}

impl Place {
    fn name(&self) -> (u16, u16) {
        (self.name_start, self.name_start + u16::from(self.name_len))
    }

    fn value(&self) -> (u16, u16) {
        (self.value_start, self.value_end)
    }

    /// The size of its `name: value\r\n` line.
    fn line_size(&self) -> usize {
        usize::from(self.name_len) + usize::from(self.value_end - self.value_start) + 4
    }
}

impl FieldLines {
    /// Records a field of `head` whose name and value are the slices `name` and `value` of
    /// it (as httparse hands them out); None when they are not within its first 64 KiB or
    /// the name is longer than 255 bytes.
    /// `head` is still borrowed by the parser here: `in_head` adds it once it is split off.
    pub(crate) fn push(
        &mut self,
        head: &[u8],
        name: &[u8],
        value: &[u8],
        role: Role,
    ) -> Option<()> {
        let start_of = |part: &[u8]| {
            let start = (part.as_ptr() as usize).wrapping_sub(head.as_ptr() as usize);
            let end = start
                .checked_add(part.len())
                .filter(|&end| end <= head.len())?;
            Some((u16::try_from(start).ok()?, u16::try_from(end).ok()?))
        };
        let (name_start, _) = start_of(name)?;
        let (value_start, value_end) = start_of(value)?;
        self.underscored |= has_underscore(name);
        self.places.push(Place {
            name_start,
            value_start,
            value_end,
            name_len: u8::try_from(name.len()).ok()?,
            role,
        });
        Some(())
    }

    /// The fields pushed, read from `head`: the bytes they were pushed with, now shared.
    pub fn in_head(self, head: Bytes) -> FieldLines {
        FieldLines { head, ..self }
    }

    fn bytes(&self, (start, end): (u16, u16)) -> &[u8] {
        self.head
            .get(start as usize..end as usize)
            .unwrap_or_default()
    }

    /// Where the field's line ends when it is `name:`, optional blanks, the value and CRLF,
    /// which the upstream head then copies as it is (not, e.g., after a bare LF).
    fn line_end(&self, place: &Place) -> Option<usize> {
        let end = usize::from(place.value_end);
        (self.head.get(end..end + 2) == Some(b"\r\n")).then_some(end + 2)
    }

    /// Whether a place holds a field called `name`: for Host and the other names with a role
    /// of their own, by role (one comparison a place, cheaper than comparing names, and every
    /// request looks up Host); for any other, lengths first.
    fn named<'a>(&'a self, name: &'a HeaderName) -> impl Fn(&&Place) -> bool + 'a {
        let own_role = Role::only_of(name);
        let name = name.as_str().as_bytes();
        move |place: &&Place| match own_role {
            Some(role) => place.role == role,
            None => {
                usize::from(place.name_len) == name.len()
                    && same_name(self.bytes(place.name()), name)
            }
        }
    }

    /// Where the first value of `name` is.
    fn first(&self, name: &HeaderName) -> Option<(u16, u16)> {
        Some(self.places.iter().find(self.named(name))?.value())
    }

    /// Takes out the hop-by-hop fields and those `Connection` names (as `strip_hop_by_hop`
    /// does to a map).
    fn strip_hop_by_hop(&mut self) {
        if self.places.iter().all(|place| !place.role.is_hop_by_hop()) {
            return;
        }
        let head = &self.head;
        let bytes = |(start, end): (u16, u16)| head.get(start as usize..end as usize);
        // As the map's strip reads them: lists of visible text only.
        let connection: SmallVec<[&[u8]; 2]> = (self.places.iter())
            .filter(|place| place.role == Role::Connection)
            .filter_map(|place| bytes(place.value()))
            .filter(|list| visible_text(list).is_some())
            .collect();
        let listed = |name: &[u8]| connection.iter().any(|list| fields::lists(list, name));
        self.places.retain(|place| {
            !(place.role.is_hop_by_hop() || listed(bytes(place.name()).unwrap_or_default()))
        });
    }

    /// Writes the fields that `keep` accepts by name, in their order: a run of adjacent
    /// whole lines in one copy, any other field as `name: value`.
    fn encode(&self, buf: &mut Vec<u8>, keep: impl Fn(&[u8]) -> bool) {
        let mut run = 0..0;
        for place in self.places.iter().filter(|p| keep(self.bytes(p.name()))) {
            let start = usize::from(place.name_start);
            let line_end = self.line_end(place);
            if let Some(end) = line_end
                && run.end == start
                && !run.is_empty()
            {
                run.end = end;
                continue;
            }
            buf.extend_from_slice(self.head.get(run).unwrap_or_default());
            run = start..start;
            match line_end {
                Some(end) => run.end = end,
                None => encode_field(buf, self.bytes(place.name()), self.bytes(place.value())),
            }
        }
        buf.extend_from_slice(self.head.get(run).unwrap_or_default());
    }
}

impl RequestFields {
    /// The first value of `name`.
    pub fn get(&self, name: &HeaderName) -> Option<&[u8]> {
        match self {
            RequestFields::Map(map) => map.get(name).map(HeaderValue::as_bytes),
            RequestFields::Lines(lines) => Some(lines.bytes(lines.first(name)?)),
        }
    }

    /// The first value of `name` as a value of its own (sharing the head's bytes).
    pub fn value(&self, name: &HeaderName) -> Option<HeaderValue> {
        match self {
            RequestFields::Map(map) => map.get(name).cloned(),
            RequestFields::Lines(lines) => {
                let (start, end) = lines.first(name)?;
                HeaderValue::from_maybe_shared(lines.head.slice(start as usize..end as usize)).ok()
            }
        }
    }

    /// Every value of `name`, first to last or (`rev`) last to first.
    pub fn get_all<'a>(&'a self, name: &'a HeaderName) -> Values<'a> {
        match self {
            RequestFields::Map(map) => Values(ValuesOf::Map(map.get_all(name).into_iter())),
            RequestFields::Lines(lines) => Values(ValuesOf::Lines {
                lines,
                name,
                places: lines.places.iter(),
            }),
        }
    }

    pub fn contains(&self, name: &HeaderName) -> bool {
        self.get(name).is_some()
    }

    /// Calls `visit` with each field's name and value, in order.
    fn each(&self, mut visit: impl FnMut(&[u8], &[u8])) {
        match self {
            RequestFields::Map(map) => {
                for (name, value) in map {
                    visit(name.as_str().as_bytes(), value.as_bytes());
                }
            }
            RequestFields::Lines(lines) => {
                for place in &lines.places {
                    visit(lines.bytes(place.name()), lines.bytes(place.value()));
                }
            }
        }
    }

    /// The fields' size as `name: value` lines.
    pub fn encoded_size(&self) -> usize {
        match self {
            RequestFields::Map(_) => {
                let mut size = 0;
                self.each(|name, value| size += name.len() + value.len() + 4);
                size
            }
            RequestFields::Lines(lines) => lines.places.iter().map(Place::line_size).sum(),
        }
    }

    /// Takes out `Connection`, the fields it names, and every hop-by-hop field.
    pub fn strip_hop_by_hop(&mut self) {
        match self {
            RequestFields::Map(map) => fields::strip_hop_by_hop(map),
            RequestFields::Lines(lines) => lines.strip_hop_by_hop(),
        }
    }

    /// The fields as (lower-case name, value) in order, for tests.
    #[cfg(any(test, fuzzing, feature = "testing"))]
    pub fn pairs(&self) -> Vec<(String, String)> {
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        let mut pairs = Vec::new();
        self.each(|name, value| pairs.push((text(name).to_ascii_lowercase(), text(value))));
        pairs
    }

    /// Writes each field whose name `keep` accepts as a head line, in order.
    pub fn encode(&self, buf: &mut Vec<u8>, keep: impl Fn(&[u8]) -> bool) {
        match self {
            RequestFields::Map(_) => self.each(|name, value| {
                if keep(name) {
                    encode_field(buf, name, value);
                }
            }),
            RequestFields::Lines(lines) => lines.encode(buf, keep),
        }
    }
}

/// Whether `name` has a `_`, eight bytes at a time (a byte at a time, it was a test for every
/// byte of every field name of every request).
fn has_underscore(name: &[u8]) -> bool {
    const EACH: u64 = 0x0101_0101_0101_0101;
    let word_has = |chunk: &[u8]| {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        let zeroed = word ^ (EACH * u64::from(b'_'));
        zeroed.wrapping_sub(EACH) & !zeroed & (EACH * 0x80) != 0
    };
    if name.len() < 8 {
        return name.contains(&b'_');
    }
    // The last eight bytes, overlapping words already seen, cover the rest.
    let last = &name[name.len() - 8..];
    name.chunks_exact(8).any(word_has) || word_has(last)
}

/// The values of one field name.
pub struct Values<'a>(ValuesOf<'a>);

enum ValuesOf<'a> {
    Map(ValueIter<'a, HeaderValue>),
    Lines {
        lines: &'a FieldLines,
        name: &'a HeaderName,
        places: std::slice::Iter<'a, Place>,
    },
}

impl<'a> Iterator for Values<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        match &mut self.0 {
            ValuesOf::Map(values) => values.next().map(HeaderValue::as_bytes),
            ValuesOf::Lines {
                lines,
                name,
                places,
            } => {
                let (lines, name): (&'a FieldLines, &'a HeaderName) = (*lines, *name);
                places
                    .find(lines.named(name))
                    .map(|p| lines.bytes(p.value()))
            }
        }
    }
}

impl DoubleEndedIterator for Values<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match &mut self.0 {
            ValuesOf::Map(values) => values.next_back().map(HeaderValue::as_bytes),
            ValuesOf::Lines {
                lines,
                name,
                places,
            } => {
                let (lines, name) = (*lines, *name);
                places
                    .rfind(lines.named(name))
                    .map(|p| lines.bytes(p.value()))
            }
        }
    }
}

mod edit;
pub(crate) use edit::Repeated;
#[cfg(test)]
pub(crate) mod tests;
