//! The eviction check of a node's server: a server that may evict the
//! lock's key while its holder runs is refused, or accepted with a note
//! (`--allow-eviction`).

use anyhow::anyhow;

use super::{Failed, Memory, Node};
use crate::lock::error::{Fault, NodeError, NodeResult};
use crate::lock::info::{cannot_read_info, eviction};
use crate::lock::keys::LockKeys;
use crate::lock::reply::{Acquire, Screened};
use crate::secrets::scrub;

impl Node {
    /// Before the first acquire on a connection: refuse a server that may
    /// evict the lock's key while its holder runs (`maxmemory` set with any
    /// `maxmemory-policy` but `noeviction`: the key has a TTL, so every
    /// policy may pick it), unless `--allow-eviction` accepts the risk (a
    /// note). `maxmemory 0` is no limit. Usually the acquire script makes
    /// this check itself, before it writes anything ([`Node::screens`]);
    /// this is the way with `--allow-eviction`, whose warning needs the
    /// server's figures: `INFO memory`, one round trip per connection. A
    /// user without `+info` gets a note instead.
    pub(in crate::lock) fn check_eviction(&mut self, keys: &LockKeys) -> NodeResult<()> {
        match self.memory {
            Memory::Unreadable => return Ok(()),
            Memory::Checked if self.conn.is_some() => return Ok(()),
            _ => {}
        }
        let info = self.send::<String>(redis::cmd("INFO").arg("memory"), Some(keys.slot()));
        let text = match info {
            Ok(text) => text,
            Err(Failed::Redis(e)) if cannot_read_info(&e) => {
                self.info_unreadable(&e.to_string());
                return Ok(());
            }
            Err(failed) => return Err(self.failure(failed, false)),
        };
        (self.answered, self.ever_answered) = (true, true);
        let Some((maxmemory, policy)) = eviction(&text) else {
            self.memory = Memory::Checked;
            return Ok(());
        };
        let risk = self.eviction_risk(&maxmemory.to_string(), policy);
        if self.endpoint.allow_eviction {
            self.memory = Memory::Checked;
            self.note(format!(
                "WARNING: {risk}; running anyway (--allow-eviction): a second holder may \
                 run beside this one"
            ));
            return Ok(());
        }
        Err(self.refuse_eviction(risk))
    }

    /// Whether the acquire script is to make the eviction check itself
    /// (`scripts::eviction_lib`): this connection was not checked (or a
    /// new one will be made), and no `--allow-eviction` (see
    /// [`Node::check_eviction`]).
    pub(in crate::lock) fn screens(&self) -> bool {
        !self.endpoint.allow_eviction
            && match self.memory {
                Memory::Unchecked => true,
                Memory::Checked => self.conn.is_none(),
                Memory::Unreadable => false,
            }
    }

    /// What the acquire script's eviction check found: the acquire's
    /// answer (the connection is checked now); a refusal (nothing was
    /// written); or `None`: `INFO` is refused to this user (a note), so
    /// ask again without the check.
    pub(in crate::lock) fn screened(&mut self, found: Screened) -> NodeResult<Option<Acquire>> {
        match found {
            Screened::Answer(answer) => {
                self.memory = Memory::Checked;
                Ok(Some(answer))
            }
            Screened::Evicts(maxmemory, policy) => {
                let risk = self.eviction_risk(&maxmemory, &policy);
                Err(self.refuse_eviction(risk))
            }
            Screened::NoInfo(error) => {
                self.info_unreadable(&error);
                Ok(None)
            }
        }
    }

    fn eviction_risk(&self, maxmemory: &str, policy: &str) -> String {
        format!(
            "{}: the server may evict the lock's key while its holder runs \
             (maxmemory {} with maxmemory-policy {})",
            scrub(self.shown()),
            crate::secrets::untrusted(maxmemory),
            crate::secrets::untrusted(policy)
        )
    }

    fn refuse_eviction(&mut self, risk: String) -> NodeError {
        let fix = "set `CONFIG SET maxmemory-policy noeviction` (and in redis.conf), \
                   or accept the risk with --allow-eviction";
        // Said if a Redlock majority holds the lock without this node.
        self.note(format!(
            "{risk}: this node does not count for the lock; {fix}"
        ));
        NodeError {
            fault: Fault::Refused,
            error: anyhow!("{risk}: {fix}"),
        }
    }

    /// `INFO memory` is refused to this user: said once, not asked again.
    fn info_unreadable(&mut self, error: &str) {
        if self.memory != Memory::Unreadable {
            self.memory = Memory::Unreadable;
            self.note(format!(
                "{}: cannot check the server's maxmemory-policy (INFO memory: {}); \
                 grant the Redis user +info, or make sure the server never evicts \
                 keys (maxmemory-policy noeviction)",
                scrub(self.shown()),
                crate::secrets::untrusted(error)
            ));
        }
    }
}
