//! Redlock's same-server check, remembered between runs: the `run_id`s a
//! run found at its nodes, so that the next run with the same URLs need
//! not ask each node `INFO` before it writes (a round trip to every node).
//! Instead each node's acquire script checks that it runs on the server
//! remembered for it, and writes nothing if not (`scripts::server_lib`).
//!
//! What is kept needs no trust: the remembered ids are pairwise distinct
//! (else they are not used), and a node writes only where its server's id
//! is the one remembered for it, so two nodes that write are two servers,
//! whatever the file says. A file that is missing, unreadable or planted
//! costs one round trip, as without it.
//!
//! One file per list of nodes (named by a hash of their URLs as shown,
//! passwords redacted), in `$XDG_RUNTIME_DIR/redlock-run`, else
//! `/tmp/redlock-run-UID`: a directory of ours (made 0700; one owned by
//! another user, open to others or a link is neither read nor written). Written only when
//! what a run found differs from what it read.

use std::fs::{self, File};
use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::PathBuf;

use nix::fcntl::{openat, renameat, OFlag};
use nix::libc::{S_IFDIR, S_IFMT, S_IFREG};
use nix::sys::stat::{fstat, Mode};
use nix::unistd::{geteuid, unlinkat, UnlinkatFlags};

/// A run_id is 40 hex digits; anything longer is not one.
const MAX_ID: usize = 64;
/// Far above any list of nodes' ids.
const MAX_FILE: u64 = 16 * 1024;

/// The ids remembered for `nodes` (as shown), one per node, pairwise
/// distinct; `None` when there are none that can be used.
pub fn recall(nodes: &[&str]) -> Option<Vec<String>> {
    let dir = open_dir(false)?;
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = openat(&dir, file_name(nodes).as_str(), flags, Mode::empty()).ok()?;
    if !ours(&fd, S_IFREG) {
        return None;
    }
    let mut text = String::new();
    File::from(fd)
        .take(MAX_FILE)
        .read_to_string(&mut text)
        .ok()?;
    parse(&text, nodes.len())
}

/// Remember `ids` for `nodes`. Failing is not an error: the next run asks.
pub fn remember(nodes: &[&str], ids: &[String]) {
    let _ = try_remember(nodes, ids);
}

fn try_remember(nodes: &[&str], ids: &[String]) -> Option<()> {
    parse(&ids.join("\n"), nodes.len())?;
    let dir = open_dir(true)?;
    let name = file_name(nodes);
    // A name nobody can guess and plant first; O_EXCL in any case.
    let tmp = format!(".{name}.{}", uuid::Uuid::new_v4().simple());
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(&dir, tmp.as_str(), flags, Mode::from_bits_truncate(0o600)).ok()?;
    let written = File::from(fd)
        .write_all(format!("{}\n", ids.join("\n")).as_bytes())
        .is_ok()
        && renameat(&dir, tmp.as_str(), &dir, name.as_str()).is_ok();
    if !written {
        let _ = unlinkat(&dir, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
    }
    written.then_some(())
}

/// Our directory, opened (not a link) and checked to be ours alone: owned
/// by us and closed to group and others, so nobody else can have put a
/// file or a link in it. Files are opened relative to this descriptor, so
/// the path cannot be swapped between the check and the use. A directory
/// another user made first (`/tmp/redlock-run-UID` when there is no
/// `$XDG_RUNTIME_DIR`) is never read: the check costs a round trip then.
fn open_dir(create: bool) -> Option<OwnedFd> {
    let path = dir();
    if create {
        let _ = fs::DirBuilder::new().mode(0o700).create(&path);
    }
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = nix::fcntl::open(&path, flags, Mode::empty()).ok()?;
    ours(&fd, S_IFDIR).then_some(fd)
}

/// `fd` is of `kind`, owned by us, and closed to group and others.
fn ours(fd: &OwnedFd, kind: u32) -> bool {
    fstat(fd).is_ok_and(|st| {
        let mode = st.st_mode;
        mode & S_IFMT == kind && st.st_uid == geteuid().as_raw() && mode & 0o077 == 0
    })
}

/// `n` ids, one a line, each a plausible run_id, no two alike.
fn parse(text: &str, n: usize) -> Option<Vec<String>> {
    let ids: Vec<String> = text.lines().map(str::to_string).collect();
    let plausible = |id: &String| {
        !id.is_empty() && id.len() <= MAX_ID && id.bytes().all(|b| b.is_ascii_alphanumeric())
    };
    if ids.len() != n || !ids.iter().all(plausible) {
        return None;
    }
    let distinct = ids.iter().enumerate().all(|(i, id)| !ids[..i].contains(id));
    distinct.then_some(ids)
}

fn dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(runtime) if runtime.is_absolute() => runtime.join("redlock-run"),
        _ => PathBuf::from(format!(
            "/tmp/redlock-run-{}",
            nix::unistd::geteuid().as_raw()
        )),
    }
}

/// `servers-` and 16 hex digits of the FNV-1a 64 hash of the URLs.
fn file_name(nodes: &[&str]) -> String {
    format!(
        "servers-{:016x}",
        crate::metrics::fnv1a64(nodes.join("\n").as_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_distinct_plausible_ids_of_every_node_are_used() {
        let a = "1f".repeat(20);
        let b = "2e".repeat(20);
        assert_eq!(
            parse(&format!("{a}\n{b}\n"), 2),
            Some(vec![a.clone(), b.clone()])
        );
        assert_eq!(parse(&format!("{a}\n{a}\n"), 2), None, "one server twice");
        assert_eq!(parse(&format!("{a}\n"), 2), None, "a node missing");
        assert_eq!(parse(&format!("{a}\n\n"), 2), None);
        assert_eq!(parse(&format!("{a}\n{b}x y\n"), 2), None);
        assert_eq!(parse(&format!("{a}\n{}\n", "f".repeat(65)), 2), None);
    }

    #[test]
    fn each_list_of_nodes_has_its_own_file() {
        let one = file_name(&["redis://a:1", "redis://b:2"]);
        assert_ne!(one, file_name(&["redis://b:2", "redis://a:1"]));
        assert!(one.starts_with("servers-") && one.len() == 24, "{one}");
    }
}
