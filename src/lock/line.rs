//! The line of waiters of a plain lock, as `status` and `list` show it
//! (see `scripts::WAITERS`).

use anyhow::anyhow;

use super::calls::Waiters;
use super::error::NodeResult;
use super::keys::LockKeys;
use super::node::{Node, Unexpected};
use super::reply::{int, items, text};

/// One live waiter, as its liveness hash describes it (fields empty when
/// it was written by an older version of this tool).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waiting {
    pub token: String,
    pub host: String,
    pub pid: String,
    pub user: String,
    /// When it began to wait, RFC 3339 by its own clock.
    pub since: String,
    /// Its `--label` (empty: none).
    pub label: String,
    /// It waits to take the lock shared (`--shared`).
    pub shared: bool,
}

/// The live waiters of a lock on one node: how many, and the first ones
/// in the order they will be served.
#[derive(Debug, Clone, Default)]
pub struct Line {
    pub count: u64,
    pub waiters: Vec<Waiting>,
}

impl Node {
    /// Read the line of waiters of a lock, changing nothing.
    pub fn waiters(&mut self, keys: &LockKeys) -> NodeResult<Line> {
        let reply = self.call(keys, &Waiters)?;
        line(reply).unexpected(self, "waiters")
    }
}

/// `{count, {{token, host, pid, user, since, label, mode}, ...}}`.
fn line(reply: redis::Value) -> anyhow::Result<Line> {
    let parts = items(reply)?;
    let count = parts
        .first()
        .and_then(int)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| anyhow!("no count"))?;
    let listed = match parts.into_iter().nth(1) {
        Some(list) => items(list)?,
        None => Vec::new(),
    };
    let waiters = listed
        .into_iter()
        .map(|one| {
            let f = items(one)?;
            let at = |i: usize| f.get(i).map(text).unwrap_or_default();
            Ok(Waiting {
                token: at(0),
                host: at(1),
                pid: at(2),
                user: at(3),
                since: at(4),
                label: at(5),
                shared: at(6) == "shared",
            })
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Line { count, waiters })
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    #[test]
    fn odd_replies_are_errors_not_panics() {
        assert!(line(Value::Array(vec![])).is_err());
        assert!(line(Value::Int(3)).is_err());
        let empty = line(Value::Array(vec![Value::Int(0), Value::Array(vec![])])).expect("ok");
        assert_eq!((empty.count, empty.waiters.len()), (0, 0));
        let short = Value::Array(vec![
            Value::Int(1),
            Value::Array(vec![Value::Array(vec![Value::BulkString(b"t".to_vec())])]),
        ]);
        let one = line(short).expect("ok");
        assert_eq!(one.waiters[0].token, "t");
        assert_eq!(one.waiters[0].host, "");
    }
}
