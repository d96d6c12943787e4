//! A client connection handed over after `101 Switching Protocols`: the server that read the
//! request sends it, with the bytes the client sent past the request head, once the 101 is
//! written; the tunnel that asked for it receives it.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;

/// A connection of any transport (TCP, TLS), as a tunnel copies bytes over it.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// The switched connection: reading it yields first what the server had read ahead.
pub(crate) type UpgradedIo = Box<dyn Io>;

/// The server's end: hands the connection over once the 101 is on its way.
pub(crate) struct UpgradeSender(oneshot::Sender<UpgradedIo>);

/// The tunnel's end: the connection, or an error when the server let it go instead (the
/// client left, or the answer was not a 101).
pub(crate) struct PendingUpgrade(oneshot::Receiver<UpgradedIo>);

#[derive(Debug, thiserror::Error)]
#[error("the client connection was not handed over for the switch of protocols")]
pub(crate) struct NotUpgraded;

/// A connected pair, made when a request that asks for an upgrade is read.
pub(crate) fn pending_upgrade() -> (UpgradeSender, PendingUpgrade) {
    let (sender, receiver) = oneshot::channel();
    (UpgradeSender(sender), PendingUpgrade(receiver))
}

impl UpgradeSender {
    /// Hands `io` over; false when nobody waits for it any more.
    pub(crate) fn send(self, io: UpgradedIo) -> bool {
        self.0.send(io).is_ok()
    }

    /// Whether a tunnel still waits for the connection.
    pub(crate) fn is_awaited(&self) -> bool {
        !self.0.is_closed()
    }
}

impl Future for PendingUpgrade {
    type Output = Result<UpgradedIo, NotUpgraded>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map_err(|_| NotUpgraded)
    }
}
