#!/usr/bin/env bash
# A one-minute look at redlock-run. Installs what it needs and nothing
# more (scripts/prereqs.sh --demo: redis-server and a linker), builds, starts a throwaway redis-server on a unix
# socket in a temp dir, and shows, step by step: one job holding a lock,
# `status` while it is held, a `-n` contender turned away with 75, a second
# job waiting its turn, and a job stopped with exit 70 when its lock is lost
# to a paused Redis. Exits 0 when every step behaved, saying where the
# binary is and how to put it on PATH; cleans up everything it started,
# also on Ctrl-C.
#
# REDLOCK_DEMO_BIN=/path/to/redlock-run skips the install step and the
# build (the test suite uses it); REDLOCK_TEST_REDIS_SERVER picks another
# redis-server binary.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${REDLOCK_DEMO_BIN:-}" ]; then
    # The test suite's way in: installing is test.sh's and CI's job.
    bin=$REDLOCK_DEMO_BIN
else
    source scripts/prereqs.sh --demo
    cargo build --locked
    bin=${CARGO_TARGET_DIR:-$PWD/target}/debug/redlock-run
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/redlock-demo.XXXXXX")
redis_pid='' paused=''
# Signals go only to children that bash has not reaped yet (`jobs -rp`):
# a reaped child's pid may already belong to someone else.
running() { jobs -rp | grep -qx "$1"; }
cleanup() {
    trap - INT TERM EXIT
    local pid
    # A stopped redis-server would hold SIGTERM until continued.
    if [ -n "$paused" ] && running "$redis_pid"; then kill -CONT "$redis_pid"; fi
    # The wrappers first, so that they can release while Redis still answers.
    for pid in $(jobs -rp); do
        [ "$pid" = "$redis_pid" ] || kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in $(jobs -rp); do
        [ "$pid" = "$redis_pid" ] || wait "$pid" 2>/dev/null || true
    done
    if [ -n "$redis_pid" ] && running "$redis_pid"; then
        kill -TERM "$redis_pid" 2>/dev/null || true
        wait "$redis_pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap cleanup EXIT

if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
step() { printf '\n%s== step %s: %s%s\n' "$bold" "$1" "$2" "$plain"; }
show() { printf '$ %s\n' "$*"; }
ok() { printf '   ok: %s\n' "$*"; }
fail() {
    printf 'demo: FAILED: %s\n' "$*"
    exit 1
}
# Poll a condition every 0.1 s for up to 30 s.
wait_for() {
    local _
    for _ in $(seq 300); do
        eval "$1" && return 0
        sleep 0.1
    done
    return 1
}
# Wait for background job $1 (up to 30 s) and put its exit code in $rc.
# Not $(...): a subshell cannot wait for its parent's children.
wait_job() {
    wait_for "! running $1" || fail "pid $1 still runs after 30 s"
    rc=0
    wait "$1" || rc=$?
}

"${REDLOCK_TEST_REDIS_SERVER:-redis-server}" --port 0 --unixsocket "$dir/redis.sock" \
    --save '' --appendonly no --dir "$dir" --logfile "$dir/redis.log" &
redis_pid=$!
wait_for '[ -S "$dir/redis.sock" ]' || fail "redis-server did not start: $(cat "$dir/redis.log")"
export REDLOCK_REDIS_URL="redis+unix://$dir/redis.sock"
export DEMO_DIR=$dir
echo "redis-server $("${REDLOCK_TEST_REDIS_SERVER:-redis-server}" --version | sed 's/.*v=\([^ ]*\).*/\1/') on $REDLOCK_REDIS_URL"

# The jobs: A holds the lock until told to finish; both log their turns.
cat >"$dir/job-A" <<'JOB'
#!/bin/sh
echo "   job A: running with fence $REDLOCK_FENCE"
echo "A start" >>"$DEMO_DIR/turns"
while [ ! -e "$DEMO_DIR/A.may-finish" ]; do sleep 0.1; done
echo "A end" >>"$DEMO_DIR/turns"
echo "   job A: done"
JOB
cat >"$dir/job-B" <<'JOB'
#!/bin/sh
echo "B start" >>"$DEMO_DIR/turns"
echo "   job B: running with fence $REDLOCK_FENCE"
echo "B end" >>"$DEMO_DIR/turns"
JOB
chmod +x "$dir/job-A" "$dir/job-B"

step 1 "job A takes the lock and holds it"
show "redlock-run -k nightly-backup -v -- job-A &"
"$bin" -k nightly-backup -v -- "$dir/job-A" &
job_a=$!
wait_for 'grep -q "A start" "$dir/turns" 2>/dev/null' || fail "job A never started"
ok "job A holds the lock"

step 2 "status while the lock is held"
show "redlock-run status nightly-backup"
rc=0
"$bin" status nightly-backup >"$dir/status" || rc=$?
cat "$dir/status"
[ "$rc" = 0 ] && grep -q "held by" "$dir/status" || fail "status exited $rc, expected 0 and 'held by'"
ok "status: exit 0 (held)"

step 3 "a -n contender is turned away"
show "redlock-run -k nightly-backup -n -- echo never"
rc=0
"$bin" -k nightly-backup -n -- echo never || rc=$?
[ "$rc" = 75 ] || fail "the -n contender exited $rc, expected 75"
ok "exit 75 (lock busy; the command did not run)"

step 4 "job B waits its turn"
show "redlock-run -k nightly-backup -v -- job-B &"
"$bin" -k nightly-backup -v -- "$dir/job-B" &
job_b=$!
sleep 1 # B is waiting now; let A finish
touch "$dir/A.may-finish"
wait_job "$job_a"
rc_a=$rc
wait_job "$job_b"
rc_b=$rc
turns=$(paste -sd, "$dir/turns")
[ "$rc_a" = 0 ] && [ "$rc_b" = 0 ] && [ "$turns" = "A start,A end,B start,B end" ] ||
    fail "jobs exited $rc_a and $rc_b, ran in the order $turns"
ok "A ran, then B (exit $rc_a and $rc_b); never both at once"

step 5 "a lock lost to a paused Redis stops its job"
show "redlock-run -k lost-lock --ttl 2s -v -- sh -c 'sleep 60' &   # then: kill -STOP redis-server"
"$bin" -k lost-lock --ttl 2s -v -- sh -c 'echo "   job: running"; touch "$DEMO_DIR/lost.started"; exec sleep 60' &
job_lost=$!
wait_for '[ -e "$dir/lost.started" ]' || fail "the job never started"
kill -STOP "$redis_pid"
paused=1
echo "   redis-server paused (SIGSTOP); the lock cannot be refreshed"
wait_job "$job_lost"
kill -CONT "$redis_pid"
paused=''
[ "$rc" = 70 ] || fail "the job's wrapper exited $rc, expected 70"
ok "exit 70 (lock lost; the job was stopped before the lock could expire)"

printf '\ndemo: all 5 steps behaved\n'
bin_dir=$(cd "$(dirname "$bin")" && pwd)
printf '\nThe binary is %s. To run it as redlock-run, put it on PATH:\n' "$bin_dir/$(basename "$bin")"
printf '  export PATH="%s:$PATH"\n' "$bin_dir"
printf 'or install it (README.md, Install): cargo install --locked --path .\n'
