//! Which cluster slot a key is in (CRC16 of its hash tag, as the Redis Cluster specification
//! says), and the slot of an identity's keys, whose hash tag is the identity.

pub(crate) const SLOTS: usize = 16384;

/// The slot of `key`: CRC16 (XMODEM) of its hash tag (what is between the first `{` and the
/// next `}`, when not empty) or of the whole key, modulo 16384.
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % SLOTS as u16
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The 128-bit identity in 22 characters of URL-safe base64 (no `{` or `}`, so it can be the
/// key's hash tag).
/// The cluster slot of every key of `identity` (its hash tag's).
pub(crate) fn identity_slot(identity: u128) -> u16 {
    slot_of(&identity_text(identity))
}

pub(crate) fn identity_text(identity: u128) -> [u8; 22] {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut text = [0u8; 22];
    for (i, slot) in text.iter_mut().enumerate() {
        let shift = 128 - 6 * (i as i32 + 1);
        let chunk = if shift >= 0 {
            identity >> shift
        } else {
            identity << -shift
        };
        *slot = ALPHABET[(chunk & 63) as usize];
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_cluster_specification() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_eq!(
            slot_of(b"foo{}{bar}"),
            slot_of(b"foo{}{bar}"),
            "empty tag: whole key"
        );
        assert_ne!(slot_of(b"foo{}{bar}"), slot_of(b"bar"));
        assert_eq!(slot_of(b"foo{{bar}}zap"), slot_of(b"{bar"));
        assert_eq!(slot_of(b"rl:x:{AAAA}:1"), slot_of(b"AAAA"));
    }
}
