//! What the admin endpoints ask of Redis about one identity, off the request path: a read of
//! its windows by the limit script in its `peek` mode (which writes nothing), and deleting its
//! keys. Commands of their own, never merged with the requests' script calls.

use super::commands::bulk;
use super::{Backend, RedisStore, StoreError};
use crate::limit::WindowCheck;
use crate::limit::window::{Small, WindowRequest};
use crate::store::cluster;
use crate::store::pipe;
use crate::store::script;

impl RedisStore {
    /// Where one identity's windows (`requests`, of one limit) stand, as the script checks
    /// them, writing nothing: for the admin endpoints, off the request path.
    pub async fn peek(
        &self,
        requests: &[WindowRequest],
        limits: &[&str],
    ) -> Result<Small<WindowCheck>, StoreError> {
        let call = self.script_call(requests, limits, None);
        let write = |out: &mut Vec<u8>| {
            let mut batch = script::Batch::default();
            batch.add(&call);
            let mut command = pipe::Command::new(out, batch.arguments() + 1);
            batch.write_peek(&mut command);
        };
        let reply = self.command(&script::first_key(&call), &write).await?;
        script::parse_reply(&bulk(reply)?, requests.len())
    }

    /// Deletes the keys of one identity's windows (`requests`, of one limit), and its denial
    /// remembered here: its next request starts afresh.
    pub async fn forget(
        &self,
        requests: &[WindowRequest],
        limits: &[&str],
    ) -> Result<(), StoreError> {
        let call = self.script_call(requests, limits, None);
        let keys = script::keys_of(&call);
        let Some(first) = keys.first() else {
            return Ok(());
        };
        let write = |out: &mut Vec<u8>| {
            let mut command = pipe::Command::new(out, keys.len() + 1);
            command.arg(b"DEL");
            for key in &keys {
                command.arg(key);
            }
        };
        self.command(first, &write).await?;
        for request in requests {
            self.denied.forget(request.limit_identity);
        }
        Ok(())
    }

    /// A script call of its own on a single node, with `load` (the script's `SCRIPT LOAD`)
    /// sent and the call retried once when the node answers `NOSCRIPT` (restarted, flushed),
    /// all as one call under the node's breaker. Sent as calls of their own, a `NOSCRIPT`
    /// counted as a failure: after an outage the breaker's probe met it, the breaker opened
    /// again, and the load that would have ended it was never sent.
    pub(crate) async fn script_command(
        &self,
        key: &[u8],
        write: &(dyn Fn(&mut Vec<u8>) + Sync),
        load: &(dyn Fn(&mut Vec<u8>) + Sync),
    ) -> Result<pipe::Reply, StoreError> {
        let Backend::Node(node) = &self.backend else {
            return match self.command(key, write).await {
                Err(error) if error.is_noscript() => {
                    self.command(key, load).await?;
                    self.command(key, write).await
                }
                reply => reply,
            };
        };
        let wait = self.config.longest_wait();
        let pipe = node.pipe();
        let call = async {
            match pipe.call(wait, write).await {
                Err(error) if error.is_noscript() => {
                    pipe.call(wait, load).await?;
                    pipe.call(wait, write).await
                }
                reply => reply,
            }
        };
        node.guarded(call).await
    }

    /// One command of its own (never merged), on the node of `key`'s slot.
    pub(crate) async fn command(
        &self,
        key: &[u8],
        write: &(dyn Fn(&mut Vec<u8>) + Sync),
    ) -> Result<pipe::Reply, StoreError> {
        let wait = self.config.longest_wait();
        match &self.backend {
            Backend::Node(node) => node.guarded(node.pipe().call(wait, write)).await,
            Backend::Cluster(cluster) => {
                let request = cluster::Request::Command(write);
                Box::pin(cluster.call(key, wait, &request)).await
            }
            Backend::Unusable(error) => Err(error.clone()),
        }
    }
}
