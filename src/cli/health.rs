//! `ratelimit-proxy health`: asks a running gateway's admin listener for `/healthz`, as a
//! container's HEALTHCHECK or an exec probe does. A plain HTTP/1.1 GET on a blocking socket
//! with one deadline for the whole exchange; only the status line is read.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;

/// Where `health` asks when given neither `--admin` nor `--config`: the admin listener of the
/// container image's config, from inside the container.
pub(crate) const DEFAULT_ADMIN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9090);

/// The longest status line read; a real one is about 20 bytes.
const MAX_STATUS_LINE: usize = 256;

/// Why the gateway at an address is not known to be healthy.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProbeError {
    #[error("cannot connect to the admin listener at {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("no answer to GET /healthz from {addr} within {timeout:?}: {source}")]
    Exchange {
        addr: SocketAddr,
        timeout: Duration,
        #[source]
        source: io::Error,
    },
    #[error("GET /healthz at {addr} answered {status_line:?}, not 200")]
    Unhealthy {
        addr: SocketAddr,
        status_line: String,
    },
}

/// The address to probe for a listener bound to `listen`: an unspecified address (0.0.0.0,
/// [::]) listens on every interface, so this host's loopback reaches it.
pub(crate) fn probe_address(listen: SocketAddr) -> SocketAddr {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, listen.port())
}

/// Ok when `GET /healthz` at `addr` answers 200 within `timeout`.
pub(crate) fn probe(addr: SocketAddr, timeout: Duration) -> Result<(), ProbeError> {
    let deadline = Instant::now() + timeout;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|source| ProbeError::Connect { addr, source })?;
    let status_line =
        exchange(&mut stream, addr, deadline).map_err(|source| ProbeError::Exchange {
            addr,
            timeout,
            source,
        })?;
    let status = status_line.split(' ').nth(1);
    if status_line.starts_with("HTTP/1.") && status == Some("200") {
        Ok(())
    } else {
        Err(ProbeError::Unhealthy { addr, status_line })
    }
}

/// Sends the request and reads the answer's status line, each step within what is left of
/// `deadline`.
fn exchange(stream: &mut TcpStream, addr: SocketAddr, deadline: Instant) -> io::Result<String> {
    let left = || {
        let left = deadline.saturating_duration_since(Instant::now());
        // A zero timeout means "none" to the socket: keep a millisecond instead.
        Some(left.max(Duration::from_millis(1)))
    };
    stream.set_write_timeout(left())?;
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    let mut head = Vec::new();
    let mut buf = [0u8; MAX_STATUS_LINE];
    while !head.contains(&b'\n') && head.len() < MAX_STATUS_LINE {
        if Instant::now() >= deadline {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(left())?;
        let read = stream.read(&mut buf[..MAX_STATUS_LINE - head.len()])?;
        if read == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&buf[..read]);
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    Ok(String::from_utf8_lossy(line).trim_end().to_string())
}

/// `health`: the admin listener to ask, then its answer.
pub(super) fn health(
    admin: Option<SocketAddr>,
    config: Option<PathBuf>,
    timeout: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    let listen = match (admin, config) {
        (Some(admin), _) => admin,
        (None, Some(path)) => {
            let config = match crate::config::load(&path) {
                Ok(config) => config,
                Err(error) => {
                    say_err!("{error}");
                    return Ok(ExitCode::FAILURE);
                }
            };
            config.admin.with_context(|| {
                format!("{}: no [admin] listen to ask for /healthz", config.source)
            })?
        }
        (None, None) => DEFAULT_ADMIN,
    };
    let addr = probe_address(listen);
    // The error names its cause itself: printed whole, not as anyhow's chain.
    match probe(addr, timeout) {
        Ok(()) => {
            say!("ok: GET /healthz at {addr} answered 200");
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            say_err!("error: {error}");
            Ok(ExitCode::FAILURE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A one-connection server answering `answer`, or holding the connection silent.
    fn serve_once(answer: Option<&'static str>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request);
            match answer {
                Some(answer) => {
                    let _ = stream.write_all(answer.as_bytes());
                }
                // Silent until the probe gives up and closes.
                None => {
                    let _ = stream.read(&mut request);
                }
            }
        });
        addr
    }

    #[test]
    fn a_200_is_healthy_and_anything_else_is_not() {
        let healthy = serve_once(Some("HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n"));
        probe(healthy, Duration::from_secs(5)).unwrap();
        let draining = serve_once(Some("HTTP/1.1 503 Service Unavailable\r\n\r\n"));
        let error = probe(draining, Duration::from_secs(5)).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("answered \"HTTP/1.1 503 Service Unavailable\""),
            "{error}"
        );
        let garbage = serve_once(Some("SSH-2.0-OpenSSH\r\n"));
        assert!(matches!(
            probe(garbage, Duration::from_secs(5)),
            Err(ProbeError::Unhealthy { .. })
        ));
    }

    #[test]
    fn a_silent_listener_fails_within_the_timeout() {
        let silent = serve_once(None);
        let started = Instant::now();
        let error = probe(silent, Duration::from_millis(300)).unwrap_err();
        assert!(matches!(error, ProbeError::Exchange { .. }), "{error}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn an_unspecified_listen_address_is_probed_on_loopback() {
        let probed = |listen: &str| probe_address(listen.parse().unwrap()).to_string();
        assert_eq!(probed("0.0.0.0:9090"), "127.0.0.1:9090");
        assert_eq!(probed("[::]:9091"), "[::1]:9091");
        assert_eq!(probed("10.0.0.5:9090"), "10.0.0.5:9090");
    }
}
