//! One JSON document read as it streams, for the values at the usage paths: a state machine
//! over bytes with an explicit stack (a bit per open container and, for the objects a path
//! goes through, the fields it may lead to), so that no input can recurse, allocate or panic.
//! Strings are skipped in bulk (`memchr2` to the next quote or backslash) unless they are
//! keys that a path may name here; those are compared, unescaped, as they pass, never copied.
//! Numbers at a path are read as they pass, with checked arithmetic.

mod key;

use super::fields::{MAX_FIELDS, MAX_SEGMENTS, Mask, UsageFields, each};
use super::{Found, UsageError};

/// The most containers a scanner can hold open: one bit each in `JsonScan::arrays`.
pub(super) const DEEPEST: u8 = 128;

/// Where the scanner is in the document.
#[derive(Debug, Clone, Copy)]
enum State {
    /// A value must come: at the start, after a key's colon, after a comma in an array.
    Value,
    /// After `[`: a value or `]`.
    FirstItem,
    /// After `{`: a key or `}`.
    FirstKey,
    /// After a comma in an object: a key.
    Key,
    /// After a key: its colon.
    Colon,
    /// After a value in a container: a comma or the container's end.
    Next,
    /// Inside a string; `key` when it is an object's key.
    Str {
        key: bool,
    },
    /// After a backslash in a string.
    Escape {
        key: bool,
    },
    /// In a `\u` escape: the hex digits still to come and the code unit so far.
    Hex {
        key: bool,
        left: u8,
        code: u16,
    },
    Number(Part),
    /// In `true`, `false` or `null`: the letters still to come.
    Literal(&'static [u8]),
    /// The root value ended: only whitespace may follow.
    Done,
    /// Nothing more is examined.
    Failed(UsageError),
}

/// Where a number is in JSON's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    E,
    ESign,
    Exp,
}

impl Part {
    /// The part after `byte`, or `None` when `byte` is not part of the number.
    fn next(self, byte: u8) -> Option<Part> {
        use Part::*;
        Some(match (self, byte) {
            (Minus, b'0') => Zero,
            (Minus, b'1'..=b'9') | (Int, b'0'..=b'9') => Int,
            (Zero | Int, b'.') => Dot,
            (Dot | Frac, b'0'..=b'9') => Frac,
            (Zero | Int | Frac, b'e' | b'E') => E,
            (E, b'+' | b'-') => ESign,
            (E | ESign | Exp, b'0'..=b'9') => Exp,
            _ => return None,
        })
    }

    /// Whether the number may end here.
    fn is_complete(self) -> bool {
        matches!(self, Part::Zero | Part::Int | Part::Frac | Part::Exp)
    }
}

/// One document's scan: the values found so far for each field.
#[derive(Debug, Clone)]
pub(super) struct JsonScan {
    state: State,
    /// Containers open.
    depth: u8,
    /// More than this many open containers is `TooLarge`.
    deepest: u8,
    /// Bit `d` is set when the container at depth `d + 1` is an array.
    arrays: u128,
    /// `paths[d]`: the fields whose path goes through the object at depth `d + 1`. Deeper
    /// objects lead to none, since a path has at most `MAX_SEGMENTS` keys.
    paths: [Mask; MAX_SEGMENTS],
    /// What the value about to start is: the value of these fields...
    value_of: Mask,
    /// ...and, if it is an object, on the path of these.
    leads_to: Mask,
    /// The key being read: the fields whose key at this depth it still equals...
    candidates: Mask,
    /// ...its bytes so far, unescaped...
    key_len: usize,
    /// ...and a `\u` high surrogate waiting for its low half (0: none).
    high: u16,
    /// The number being read: the fields it is the value of...
    number_of: Mask,
    /// ...and its value while it is a non-negative integer that fits.
    integer: Option<u64>,
    values: [Found; MAX_FIELDS],
}

impl JsonScan {
    /// A scan of a document that may nest `deepest` containers (at most `DEEPEST`).
    pub(super) fn new(fields: &UsageFields, deepest: u8) -> JsonScan {
        JsonScan {
            state: State::Value,
            depth: 0,
            deepest: deepest.min(DEEPEST),
            arrays: 0,
            paths: [0; MAX_SEGMENTS],
            value_of: 0,
            leads_to: fields.all(),
            candidates: 0,
            key_len: 0,
            high: 0,
            number_of: 0,
            integer: None,
            values: [Found::Absent; MAX_FIELDS],
        }
    }

    /// The next bytes of the document.
    pub(super) fn feed(&mut self, fields: &UsageFields, bytes: &[u8]) {
        let mut at = 0;
        while let Some(&byte) = bytes.get(at) {
            match self.state {
                State::Failed(_) => return,
                State::Str { key } if !key || self.candidates == 0 => {
                    // No key here can match: only a quote or a backslash matters.
                    let Some(found) = memchr::memchr2(b'"', b'\\', &bytes[at..]) else {
                        return;
                    };
                    at += found + 1;
                    self.string_byte(fields, key, bytes[at - 1]);
                }
                State::Value
                | State::FirstItem
                | State::FirstKey
                | State::Key
                | State::Colon
                | State::Next
                | State::Done
                    if is_whitespace(byte) =>
                {
                    at += 1;
                    while bytes.get(at).copied().is_some_and(is_whitespace) {
                        at += 1;
                    }
                }
                _ => at += usize::from(self.step(fields, byte)),
            }
        }
    }

    /// Stops examining: the document is over the byte cap.
    pub(super) fn too_large(&mut self) {
        if !matches!(self.state, State::Failed(_)) {
            self.state = State::Failed(UsageError::TooLarge);
        }
    }

    /// The document ended: each field's value (the first `UsageFields::len` count), if it was
    /// one whole JSON value.
    pub(super) fn end(mut self) -> Result<[Found; MAX_FIELDS], UsageError> {
        if let State::Number(part) = self.state
            && part.is_complete()
            && self.depth == 0
        {
            self.end_number();
        }
        match self.state {
            State::Done => Ok(self.values),
            State::Failed(error) => Err(error),
            _ => Err(UsageError::Malformed),
        }
    }

    /// One byte in any state but a skipped string; whether it was consumed (a byte that ends
    /// a number is read again in the state after it).
    fn step(&mut self, fields: &UsageFields, byte: u8) -> bool {
        match self.state {
            State::Str { key } => self.string_byte(fields, key, byte),
            State::Escape { key } => self.escape(fields, key, byte),
            State::Hex { key, left, code } => self.hex(fields, key, left, code, byte),
            State::Number(part) => return self.number(part, byte),
            State::Literal(rest) => match rest.split_first() {
                Some((&want, [])) if want == byte => self.value_done(),
                Some((&want, rest)) if want == byte => self.state = State::Literal(rest),
                _ => self.fail(UsageError::Malformed),
            },
            State::Failed(_) => {}
            _ => self.structural(byte),
        }
        true
    }

    /// A byte outside strings, numbers and literals, not whitespace.
    fn structural(&mut self, byte: u8) {
        match (self.state, byte) {
            (State::FirstItem, b']') | (State::FirstKey, b'}') | (State::Next, b']' | b'}') => {
                self.close(byte)
            }
            (State::Value | State::FirstItem, _) => self.begin_value(byte),
            (State::FirstKey | State::Key, b'"') => self.begin_key(),
            (State::Colon, b':') => self.state = State::Value,
            (State::Next, b',') if self.in_array() => self.state = State::Value,
            (State::Next, b',') => self.state = State::Key,
            _ => self.fail(UsageError::Malformed),
        }
    }

    fn begin_value(&mut self, byte: u8) {
        let value_of = std::mem::take(&mut self.value_of);
        let leads_to = std::mem::take(&mut self.leads_to);
        if let b'0'..=b'9' = byte {
            self.number_of = value_of;
            self.integer = Some(u64::from(byte - b'0'));
            self.state = State::Number(if byte == b'0' { Part::Zero } else { Part::Int });
            return;
        }
        // Anything but digits at a path is not a usage number.
        self.mark(value_of, Found::Invalid);
        match byte {
            b'{' => self.open(false, leads_to),
            b'[' => self.open(true, 0),
            b'"' => self.state = State::Str { key: false },
            b't' => self.state = State::Literal(b"rue"),
            b'f' => self.state = State::Literal(b"alse"),
            b'n' => self.state = State::Literal(b"ull"),
            b'-' => {
                self.number_of = 0;
                self.integer = None;
                self.state = State::Number(Part::Minus);
            }
            _ => self.fail(UsageError::Malformed),
        }
    }

    fn open(&mut self, array: bool, leads_to: Mask) {
        if self.depth >= self.deepest {
            return self.fail(UsageError::TooLarge);
        }
        let bit = 1u128.checked_shl(u32::from(self.depth)).unwrap_or(0);
        if array {
            self.arrays |= bit;
        } else {
            self.arrays &= !bit;
        }
        if let Some(path) = self.paths.get_mut(usize::from(self.depth)) {
            *path = leads_to;
        }
        self.depth += 1;
        self.state = if array {
            State::FirstItem
        } else {
            State::FirstKey
        };
    }

    fn close(&mut self, byte: u8) {
        let want = if self.in_array() { b']' } else { b'}' };
        if self.depth == 0 || byte != want {
            return self.fail(UsageError::Malformed);
        }
        self.depth -= 1;
        self.value_done();
    }

    fn in_array(&self) -> bool {
        let top = u32::from(self.depth.saturating_sub(1));
        self.depth > 0 && self.arrays.checked_shr(top).unwrap_or(0) & 1 == 1
    }

    fn value_done(&mut self) {
        self.state = if self.depth == 0 {
            State::Done
        } else {
            State::Next
        };
    }

    fn string_byte(&mut self, fields: &UsageFields, key: bool, byte: u8) {
        match byte {
            b'"' if key => self.end_key(fields),
            b'"' => self.value_done(),
            b'\\' => self.state = State::Escape { key },
            _ => self.key_char(fields, byte),
        }
    }

    fn escape(&mut self, fields: &UsageFields, key: bool, byte: u8) {
        let unescaped = match byte {
            b'"' | b'\\' | b'/' => byte,
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                self.state = State::Hex {
                    key,
                    left: 4,
                    code: 0,
                };
                return;
            }
            _ => return self.fail(UsageError::Malformed),
        };
        self.state = State::Str { key };
        if key {
            self.key_char(fields, unescaped);
        }
    }

    fn hex(&mut self, fields: &UsageFields, key: bool, left: u8, code: u16, byte: u8) {
        let Some(digit) = char::from(byte).to_digit(16) else {
            return self.fail(UsageError::Malformed);
        };
        let code = code << 4 | digit as u16;
        if left > 1 {
            self.state = State::Hex {
                key,
                left: left - 1,
                code,
            };
            return;
        }
        self.state = State::Str { key };
        if key && self.candidates != 0 {
            self.key_code_unit(fields, code);
        }
    }

    fn number(&mut self, part: Part, byte: u8) -> bool {
        match part.next(byte) {
            Some(next) => {
                self.integer = match (next, self.integer) {
                    (Part::Int, Some(n)) => n
                        .checked_mul(10)
                        .and_then(|n| n.checked_add(u64::from(byte - b'0'))),
                    _ => None,
                };
                self.state = State::Number(next);
                true
            }
            None if part.is_complete() => {
                self.end_number();
                false
            }
            None => {
                self.fail(UsageError::Malformed);
                true
            }
        }
    }

    fn end_number(&mut self) {
        let found = self.integer.map_or(Found::Invalid, Found::Integer);
        let fields = std::mem::take(&mut self.number_of);
        self.mark(fields, found);
        self.value_done();
    }

    fn mark(&mut self, fields: Mask, found: Found) {
        for field in each(fields) {
            if let Some(value) = self.values.get_mut(field) {
                *value = found;
            }
        }
    }

    fn fail(&mut self, error: UsageError) {
        self.state = State::Failed(error);
    }
}

/// JSON's whitespace (RFC 8259 §2).
fn is_whitespace(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}
