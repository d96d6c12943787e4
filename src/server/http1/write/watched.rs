//! Writing under the connection's watch: the response while the request body is pumped, and
//! `100 Continue`.

use std::future::poll_fn;
use std::pin::{Pin, pin};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::WriteError;
use crate::server::http1::reader::{Pumped, Reader};
use crate::server::http1::{Close, Watch};

/// Writes a response while the watch looks on and the request body is read as the upstream
/// asks for it: a client that takes nothing for `send_timeout` ends it with
/// `WriteError::Stalled`; shutdown sets `stopping` (the response is finished, then the
/// connection closes).
pub(in crate::server::http1) async fn write_watched<S: AsyncRead, W: Watch>(
    mut writing: Pin<&mut impl Future<Output = Result<bool, WriteError>>>,
    reader: &mut Reader<S>,
    watch: &mut W,
    stopping: &mut bool,
) -> Result<bool, WriteError> {
    let mut reading = true;
    loop {
        tokio::select! {
            biased;
            written = writing.as_mut() => return written,
            // A 100 Continue no longer goes out once the answer has begun.
            pumped = poll_fn(|cx| reader.poll_pump(cx)), if reading => {
                reading = pumped != Pumped::Closed;
            }
            close = poll_fn(|cx| watch.poll_close(cx)), if !*stopping => match close {
                Close::Stop | Close::Idle => *stopping = true,
                Close::SlowHead | Close::SendStalled => return Err(WriteError::Stalled),
            },
        }
    }
}

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Sends `100 Continue` while the watch looks on: a client that takes nothing for
/// `send_timeout` (its earlier, pipelined answers fill the socket) is cut, as during any other
/// write. False when the connection must close.
pub(in crate::server::http1) async fn send_continue<S: AsyncWrite + Unpin, W: Watch>(
    io: &mut S,
    watch: &mut W,
    stopping: &mut bool,
) -> bool {
    let sending = async {
        io.write_all(CONTINUE).await?;
        io.flush().await
    };
    let mut sending = pin!(sending);
    loop {
        tokio::select! {
            biased;
            sent = sending.as_mut() => return sent.is_ok(),
            close = poll_fn(|cx| watch.poll_close(cx)), if !*stopping => match close {
                Close::Stop | Close::Idle => *stopping = true,
                Close::SlowHead | Close::SendStalled => return false,
            },
        }
    }
}
