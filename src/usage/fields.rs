//! The usage fields a limit is settled by, parsed once when the config loads: each a path of
//! object keys. The scanners ask it, per depth, which fields a key may lead to; it keeps the
//! caps that make a scanner's state a few fixed-size arrays.

/// A set of fields, one bit a field (in the order the config names them).
pub(super) type Mask = u8;

/// At most this many fields are summed (one bit each in a `Mask`).
pub(crate) const MAX_FIELDS: usize = Mask::BITS as usize;
/// A path has at most this many keys; objects deeper than this can hold no field.
pub(crate) const MAX_SEGMENTS: usize = 8;
/// A key of a path has at most this many bytes: a scanner compares no longer key.
pub(crate) const MAX_SEGMENT_BYTES: usize = 128;

/// The fields whose values are summed, each a path of object keys:
/// `"usage.total_tokens"` is the key `total_tokens` of the object at the key `usage` of the
/// document's root object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageFields {
    paths: Vec<Vec<Box<[u8]>>>,
    /// `ends_at[d]`: the fields whose last key is at depth `d` (0 for the root's keys).
    ends_at: [Mask; MAX_SEGMENTS],
}

/// Why a list of usage paths is refused at load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldsError {
    #[error("no usage field named")]
    NoFields,
    #[error("at most {MAX_FIELDS} usage fields are summed")]
    TooManyFields,
    #[error("an empty usage path")]
    EmptyPath,
    #[error("usage path {0:?} has an empty key (two dots, or a dot at an end)")]
    EmptySegment(String),
    #[error("usage path {0:?} has more than {MAX_SEGMENTS} keys")]
    TooManySegments(String),
    #[error("usage path {0:?} has a key longer than {MAX_SEGMENT_BYTES} bytes")]
    SegmentTooLong(String),
    #[error("usage path {0:?} is named twice")]
    Repeated(String),
}

impl UsageFields {
    /// Paths of keys separated by dots (`usage.total_tokens`); a key is compared byte for byte
    /// with the document's keys once their escapes are read. Paths go through objects only:
    /// there are no array indexes, and a key holding a dot cannot be named.
    pub fn parse(paths: &[&str]) -> Result<UsageFields, FieldsError> {
        if paths.is_empty() {
            return Err(FieldsError::NoFields);
        }
        if paths.len() > MAX_FIELDS {
            return Err(FieldsError::TooManyFields);
        }
        let mut parsed: Vec<Vec<Box<[u8]>>> = Vec::with_capacity(paths.len());
        let mut ends_at = [0; MAX_SEGMENTS];
        for (field, text) in paths.iter().enumerate() {
            let path = parse_path(text)?;
            if parsed.contains(&path) {
                return Err(FieldsError::Repeated((*text).to_owned()));
            }
            if let Some(ends) = ends_at.get_mut(path.len() - 1) {
                *ends |= 1 << field;
            }
            parsed.push(path);
        }
        Ok(UsageFields {
            paths: parsed,
            ends_at,
        })
    }

    /// How many fields there are (at least one, at most `MAX_FIELDS`).
    pub(super) fn len(&self) -> usize {
        self.paths.len()
    }

    /// Every field: the root object may lead to any.
    pub(super) fn all(&self) -> Mask {
        Mask::MAX >> (MAX_FIELDS - self.paths.len())
    }

    /// The fields of `fields` whose last key is at depth `depth`.
    pub(super) fn ending_at(&self, fields: Mask, depth: usize) -> Mask {
        fields & self.ends_at.get(depth).copied().unwrap_or(0)
    }

    /// The key of `field` at depth `depth`, if its path is that deep.
    pub(super) fn segment(&self, field: usize, depth: usize) -> Option<&[u8]> {
        Some(self.paths.get(field)?.get(depth)?)
    }
}

fn parse_path(text: &str) -> Result<Vec<Box<[u8]>>, FieldsError> {
    if text.is_empty() {
        return Err(FieldsError::EmptyPath);
    }
    let path: Vec<Box<[u8]>> = text.split('.').map(|key| key.as_bytes().into()).collect();
    if path.iter().any(|key| key.is_empty()) {
        Err(FieldsError::EmptySegment(text.to_owned()))
    } else if path.len() > MAX_SEGMENTS {
        Err(FieldsError::TooManySegments(text.to_owned()))
    } else if path.iter().any(|key| key.len() > MAX_SEGMENT_BYTES) {
        Err(FieldsError::SegmentTooLong(text.to_owned()))
    } else {
        Ok(path)
    }
}

/// The fields of `mask`, lowest first.
pub(super) fn each(mask: Mask) -> impl Iterator<Item = usize> {
    let mut left = mask;
    std::iter::from_fn(move || {
        let field = left.trailing_zeros() as usize;
        left &= left.wrapping_sub(1);
        (field < MAX_FIELDS).then_some(field)
    })
}
