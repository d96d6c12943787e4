//! A local resource shortage: the gateway itself out of file descriptors, memory or socket
//! buffers (EMFILE, ENFILE, ENOMEM, ENOBUFS). Not a peer's fault: an upstream whose connect
//! fails so is not ejected, and a listener that cannot accept pauses instead of spinning.
//! Counted for `rlp_resource_exhausted_total{resource,site}`.

use std::sync::atomic::{AtomicU64, Ordering};

/// What ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shortage {
    FileDescriptors,
    Memory,
    SocketBuffers,
}

/// Where it was met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Site {
    Accept,
    AdminAccept,
    UpstreamConnect,
}

impl Shortage {
    pub(crate) const ALL: [Shortage; 3] = [
        Shortage::FileDescriptors,
        Shortage::Memory,
        Shortage::SocketBuffers,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Shortage::FileDescriptors => "file_descriptors",
            Shortage::Memory => "memory",
            Shortage::SocketBuffers => "socket_buffers",
        }
    }

    /// The shortage an I/O error reports, if it is one.
    pub(crate) fn of_io(error: &std::io::Error) -> Option<Shortage> {
        match error.raw_os_error()? {
            libc::EMFILE | libc::ENFILE => Some(Shortage::FileDescriptors),
            libc::ENOMEM => Some(Shortage::Memory),
            libc::ENOBUFS => Some(Shortage::SocketBuffers),
            _ => None,
        }
    }

    /// The shortage behind `error` or any of its sources (a connector wraps the I/O error).
    pub(crate) fn behind(error: &(dyn std::error::Error + 'static)) -> Option<Shortage> {
        let mut next = Some(error);
        while let Some(error) = next {
            next = error.source();
            if let Some(io) = error.downcast_ref::<std::io::Error>() {
                if let Some(shortage) = Shortage::of_io(io) {
                    return Some(shortage);
                }
                // An io::Error made from another error hides it from `source`.
                if let Some(inner) = io.get_ref() {
                    next = Some(inner);
                }
            }
        }
        None
    }

    /// Counts one meeting of this shortage at `site`.
    pub(crate) fn count(self, site: Site) {
        MET[site as usize][self as usize].fetch_add(1, Ordering::Relaxed);
    }
}

impl Site {
    pub(crate) const ALL: [Site; 3] = [Site::Accept, Site::AdminAccept, Site::UpstreamConnect];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Site::Accept => "accept",
            Site::AdminAccept => "admin_accept",
            Site::UpstreamConnect => "upstream_connect",
        }
    }
}

/// Shortages met since the process started, by site and resource.
static MET: [[AtomicU64; 3]; 3] = [const { [const { AtomicU64::new(0) }; 3] }; 3];

pub(crate) fn met(site: Site, shortage: Shortage) -> u64 {
    MET[site as usize][shortage as usize].load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shortage_is_found_behind_the_errors_that_wrap_it() {
        let io = std::io::Error::from_raw_os_error(libc::EMFILE);
        let wrapped: Box<dyn std::error::Error + Send + Sync> = Box::new(std::io::Error::other(io));
        assert_eq!(
            Shortage::behind(wrapped.as_ref()),
            Some(Shortage::FileDescriptors)
        );
        let refused = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert_eq!(Shortage::behind(&refused), None);
        let buffers = std::io::Error::from_raw_os_error(libc::ENOBUFS);
        assert_eq!(Shortage::of_io(&buffers), Some(Shortage::SocketBuffers));
    }
}
