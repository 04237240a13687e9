//! N servers at once: one round sends a call to every node, then reads
//! every answer, within one deadline for the round. No thread per node
//! per call: a connected node gets its command on this thread, and its
//! reply is read once every node's command is on its way. Only making
//! connections (a TCP handshake, a Sentinel lookup) may run in parallel,
//! on a thread per node that has none yet, where latency makes one
//! connection after another add up (see [`start_all`]).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::{Cmd, Value};

use super::deadline::Armed;
use super::error::NodeResult;
use super::node::{Node, Sent};

/// One round: `prepare` gives each node's command and what `read` needs
/// to read its reply (`None`: the node sits this round out; `Some(Err)`:
/// it failed before anything was sent); `read` turns the reply into the
/// node's answer. Answers in the nodes' order.
pub fn round<P, R>(
    nodes: &mut [Node],
    mut prepare: impl FnMut(usize, &mut Node) -> Option<NodeResult<(Cmd, P)>>,
    mut read: impl FnMut(&mut Node, P, NodeResult<Value>) -> NodeResult<R>,
) -> Vec<Option<NodeResult<R>>> {
    let mut cmds = Vec::with_capacity(nodes.len());
    let mut answers: Vec<Option<NodeResult<R>>> = Vec::with_capacity(nodes.len());
    let mut pending = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter_mut().enumerate() {
        let (cmd, state, answer) = match prepare(i, node) {
            Some(Ok((cmd, state))) => (Some(cmd), Some(state), None),
            Some(Err(e)) => (None, None, Some(Err(e))),
            None => (None, None, None),
        };
        answers.push(answer);
        cmds.push(cmd);
        pending.push(state);
    }
    let sent = start_all(nodes, cmds);
    // One deadline for every reply of the round: one timer.
    let limit = nodes.first().map(Node::timeout).unwrap_or_default();
    let armed = Armed::new(limit);
    let deadline = Instant::now() + limit;
    let replies: Vec<Option<NodeResult<Value>>> = (nodes.iter_mut().zip(sent))
        .map(|(node, sent)| Some(node.finish(sent?, (deadline, limit))))
        .collect();
    armed.disarm();
    let calls = nodes.iter_mut().zip(replies).zip(pending);
    for (((node, reply), state), answer) in calls.zip(answers.iter_mut()) {
        if let (Some(reply), Some(state)) = (reply, state) {
            *answer = Some(read(node, state, reply));
        }
    }
    answers
}

/// Send each node its command. Connections are made one after another
/// while each is quick (no latency: a thread would cost more than it
/// saves); once one took longer than [`QUICK`], the nodes still without
/// one are connected in parallel.
fn start_all(nodes: &mut [Node], cmds: Vec<Option<Cmd>>) -> Vec<Option<Sent>> {
    let mut sent: Vec<Option<Sent>> = Vec::with_capacity(nodes.len());
    let mut later = Vec::new();
    let mut slow = false;
    for (i, (node, cmd)) in nodes.iter_mut().zip(cmds).enumerate() {
        sent.push(None);
        match cmd {
            Some(cmd) if slow && node.needs_connecting() => {
                later.push((i, Mutex::new(Some((node, cmd)))))
            }
            Some(cmd) => {
                let start = Instant::now();
                let connecting = node.needs_connecting();
                sent[i] = Some(node.start(cmd));
                slow |= connecting && start.elapsed() > QUICK;
            }
            None => {}
        }
    }
    for (i, started) in connect_all(&later) {
        sent[i] = Some(started);
    }
    sent
}

/// A connection made within this is on a network without latency to
/// speak of (a loopback, a LAN): the next one is made on this thread too.
const QUICK: Duration = Duration::from_millis(1);

type Unstarted<'n> = Mutex<Option<(&'n mut Node, Cmd)>>;

/// Start each of `later` on a small thread of its own (the first on this
/// thread), all at once. A node whose thread cannot start (out of
/// processes) is started on this thread, after the others: slower, never
/// a crash.
fn connect_all(later: &[(usize, Unstarted<'_>)]) -> Vec<(usize, Sent)> {
    let start = |unstarted: &Unstarted<'_>| {
        let taken = unstarted.lock().ok()?.take();
        taken.map(|(node, cmd)| node.start(cmd))
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (later.iter().skip(1))
            .map(|(_, unstarted)| {
                std::thread::Builder::new()
                    .stack_size(128 * 1024)
                    .spawn_scoped(s, move || start(unstarted))
                    .ok()
            })
            .collect();
        let mut started: Vec<(usize, Sent)> = Vec::with_capacity(later.len());
        let first = later.first().and_then(|(i, u)| Some((*i, start(u)?)));
        started.extend(first);
        for ((i, unstarted), handle) in later.iter().skip(1).zip(handles) {
            let joined = handle.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
            let done = joined.flatten();
            if let Some(sent) = done.or_else(|| start(unstarted)) {
                started.push((*i, sent));
            }
        }
        started
    })
}

/// Calls of several round trips on each node (the admin commands'
/// scans, `--replicas`' WAIT and INFO, reading a lock for a nested run):
/// every node at once, the first on this thread, the others on small
/// threads of their own; one node is asked on this thread alone. The
/// lock's own calls, one round trip each, go through [`round`] instead.
pub fn each<R: Send>(nodes: &mut [Node], f: impl Fn(&mut Node) -> R + Sync) -> Vec<R> {
    if let [node] = nodes {
        return vec![f(node)];
    }
    // The first node is asked on this thread, the others on small
    // threads of their own, all at once.
    let Some((first, rest)) = nodes.split_first_mut() else {
        return Vec::new();
    };
    // A node whose thread cannot start (out of processes) is asked
    // on this thread, after the others: slower, never a crash.
    let rest: Vec<std::sync::Mutex<&mut Node>> =
        rest.iter_mut().map(std::sync::Mutex::new).collect();
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = rest
            .iter()
            .map(|node| {
                std::thread::Builder::new()
                    .stack_size(128 * 1024)
                    .spawn_scoped(s, move || f(&mut lock(node)))
                    .ok()
            })
            .collect();
        let mut answers = vec![f(first)];
        for (node, handle) in rest.iter().zip(handles) {
            answers.push(match handle {
                Some(h) => h
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                None => f(&mut lock(node)),
            });
        }
        answers
    })
}

fn lock<'m, 'n>(
    node: &'m std::sync::Mutex<&'n mut Node>,
) -> std::sync::MutexGuard<'m, &'n mut Node> {
    node.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
