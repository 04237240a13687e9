"""A broken stand-in for redlock-run (a negative control): it takes the lock
once with SET NX PX (and bumps a fence counter), runs COMMAND, and never
refreshes, so a job longer than the TTL runs on after its lock expired.
The checker must see the overlaps this causes.

With --refresh (control c5) it refreshes every TTL/3 and kills COMMAND's
group when its lock is gone (exit 70), as redlock-run does; but a waiter
takes the lock as soon as SET NX succeeds, even after Redis lost the data
of a holder it saw: it ignores the old holder's lease.

usage: standin.py PORT KEY TTL_MS WAIT_MS [--refresh] -- COMMAND...
Exit: COMMAND's code, 70 when the lock was lost (--refresh), or 75 when
the lock was not had within WAIT_MS.
"""

import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid

ACQUIRE = (
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
    "return redis.call('incr', KEYS[2]) else return 0 end"
)
RELEASE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end"
)
EXTEND = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
)


def command(sock, reader, *args):
    out = f"*{len(args)}\r\n"
    for a in args:
        a = str(a)
        out += f"${len(a.encode())}\r\n{a}\r\n"
    sock.sendall(out.encode())
    line = reader.readline().decode().rstrip("\r\n")
    if line[:1] == ":":
        return int(line[1:])
    if line[:1] == "-":
        raise RuntimeError(line)
    return line


def main():
    port, key, ttl, wait = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    cmd = sys.argv[sys.argv.index("--") + 1:]
    sock = socket.create_connection(("127.0.0.1", int(port)))
    reader = sock.makefile("rb")
    token = str(uuid.uuid4())
    end = time.monotonic() + wait / 1000
    lock, fence_key = f"standin{{{key}}}", f"standin{{{key}}}:fence"
    first = True
    while True:
        fence = command(sock, reader, "EVAL", ACQUIRE, 2, lock, fence_key, token, ttl)
        if fence:
            break
        if time.monotonic() >= end:
            return 75
        if first:
            # As redlock-run -v says it (the harness looks for a line).
            print(f"standin: lock '{key}' is busy; waiting", file=sys.stderr, flush=True)
            first = False
        time.sleep(random.uniform(0.01, 0.05))
    env = dict(os.environ, REDLOCK_FENCE=str(fence), REDLOCK_TOKEN=token)
    if "--refresh" in sys.argv[:sys.argv.index("--")]:
        job = subprocess.Popen(cmd, env=env, start_new_session=True)
        while True:
            try:
                code = job.wait(timeout=ttl / 3000)
                break
            except subprocess.TimeoutExpired:
                if not command(sock, reader, "EVAL", EXTEND, 1, lock, token, ttl):
                    os.killpg(job.pid, signal.SIGKILL)
                    job.wait()
                    return 70
    else:
        code = subprocess.call(cmd, env=env)
    command(sock, reader, "EVAL", RELEASE, 1, lock, token)
    return code


if __name__ == "__main__":
    sys.exit(main())
