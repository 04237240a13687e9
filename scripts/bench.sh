#!/usr/bin/env bash
# Benchmark redlock-run against true, flock(1) and a redis-cli wrapper.
# Usage: scripts/bench.sh [--quick] [--no-topologies] [--idle N]
# Builds the release binary, starts throwaway redis-servers (one, a 5-node
# quorum, a primary with 3 sentinels, a 3-primary cluster) on free loopback
# ports, briefly adds thousands of idle `sleep` processes, and prints one
# table with the targets [met]/[MISSED] (see scripts/bench.py). Exits
# non-zero only if a wrapped run failed or two sections overlapped; timing
# is never asserted. scripts/phases.sh breaks one run down by phase.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
target="${CARGO_TARGET_DIR:-target}"
exec python3 scripts/bench.py --binary "$target/release/redlock-run" "$@"
