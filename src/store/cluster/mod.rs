//! A Redis Cluster as the gateway uses it: its own view of which master serves each slot
//! (read with `CLUSTER SLOTS`), a `Node` per node (a connection per worker and a breaker
//! each), and redirections followed as Redis asks: `MOVED` (the slot has moved: the call goes
//! there and the view is read again), `ASK` (the slot is being migrated: this call goes to
//! the importing node after `ASKING`), `TRYAGAIN` (keys of one call split mid-migration: a
//! moment later, again).
//!
//! The view is read again in the background, never in a request's way: after a redirection
//! or a failure, and when it is older than `STALE_AFTER`; one read at a time, at most one per
//! `REFRESH_PAUSE`. A failed master then holds up only the calls for its own slots, and once
//! the cluster has promoted a replica, the next read sends them there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::connect::{Address, Session};
use super::node::Node;
use super::pipe::{Command, Pipe, Reply};
use super::redis::StoreError;
use super::script::ScriptCall;
pub use slots::{SLOTS, slot_of};
use slots::{SlotRange, parse_slots};

mod slots;

/// How many redirections one call follows before it fails.
const MOST_REDIRECTIONS: usize = 5;
const TRY_AGAIN_AFTER: Duration = Duration::from_millis(10);
const REFRESH_PAUSE: Duration = Duration::from_millis(200);
const STALE_AFTER: Duration = Duration::from_secs(10);
const NO_MASTER: u16 = u16::MAX;

/// What a call sends to the master of its slot.
pub enum Request<'a> {
    Script(&'a ScriptCall<'a>),
    Hget { hash: &'a str, field: &'a [u8] },
}

pub struct Cluster {
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

/// Which master serves each slot, as of `taken_at`.
pub struct View {
    /// Per slot, its master's index in `masters`, or `NO_MASTER`.
    slots: Box<[u16]>,
    pub masters: Vec<Arc<Node>>,
    /// Every node it names, replicas too: where to read the next view.
    known: Vec<Address>,
    taken_at: Instant,
}

#[derive(Default)]
struct Refresh {
    running: bool,
    started: Option<Instant>,
    last_error: Option<StoreError>,
}

/// What a node answered, as far as routing goes.
enum Answer {
    Reply(Reply),
    Moved(String, u16),
    Ask(String, u16),
    TryAgain,
}

impl Cluster {
    pub fn new(
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
    pub fn masters(&self) -> Vec<Arc<Node>> {
        self.view
            .load()
            .as_ref()
            .map_or_else(Vec::new, |view| view.masters.clone())
    }

    /// Sends `request` to the master of the slot of `key`, following redirections, each node
    /// under its own breaker; each node is given `wait` to answer.
    pub async fn call(
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
        Err(StoreError::Protocol(format!(
            "more than {MOST_REDIRECTIONS} redirections for slot {slot}"
        )))
    }

    /// Reads the view now if there is none yet (waiting for one under way); the masters.
    pub async fn first_view(self: &Arc<Self>) -> Result<Arc<View>, StoreError> {
        if let Some(view) = self.view.load_full() {
            return Ok(view);
        }
        self.wait_for_view().await
    }

    /// The master of `slot` in the current view; before the first view, waits for it.
    async fn master_for(self: &Arc<Self>, slot: u16) -> Result<Arc<Node>, StoreError> {
        let view = match self.view.load_full() {
            Some(view) => view,
            None => self.wait_for_view().await?,
        };
        if view.taken_at.elapsed() >= STALE_AFTER {
            self.request_refresh();
        }
        match view.slots[usize::from(slot)] {
            NO_MASTER => {
                self.request_refresh();
                Err(StoreError::Server(format!(
                    "CLUSTERDOWN slot {slot} is not served by any master"
                )))
            }
            index => Ok(view.masters[usize::from(index)].clone()),
        }
    }

    /// Waits for a first view to be read, within `first_view_wait`. When the last read
    /// failed and none runs, fails at once (the next read is on its way).
    async fn wait_for_view(self: &Arc<Self>) -> Result<Arc<View>, StoreError> {
        let give_up = Instant::now() + self.first_view_wait;
        loop {
            let notified = self.refreshed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(view) = self.view.load_full() {
                return Ok(view);
            }
            let failed = {
                let refresh = self.refresh.lock().unwrap_or_else(|p| p.into_inner());
                (!refresh.running)
                    .then(|| refresh.last_error.clone())
                    .flatten()
            };
            self.request_refresh();
            if let Some(error) = failed {
                return Err(unknown_view(&error));
            }
            if tokio::time::timeout_at(give_up, notified).await.is_err() {
                return Err(StoreError::Connection(format!(
                    "the cluster's slots are still unknown after {:?}",
                    self.first_view_wait
                )));
            }
        }
    }

    /// Starts reading the view in the background, unless a read runs or one started less
    /// than `REFRESH_PAUSE` ago.
    pub fn request_refresh(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut refresh = self.refresh.lock().unwrap_or_else(|p| p.into_inner());
            let recent = refresh
                .started
                .is_some_and(|at| at.elapsed() < REFRESH_PAUSE);
            if refresh.running || recent {
                return;
            }
            refresh.running = true;
            refresh.started = Some(Instant::now());
        }
        let cluster = self.clone();
        runtime.spawn(async move {
            let result = cluster.read_view().await;
            if let Err(error) = &result {
                tracing::debug!(%error, "cannot read the cluster's slots");
            }
            let mut refresh = cluster.refresh.lock().unwrap_or_else(|p| p.into_inner());
            refresh.running = false;
            refresh.last_error = result.err();
            drop(refresh);
            cluster.refreshed.notify_waiters();
        });
    }

    /// Asks the known nodes, healthy masters first and seeds last, for `CLUSTER SLOTS`, and
    /// installs the first answer.
    async fn read_view(&self) -> Result<(), StoreError> {
        let mut last_error = StoreError::Connection("no node to ask for the slots".into());
        for (host, port) in self.candidates() {
            let node = self.node(&host, port)?;
            let wait = self.longest_call;
            let slots = |out: &mut Vec<u8>| {
                Command::new(out, 2).arg(b"CLUSTER").arg(b"SLOTS");
            };
            let ranges = match node.pipe().call(wait, slots).await {
                Ok(Reply::Array(frame)) => parse_slots(&frame, &host),
                Ok(other) => Err(StoreError::Protocol(format!(
                    "CLUSTER SLOTS answered {other:?}"
                ))),
                Err(error) => Err(error),
            };
            match ranges {
                Ok(ranges) if !ranges.is_empty() => return self.install(&ranges),
                Ok(_) => last_error = StoreError::Server(format!("{host}:{port} serves no slots")),
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    /// Where to ask: the masters of the view whose breakers are closed, the other nodes it
    /// names, then the seeds; each once.
    fn candidates(&self) -> Vec<Address> {
        let view = self.view.load_full();
        let mut candidates: Vec<Address> = Vec::new();
        let mut add = |address: Address| {
            if !candidates.contains(&address) {
                candidates.push(address);
            }
        };
        if let Some(view) = &view {
            let healthy = view.masters.iter().filter(|m| !m.breaker_open());
            for master in healthy {
                if let Some(address) = split_address(master.address()) {
                    add(address);
                }
            }
            view.known.iter().cloned().for_each(&mut add);
        }
        self.seeds.iter().cloned().for_each(add);
        candidates
    }

    fn install(&self, ranges: &[SlotRange]) -> Result<(), StoreError> {
        let mut slots = vec![NO_MASTER; SLOTS].into_boxed_slice();
        let mut masters: Vec<Arc<Node>> = Vec::new();
        let mut known = Vec::new();
        for range in ranges {
            let node = self.node(&range.master.0, range.master.1)?;
            let index = match masters.iter().position(|m| Arc::ptr_eq(m, &node)) {
                Some(index) => index,
                None => {
                    masters.push(node);
                    masters.len() - 1
                }
            };
            let index = u16::try_from(index).unwrap_or(NO_MASTER);
            slots[range.start..=range.end].fill(index);
            for address in std::iter::once(&range.master).chain(&range.replicas) {
                if !known.contains(address) {
                    known.push(address.clone());
                }
            }
        }
        // Nodes the cluster no longer names are let go (their connections close once the
        // calls still holding them end).
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        nodes.retain(|address, _| {
            split_address(address).is_some_and(|a| known.contains(&a) || self.seeds.contains(&a))
        });
        drop(nodes);
        self.view.store(Some(Arc::new(View {
            slots,
            masters,
            known,
            taken_at: Instant::now(),
        })));
        Ok(())
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

fn unknown_view(error: &StoreError) -> StoreError {
    StoreError::Connection(format!("the cluster's slots are unknown: {error}"))
}

async fn send(
    pipe: &Pipe,
    wait: Duration,
    request: &Request<'_>,
    asking: bool,
) -> Result<Reply, StoreError> {
    match request {
        Request::Script(call) if asking => pipe.call_script_asking(wait, call).await,
        Request::Script(call) => pipe.call_script(wait, call).await,
        Request::Hget { hash, field } => {
            let hget = |out: &mut Vec<u8>| {
                Command::new(out, 3)
                    .arg(b"HGET")
                    .arg(hash.as_bytes())
                    .arg(field);
            };
            pipe.call_with(wait, asking, hget).await
        }
    }
}

/// Redirections are answers (the node is up); anything else is the call's result.
fn classify(reply: Result<Reply, StoreError>, node: &Node) -> Result<Answer, StoreError> {
    let error = match reply {
        Ok(reply) => return Ok(Answer::Reply(reply)),
        Err(StoreError::Server(error)) => error,
        Err(other) => return Err(other),
    };
    let mut words = error.split_ascii_whitespace();
    let redirect = match words.next() {
        Some("MOVED") => Answer::Moved,
        Some("ASK") => Answer::Ask,
        Some("TRYAGAIN") => return Ok(Answer::TryAgain),
        _ => return Err(StoreError::Server(error)),
    };
    let target = words.nth(1).and_then(split_address);
    match target {
        // An empty host: the node that answered.
        Some((host, port)) if host.is_empty() => match split_address(node.address()) {
            Some((own, _)) => Ok(redirect(own, port)),
            None => Err(StoreError::Protocol(format!("cannot follow {error:?}"))),
        },
        Some((host, port)) => Ok(redirect(host, port)),
        None => Err(StoreError::Protocol(format!("cannot follow {error:?}"))),
    }
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
        let error = |text: &str| Err(StoreError::Server(text.into()));
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
