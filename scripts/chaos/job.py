"""The critical section every chaos run executes as redlock-run's COMMAND.

It logs its start, a heartbeat after every store write and its end to the
sections log, each with CLOCK_MONOTONIC (system-wide on Linux, so the
checker compares it with the harness's and the store's), and writes to the
fenced store with its REDLOCK_FENCE while it runs. It never reads anything
redlock-run prints. A SIGTERM or SIGKILL simply ends it: the checker takes
a section's span from its first to its last record (and store attempt).

Environment: CHAOS_LOG, CHAOS_STORE (unix socket, empty: no writes),
CHAOS_RUN (run id), CHAOS_DUR_MS, CHAOS_EXIT (exit code when it ends by
itself), CHAOS_RESOURCE (store key), REDLOCK_FENCE, REDLOCK_TOKEN.
"""

import os
import socket
import sys
import time


def now():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def main():
    env = os.environ
    log = os.open(env["CHAOS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    run = env["CHAOS_RUN"]
    fence = env.get("REDLOCK_FENCE", "-")
    token = env.get("REDLOCK_TOKEN", "-")
    started = now()
    os.write(log, f"S {started} {run} {fence} {token}\n".encode())
    end = started + int(env["CHAOS_DUR_MS"]) * 1_000_000
    store = None
    if env.get("CHAOS_STORE"):
        store = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        store.connect(env["CHAOS_STORE"])
        reader = store.makefile("rb")
    resource = env.get("CHAOS_RESOURCE", "r")
    while True:
        if store is not None:
            store.sendall(f"W {resource} {fence} {run}\n".encode())
            reader.readline()
        t = now()
        os.write(log, f"A {t} {run}\n".encode())
        if t >= end:
            break
        time.sleep(min(0.025, max(0.0, (end - t) / 1e9)))
    os.write(log, f"E {now()} {run}\n".encode())
    return int(env.get("CHAOS_EXIT", "0"))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BrokenPipeError, ConnectionError, OSError) as err:
        # Not a code of redlock-run's table: the harness's own trouble.
        print(f"chaos job: {err}", file=sys.stderr)
        sys.exit(4)
