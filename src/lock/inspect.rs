//! Reading and deleting locks by hand, for `status`, `list` and
//! `force-release`.

use redis::FromRedisValue;

use super::calls::{self, ForceRelease, Inspect};
use super::error::{NodeError, NodeResult};
use super::fanout;
use super::keys::LockKeys;
use super::node::{Node, Unexpected};
use super::reply::{self, Forced, Inspected};

impl Node {
    /// Read a lock, its holder record and its fence, changing nothing:
    /// the call to send in a round (see `fanout`).
    pub(super) fn inspecting(keys: &LockKeys) -> redis::Cmd {
        calls::command(keys, &Inspect)
    }

    /// The reply to [`Node::inspecting`] (a semaphore's INSPECT may ask
    /// for its holders' records first: see `calls.rs`).
    pub(super) fn read_inspect(
        &mut self,
        keys: &LockKeys,
        reply: NodeResult<redis::Value>,
    ) -> NodeResult<Inspected> {
        let reply = self.answer(keys, &Inspect, reply)?;
        reply::inspect(reply).unexpected(self, "inspect")
    }

    /// The call that takes a lock from its holder, whoever it is, or only
    /// if it holds `token`: revoke it (no waiter gets it before the holder
    /// has stopped), or with `now` delete it at once; sent in a round (see
    /// `fanout`), its reply read by [`Node::read_forced`].
    pub(super) fn forcing(keys: &LockKeys, token: Option<&str>, now: bool, by: &str) -> redis::Cmd {
        calls::command(keys, &ForceRelease { token, now, by })
    }

    /// The reply to [`Node::forcing`] (a semaphore's may ask for its
    /// holders' records first: see `calls.rs`).
    pub(super) fn read_forced(
        &mut self,
        keys: &LockKeys,
        token: Option<&str>,
        now: bool,
        by: &str,
        reply: NodeResult<redis::Value>,
    ) -> NodeResult<(Forced, Inspected)> {
        let reply = self.answer(keys, &ForceRelease { token, now, by }, reply)?;
        reply::forced(reply).unexpected(self, "force-release")
    }
}

/// The names (KEY, not `P{KEY}`) of every lock under `prefix` on each of
/// `nodes` (on every primary of a Cluster), sorted: SCAN's pages in
/// rounds (see `fanout`), all nodes at once; a node that failed is not
/// asked again, its error stands.
pub(super) fn scan_each(nodes: &mut [Node], prefix: &str) -> Vec<NodeResult<Vec<String>>> {
    let plain: Vec<bool> = nodes.iter().map(|n| !n.is_cluster()).collect();
    let mut found = scan_pages(nodes, prefix, &plain);
    for (node, found) in nodes.iter_mut().zip(found.iter_mut()) {
        if found.is_none() {
            *found = Some(scan_primaries(node, prefix));
        }
    }
    found
        .into_iter()
        .map(|f| f.unwrap_or_else(|| Ok(Vec::new())))
        .collect()
}

/// A Cluster's locks: its primaries' SCANs, in rounds.
fn scan_primaries(node: &mut Node, prefix: &str) -> NodeResult<Vec<String>> {
    let mut primaries = node.primaries()?.unwrap_or_default();
    let every = vec![true; primaries.len()];
    let mut names = Vec::new();
    for found in scan_pages(&mut primaries, prefix, &every)
        .into_iter()
        .flatten()
    {
        names.extend(found?);
    }
    names.sort();
    names.dedup();
    Ok(names)
}

/// The locks on each server of `nodes` that `ask` names, found with SCAN
/// (KEYS would block the server), a round per page: plain locks `P{KEY}`
/// and semaphores `P{KEY}:limit` (`P}{~KEY}` for a KEY that begins with
/// `}`), all strings. Holder, fence and holder-set keys never match: the
/// pattern ends with the closing brace or the `t` of `:limit`. Names that
/// this tool could not have written are skipped.
fn scan_pages(
    nodes: &mut [Node],
    prefix: &str,
    ask: &[bool],
) -> Vec<Option<NodeResult<Vec<String>>>> {
    let pattern = format!("{}[{{}}]*[}}t]", glob_escape(prefix));
    let mut cursors: Vec<Option<u64>> = ask.iter().map(|a| a.then_some(0)).collect();
    let mut found: Vec<Option<NodeResult<Vec<String>>>> =
        ask.iter().map(|a| a.then(|| Ok(Vec::new()))).collect();
    while cursors.iter().any(Option::is_some) {
        let answers = fanout::round(
            nodes,
            |i, _| {
                let cursor = cursors.get(i).copied().flatten()?;
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(cursor).arg("MATCH").arg(&pattern);
                cmd.arg("COUNT").arg(1000).arg("TYPE").arg("string");
                Some(Ok((cmd, ())))
            },
            |node, (), reply| {
                let reply = reply?;
                <(u64, Vec<Vec<u8>>)>::from_redis_value(reply)
                    .map_err(|e| NodeError::unexpected(node.shown(), "SCAN", e.into()))
            },
        );
        for ((answer, cursor), found) in answers.into_iter().zip(&mut cursors).zip(&mut found) {
            let Some(answer) = answer else { continue };
            match (answer, found.as_mut()) {
                (Ok((next, batch)), Some(Ok(names))) => {
                    names.extend(batch.iter().filter_map(|raw| lock_name(prefix, raw)));
                    *cursor = (next != 0).then_some(next);
                }
                (Err(e), _) => (*found, *cursor) = (Some(Err(e)), None),
                _ => *cursor = None,
            }
        }
    }
    for names in found.iter_mut().flatten().flatten() {
        names.sort();
        names.dedup();
    }
    found
}

/// `prefix` as a literal in a SCAN MATCH pattern.
fn glob_escape(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// KEY from a scanned `P{KEY}`. KEY may itself hold braces and colons, so
/// strip the ends rather than split. Not UTF-8, empty or with control
/// characters: not written by this tool, skipped.
fn lock_name(prefix: &str, raw: &[u8]) -> Option<String> {
    let key = std::str::from_utf8(raw).ok()?;
    let rest = key.strip_prefix(prefix)?;
    // `P}{~KEY}` is the form of a KEY that begins with `}` (see LockKeys).
    let (inner, moved) = match rest.strip_prefix("}{~") {
        Some(inner) => (inner, true),
        None => (rest.strip_prefix('{')?, false),
    };
    let name = inner
        .strip_suffix('}')
        .or_else(|| inner.strip_suffix("}:limit"))?;
    if name.is_empty()
        || name.chars().any(char::is_control)
        || moved != (name.starts_with('}') && !prefix.contains('{'))
    {
        return None;
    }
    Some(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scanned_names_are_parsed_from_the_ends() {
        assert_eq!(lock_name("p:", b"p:{a}").as_deref(), Some("a"));
        assert_eq!(
            lock_name("p:", "p:{x {y}: z ü}".as_bytes()).as_deref(),
            Some("x {y}: z ü")
        );
        assert_eq!(lock_name("p:", b"p:{a}:holder"), None);
        assert_eq!(lock_name("p:", b"p:{a}:fence"), None);
        assert_eq!(lock_name("p:", b"p:{a}:limit").as_deref(), Some("a"));
        assert_eq!(lock_name("p:", b"p:{a}:holders"), None);
        assert_eq!(lock_name("p:", b"p:{a}:holder:1-2"), None);
        assert_eq!(
            lock_name("p:", b"p:{a}:limit}").as_deref(),
            Some("a}:limit")
        );
        assert_eq!(lock_name("p:", b"p:{}"), None);
        assert_eq!(lock_name("p:", b"q:{a}"), None);
        assert_eq!(lock_name("p:", b"p:{a\x01}"), None);
        assert_eq!(lock_name("p:", b"p:{\xff}"), None);
        assert_eq!(lock_name("p:", b"p:}{~}x}").as_deref(), Some("}x"));
        assert_eq!(lock_name("p:", b"p:}{~}x}:limit").as_deref(), Some("}x"));
        assert_eq!(lock_name("p:", b"p:}{~x}"), None);
        assert_eq!(lock_name("p:", b"p:{}x}"), None);
    }

    #[test]
    fn prefixes_are_literal_in_patterns() {
        assert_eq!(glob_escape("redlock:"), "redlock:");
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
