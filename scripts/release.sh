#!/usr/bin/env bash
# Build the release artefacts into dist/, both with the static musl binary
# (x86_64-unknown-linux-musl, dlmalloc; the fastest to start, see
# scripts/bench.sh):
#   redlock-run_VERSION-1_amd64.deb                       (cargo-deb; no Depends)
#   redlock-run-VERSION-x86_64-unknown-linux-musl.tar.gz  (static binary, man
#       page, completions, README, licences, changelog)
#   SHA256SUMS                                            (sha256sum -c SHA256SUMS)
#
# Usage: scripts/release.sh [--deb-only]
# Installs what it needs (scripts/prereqs.sh --release, cargo-deb, the
# x86_64-unknown-linux-musl target). When the musl target cannot be
# installed it says so in one line and exits 3, before building anything,
# rather than produce a release without the static binary.
set -euo pipefail
cd "$(dirname "$0")/.."

deb_only=''
case "${1:-}" in
'') ;;
--deb-only) deb_only=1 ;;
*)
    echo "usage: scripts/release.sh [--deb-only]" >&2
    exit 2
    ;;
esac

source scripts/prereqs.sh --release

musl=x86_64-unknown-linux-musl
if ! rustup target list --installed 2>/dev/null | grep -qx "$musl"; then
    if ! rustup target add "$musl" >/dev/null 2>&1; then
        echo "release: cannot install the Rust target $musl (rustup target add failed); no release built" >&2
        exit 3
    fi
fi

if ! cargo deb --version 2>/dev/null | grep -q '^cargo-deb 3\.'; then
    echo "release: installing cargo-deb 3.x" >&2
    cargo install --locked --quiet cargo-deb@^3
fi

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
target_dir=${CARGO_TARGET_DIR:-target}
mkdir -p dist
rm -f dist/redlock-run_"$version"-*.deb dist/redlock-run-"$version"-*.tar.gz dist/SHA256SUMS

# ring compiles C: it needs musl's gcc wrapper for this target.
export CC_x86_64_unknown_linux_musl=musl-gcc

# The .deb: cargo-deb builds the release profile for the musl target (the
# asset target/release/redlock-run is read from $target_dir/$musl/release/),
# gzips the man page. $auto finds no shared library, so no Depends (cargo-deb
# still writes the field, empty; its warning about $auto is one --quiet hides).
cargo deb --quiet --target "$musl" --output dist/ -- --locked
deb=$(ls dist/redlock-run_"$version"-*_amd64.deb)
echo "release: $deb"
artefacts=("$(basename "$deb")")

if [ -z "$deb_only" ]; then
    # The binary cargo-deb just built (this build is a no-op).
    cargo build --quiet --locked --release --target "$musl"
    name=redlock-run-$version-$musl
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage/$name/man" "$stage/$name/completions"
    cp "$target_dir/$musl/release/redlock-run" "$stage/$name/"
    cp man/redlock-run.1 "$stage/$name/man/"
    cp completions/* "$stage/$name/completions/"
    cp README.md CHANGELOG.md CONTRIBUTING.md LICENSE-MIT LICENSE-APACHE "$stage/$name/"
    cp -r docs contrib "$stage/$name/"
    # Reproducible: sorted, owned by root, dated by the last commit.
    mtime=$(git log -1 --format=%cI 2>/dev/null || date -u +%FT%TZ)
    tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="$mtime" \
        -cf - "$name" | gzip -9n >"dist/$name.tar.gz"
    echo "release: dist/$name.tar.gz"
    artefacts+=("$name.tar.gz")
fi

(cd dist && sha256sum "${artefacts[@]}" >SHA256SUMS && sha256sum --quiet -c SHA256SUMS)
echo "release: dist/SHA256SUMS"
