//! The cluster's view of which master serves each slot, and reading it again in the
//! background: after a redirection or a failure, and when it is older than `STALE_AFTER`; one
//! read at a time, at most one per `REFRESH_PAUSE`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::slots::{SLOTS, SlotRange, parse_slots};
use super::{Cluster, split_address};
use crate::store::connect::Address;
use crate::store::error::{ConnectionError, ErrorReply, ProtocolError, StoreError};
use crate::store::node::Node;
use crate::store::pipe::{Command, Reply};

const REFRESH_PAUSE: Duration = Duration::from_millis(200);
const STALE_AFTER: Duration = Duration::from_secs(10);
const NO_MASTER: u16 = u16::MAX;

/// Which master serves each slot, as of `taken_at`.
pub(crate) struct View {
    /// Per slot, its master's index in `masters`, or `NO_MASTER`.
    slots: Box<[u16]>,
    pub masters: Vec<Arc<Node>>,
    /// Every node it names, replicas too: where to read the next view.
    known: Vec<Address>,
    taken_at: Instant,
}

impl View {
    /// The index in `masters` of the master of `slot`, if one serves it.
    pub(crate) fn master_of(&self, slot: u16) -> Option<usize> {
        match self.slots.get(usize::from(slot)) {
            Some(&NO_MASTER) | None => None,
            Some(&index) => Some(usize::from(index)),
        }
    }

    /// The slots `masters[index]` serves.
    pub(crate) fn slots_of(&self, index: usize) -> Vec<u16> {
        (0..SLOTS as u16)
            .filter(|&slot| self.master_of(slot) == Some(index))
            .collect()
    }
}

#[derive(Default)]
pub(super) struct Refresh {
    running: bool,
    started: Option<Instant>,
    last_error: Option<StoreError>,
}

impl Cluster {
    /// Reads the view now if there is none yet (waiting for one under way); the masters.
    pub(crate) async fn first_view(self: &Arc<Self>) -> Result<Arc<View>, StoreError> {
        if let Some(view) = self.view.load_full() {
            return Ok(view);
        }
        self.wait_for_view().await
    }

    /// The master of `slot` in the current view; before the first view, waits for it.
    pub(super) async fn master_for(self: &Arc<Self>, slot: u16) -> Result<Arc<Node>, StoreError> {
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
                // As Redis would answer a call for it.
                Err(StoreError::Server(ErrorReply::new(format!(
                    "CLUSTERDOWN slot {slot} is not served by any master"
                ))))
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
                return Err(ConnectionError::SlotsStillUnknown(self.first_view_wait).into());
            }
        }
    }

    /// Starts reading the view in the background, unless a read runs or one started less
    /// than `REFRESH_PAUSE` ago.
    pub(crate) fn request_refresh(self: &Arc<Self>) {
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
        let mut last_error = StoreError::Connection(ConnectionError::NoNodeToAsk);
        for (host, port) in self.candidates() {
            let node = self.node(&host, port)?;
            let wait = self.longest_call;
            let slots = |out: &mut Vec<u8>| {
                Command::new(out, 2).arg(b"CLUSTER").arg(b"SLOTS");
            };
            let ranges = match node.pipe().call(wait, slots).await {
                Ok(Reply::Array(frame)) => parse_slots(&frame, &host),
                Ok(other) => Err(ProtocolError::Unexpected {
                    expected: "CLUSTER SLOTS' array",
                    got: other.kind(),
                }
                .into()),
                Err(error) => Err(error),
            };
            match ranges {
                Ok(ranges) if !ranges.is_empty() => return self.install(&ranges),
                Ok(_) => {
                    let address = format!("{host}:{port}").into();
                    last_error = ProtocolError::ServesNoSlots { address }.into();
                }
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
}

fn unknown_view(error: &StoreError) -> StoreError {
    ConnectionError::SlotsUnknown(Box::new(error.clone())).into()
}
