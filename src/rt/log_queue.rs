//! Log lines written off the request path. A line is queued (bounded in bytes) and one thread
//! writes the queue out; a full queue or a failed write drops the line and counts it, so a
//! stalled log reader (a pipe nobody drains) or a full disk never blocks or stops serving.
//! When writing works again after drops, one notice says how many were lost (at most one per
//! `NOTICE_EVERY`).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant};

/// Why a line was not written: the `reason` label of `rlp_log_lines_dropped_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DropReason {
    /// The queue held `MAX_QUEUED_BYTES` already: the writer is slower than the lines come.
    QueueFull,
    /// The write itself failed (a full disk, a closed pipe, a closed descriptor).
    WriteFailed,
}

impl DropReason {
    pub(crate) const ALL: [DropReason; 2] = [DropReason::QueueFull, DropReason::WriteFailed];

    pub(crate) fn label(self) -> &'static str {
        match self {
            DropReason::QueueFull => "queue_full",
            DropReason::WriteFailed => "write_failed",
        }
    }
}

/// Lines dropped since the process started, by reason (the process has one log queue).
static DROPPED: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

pub(crate) fn dropped(reason: DropReason) -> u64 {
    DROPPED[reason as usize].load(Ordering::Relaxed)
}

/// One queue's drops, for its notices; the process's are in `DROPPED` too.
#[derive(Default)]
struct Drops([AtomicU64; 2]);

impl Drops {
    fn count(&self, reason: DropReason) {
        self.0[reason as usize].fetch_add(1, Ordering::Relaxed);
        DROPPED[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self, reason: DropReason) -> u64 {
        self.0[reason as usize].load(Ordering::Relaxed)
    }

    fn total(&self) -> u64 {
        DropReason::ALL.iter().map(|&reason| self.get(reason)).sum()
    }
}

/// What the queue may hold before lines are dropped: a few seconds of access lines at full
/// speed, and a bound on memory whatever the lines carry.
pub(crate) const MAX_QUEUED_BYTES: usize = 4 << 20;

/// At most one "lines were dropped" notice this often.
const NOTICE_EVERY: Duration = Duration::from_secs(10);

/// The most lines (and flush marks) in the channel; the byte bound is the one that matters.
const MAX_QUEUED_LINES: usize = 16 * 1024;

enum Item {
    Line(Vec<u8>),
    /// Answered once every line queued before it has been written (or dropped).
    Flush(SyncSender<()>),
}

/// The sending side; cheap to clone, one per subscriber.
#[derive(Clone)]
pub(crate) struct LogQueue {
    sender: SyncSender<Item>,
    queued_bytes: Arc<AtomicUsize>,
    drops: Arc<Drops>,
}

impl LogQueue {
    /// Starts the writer thread on `out` (stderr in the gateway, anything in tests).
    pub(crate) fn start(out: impl Write + Send + 'static) -> std::io::Result<LogQueue> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(MAX_QUEUED_LINES);
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let drops = Arc::new(Drops::default());
        let writer = Writer {
            out,
            queued_bytes: queued_bytes.clone(),
            drops: drops.clone(),
            reported: 0,
            last_notice: None,
        };
        std::thread::Builder::new()
            .name("rlp-log".into())
            .spawn(move || writer.run(receiver))?;
        Ok(LogQueue {
            sender,
            queued_bytes,
            drops,
        })
    }

    /// Queues one whole line, or drops and counts it; never waits.
    pub(crate) fn push(&self, line: Vec<u8>) {
        let size = line.len();
        if self.queued_bytes.fetch_add(size, Ordering::Relaxed) + size > MAX_QUEUED_BYTES {
            self.queued_bytes.fetch_sub(size, Ordering::Relaxed);
            self.drops.count(DropReason::QueueFull);
            return;
        }
        if self.sender.try_send(Item::Line(line)).is_err() {
            self.queued_bytes.fetch_sub(size, Ordering::Relaxed);
            self.drops.count(DropReason::QueueFull);
        }
    }

    /// Waits at most `within` for the lines queued so far to be written: the last lines of a
    /// process that exits, without hanging on a log reader that stopped reading.
    pub(crate) fn flush(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let (done, written) = std::sync::mpsc::sync_channel(1);
        let mut mark = Item::Flush(done);
        loop {
            match self.sender.try_send(mark) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                    mark = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(TrySendError::Full(_)) => return false,
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        written.recv_timeout(left).is_ok()
    }
}

/// The thread that owns the output.
struct Writer<W> {
    out: W,
    queued_bytes: Arc<AtomicUsize>,
    drops: Arc<Drops>,
    /// Drops already told about in a notice.
    reported: u64,
    last_notice: Option<Instant>,
}

impl<W: Write> Writer<W> {
    fn run(mut self, receiver: Receiver<Item>) {
        for item in receiver {
            match item {
                Item::Line(line) => {
                    self.queued_bytes.fetch_sub(line.len(), Ordering::Relaxed);
                    self.write(&line);
                }
                Item::Flush(done) => {
                    let _ = self.out.flush();
                    let _ = done.try_send(());
                }
            }
        }
    }

    fn write(&mut self, line: &[u8]) {
        if self.out.write_all(line).is_err() {
            self.drops.count(DropReason::WriteFailed);
            return;
        }
        let total = self.drops.total();
        let due = self
            .last_notice
            .is_none_or(|at| at.elapsed() >= NOTICE_EVERY);
        if total > self.reported && due {
            let notice = format!(
                "{} log lines dropped (queue full: {}, write failed: {}); see rlp_log_lines_dropped_total\n",
                total - self.reported,
                self.drops.get(DropReason::QueueFull),
                self.drops.get(DropReason::WriteFailed),
            );
            if self.out.write_all(notice.as_bytes()).is_ok() {
                self.reported = total;
                self.last_notice = Some(Instant::now());
            }
        }
    }
}

/// A `tracing_subscriber` writer: one event is written into a `Line`, queued when dropped.
pub(crate) struct Line<'a> {
    queue: &'a LogQueue,
    bytes: Vec<u8>,
}

impl Write for Line<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.bytes.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line<'_> {
    fn drop(&mut self) {
        if !self.bytes.is_empty() {
            self.queue.push(std::mem::take(&mut self.bytes));
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogQueue {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Line<'a> {
        Line {
            queue: self,
            bytes: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests;
