//! The floor for benches/idle.sh: the least a tokio server can hold per idle keep-alive
//! connection. One thread, like a gateway worker; per connection only a task, its socket and
//! the runtime's registration of it. It reads a request head into a buffer of its thread
//! (nothing per connection) and answers `200 ok`. Not a proxy: what it measures is what
//! tokio itself costs per connection, below which no tokio server can go.
//!
//! usage: idle_floor 127.0.0.1:PORT

use std::cell::RefCell;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

thread_local! {
    static BUFFER: RefCell<Vec<u8>> = RefCell::new(vec![0; 8192]);
}

async fn serve(mut stream: TcpStream) {
    let mut pending = 0usize;
    loop {
        if stream.readable().await.is_err() {
            return;
        }
        // The head's end is looked for in what each read brings: enough for the bench's
        // requests, which come in one segment each.
        let read = BUFFER.with(|buffer| {
            let mut buffer = buffer.borrow_mut();
            match stream.try_read(&mut buffer) {
                Ok(0) => None,
                Ok(n) => Some(buffer[..n].windows(4).filter(|w| w == b"\r\n\r\n").count()),
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => Some(0),
                Err(_) => None,
            }
        });
        let Some(heads) = read else { return };
        pending += heads;
        while pending > 0 {
            if stream.write_all(ANSWER).await.is_err() {
                return;
            }
            pending -= 1;
        }
    }
}

fn main() -> std::io::Result<()> {
    let address = std::env::args()
        .nth(1)
        .ok_or_else(|| std::io::Error::other("usage: idle_floor 127.0.0.1:PORT"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = TcpListener::bind(&address).await?;
        loop {
            let (stream, _) = listener.accept().await?;
            tokio::spawn(serve(stream));
        }
    })
}
