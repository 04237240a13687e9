#!/usr/bin/env bash
# The whole test suite, as CI runs it: install the prerequisites
# (scripts/prereqs.sh), then run every test against real redis-server
# processes, with missing tools failing rather than skipping.
# Extra arguments go to cargo test: scripts/test.sh -- --test-threads 1
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/prereqs.sh
REDLOCK_TEST_REQUIRE_TOOLS=1 exec cargo test --locked "$@"
