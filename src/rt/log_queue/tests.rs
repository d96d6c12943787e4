use std::sync::{Arc, Condvar, Mutex};

use super::*;

/// Collects what is written; `stalled` makes every write wait until it is cleared.
#[derive(Clone, Default)]
struct Output {
    written: Arc<Mutex<Vec<u8>>>,
    stalled: Arc<(Mutex<bool>, Condvar)>,
    failing: Arc<Mutex<bool>>,
}

impl Output {
    fn text(&self) -> String {
        String::from_utf8(self.written.lock().unwrap().clone()).unwrap()
    }

    fn stall(&self, stalled: bool) {
        *self.stalled.0.lock().unwrap() = stalled;
        self.stalled.1.notify_all();
    }
}

impl Write for Output {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let (lock, wake) = &*self.stalled;
        let mut stalled = lock.lock().unwrap();
        while *stalled {
            stalled = wake.wait(stalled).unwrap();
        }
        if *self.failing.lock().unwrap() {
            return Err(std::io::Error::from_raw_os_error(28)); // ENOSPC
        }
        self.written.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn lines_are_written_in_order() {
    let output = Output::default();
    let queue = LogQueue::start(output.clone()).unwrap();
    for i in 0..100 {
        queue.push(format!("line {i}\n").into_bytes());
    }
    assert!(queue.flush(Duration::from_secs(5)));
    let expected: String = (0..100).map(|i| format!("line {i}\n")).collect();
    assert_eq!(output.text(), expected);
}

#[test]
fn a_stalled_reader_drops_lines_without_blocking_then_a_notice_says_how_many() {
    let output = Output::default();
    let queue = LogQueue::start(output.clone()).unwrap();
    output.stall(true);
    let before = dropped(DropReason::QueueFull);
    let line = vec![b'x'; 1023];
    let lines = 3 * MAX_QUEUED_BYTES / 1024;
    let started = Instant::now();
    for _ in 0..lines {
        let mut line = line.clone();
        line.push(b'\n');
        queue.push(line);
    }
    // Never waited for the writer: every push returned while it was stalled.
    assert!(started.elapsed() < Duration::from_secs(5));
    let dropped_now = dropped(DropReason::QueueFull) - before;
    assert!(
        dropped_now >= (lines - MAX_QUEUED_BYTES / 1024 - 2) as u64,
        "{dropped_now}"
    );
    assert!(
        !queue.flush(Duration::from_millis(50)),
        "flushed while stalled"
    );

    output.stall(false);
    // The full queue drains first: a line pushed while it is still full is dropped too.
    assert!(queue.flush(Duration::from_secs(5)));
    queue.push(b"after\n".to_vec());
    assert!(queue.flush(Duration::from_secs(5)));
    let text = output.text();
    assert!(text.ends_with("after\n"), "{text}");
    let notice = text
        .lines()
        .find(|l| l.contains("log lines dropped"))
        .expect("a notice");
    assert!(
        notice.contains("see rlp_log_lines_dropped_total"),
        "{notice}"
    );
    // One notice, not one a line.
    assert_eq!(text.matches("log lines dropped").count(), 1);
}

#[test]
fn a_failing_write_is_counted_and_writing_resumes_after_it() {
    let output = Output::default();
    let queue = LogQueue::start(output.clone()).unwrap();
    *output.failing.lock().unwrap() = true;
    let before = dropped(DropReason::WriteFailed);
    for _ in 0..10 {
        queue.push(b"lost\n".to_vec());
    }
    assert!(queue.flush(Duration::from_secs(5)));
    assert!(dropped(DropReason::WriteFailed) - before >= 10);
    assert_eq!(output.text(), "");

    *output.failing.lock().unwrap() = false;
    queue.push(b"kept\n".to_vec());
    assert!(queue.flush(Duration::from_secs(5)));
    let text = output.text();
    assert!(text.starts_with("kept\n"), "{text}");
    assert!(text.contains("log lines dropped"), "{text}");
}
