//! One window of one limit for one identity, as a request needs it checked, and the rule
//! every store follows: a request's windows are committed all-or-nothing, group by group.

use std::time::Duration;

use smallvec::SmallVec;

use crate::limit::key::Identity;
use crate::limit::{Algorithm, Rate};

/// Per-request lists: a request meets a handful of windows, so they live on the stack. Four
/// (two limits of two windows) stay inline; more spill to the heap. Eight made every list of
/// window requests large, copied whole each time a future holding one moved
/// (docs/PERFORMANCE.md, "Measured behind the code").
pub type Small<T> = SmallVec<[T; 4]>;

/// One window of one limit for one identity, as a request needs it checked.
#[derive(Debug, Clone)]
pub struct WindowRequest {
    pub identity: Identity,
    /// The identity of the whole limit (all its windows), as reported for denials.
    pub limit_identity: Identity,
    pub algorithm: Algorithm,
    pub rate: Rate,
    pub cost: u64,
    pub max_delay: Duration,
    /// Windows of one limit share a group; a group is admitted or not as a whole.
    pub group: usize,
    /// Which window of its limit this is (for Redis keys).
    pub window: usize,
    /// A shadow group never blocks the request; it is committed only when it would allow.
    pub shadow: bool,
}

/// Which windows to commit, given every window's verdict: when all enforced groups allow,
/// the windows of every group that allows (enforced or shadow); otherwise none. The windows of
/// one group must be adjacent in `requests`, as the limiter builds them.
pub(crate) fn groups_to_commit(requests: &[WindowRequest], allowed: &[bool]) -> Small<bool> {
    // In place, a group at a time (counting each group's run and extending a second list
    // cost a fifth more).
    let mut commit: Small<bool> = Small::from_slice(allowed);
    let mut start = 0;
    for end in 1..=requests.len() {
        if end < requests.len() && requests[end].group == requests[start].group {
            continue;
        }
        let group_allows = commit[start..end].iter().all(|allows| *allows);
        commit[start..end].fill(group_allows);
        start = end;
    }
    let enforced_allow = (requests.iter())
        .zip(&commit)
        .all(|(request, allows)| request.shadow || *allows);
    if !enforced_allow {
        commit.fill(false);
    }
    commit
}
