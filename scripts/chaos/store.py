"""The fenced store: a harness process the jobs write to.

A write `W KEY FENCE RUN` is accepted when FENCE is at least the last fence
accepted for KEY (with --ignore-fences, a broken store for a negative
control, every write is accepted). Every attempt is logged, accepted or
not, as `T_MONO RUN KEY FENCE ACC|REJ`, T_MONO being CLOCK_MONOTONIC in ns
when the store decided.

usage: store.py SOCKET LOG [--ignore-fences]
"""

import os
import socket
import sys
import threading
import time


def main():
    path, log_path = sys.argv[1], sys.argv[2]
    ignore = "--ignore-fences" in sys.argv[3:]
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    last = {}
    lock = threading.Lock()

    def serve(conn):
        with conn, conn.makefile("rb") as reader:
            for line in reader:
                parts = line.decode(errors="replace").split()
                if len(parts) != 4 or parts[0] != "W":
                    conn.sendall(b"ERR\n")
                    continue
                _, key, fence_text, run = parts
                try:
                    fence = int(fence_text)
                except ValueError:
                    fence = -1
                with lock:
                    ok = ignore or (fence >= 0 and fence >= last.get(key, -1))
                    if ok:
                        last[key] = fence
                    t = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
                    verdict = "ACC" if ok else "REJ"
                    os.write(log, f"{t} {run} {key} {fence_text} {verdict}\n".encode())
                try:
                    conn.sendall(b"OK\n" if ok else b"STALE\n")
                except OSError:
                    return

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o666)
    server.listen(128)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
