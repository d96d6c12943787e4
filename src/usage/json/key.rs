//! The keys of the objects a path goes through: compared with the paths' keys at that depth
//! as their bytes pass, escapes read, never copied. A key that no path's key can still equal
//! is skipped in bulk like any string.

use super::{Found, JsonScan, State, UsageFields};
use crate::usage::fields::each;

impl JsonScan {
    pub(super) fn begin_key(&mut self) {
        let object = usize::from(self.depth.saturating_sub(1));
        self.candidates = self.paths.get(object).copied().unwrap_or(0);
        self.key_len = 0;
        self.high = 0;
        self.state = State::Str { key: true };
    }

    /// The key ended: a field whose key it is starts over (the last of duplicate keys wins),
    /// and the value after the colon is its value or leads to it.
    pub(super) fn end_key(&mut self, fields: &UsageFields) {
        let depth = usize::from(self.depth.saturating_sub(1));
        let mut matched = 0;
        if self.high == 0 {
            for field in each(self.candidates) {
                if fields.segment(field, depth).map(<[u8]>::len) == Some(self.key_len) {
                    matched |= 1 << field;
                }
            }
        }
        self.mark(matched, Found::Absent);
        self.value_of = fields.ending_at(matched, depth);
        self.leads_to = matched & !self.value_of;
        self.state = State::Colon;
    }

    /// A byte of a key, as written or from a one-letter escape: after a high surrogate that
    /// is no low half, so the key names nothing (JSON.parse would keep the lone surrogate).
    pub(super) fn key_char(&mut self, fields: &UsageFields, byte: u8) {
        if self.high != 0 {
            self.candidates = 0;
        } else {
            self.key_byte(fields, byte);
        }
    }

    /// A `\u` escape of a key: a character's UTF-8 bytes are compared; a lone surrogate
    /// matches no path.
    pub(super) fn key_code_unit(&mut self, fields: &UsageFields, code: u16) {
        let scalar = match (self.high, code) {
            (0, 0xD800..=0xDBFF) => {
                self.high = code;
                return;
            }
            (0, 0xDC00..=0xDFFF) => None,
            (0, _) => char::from_u32(u32::from(code)),
            (high @ 0xD800..=0xDBFF, 0xDC00..=0xDFFF) => {
                self.high = 0;
                let pair = 0x10000 + (u32::from(high - 0xD800) << 10) + u32::from(code - 0xDC00);
                char::from_u32(pair)
            }
            _ => None,
        };
        match scalar {
            Some(scalar) => {
                for &byte in scalar.encode_utf8(&mut [0; 4]).as_bytes() {
                    self.key_byte(fields, byte);
                }
            }
            None => self.candidates = 0,
        }
    }

    /// The key's next byte: the fields whose key differs there drop out.
    fn key_byte(&mut self, fields: &UsageFields, byte: u8) {
        let depth = usize::from(self.depth.saturating_sub(1));
        for field in each(self.candidates) {
            let same = fields
                .segment(field, depth)
                .and_then(|segment| segment.get(self.key_len))
                == Some(&byte);
            if !same {
                self.candidates &= !(1 << field);
            }
        }
        self.key_len = self.key_len.saturating_add(1);
    }
}
