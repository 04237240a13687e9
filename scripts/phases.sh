#!/usr/bin/env bash
# Where one uncontended `redlock-run -- true` spends its time, for people
# (not CI): builds the binaries as scripts/bench.sh does (the static musl
# one as released, and the glibc build beside it; the glibc build alone,
# with one line saying why, when the static one cannot be built), starts a
# throwaway redis-server, traces a few runs of each with `strace -f -ttt -T`
# and prints the median time of each phase (exec to main, connect, acquire
# EVAL, fork/exec of the child, its run, waiting, release EVAL, exit), the
# threads, /proc opens and NSS lookups, and the Redis commands one run sends
# (redis-cli MONITOR).
# Usage: scripts/phases.sh [--traces N]
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v strace >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null
    else
        echo "phases: strace not found; install it (apt-get install strace)" >&2
        exit 1
    fi
fi
exec scripts/bench.sh --phases "$@"
