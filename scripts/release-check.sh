#!/usr/bin/env bash
# Check the release in dist/ (scripts/release.sh's output, both
# architectures) as CI does; each check says in one line what failed.
#
#   scripts/release-check.sh PUBLIC_KEY   the minisign public key that
#                                         signed dist/SHA256SUMS
#
# - SHA256SUMS: sha256sum -c; its signature verifies with PUBLIC_KEY, and
#   a copy with one byte changed does not;
# - each SBOM (ARTEFACT.cdx.json) lists exactly the crates `cargo tree`
#   says are compiled into that target, each with version, licence and
#   SHA-256 (scripts/sbom.py --check);
# - the .debs: lintian --fail-on error, installed into an empty dpkg root
#   (the arm64 one as a foreign architecture), their binary static and the
#   tarball's, byte for byte;
# - both binaries (aarch64 under qemu-aarch64-static, no binfmt needed):
#   --version, a job run under a lock with its exit code passed through, a
#   lost lock (the key replaced while the job runs) stopping the job with
#   exit 70;
# - the aarch64 binary under qemu: a subset of the integration suite
#   (scripts/release-check-qemu-tests.txt: tests that look only at what
#   the binary does over Redis and to its job, not at its own pid, /proc
#   or process names);
# - the OCI images: unpacked with umoci, holding the binary and the CA
#   certificates and nothing else; a job run under a lock from the image's
#   root filesystem, as the image's user, in new mount and PID namespaces
#   (as a container runtime would: /proc and /dev mounted, nothing else).
#
# Every redis-server runs on a free loopback port (never 6379) in a
# scratch directory. Needs root (dpkg roots, chroot, namespaces) and
# scripts/prereqs.sh --release.
set -euo pipefail
cd "$(dirname "$0")/.."

pub=${1:?usage: scripts/release-check.sh PUBLIC_KEY}
[ "$(id -u)" = 0 ] || { echo "release-check: needs root (dpkg roots, chroot, namespaces)" >&2; exit 2; }
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
scratch=$(mktemp -d)
redis_pid=''
cleanup() {
    if [ -n "$redis_pid" ]; then kill "$redis_pid" 2>/dev/null || true; fi
    rm -rf "$scratch"
}
trap cleanup EXIT
fail() {
    echo "release-check: $*" >&2
    exit 1
}

# The integration tests run against the aarch64 binary under qemu, by
# exact name, and why the others are left out: scripts/release-check-qemu-tests.txt.
mapfile -t QEMU_TESTS < <(grep -v '^#' scripts/release-check-qemu-tests.txt)

section() { printf '\nrelease-check: == %s\n' "$*"; }

# A throwaway redis-server on a free loopback port: sets $port and $redis_pid.
start_redis() {
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    [ "$port" != 6379 ] || port=$((port + 1))
    redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
        --dir "$scratch" --logfile "$scratch/redis-$port.log" &
    redis_pid=$!
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return; sleep 0.1; done
    fail "redis-server on port $port did not answer"
}
stop_redis() {
    kill "$redis_pid"
    wait "$redis_pid" || true
    redis_pid=''
}

# The lock's two promises, for one binary run by "$@" (a path, or qemu and
# a path): the job's exit code passed through; a lost lock stops the job
# (exit 70) well before the job would end.
runs_jobs_under_a_lock() {
    local what=$1 rc=0 job_pid started
    shift
    "$@" --version || fail "$what does not run (--version)"
    start_redis
    "$@" --redis "redis://127.0.0.1:$port" -k ci-exit -- sh -c 'exit 7' || rc=$?
    [ "$rc" = 7 ] || fail "$what returned $rc, not the job's 7"
    # Lost: another token replaces ours while the job sleeps.
    rc=0
    started=$SECONDS
    "$@" --redis "redis://127.0.0.1:$port" -k ci-lost --ttl 3s --refresh 300ms -- sleep 60 &
    job_pid=$!
    for _ in $(seq 100); do
        [ "$(redis-cli -p "$port" exists 'redlock:{ci-lost}')" = 1 ] && break
        sleep 0.1
    done
    redis-cli -p "$port" set 'redlock:{ci-lost}' someone-else >/dev/null
    wait "$job_pid" || rc=$?
    [ "$rc" = 70 ] || fail "$what returned $rc after its lock was lost, not 70"
    [ $((SECONDS - started)) -lt 30 ] || fail "$what took $((SECONDS - started)) s to stop the job of a lost lock"
    stop_redis
    echo "release-check: $what passed a job's exit code 7 through, and stopped the job of a lost lock in $((SECONDS - started)) s (exit 70)"
}

# Static: no program interpreter, no shared library needed (readelf reads
# either architecture; ldd runs only the machine's own).
is_static() {
    readelf --program-headers --dynamic "$1" >"$scratch/readelf.txt"
    ! grep -q 'INTERP\|(NEEDED)' "$scratch/readelf.txt" || fail "$1 is not statically linked"
    echo "release-check: $1 is static ($(readelf -h "$1" | sed -n 's/^ *Machine: *//p'))"
}

section "SHA256SUMS and its signature"
(cd dist && sha256sum --quiet -c SHA256SUMS) || fail "dist/SHA256SUMS does not match the artefacts"
minisign -V -p "$pub" -m dist/SHA256SUMS || fail "dist/SHA256SUMS.minisig does not verify with $pub"
cp dist/SHA256SUMS "$scratch/SHA256SUMS"
cp dist/SHA256SUMS.minisig "$scratch/SHA256SUMS.minisig"
sed -i '1s/^./x/' "$scratch/SHA256SUMS"
if minisign -V -q -p "$pub" -m "$scratch/SHA256SUMS" 2>/dev/null; then
    fail "a changed SHA256SUMS still verifies"
fi
echo "release-check: $(wc -l <dist/SHA256SUMS) files listed; the signature verifies, and fails on a changed copy"

for arch in x86_64 aarch64; do
    musl=$arch-unknown-linux-musl
    case $arch in
    x86_64) debarch=amd64 run=() ;;
    aarch64) debarch=arm64 run=(qemu-aarch64-static) ;;
    esac
    deb=dist/redlock-run_$version-1_$debarch.deb
    tarball=dist/redlock-run-$version-$musl.tar.gz
    oci=dist/redlock-run-$version-oci-$debarch.tar

    section "$arch: the SBOMs"
    for artefact in "$deb" "$tarball" "$oci"; do
        python3 scripts/sbom.py --check "$artefact.cdx.json" --target "$musl" ||
            fail "$artefact.cdx.json does not list what is compiled in (see above)"
    done

    section "$arch: the .deb and the tarball"
    # No errors allowed; the warnings that stay are listed in docs/install.md.
    lintian --fail-on error "$deb" || fail "lintian found errors in $deb (see above)"
    root=$scratch/root-$debarch
    mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
    touch "$root/var/lib/dpkg/status"
    dpkg=(dpkg --root="$root" --log="$scratch/dpkg.log" --force-not-root --force-script-chrootless)
    [ "$debarch" = amd64 ] || "${dpkg[@]}" --add-architecture "$debarch"
    "${dpkg[@]}" -i "$deb" >/dev/null || fail "dpkg could not install $deb into an empty root (see above)"
    [ "$(dpkg-query --root="$root" -W -f='${db:Status-Status}' redlock-run)" = installed ] ||
        fail "$deb did not install into an empty dpkg root"
    echo "release-check: $deb installs into an empty dpkg root (Depends: $(dpkg-deb -f "$deb" Depends))"
    MANWIDTH=80 man -l "$root/usr/share/man/man1/redlock-run.1.gz" >"$scratch/man.txt"
    grep -q '^EXIT STATUS' "$scratch/man.txt" || fail "the packaged man page does not render"
    tar -C "$scratch" -xzf "$tarball" || fail "cannot unpack $tarball"
    bin=$scratch/redlock-run-$version-$musl/redlock-run
    cmp "$bin" "$root/usr/bin/redlock-run" || fail "the tarball's binary is not the .deb's"
    is_static "$bin"
    runs_jobs_under_a_lock "the $arch binary${run:+ under qemu}" "${run[@]}" "$bin"

    if [ "$arch" = aarch64 ]; then
        section "aarch64: ${#QEMU_TESTS[@]} integration tests under qemu (scripts/release-check-qemu-tests.txt)"
        wrapper=$scratch/redlock-run-aarch64
        printf '#!/bin/sh\nexec qemu-aarch64-static %s "$@"\n' "$bin" >"$wrapper"
        chmod +x "$wrapper"
        started=$SECONDS
        REDLOCK_TEST_BINARY=$wrapper REDLOCK_TEST_REQUIRE_TOOLS=1 \
            cargo test --locked --quiet --test integration -- --exact "${QEMU_TESTS[@]}" |
            tee "$scratch/qemu-tests.log" ||
            fail "integration tests failed against the aarch64 binary under qemu (see above)"
        grep -q "^test result: ok\. ${#QEMU_TESTS[@]} passed" "$scratch/qemu-tests.log" ||
            fail "fewer tests ran under qemu than scripts/release-check-qemu-tests.txt lists (one renamed or removed?)"
        echo "release-check: the integration subset passed under qemu in $((SECONDS - started)) s"
    fi

    section "$arch: the OCI image"
    layout=$scratch/oci-$debarch
    mkdir -p "$layout"
    tar -C "$layout" -xf "$oci" || fail "cannot unpack $oci"
    umoci unpack --image "$layout:$version" "$scratch/bundle-$debarch" >/dev/null ||
        fail "umoci cannot unpack the image $version from $oci (see above)"
    rootfs=$scratch/bundle-$debarch/rootfs
    (cd "$rootfs" && find . -mindepth 1 | LC_ALL=C sort) >"$scratch/files.txt"
    printf '%s\n' ./etc ./etc/ssl ./etc/ssl/certs ./etc/ssl/certs/ca-certificates.crt \
        ./usr ./usr/bin ./usr/bin/redlock-run | diff - "$scratch/files.txt" ||
        fail "$oci holds other files than the binary and the CA certificates"
    cmp "$bin" "$rootfs/usr/bin/redlock-run" || fail "$oci's binary is not the tarball's"
    entrypoint=$(python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); print(c["process"]["args"][0], c["process"]["user"]["uid"])' \
        "$scratch/bundle-$debarch/config.json")
    [ "$entrypoint" = "/usr/bin/redlock-run 65534" ] || fail "$oci's entrypoint and user are $entrypoint"
    # What a runtime adds: /proc, /dev; for aarch64, qemu (static) beside
    # the image's files, since this kernel has no binfmt entry for it.
    mkdir "$rootfs/proc" "$rootfs/dev"
    inside=(/usr/bin/redlock-run)
    if [ "$arch" = aarch64 ]; then
        cp "$(command -v qemu-aarch64-static)" "$rootfs/qemu"
        inside=(/qemu /usr/bin/redlock-run)
    fi
    start_redis
    # As a runtime would run it: PID 1 of new PID and mount namespaces,
    # chrooted, as the image's user.
    in_image() {
        unshare --mount --pid --fork sh -c 'mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" &&
            shift && exec chroot --userspec=65534:65534 "$@"' sh "$rootfs" "$rootfs" "$@"
    }
    url=redis://127.0.0.1:$port
    # The job, from the image too, finds its lock held (status exits 0)...
    in_image "${inside[@]}" --redis "$url" -k ci-image -- "${inside[@]}" --redis "$url" status ci-image ||
        fail "a job run under a lock from $oci's root filesystem did not find the lock held"
    # ... and its exit code is passed through (status exits 1: a key is free).
    rc=0
    in_image "${inside[@]}" --redis "$url" -k ci-image -- "${inside[@]}" --redis "$url" status ci-image ci-free || rc=$?
    stop_redis
    [ "$rc" = 1 ] || fail "a job from $oci's root filesystem exited 1, but the run returned $rc"
    echo "release-check: $oci holds only the binary and the CA certificates; from its root filesystem a job ran under the lock, found it held, and its exit code was passed through"
done
echo
echo "release-check: dist/ passed every check"
