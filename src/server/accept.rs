//! The accept loop of one listener: a connection slot (of `max_connections`) first, then the
//! socket, then the TLS handshake when the listener has one, then the connection's task.

use super::*;

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
                    self.serving
                        .connections
                        .spawn(self.serve(stream, peer, slot));
                }
                Err(error) => accept_failed(error).await,
            }
        }
    }

    /// Serves one accepted connection, after a TLS handshake on TLS listeners.
    fn serve(
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
        let tls = self.tls.clone();
        async move {
            match tls {
                None => {
                    let client = (peer, "http", Protocols::Any);
                    connection::serve((stream, slot), client, runtime, settings, stop).await
                }
                Some(tls) => {
                    let handshake =
                        tokio::time::timeout(tls.handshake_timeout, tls.acceptor.accept(stream));
                    match handshake.await {
                        Ok(Ok(stream)) => {
                            // HTTP/2 over TLS only when ALPN chose it (RFC 9113 §3.3).
                            let alpn = stream.get_ref().1.alpn_protocol();
                            let protocols = match alpn {
                                Some(b"http/1.1") => Protocols::Http1Only,
                                _ => Protocols::Any,
                            };
                            let client = (peer, "https", protocols);
                            connection::serve((stream, slot), client, runtime, settings, stop).await
                        }
                        Ok(Err(error)) => handshake_failed(&tls, peer, &error.to_string()),
                        Err(_) => handshake_failed(&tls, peer, "handshake_timeout passed"),
                    }
                }
            }
        }
    }
}

/// A failed handshake is the client's problem (scanners, plain HTTP on the TLS port): counted
/// and logged at debug, never an error.
fn handshake_failed(tls: &TlsEntry, peer: SocketAddr, reason: &str) {
    let failures = tls.handshake_failures.fetch_add(1, Ordering::Relaxed) + 1;
    tracing::debug!(%peer, reason, failures, "TLS handshake failed");
}

/// Out of file descriptors or memory: wait a moment instead of spinning.
async fn accept_failed(error: std::io::Error) {
    tracing::warn!(%error, "accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}
