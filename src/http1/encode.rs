//! Writing HTTP/1 head lines.

/// A head line, `name: value\r\n`.
pub fn encode_field(buf: &mut Vec<u8>, name: impl AsRef<[u8]>, value: &[u8]) {
    let name = name.as_ref();
    buf.reserve(name.len() + value.len() + 4);
    buf.extend_from_slice(name);
    buf.extend_from_slice(b": ");
    buf.extend_from_slice(value);
    buf.extend_from_slice(b"\r\n");
}

/// `n` in lowercase hexadecimal, written into `out`.
pub fn hex(mut n: usize, out: &mut [u8; 16]) -> &[u8] {
    let mut start = out.len();
    loop {
        start -= 1;
        out[start] = b"0123456789abcdef"[n & 0xf];
        n >>= 4;
        if n == 0 {
            return &out[start..];
        }
    }
}
