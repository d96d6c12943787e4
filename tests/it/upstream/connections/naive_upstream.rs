//! An HTTP/1.1 upstream that answers a login 401 right after its head and, without reading
//! the login's body, parses what follows as the next request: the behaviour that lets an early
//! answer splice requests together when a proxy then reuses the connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct NaiveUpstream {
    pub url: String,
    smuggled: Arc<AtomicBool>,
    answers: Arc<AtomicUsize>,
    ended: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl NaiveUpstream {
    pub async fn start() -> NaiveUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let smuggled = Arc::new(AtomicBool::new(false));
        let ended = Arc::new(AtomicUsize::new(0));
        let answers = Arc::new(AtomicUsize::new(0));
        let (seen, ending, answering) = (smuggled.clone(), ended.clone(), answers.clone());
        let accepted = Arc::new(AtomicUsize::new(0));
        let accepting = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                accepting.fetch_add(1, Ordering::SeqCst);
                let (seen, ending, answering) = (seen.clone(), ending.clone(), answering.clone());
                // Each answer goes out at once: Nagle's algorithm would hold one that follows
                // another until the gateway's (delayed) acknowledgement.
                stream.set_nodelay(true).unwrap();
                tokio::spawn(async move {
                    serve(stream, &seen, &answering).await;
                    ending.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        NaiveUpstream {
            url,
            smuggled,
            answers,
            ended,
            accepted,
            task,
        }
    }

    /// Whether a request for `/smuggled` reached it.
    pub fn smuggled_seen(&self) -> bool {
        self.smuggled.load(Ordering::SeqCst)
    }

    /// Answers written whole so far (a HEAD answer's extra bytes included), on any connection.
    pub fn answers(&self) -> usize {
        self.answers.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Connections that ended.
    pub fn ended(&self) -> usize {
        self.ended.load(Ordering::SeqCst)
    }
}

impl Drop for NaiveUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Answers requests until the connection ends: `401` to `POST /login` and `200` to
/// `POST /static` (their bodies left for the next request), a head and then bytes nobody
/// asked for to `HEAD /headbody`, else `200` naming the method, path, cookie and body it read,
/// after 300 ms for `/slow`.
async fn serve(mut stream: TcpStream, smuggled: &AtomicBool, answers: &AtomicUsize) {
    let mut buffer = Vec::new();
    loop {
        let Some(end) = fill_until(&mut stream, &mut buffer, head_end).await else {
            return;
        };
        let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
        buffer.drain(..end);
        let mut words = head.split_whitespace();
        let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let field = |name: &str| {
            head.lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix(name)
                        .map(|_| l[name.len()..].trim().to_string())
                })
                .unwrap_or_default()
        };
        if path == "/smuggled" || path == "/slow" {
            smuggled.store(true, Ordering::SeqCst);
        }
        let answer = if method == "POST" && path == "/login" {
            "HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n".to_string()
        } else if method == "HEAD" && path == "/headbody" {
            // A head, then in a write of its own a "body" a HEAD answer must not have: a whole
            // answer.
            let head = "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n";
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nHEAD-BODY!".to_string()
        } else if method == "POST" && path == "/static" {
            "HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nstatic".to_string()
        } else {
            if path == "/slow" {
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            }
            let length: usize = field("content-length:").parse().unwrap_or(0);
            if fill_until(&mut stream, &mut buffer, |b| {
                (b.len() >= length).then_some(length)
            })
            .await
            .is_none()
            {
                return;
            }
            let body: Vec<u8> = buffer.drain(..length).collect();
            let text = format!(
                "{method} {path} cookie={} body={}",
                field("cookie:"),
                String::from_utf8_lossy(&body)
            );
            format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{text}",
                text.len()
            )
        };
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
        answers.fetch_add(1, Ordering::SeqCst);
    }
}

fn head_end(buffer: &[u8]) -> Option<usize> {
    buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4)
}

/// Reads into `buffer` until `done` finds what it needs; None when the connection ends first.
async fn fill_until(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
    done: impl Fn(&[u8]) -> Option<usize>,
) -> Option<usize> {
    loop {
        if let Some(found) = done(buffer) {
            return Some(found);
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}
