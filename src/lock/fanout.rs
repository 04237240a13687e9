//! N servers at once: one round sends a call to every node, then reads
//! every answer, within one deadline for the round. No thread per node
//! per call: a connected node gets its command on this thread, and its
//! reply is read once every node's command is on its way. Only making
//! connections (a TCP handshake, a Sentinel lookup) may run in parallel,
//! on a thread per node that has none yet, where latency makes one
//! connection after another add up (see [`start_all`]).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::{Cmd, Connection, ConnectionInfo, RedisResult, Value};

use super::deadline::Armed;
use super::error::NodeResult;
use super::node::{Node, Sent};

/// One round: `prepare` gives each node's command and what `read` needs
/// to read its reply (`None`: the node sits this round out; `Some(Err)`:
/// it failed before anything was sent); `read` turns the reply into the
/// node's answer. Answers in the nodes' order.
pub fn round<P, R>(
    nodes: &mut [Node],
    prepare: impl FnMut(usize, &mut Node) -> Option<NodeResult<(Cmd, P)>>,
    read: impl FnMut(&mut Node, P, NodeResult<Value>) -> NodeResult<R>,
) -> Vec<Option<NodeResult<R>>> {
    round_at(nodes, None, prepare, read)
}

/// [`round`] of commands without keys (WAIT, INFO) that go, on a
/// Cluster, to the primary of `slot` (the lock's).
pub fn round_at<P, R>(
    nodes: &mut [Node],
    slot: Option<u16>,
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
    // Behind sentinels, a master named a while ago is named again first.
    let asked: Vec<bool> = cmds.iter().map(Option::is_some).collect();
    for (i, checked) in masters(nodes, &asked, true).into_iter().enumerate() {
        if let Some(Err(e)) = checked {
            (answers[i], cmds[i], pending[i]) = (Some(Err(e)), None, None);
        }
    }
    let sent = start_all(nodes, cmds, slot);
    warm_up();
    if let Some(task) = WHILE_SENT.take() {
        task();
    }
    // One deadline for every reply of the round: one timer.
    let limit = nodes.first().map(Node::timeout).unwrap_or_default();
    let armed = Armed::new(limit);
    let replies: Vec<Option<NodeResult<Value>>> = (nodes.iter_mut().zip(sent))
        .map(|(node, sent)| Some(node.finish(sent?, &armed)))
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

thread_local! {
    /// Work for this thread's next round to do while its commands are on
    /// their way (see [`while_sent`]).
    static WHILE_SENT: std::cell::Cell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::Cell::new(None) };
}

/// Have `task` done once this thread's next round has sent its commands,
/// while the servers work on them and we would only wait: the end of a
/// run (the keeper's exit, the cgroup's removal) beside its release's
/// round trip rather than before it. Done at once by [`sent_or_now`] if
/// no round came.
pub fn while_sent(task: Box<dyn FnOnce()>) {
    if let Some(earlier) = WHILE_SENT.replace(Some(task)) {
        earlier();
    }
}

/// The task [`while_sent`] left, if no round has done it: done now.
pub fn sent_or_now() {
    if let Some(task) = WHILE_SENT.take() {
        task();
    }
}

/// What the first reply's parser asks, asked while the servers work on
/// the round's commands instead: the redis crate's parser finds line ends
/// with `memchr`, which asks the CPU what it supports once per process,
/// seven CPUID instructions, each a trap to the hypervisor in a virtual
/// machine (3.6 us each on the one docs/benchmarks.md was measured on).
/// Once asked, the answer is kept: a load.
fn warm_up() {
    #[cfg(target_arch = "x86_64")]
    let _ = std::is_x86_feature_detected!("avx2");
}

/// Behind sentinels, whether they still name the master each `asked`
/// node's writes go to, in one round (see `sentinel::named_each`): before
/// a write (`recheck`: only where they named it a while ago, see
/// `Node::sentinels_to_ask`), or after one. `None` for a node not asked, or
/// not behind sentinels.
pub fn masters(nodes: &mut [Node], asked: &[bool], recheck: bool) -> Vec<Option<NodeResult<()>>> {
    let mut checked: Vec<Option<NodeResult<()>>> = nodes.iter().map(|_| None).collect();
    let timeout = nodes.first().map(Node::timeout).unwrap_or_default();
    let mut which = Vec::new();
    let mut targets = Vec::new();
    for (i, node) in nodes.iter_mut().enumerate() {
        let target = (asked.get(i) == Some(&true)).then(|| node.sentinels_to_ask(recheck));
        if let Some(target) = target.flatten() {
            which.push(i);
            targets.push(target);
        }
    }
    if targets.is_empty() {
        return checked;
    }
    let named = super::sentinel::named_each(&mut targets, timeout);
    for (i, named) in which.into_iter().zip(named) {
        checked[i] = Some(nodes[i].named(named, !recheck));
    }
    checked
}

/// Send each node its command. Connections are made one after another
/// while each is quick (no latency: a thread would cost more than it
/// saves); once one took longer than [`QUICK`], the nodes still without
/// one are connected in parallel.
fn start_all(nodes: &mut [Node], cmds: Vec<Option<Cmd>>, slot: Option<u16>) -> Vec<Option<Sent>> {
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
                sent[i] = Some(node.start(cmd, slot));
                slow |= connecting && start.elapsed() > QUICK;
            }
            None => {}
        }
    }
    for (i, started) in connect_all(&later, slot) {
        sent[i] = Some(started);
    }
    sent
}

/// A connection made within this is on a network without latency to
/// speak of (a loopback, a LAN): the next one is made on this thread too.
const QUICK: Duration = Duration::from_millis(1);

type Unstarted<'n> = Mutex<Option<(&'n mut Node, Cmd)>>;

/// Start each of `later` at once (see [`in_parallel`]).
fn connect_all(later: &[(usize, Unstarted<'_>)], slot: Option<u16>) -> Vec<(usize, Sent)> {
    let start = |(i, unstarted): &(usize, Unstarted<'_>)| {
        let taken = unstarted.lock().ok()?.take();
        taken.map(|(node, cmd)| (*i, node.start(cmd, slot)))
    };
    in_parallel(later, start).into_iter().flatten().collect()
}

/// Connections to servers that are no nodes of the lock (sentinels,
/// the servers `doctor` checks), made as [`round`] makes a node's: one
/// after another while each is quick, the rest at once after a slow one.
pub fn dial_all(infos: &[&ConnectionInfo], timeout: Duration) -> Vec<RedisResult<Connection>> {
    let dial = |info: &&ConnectionInfo| super::dial::connect(info, timeout);
    let mut made = Vec::with_capacity(infos.len());
    let mut rest = infos;
    while let Some((info, tail)) = rest.split_first() {
        let start = Instant::now();
        made.push(dial(info));
        rest = tail;
        if start.elapsed() > QUICK {
            break;
        }
    }
    made.extend(in_parallel(rest, dial));
    made
}

/// `f` of each item at once: the first on this thread, the others on
/// small threads of their own (only to make connections, where latency
/// makes one after another add up). An item whose thread cannot start
/// (out of processes) is done on this thread, after the others: slower,
/// never a crash.
fn in_parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = (items.iter().skip(1))
            .map(|item| {
                std::thread::Builder::new()
                    .stack_size(128 * 1024)
                    .spawn_scoped(s, move || f(item))
                    .ok()
            })
            .collect();
        let mut done: Vec<R> = items.first().map(f).into_iter().collect();
        for (item, handle) in items.iter().skip(1).zip(handles) {
            done.push(match handle {
                Some(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                None => f(item),
            });
        }
        done
    })
}

/// One round over connections that are no nodes of the lock (sentinels,
/// the servers `doctor` checks): each gets its command, then every reply
/// is read, all within `limit` (one timer for the round). An error reply
/// is an `Err`; a reply not whole by the deadline is a timeout.
pub fn exchange(calls: &mut [(&mut Connection, &Cmd)], limit: Duration) -> Vec<RedisResult<Value>> {
    let sent: Vec<RedisResult<()>> = (calls.iter_mut())
        .map(|(conn, cmd)| conn.send_packed_command(&cmd.get_packed_command()))
        .collect();
    let armed = Armed::new(limit);
    let replies = (calls.iter_mut().zip(sent))
        .map(|((conn, _), sent)| {
            sent?;
            let reply = loop {
                match conn.recv_response() {
                    Ok(Value::Push { .. }) => continue,
                    other => break other,
                }
            };
            armed.judge(reply).and_then(Value::extract_error)
        })
        .collect();
    armed.disarm();
    replies
}
