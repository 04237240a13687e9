#!/usr/bin/env bash
# The environment of a release build, sourced by scripts/release.sh and
# scripts/bench.sh (so that CI's one x86_64 musl build, made by the
# benchmark, is the one released: cargo rebuilds when the flags differ).
#
# It makes the build reproducible (docs/install.md#reproducible-builds):
#   SOURCE_DATE_EPOCH   the last commit's time: the date of every file in
#                       the tarball, the .deb and the OCI image
#   --remap-path-prefix the cargo home becomes /cargo, the source directory
#                       /src (the target directory too when it lies
#                       elsewhere): the binary names no build path
# and names the C compilers and the linker of the two static targets
# (ring compiles C): musl-gcc (musl-tools) for x86_64, Debian's
# aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu) for aarch64, which links
# against the Rust target's own musl (self-contained crt and libc).
#
# The static binaries are linked at a fixed address (`-C
# relocation-model=static`, as .cargo/config.toml says for builds without
# this file): a position-independent one relocates 3,680 pointers at
# every start, copying 16 pages to write them, 0.09 ms of a 2.2 ms run
# (docs/benchmarks.md). The stack, heap and libraries' mappings are still
# placed at random; only the binary's own image is not.
#
# RUSTFLAGS and CARGO_ENCODED_RUSTFLAGS are unset: either would replace
# the per-target flags set here.

redlock_build_env_main() {
    local root cargo_home target_dir remap
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
    cargo_home=${CARGO_HOME:-$HOME/.cargo}
    target_dir=${CARGO_TARGET_DIR:-$root/target}
    case "$root$cargo_home$target_dir" in
    *[[:space:]]*)
        echo "build-env: a path holds white space ($root, $cargo_home, $target_dir): cargo's RUSTFLAGS cannot carry it" >&2
        return 1
        ;;
    esac
    if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
        SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct 2>/dev/null) || {
            echo "build-env: no git history in $root to date the build by (set SOURCE_DATE_EPOCH)" >&2
            return 1
        }
    fi
    export SOURCE_DATE_EPOCH
    remap="--remap-path-prefix=$cargo_home=/cargo --remap-path-prefix=$root=/src"
    case "$target_dir" in
    "$root" | "$root"/*) ;;
    *) remap+=" --remap-path-prefix=$target_dir=/target" ;;
    esac
    unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS
    export CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="$remap -C relocation-model=static"
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="$remap -C relocation-model=static"
    export CC_x86_64_unknown_linux_musl=musl-gcc
    export CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc
    export AR_aarch64_unknown_linux_musl=aarch64-linux-gnu-ar
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc
}

redlock_build_env_main || return 1
unset -f redlock_build_env_main
