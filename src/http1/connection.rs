//! What a message's Connection fields say of the connection (RFC 9112 §9.3): the one reading of
//! `close` and `keep-alive`, for the requests the server reads and the responses the upstream
//! client reads.

use http::Version;

use super::fields::list_items;

/// The `close` and `keep-alive` options of a message's Connection fields.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct ConnectionOptions {
    close: bool,
    keep_alive: bool,
}

impl ConnectionOptions {
    /// Notes every option of one Connection field's value.
    pub(crate) fn add(&mut self, list: &[u8]) {
        for option in list_items(list) {
            self.note(option);
        }
    }

    /// Notes one option of a Connection list; false when it is neither `close` nor
    /// `keep-alive` (then it names a field meant for this connection only).
    #[inline]
    pub(crate) fn note(&mut self, option: &[u8]) -> bool {
        if option.eq_ignore_ascii_case(b"close") {
            self.close = true;
        } else if option.eq_ignore_ascii_case(b"keep-alive") {
            self.keep_alive = true;
        } else {
            return false;
        }
        true
    }

    /// Whether the connection persists after the message: never after `close`; otherwise
    /// HTTP/1.1 does, HTTP/1.0 only when asked to with `keep-alive`.
    pub(crate) fn keeps_alive(self, version: Version) -> bool {
        if version == Version::HTTP_10 {
            self.keep_alive && !self.close
        } else {
            !self.close
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keeps(version: Version, fields: &[&str]) -> bool {
        let mut options = ConnectionOptions::default();
        for field in fields {
            options.add(field.as_bytes());
        }
        options.keeps_alive(version)
    }

    #[test]
    fn close_always_ends_the_connection_and_http_1_0_keeps_it_only_when_asked() {
        let (v10, v11) = (Version::HTTP_10, Version::HTTP_11);
        assert!(keeps(v11, &[]));
        assert!(keeps(v11, &["upgrade, x-trace"]));
        assert!(keeps(v11, &["closed"]));
        assert!(!keeps(v11, &["x-trace, Close"]));
        assert!(!keeps(v11, &["keep-alive", "close"]));
        assert!(!keeps(v10, &[]));
        assert!(keeps(v10, &["Keep-Alive"]));
        assert!(!keeps(v10, &["keep-alive, close"]));
        assert!(!keeps(v10, &["keep-alives"]));
    }

    #[test]
    fn only_close_and_keep_alive_are_noted_as_options_of_their_own() {
        let mut options = ConnectionOptions::default();
        assert!(options.note(b"CLOSE") && options.note(b"keep-alive"));
        assert!(!options.note(b"upgrade") && !options.note(b""));
    }
}
