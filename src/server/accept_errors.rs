//! What a listener does when `accept` fails: out of file descriptors (or memory, or socket
//! buffers) it pauses `SHORTAGE_PAUSE`, as nginx pauses accepting, since retrying at once
//! only fails again and spins a core; any other error pauses `OTHER_PAUSE`. The warning is
//! written at most once every `LOG_EVERY` per listener, with how many failures it stands for.

use std::time::{Duration, Instant};

use crate::rt::shortage::{Shortage, Site};

/// The pause after an accept that failed for lack of a local resource.
const SHORTAGE_PAUSE: Duration = Duration::from_millis(500);
/// The pause after any other failed accept.
const OTHER_PAUSE: Duration = Duration::from_millis(50);
/// At most one warning this often per listener.
const LOG_EVERY: Duration = Duration::from_secs(10);

pub(super) struct AcceptErrors {
    site: Site,
    last_logged: Option<Instant>,
    /// Failures since the last warning.
    unlogged: u64,
}

impl AcceptErrors {
    pub(super) fn new(site: Site) -> AcceptErrors {
        AcceptErrors {
            site,
            last_logged: None,
            unlogged: 0,
        }
    }

    /// Counts, maybe logs, and waits the pause the error calls for.
    pub(super) async fn failed(&mut self, error: std::io::Error) {
        let shortage = Shortage::of_io(&error);
        if let Some(shortage) = shortage {
            shortage.count(self.site);
        }
        if let Some(failures) = self.due(Instant::now()) {
            let listener = self.site.label();
            tracing::warn!(%error, listener, failures, "accept failed");
        }
        let pause = if shortage.is_some() {
            SHORTAGE_PAUSE
        } else {
            OTHER_PAUSE
        };
        tokio::time::sleep(pause).await;
    }

    /// Counts one failure; the failures a warning written `now` stands for, if one is due.
    fn due(&mut self, now: Instant) -> Option<u64> {
        self.unlogged += 1;
        if self
            .last_logged
            .is_some_and(|at| now.duration_since(at) < LOG_EVERY)
        {
            return None;
        }
        self.last_logged = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_every_ten_seconds_stands_for_the_failures_between() {
        let mut errors = AcceptErrors::new(Site::Accept);
        let start = Instant::now();
        assert_eq!(errors.due(start), Some(1));
        for i in 1..100 {
            assert_eq!(errors.due(start + Duration::from_millis(i * 50)), None);
        }
        assert_eq!(errors.due(start + LOG_EVERY), Some(100));
        assert_eq!(errors.due(start + LOG_EVERY), None);
    }

    #[tokio::test(start_paused = true)]
    async fn out_of_descriptors_pauses_half_a_second() {
        let mut errors = AcceptErrors::new(Site::AdminAccept);
        let before = crate::rt::shortage::met(Site::AdminAccept, Shortage::FileDescriptors);
        let started = tokio::time::Instant::now();
        errors
            .failed(std::io::Error::from_raw_os_error(libc::EMFILE))
            .await;
        assert_eq!(started.elapsed(), SHORTAGE_PAUSE);
        let after = crate::rt::shortage::met(Site::AdminAccept, Shortage::FileDescriptors);
        assert_eq!(after - before, 1);
        let started = tokio::time::Instant::now();
        errors
            .failed(std::io::Error::from_raw_os_error(libc::ECONNABORTED))
            .await;
        assert_eq!(started.elapsed(), OTHER_PAUSE);
    }
}
