#!/usr/bin/env bash
# A two-minute look at redlock-run: starts a throwaway redis-server on a unix
# socket in a temp dir, runs two jobs that contend for one lock and take
# turns, and shows the lock from the outside. Needs redis-server installed
# (Debian/Ubuntu: apt-get install redis-server).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null; then
    echo "demo: redis-server not found; install it (apt-get install redis-server)" >&2
    exit 1
fi
cargo build --quiet
bin=$PWD/target/debug/redlock-run

dir=$(mktemp -d)
redis-server --port 0 --unixsocket "$dir/redis.sock" --save '' --appendonly no \
    --dir "$dir" --logfile "$dir/redis.log" &
redis_pid=$!
trap 'kill $redis_pid 2>/dev/null; wait $redis_pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$dir/redis.sock" ] && break; sleep 0.05; done
export REDLOCK_REDIS_URL="redis+unix://$dir/redis.sock"

say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

say "redlock-run -k nightly-backup -v -- sh -c 'job A ...' &   # takes the lock for 2s"
"$bin" -k nightly-backup -v -- sh -c \
    'echo "  job A: running with fence $REDLOCK_FENCE"; sleep 2; echo "  job A: done"' &
job_a=$!
sleep 0.5

say "redlock-run status nightly-backup"
"$bin" status nightly-backup || true

say "redlock-run -k nightly-backup -n -- echo never   # -n: do not wait"
"$bin" -k nightly-backup -n -- echo never || echo "  exit $? (75: lock busy, the command did not run)"

say "redlock-run -k nightly-backup -v -- sh -c 'job B ...'   # waits, then runs"
"$bin" -k nightly-backup -v -- sh -c 'echo "  job B: running with fence $REDLOCK_FENCE"'
wait $job_a

say "redlock-run status nightly-backup"
"$bin" status nightly-backup || echo "  exit $? (1: the lock is free)"
