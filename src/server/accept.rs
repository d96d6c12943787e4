//! The accept loop of one listener: a connection slot (of `max_connections`) first, then the
//! socket, then the TLS handshake when the listener has one, then the connection's task.

use tokio_rustls::server::TlsStream;

use super::accept_errors::AcceptErrors;
use super::*;
use crate::rt::shortage::Site;

pub(super) struct AcceptLoop {
    pub(super) socket: TcpListener,
    pub(super) tls: Option<Arc<TlsEntry>>,
    pub(super) serving: Serving,
}

impl AcceptLoop {
    /// Accepts until `stop`. At `max_connections` it stops accepting, so newcomers wait in the
    /// kernel's backlog instead of costing memory here.
    pub(super) async fn run(self) {
        let stop = &self.serving.stop;
        let mut errors = AcceptErrors::new(Site::Accept);
        loop {
            let slot = tokio::select! {
                _ = stop.cancelled() => return,
                slot = self.serving.slots.clone().acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => return,
                },
            };
            let accepted = tokio::select! {
                _ = stop.cancelled() => return,
                accepted = self.socket.accept() => accepted,
            };
            match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    // Plain and TLS connections are tasks of their own types: a task is as
                    // large as the largest state its future can be in, and a plain
                    // connection's need not hold room for a TLS session and its handshake.
                    match &self.tls {
                        None => self
                            .serving
                            .connections
                            .spawn(self.serve_plain(stream, peer, slot)),
                        Some(tls) => self.serving.connections.spawn(self.serve_tls(
                            tls.clone(),
                            stream,
                            peer,
                            slot,
                        )),
                    };
                }
                Err(error) => errors.failed(error).await,
            }
        }
    }

    /// Serves one accepted connection of a plain listener.
    fn serve_plain(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        slot: OwnedSemaphorePermit,
    ) -> impl Future<Output = ()> + use<> {
        let Serving {
            runtime,
            settings,
            stop,
            ..
        } = self.serving.clone();
        let client = (peer, "http", Protocols::Any);
        connection::serve((stream, slot), client, runtime, settings, stop)
    }

    /// Serves one accepted connection of a TLS listener, after its handshake.
    fn serve_tls(
        &self,
        tls: Arc<TlsEntry>,
        stream: TcpStream,
        peer: SocketAddr,
        slot: OwnedSemaphorePermit,
    ) -> impl Future<Output = ()> + use<> {
        let Serving {
            runtime,
            settings,
            stop,
            ..
        } = self.serving.clone();
        async move {
            // Boxed, the handshake's state is freed before the connection is served, and the
            // session it makes is moved as a pointer: a TLS session is over a kilobyte, and a
            // future holds room for each place a value it owns moves through.
            let Some(stream) = Box::pin(handshake(&tls, stream, peer)).await else {
                return;
            };
            // HTTP/2 over TLS only when ALPN chose it (RFC 9113 §3.3).
            let protocols = match stream.get_ref().1.alpn_protocol() {
                Some(b"http/1.1") => Protocols::Http1Only,
                _ => Protocols::Any,
            };
            drop(tls);
            let client = (peer, "https", protocols);
            connection::serve((stream, slot), client, runtime, settings, stop).await
        }
    }
}

/// The TLS session of a connection, boxed; None when its handshake failed or took longer than
/// `handshake_timeout`.
async fn handshake(
    tls: &TlsEntry,
    stream: TcpStream,
    peer: SocketAddr,
) -> Option<Box<TlsStream<TcpStream>>> {
    match tokio::time::timeout(tls.handshake_timeout, tls.acceptor.accept(stream)).await {
        Ok(Ok(stream)) => Some(Box::new(stream)),
        Ok(Err(error)) => {
            handshake_failed(tls, peer, &error.to_string());
            None
        }
        Err(_) => {
            handshake_failed(tls, peer, "handshake_timeout passed");
            None
        }
    }
}

/// A failed handshake is the client's problem (scanners, plain HTTP on the TLS port): counted
/// and logged at debug, never an error.
fn handshake_failed(tls: &TlsEntry, peer: SocketAddr, reason: &str) {
    let failures = tls.handshake_failures.fetch_add(1, Ordering::Relaxed) + 1;
    tracing::debug!(%peer, reason, failures, "TLS handshake failed");
}
