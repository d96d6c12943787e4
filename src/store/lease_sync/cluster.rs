//! The lease sync on a Redis Cluster: a sync's entries grouped by the master serving each
//! identity's slot, and one call per master, concurrently, each with only its own keys. Every
//! master of the view is called, even with no entry, so that each node's identities are
//! known fresh (or stale) on their own. The master of the instances' set records the gateway
//! and counts the fleet; the others share among the count the gateway last read.
//!
//! A call is never redirected: its keys span slots, so a `MOVED`, `ASK`, `TRYAGAIN` or a key
//! the node no longer holds fails that node's call for this sync (what it gave back was taken
//! off already: under-admission only) and asks for the slots to be read again.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use super::{Mode, SyncCall, SyncEntry, SyncReply, instances_key, parse_reply};
use crate::rt::clock::Nanos;
use crate::store::cluster::{Cluster, slot_of};
use crate::store::error::ConnectionError;
use crate::store::node::Node;
use crate::store::pipe::{self, Reply};
use crate::store::redis::{RedisStore, StoreError};
use crate::store::slot::identity_slot;

/// One master's part of a sync: which entries it carried (indices in the sync's entries),
/// the slots it serves (whose identities its outcome makes fresh), and its outcome.
pub struct NodeSync {
    /// This master holds the instances' set: its reply counts the fleet.
    pub holder: bool,
    pub entries: Vec<usize>,
    pub slots: Vec<u16>,
    pub result: Result<SyncReply, StoreError>,
}

impl RedisStore {
    /// Syncs `entries` on the cluster, one call per master; `shared_by`: the live instances
    /// the gateway last read, for the masters that do not hold the instances' set. Entries
    /// whose slot no master serves fail with the whole sync's error only when there is no
    /// view at all; otherwise they are left out (their slots are served by none, so stale).
    pub async fn sync_leases_cluster(
        &self,
        instance: &str,
        live_for: Duration,
        entries: &[SyncEntry<'_>],
        shared_by: u64,
        now: Option<Nanos>,
    ) -> Result<Vec<NodeSync>, StoreError> {
        let cluster = self.cluster().ok_or(ConnectionError::NotACluster)?;
        let view = cluster.first_view().await?;
        let prefix = &self.config().key_prefix;
        let holder = view.master_of(slot_of(&instances_key(prefix)));
        let mut groups: Vec<Vec<usize>> = vec![Vec::new(); view.masters.len()];
        for (i, entry) in entries.iter().enumerate() {
            match view.master_of(identity_slot(entry.limit_identity)) {
                Some(master) => groups[master].push(i),
                None => cluster.request_refresh(),
            }
        }
        let wait = self.config().longest_wait();
        let calls = groups.iter().enumerate().map(|(master, indices)| {
            let mine: Vec<SyncEntry> = indices.iter().map(|&i| entries[i].clone()).collect();
            let mode = Mode::Cluster((holder != Some(master)).then_some(shared_by));
            let node = view.masters[master].clone();
            async move {
                let call = SyncCall {
                    key_prefix: prefix,
                    instance,
                    live_for,
                    entries: &mine,
                    now,
                    mode,
                };
                let result = call_node(cluster, &node, wait, &call).await;
                result.and_then(|reply| parse_reply(reply, mine.len()))
            }
        });
        let results = join_all(calls).await;
        Ok(groups
            .into_iter()
            .zip(results)
            .enumerate()
            .map(|(master, (entries, result))| NodeSync {
                holder: holder == Some(master),
                entries,
                slots: view.slots_of(master),
                result,
            })
            .collect())
    }
}

/// `call` on `node` alone, under its breaker; the script loaded once if the node lacks it.
/// Any failure asks for the slots to be read again (a redirection, a failover).
async fn call_node(
    cluster: &Arc<Cluster>,
    node: &Node,
    wait: Duration,
    call: &SyncCall<'_>,
) -> Result<Reply, StoreError> {
    let write = call.writer();
    let result = match answered(node, wait, &write).await {
        Err(error) if error.is_noscript() => {
            let text = call.text();
            let load = |out: &mut Vec<u8>| {
                pipe::Command::new(out, 3)
                    .arg(b"SCRIPT")
                    .arg(b"LOAD")
                    .arg(text.as_bytes());
            };
            match answered(node, wait, &load).await {
                Ok(_) => answered(node, wait, &write).await,
                Err(error) => Err(error),
            }
        }
        result => result,
    };
    if result.is_err() {
        cluster.request_refresh();
    }
    result
}

/// One command on `node` under its breaker, an error reply counting as an answer (as a
/// redirection does on the exact path): the node is up, so its breaker stays closed.
async fn answered(
    node: &Node,
    wait: Duration,
    write: &(dyn Fn(&mut Vec<u8>) + Sync),
) -> Result<Reply, StoreError> {
    let call = async {
        match node.pipe().call(wait, write).await {
            Err(StoreError::Server(error)) => Ok(Err(StoreError::Server(error))),
            other => other.map(Ok),
        }
    };
    node.guarded(call).await?
}
