#!/usr/bin/env bash
# Build the release into dist/: for x86_64 and aarch64 (ARCH), each with
# the static musl binary (dlmalloc; the fastest to start, see scripts/bench.sh):
#   redlock-run_VERSION-1_DEBARCH.deb                   (cargo-deb; no Depends)
#   redlock-run-VERSION-ARCH-unknown-linux-musl.tar.gz  (static binary, man page,
#       completions, README, licences, changelog, docs)
#   redlock-run-VERSION-oci-DEBARCH.tar                 (an OCI image layout: FROM
#       scratch, the binary and the CA certificates; scripts/oci_image.py)
#   ARTEFACT.cdx.json                                   (a CycloneDX SBOM per
#       artefact: every crate compiled in, version, licence, SHA-256)
# and over them all:
#   SHA256SUMS, SHA256SUMS.minisig                      (minisign; docs/install.md
#       says how to verify)
# DEBARCH is Debian's name: amd64, arm64.
#
# Usage: scripts/release.sh (--key SECRET_KEY | --unsigned) [--arch ARCH]...
#   --key FILE    sign SHA256SUMS with this minisign secret key (minisign
#                 asks for its password, if it has one)
#   --unsigned    no SHA256SUMS.minisig (a build to compare, not to publish)
#   --arch ARCH   x86_64 or aarch64; repeat for both (the default)
#
# Reproducible: two builds of one commit give the same bytes, whatever the
# directory, user or cargo home (scripts/build-env.sh; checked by .ci/run).
# Installs what it needs first (scripts/prereqs.sh --release: Debian
# packages, the Rust targets, cargo-deb, cargo-cyclonedx, cargo-deny), and
# checks licences, bans and sources (cargo deny, offline; deny.toml). When
# a Rust target cannot be installed it says so in one line and exits 3,
# before building anything, rather than release less.
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: scripts/release.sh (--key SECRET_KEY | --unsigned) [--arch x86_64|aarch64]..."
key='' unsigned='' arches=()
while [ $# -gt 0 ]; do
    case $1 in
    --key) key=${2:?$usage} && shift 2 ;;
    --unsigned) unsigned=1 && shift ;;
    --arch)
        case ${2:-} in
        x86_64 | aarch64) arches+=("$2") && shift 2 ;;
        *) echo "$usage" >&2 && exit 2 ;;
        esac
        ;;
    *) echo "$usage" >&2 && exit 2 ;;
    esac
done
if [ -z "$key$unsigned" ] || { [ -n "$key" ] && [ -n "$unsigned" ]; }; then
    echo "release: say how SHA256SUMS is signed: --key SECRET_KEY (minisign) or --unsigned" >&2
    exit 2
fi
if [ -n "$key" ] && [ ! -r "$key" ]; then
    echo "release: cannot read the secret key $key" >&2
    exit 2
fi
((${#arches[@]})) || arches=(x86_64 aarch64)

source scripts/prereqs.sh --release --no-venv
source scripts/build-env.sh

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
target_dir=${CARGO_TARGET_DIR:-target}
certs=/etc/ssl/certs/ca-certificates.crt
[ -r "$certs" ] || { echo "release: no $certs for the OCI image (apt-get install ca-certificates)" >&2; exit 1; }
mkdir -p dist
rm -f dist/redlock-run_"$version"-* dist/redlock-run-"$version"-* dist/SHA256SUMS dist/SHA256SUMS.minisig
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# Licences, bans and sources of every crate (deny.toml), before building:
# cargo deny reads `cargo metadata`, which wants every platform's crates.
cargo fetch --locked --quiet
cargo deny --offline --log-level error check licenses bans sources ||
    { echo "release: cargo deny found a licence, ban or source problem (see above)" >&2; exit 1; }

# tar, reproducibly: sorted, owned by root, modes from the source's
# executable bits alone (not the umask), dated by the last commit.
repro_tar() {
    tar --sort=name --owner=0 --group=0 --numeric-owner --mode=u=rwX,go=rX \
        --mtime="@$SOURCE_DATE_EPOCH" --format=gnu "$@"
}

artefacts=()
for arch in "${arches[@]}"; do
    musl=$arch-unknown-linux-musl
    case $arch in
    x86_64) debarch=amd64 ;;
    aarch64) debarch=arm64 ;;
    esac
    bin=$target_dir/$musl/release/redlock-run

    # The .deb: cargo-deb builds the release profile for the musl target
    # (the asset target/release/redlock-run is read from
    # $target_dir/$musl/release/), gzips the man page, dates every file by
    # SOURCE_DATE_EPOCH. $auto finds no shared library, so no Depends
    # (cargo-deb still writes the field, empty).
    nice -n 10 cargo deb --quiet --target "$musl" --output dist/ -- --locked ||
        { echo "release: cargo deb --target $musl failed (see above)" >&2; exit 1; }
    deb=redlock-run_$version-1_$debarch.deb
    [ -f "dist/$deb" ] || { echo "release: cargo deb wrote no dist/$deb" >&2; exit 1; }

    # The tarball: the binary cargo-deb just built.
    name=redlock-run-$version-$musl
    mkdir -p "$stage/$name/man" "$stage/$name/completions"
    cp "$bin" "$stage/$name/"
    cp man/redlock-run.1 "$stage/$name/man/"
    cp completions/* "$stage/$name/completions/"
    cp README.md CHANGELOG.md CONTRIBUTING.md LICENSE-MIT LICENSE-APACHE "$stage/$name/"
    cp -r docs contrib "$stage/$name/"
    repro_tar -C "$stage" -cf - "$name" | gzip -9n >"dist/$name.tar.gz"

    # The OCI image layout: the same binary, FROM scratch.
    oci=redlock-run-$version-oci-$debarch.tar
    python3 scripts/oci_image.py --binary "$bin" --certs "$certs" --arch "$debarch" \
        --version "$version" --out "dist/$oci"

    # One SBOM per artefact: the crates compiled into this target's binary.
    cargo cyclonedx --quiet --format json --target "$musl" --no-build-deps --spec-version 1.5 \
        --override-filename "redlock-run-sbom-$musl" >/dev/null ||
        { echo "release: cargo cyclonedx --target $musl failed (see above)" >&2; exit 1; }
    for artefact in "$deb" "$name.tar.gz" "$oci"; do
        python3 scripts/sbom.py --cargo-sbom "redlock-run-sbom-$musl.json" --target "$musl" --binary "$bin" \
            --artefact "dist/$artefact" --out "dist/$artefact.cdx.json"
        artefacts+=("$artefact" "$artefact.cdx.json")
    done
    rm -f "redlock-run-sbom-$musl.json"
    echo "release: $arch: dist/$deb, dist/$name.tar.gz, dist/$oci and their SBOMs"
done

(cd dist && printf '%s\n' "${artefacts[@]}" | LC_ALL=C sort | xargs sha256sum >SHA256SUMS &&
    sha256sum --quiet -c SHA256SUMS)
echo "release: dist/SHA256SUMS"
if [ -n "$key" ]; then
    # The trusted comment is signed too: it names what was signed.
    minisign -S -s "$key" -m dist/SHA256SUMS -t "redlock-run $version SHA256SUMS" >/dev/null
    minisign -R -s "$key" -p "$stage/minisign.pub" >/dev/null
    minisign -V -q -p "$stage/minisign.pub" -m dist/SHA256SUMS ||
        { echo "release: the new signature does not verify with the key's own public half" >&2; exit 1; }
    echo "release: dist/SHA256SUMS.minisig (public key: $(tail -n 1 "$stage/minisign.pub"))"
fi
