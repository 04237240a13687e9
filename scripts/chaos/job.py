"""The critical section every chaos run executes as redlock-run's COMMAND.

It logs its start, each store write as it sends it, a heartbeat after
every store write and its end to the sections log, each with CLOCK_MONOTONIC (system-wide on Linux, so the
checker compares it with the harness's and the store's), and writes to the
fenced store with its REDLOCK_FENCE while it runs. It never reads anything
redlock-run prints. A SIGTERM or SIGKILL simply ends it: the checker takes
a section's span from its first to its last record, in whichever of the
job's processes it was written.

A job may also start a helper that escapes the way real jobs do
(CHAOS_ESCAPE), and the helper logs and writes under the same run id and
fence, so whatever of it runs on is part of the section:
  child       a helper in the job's own process group (`a & b; wait`)
  setsid      a helper in a session of its own
  doublefork  a daemon: fork, setsid, fork, the middle process exits
  setpgid     the leader moves itself into a new group of its session
              (its helper's), so its own group is left empty
With CHAOS_ESCAPE_WAIT=1 the leader runs and waits for its helper (EOF on
a pipe only the helper holds); with 0 it ends as soon as the helper runs
(a daemon left behind, `sh -c 'daemon & exit 0'`), and redlock-run must
stop what is left before it releases the lock. setpgid always waits.

Environment: CHAOS_LOG, CHAOS_STORE (unix socket, empty: no writes),
CHAOS_RUN (run id), CHAOS_DUR_MS, CHAOS_EXIT (exit code when it ends by
itself), CHAOS_RESOURCE (store key), CHAOS_ESCAPE, CHAOS_ESCAPE_WAIT,
REDLOCK_FENCE, REDLOCK_TOKEN, REDLOCK_MODE.

With CHAOS_MULTI=1 (several keys) the job holds a resource per key of
REDLOCK_KEYS, fenced by the same line of REDLOCK_FENCES: its start line
says each (`R:KEY=FENCE,...`) and it writes each to the store under its
key's own fence. The start line also says REDLOCK_MODE (`M:shared`).
"""

import os
import socket
import sys
import time


def now():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def resources(env, fence):
    """(store key, fence) of each resource the job holds."""
    if env.get("CHAOS_MULTI") == "1":
        keys = env.get("REDLOCK_KEYS", "").split("\n")
        fences = env.get("REDLOCK_FENCES", "").split("\n")
        return list(zip(keys, fences + ["-"] * (len(keys) - len(fences))))
    return [(env.get("CHAOS_RESOURCE", "r"), fence)]


def work(env, log, run, fence, end, tag):
    """Write to the store and log a heartbeat every 25 ms until `end`."""
    store = None
    if env.get("CHAOS_STORE"):
        store = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        store.connect(env["CHAOS_STORE"])
        reader = store.makefile("rb")
    held = resources(env, fence)
    while True:
        for resource, res_fence in held if store is not None else ():
            # Logged before it is sent: the store may decide it later (a
            # loaded machine), when this process is gone.
            os.write(log, f"W {now()} {run} {tag}\n".encode())
            store.sendall(f"W {resource} {res_fence} {run}\n".encode())
            reader.readline()
        t = now()
        os.write(log, f"A {t} {run} {tag}\n".encode())
        if t >= end:
            break
        time.sleep(min(0.025, max(0.0, (end - t) / 1e9)))
    if store is not None:
        store.close()


def helper(env, log, run, fence, end, mode, hold):
    """Fork the escaping helper; returns its pid when it is our child (the
    daemon's is not). `hold` is the pipe end only the helper keeps open."""
    pid = os.fork()
    if pid == 0:
        try:
            if mode == "setsid":
                os.setsid()
            elif mode == "setpgid":
                os.setpgid(0, 0)
            elif mode == "doublefork":
                os.setsid()
                if os.fork() != 0:
                    os._exit(0)
            work(env, log, run, fence, end, mode)
            os._exit(0)
        except BaseException:  # noqa: BLE001 - a child never returns into main
            os._exit(4)
    os.close(hold)
    if mode == "setpgid":
        try:
            os.setpgid(pid, pid)  # either side may get there first
        except OSError:
            pass
        os.setpgid(0, pid)  # the leader leaves its own group
    if mode == "doublefork":
        os.waitpid(pid, 0)  # the middle process; the daemon is not ours
        return None
    return pid


def main():
    env = os.environ
    log = os.open(env["CHAOS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    run = env["CHAOS_RUN"]
    fence = env.get("REDLOCK_FENCE", "-")
    token = env.get("REDLOCK_TOKEN", "-")
    started = now()
    extra = ""
    if env.get("CHAOS_MULTI") == "1":
        extra += " R:" + ",".join(f"{k}={f}" for k, f in resources(env, fence))
    if env.get("REDLOCK_MODE"):
        extra += f" M:{env['REDLOCK_MODE']}"
    os.write(log, f"S {started} {run} {fence} {token}{extra}\n".encode())
    end = started + int(env["CHAOS_DUR_MS"]) * 1_000_000
    mode = env.get("CHAOS_ESCAPE", "")
    if not mode:
        work(env, log, run, fence, end, "leader")
    else:
        wait = env.get("CHAOS_ESCAPE_WAIT", "1") == "1" or mode == "setpgid"
        done_r, done_w = os.pipe()
        child = helper(env, log, run, fence, end, mode, done_w)
        if wait:
            work(env, log, run, fence, end, "leader")
            while os.read(done_r, 1):
                pass
            if child is not None:
                os.waitpid(child, 0)
    os.write(log, f"E {now()} {run}\n".encode())
    return int(env.get("CHAOS_EXIT", "0"))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BrokenPipeError, ConnectionError, OSError) as err:
        # Not a code of redlock-run's table: the harness's own trouble.
        print(f"chaos job: {err}", file=sys.stderr)
        sys.exit(4)
