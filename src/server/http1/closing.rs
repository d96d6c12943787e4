//! How a connection ends: the answer to a head that cannot be served, and the lingering close
//! that keeps a client still sending from losing its answer to a reset.

use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::write::{AnswerTo, write_response};
use super::{ClientIo, Connection};
use crate::http1::HeadError;
use crate::proxy::ClientConnection;
use crate::response::{GatewayError, error_response};

/// How long, and how much, a closing connection still reads and discards what the client
/// sent, so that the answer is not lost to a reset (nginx's lingering close).
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1024 * 1024;

impl<S: ClientIo> Connection<S> {
    /// Answers a head that cannot be served, then closes.
    pub(super) async fn refuse(&mut self, error: HeadError, client: &ClientConnection) {
        tracing::debug!(peer = %client.peer, %error, "refusing a request head");
        let request_id = crate::request::id::mint();
        let response = error_response(&GatewayError::Head(error), &request_id);
        let answer_to = AnswerTo {
            keep_alive: false,
            head_only: false,
            http10: false,
            takes_trailers: false,
        };
        let writing = write_response(&mut self.writer, &mut self.out, response, answer_to);
        if tokio::time::timeout(LINGER_TIME, writing).await.is_ok() {
            self.close().await;
        }
    }

    /// Closes the sending side, then reads and discards what the client still sends for a
    /// while, so that a client still sending a body gets the answer rather than a reset.
    pub(super) async fn close(&mut self) {
        let _ = self.writer.shutdown().await;
        let discard = async {
            let mut discarded = 0;
            while discarded < LINGER_BYTES {
                self.reader.read.clear();
                if !self.reader.read_more().await {
                    break;
                }
                discarded += self.reader.read.len();
            }
        };
        let _ = tokio::time::timeout(LINGER_TIME, discard).await;
    }
}
