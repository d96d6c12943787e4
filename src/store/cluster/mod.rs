//! A Redis Cluster as the gateway uses it: its own view of which master serves each slot
//! (read with `CLUSTER SLOTS`), a `Node` per node (a connection per worker and a breaker
//! each), and redirections followed as Redis asks: `MOVED` (the slot has moved: the call goes
//! there and the view is read again), `ASK` (the slot is being migrated: this call goes to
//! the importing node after `ASKING`), `TRYAGAIN` (keys of one call split mid-migration: a
//! moment later, again).
//!
//! The view is read again in the background, never in a request's way (`view.rs` says when).
//! A failed master then holds up only the calls for its own slots, and once the cluster has
//! promoted a replica, the next read sends them there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::sync::Notify;

use super::connect::{Address, Session};
use super::error::{ErrorReply, ProtocolError, RedirectionKind, StoreError};
use super::node::{Node, NodePipe};
use super::pipe::{Command, Reply};
use super::script::ScriptCall;
pub(crate) use crate::store::slot::{SLOTS, slot_of};
use view::Refresh;
pub(crate) use view::View;

mod slots;
mod view;

/// How many redirections one call follows before it fails.
const MOST_REDIRECTIONS: usize = 5;
const TRY_AGAIN_AFTER: Duration = Duration::from_millis(10);

/// What a call sends to the master of its slot.
pub(crate) enum Request<'a> {
    Script(&'a ScriptCall<'a>),
    Hget {
        hash: &'a str,
        field: &'a [u8],
    },
    /// A command `write` appends (the admin endpoints' reads and deletes).
    Command(&'a (dyn Fn(&mut Vec<u8>) + Sync)),
}

pub(crate) struct Cluster {
    seeds: Vec<Address>,
    /// The seed URLs' session, which every node shares.
    session: Session,
    workers: usize,
    /// The longest a call may take, for the nodes' breakers.
    longest_call: Duration,
    /// How long a first read of the view may keep calls waiting.
    first_view_wait: Duration,
    nodes: Mutex<HashMap<Arc<str>, Arc<Node>>>,
    view: ArcSwapOption<View>,
    refresh: Mutex<Refresh>,
    refreshed: Notify,
}

/// What a node answered, as far as routing goes.
enum Answer {
    Reply(Reply),
    Moved(String, u16),
    Ask(String, u16),
    TryAgain,
}

impl Cluster {
    pub(crate) fn new(
        seeds: Vec<Address>,
        session: Session,
        workers: usize,
        longest_call: Duration,
        first_view_wait: Duration,
    ) -> Cluster {
        Cluster {
            seeds,
            session,
            workers,
            longest_call,
            first_view_wait,
            nodes: Mutex::default(),
            view: ArcSwapOption::empty(),
            refresh: Mutex::default(),
            refreshed: Notify::new(),
        }
    }

    /// The masters of the current view (none before the first).
    pub(crate) fn masters(&self) -> Vec<Arc<Node>> {
        self.view
            .load()
            .as_ref()
            .map_or_else(Vec::new, |view| view.masters.clone())
    }

    /// Sends `request` to the master of the slot of `key`, following redirections, each node
    /// under its own breaker; each node is given `wait` to answer.
    pub(crate) async fn call(
        self: &Arc<Self>,
        key: &[u8],
        wait: Duration,
        request: &Request<'_>,
    ) -> Result<Reply, StoreError> {
        let slot = slot_of(key);
        let mut node = self.master_for(slot).await?;
        let mut asking = false;
        for _ in 0..MOST_REDIRECTIONS {
            let sent = node.guarded(async {
                let reply = send(node.pipe(), wait, request, asking).await;
                classify(reply, &node)
            });
            match sent.await {
                Ok(Answer::Reply(reply)) => return Ok(reply),
                Ok(Answer::Moved(host, port)) => {
                    self.request_refresh();
                    (node, asking) = (self.node(&host, port)?, false);
                }
                Ok(Answer::Ask(host, port)) => (node, asking) = (self.node(&host, port)?, true),
                Ok(Answer::TryAgain) => {
                    tokio::time::sleep(TRY_AGAIN_AFTER).await;
                    (node, asking) = (self.master_for(slot).await?, false);
                }
                Err(error) => {
                    // Perhaps a failover: the next view may name another master.
                    self.request_refresh();
                    return Err(error);
                }
            }
        }
        Err(ProtocolError::TooManyRedirections {
            most: MOST_REDIRECTIONS,
            slot,
        }
        .into())
    }

    /// The node at `host:port`, made on first use.
    fn node(&self, host: &str, port: u16) -> Result<Arc<Node>, StoreError> {
        let settings = self.session.node(host, port)?;
        let address: Arc<str> = settings.address().into();
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let node = nodes
            .entry(address)
            .or_insert_with(|| Arc::new(Node::new(settings, self.workers, self.longest_call)));
        Ok(node.clone())
    }
}

async fn send(
    pipe: &NodePipe,
    wait: Duration,
    request: &Request<'_>,
    asking: bool,
) -> Result<Reply, StoreError> {
    match request {
        Request::Script(call) if asking => pipe.call_merged_asking(wait, call).await,
        Request::Script(call) => pipe.call_merged(wait, call).await,
        Request::Hget { hash, field } => {
            let hget = |out: &mut Vec<u8>| {
                Command::new(out, 3)
                    .arg(b"HGET")
                    .arg(hash.as_bytes())
                    .arg(field);
            };
            pipe.call_with(wait, asking, hget).await
        }
        Request::Command(write) => pipe.call_with(wait, asking, write).await,
    }
}

/// Redirections are answers (the node is up); anything else is the call's result.
fn classify(reply: Result<Reply, StoreError>, node: &Node) -> Result<Answer, StoreError> {
    let error = match reply {
        Ok(reply) => return Ok(Answer::Reply(reply)),
        Err(StoreError::Server(error)) => error,
        Err(other) => return Err(other),
    };
    if error.is_tryagain() {
        return Ok(Answer::TryAgain);
    }
    if !error.is_redirection() {
        return Err(StoreError::Server(error));
    }
    let cannot_follow =
        |error: &ErrorReply| -> StoreError { ProtocolError::BadRedirection(error.clone()).into() };
    let Some(to) = error.redirection() else {
        return Err(cannot_follow(&error));
    };
    let host = match to.host {
        // An empty host: the node that answered.
        "" => match split_address(node.address()) {
            Some((own, _)) => own,
            None => return Err(cannot_follow(&error)),
        },
        host => host.to_string(),
    };
    Ok(match to.kind {
        RedirectionKind::Moved => Answer::Moved(host, to.port),
        RedirectionKind::Ask => Answer::Ask(host, to.port),
    })
}

/// `host:port` (`[v6]:port` too) into its parts.
fn split_address(address: &str) -> Option<(String, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_string(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirections_name_where_to_go() {
        let node = Node::new(
            crate::store::pipe::Settings {
                host: "10.0.0.9".into(),
                port: 7000,
                username: None,
                password: None,
                db: 0,
                connect_timeout: Duration::from_secs(1),
                timeout: Duration::from_millis(50),
                tls: None,
                merge: false,
            },
            1,
            Duration::from_secs(1),
        );
        let error = |text: &str| Err(StoreError::Server(ErrorReply::new(text)));
        assert!(matches!(
            classify(error("MOVED 3999 127.0.0.1:6381"), &node),
            Ok(Answer::Moved(host, 6381)) if host == "127.0.0.1"
        ));
        assert!(matches!(
            classify(error("ASK 3999 :6390"), &node),
            Ok(Answer::Ask(host, 6390)) if host == "10.0.0.9"
        ));
        assert!(matches!(
            classify(
                error("TRYAGAIN Multiple keys request during rehashing of slot"),
                &node
            ),
            Ok(Answer::TryAgain)
        ));
        assert!(matches!(
            classify(error("CLUSTERDOWN The cluster is down"), &node),
            Err(StoreError::Server(_))
        ));
        assert!(matches!(
            classify(error("MOVED 3999 nowhere"), &node),
            Err(StoreError::Protocol(_))
        ));
    }
}
