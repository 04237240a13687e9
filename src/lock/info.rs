//! What this tool reads in a server's `INFO` reply: its `run_id`, and
//! whether it may evict the lock's keys.

use redis::RedisError;

/// `maxmemory` and `maxmemory_policy` of `INFO memory` when the server
/// may evict keys that have a TTL: a limit (0 is none) and a policy other
/// than `noeviction`. A server that does not say is taken at its word.
pub fn eviction(info: &str) -> Option<(u64, &str)> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let maxmemory = field("maxmemory")?.parse::<u64>().ok()?;
    let policy = field("maxmemory_policy")?;
    (maxmemory > 0 && policy != "noeviction").then_some((maxmemory, policy))
}

/// The `run_id` field of an `INFO` reply, if it has one.
pub fn run_id_of(info: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(|id| id.trim().to_string())
        .filter(|id| !id.is_empty())
}

/// `INFO` refused to the user (no `+info`), or renamed away.
pub fn cannot_read_info(e: &RedisError) -> bool {
    let message = e.to_string();
    e.code() == Some("NOPERM")
        || message.contains("NOPERM")
        || message.contains("no permissions")
        || message.contains("unknown command")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_needs_a_limit_and_an_evicting_policy() {
        let info = |limit: &str, policy: &str| {
            format!(
                "# Memory\r\nused_memory:1\r\nmaxmemory:{limit}\r\nmaxmemory_human:x\r\n\
                 maxmemory_policy:{policy}\r\n"
            )
        };
        assert_eq!(
            eviction(&info("1048576", "allkeys-lru")),
            Some((1048576, "allkeys-lru"))
        );
        assert_eq!(
            eviction(&info("5", "volatile-ttl")),
            Some((5, "volatile-ttl"))
        );
        assert_eq!(eviction(&info("0", "allkeys-lru")), None);
        assert_eq!(eviction(&info("1048576", "noeviction")), None);
        assert_eq!(eviction("# Memory\r\nused_memory:1\r\n"), None);
        assert_eq!(eviction(&info("lots", "allkeys-lru")), None);
    }
}
