#!/usr/bin/env bash
# Benchmark redlock-run against true, flock(1) and a redis-cli wrapper.
# Usage: scripts/bench.sh [--quick]
# Builds the release binary, starts a throwaway redis-server on a free
# loopback port, and prints one table (see scripts/bench.py).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
target="${CARGO_TARGET_DIR:-target}"
exec python3 scripts/bench.py --binary "$target/release/redlock-run" "$@"
