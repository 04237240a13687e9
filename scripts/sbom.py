#!/usr/bin/env python3
"""The SBOM of one release artefact, and its check.

    sbom.py --cargo-sbom FILE --target TRIPLE --binary PATH --artefact PATH --out FILE
        From cargo-cyclonedx's CycloneDX JSON for one target (every crate
        compiled in: name, version, licence, the SHA-256 of its .crate, its
        purl), write the artefact's SBOM: the same, less any crate that
        `cargo tree --target TRIPLE` says is not compiled in (cargo-cyclonedx
        cannot evaluate a dependency's own cfg flags: rustix's `errno` is
        built only where rustix uses libc), made reproducible (the
        date is SOURCE_DATE_EPOCH, the serial number is derived from the
        artefact's SHA-256, no path of the build machine), and saying what
        it describes: the artefact's file name and SHA-256, and the
        SHA-256 of the binary inside it.

    sbom.py --check FILE --target TRIPLE
        Fail unless FILE lists exactly the crates `cargo tree --edges
        normal --target TRIPLE` says are compiled in, each with its version,
        a licence and the SHA-256 that Cargo.lock records for it.
"""

import argparse
import datetime
import hashlib
import json
import os
import subprocess
import sys
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write(args):
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch or not epoch.isdigit():
        sys.exit("sbom.py: SOURCE_DATE_EPOCH must be set (scripts/build-env.sh sets it)")
    with open(args.cargo_sbom) as f:
        text = f.read()
    # Package ids of path crates name the source directory: not ours to publish.
    for root in {ROOT, os.path.realpath(ROOT)}:
        text = text.replace("file://" + root, "file:///src")
    bom = json.loads(text)
    keep_compiled_in(bom, compiled_in(args.target))
    name = os.path.basename(args.artefact)
    digest = sha256(args.artefact)
    bom["serialNumber"] = "urn:uuid:" + str(uuid.uuid5(uuid.NAMESPACE_URL, "sha256:" + digest))
    meta = bom.setdefault("metadata", {})
    meta["timestamp"] = datetime.datetime.fromtimestamp(
        int(epoch), datetime.timezone.utc
    ).strftime("%Y-%m-%dT%H:%M:%SZ")
    component = meta.setdefault("component", {})
    component["hashes"] = [{"alg": "SHA-256", "content": sha256(args.binary)}]
    meta["properties"] = [
        p for p in meta.get("properties", []) if not p.get("name", "").startswith("redlock-run:")
    ] + [
        {"name": "redlock-run:artefact", "value": name},
        {"name": "redlock-run:artefact:sha256", "value": digest},
        {"name": "redlock-run:binary:sha256", "value": sha256(args.binary)},
    ]
    with open(args.out, "w") as f:
        json.dump(bom, f, indent=2, sort_keys=True)
        f.write("\n")


def keep_compiled_in(bom, crates):
    """Drop from `bom` every library component not in `crates` ((name,
    version) pairs), and the dependency entries that name it."""
    dropped = set()

    def prune(components):
        kept = []
        for c in components:
            key = (c.get("name"), c.get("version"))
            if c.get("type", "library") == "library" and key not in crates:
                dropped.add(c.get("bom-ref"))
                continue
            c["components"] = prune(c.get("components", []))
            if not c["components"]:
                del c["components"]
            kept.append(c)
        return kept

    bom["components"] = prune(bom.get("components", []))
    deps = []
    for d in bom.get("dependencies", []):
        if d.get("ref") in dropped:
            continue
        if "dependsOn" in d:
            d["dependsOn"] = [r for r in d["dependsOn"] if r not in dropped]
        deps.append(d)
    if "dependencies" in bom:
        bom["dependencies"] = deps


def locked_checksums():
    """(name, version) -> the .crate's SHA-256, from Cargo.lock."""
    import tomllib

    with open(os.path.join(ROOT, "Cargo.lock"), "rb") as f:
        lock = tomllib.load(f)
    return {(p["name"], p["version"]): p.get("checksum") for p in lock["package"]}


def compiled_in(target):
    """The crates cargo builds into TARGET's binary, the root crate left out."""
    out = subprocess.run(
        ["cargo", "tree", "--locked", "--edges", "normal", "--target", target,
         "--prefix", "none", "--format", "{p}"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    crates = set()
    for line in out.splitlines():
        # "name vX.Y.Z", then "(*)" (seen before), "(proc-macro)", or for
        # the root crate its path: "redlock-run v0.1.0 (/path)".
        fields = line.split()
        if len(fields) < 2 or len(fields) > 2 and fields[2].startswith("(/"):
            continue
        crates.add((fields[0], fields[1].lstrip("v")))
    return crates


def check(args):
    with open(args.check) as f:
        bom = json.load(f)
    problems = []
    listed = {}

    def walk(components):
        for c in components:
            listed[(c.get("name"), c.get("version"))] = c
            walk(c.get("components", []))

    walk(bom.get("components", []))
    want = compiled_in(args.target)
    checksums = locked_checksums()
    for missing in sorted(want - set(listed)):
        problems.append("not listed: %s %s" % missing)
    for extra in sorted(set(listed) - want):
        problems.append("listed, not compiled in: %s %s" % extra)
    for key in sorted(want & set(listed)):
        c = listed[key]
        licences = [
            l.get("expression") or (l.get("license") or {}).get("id") or (l.get("license") or {}).get("name")
            for l in c.get("licenses", [])
        ]
        if not any(licences):
            problems.append("no licence: %s %s" % key)
        hashes = {h.get("alg"): h.get("content") for h in c.get("hashes", [])}
        if hashes.get("SHA-256") != checksums.get(key):
            problems.append("SHA-256 of %s %s is not Cargo.lock's" % key)
    if problems:
        for p in problems:
            print("sbom.py: %s: %s" % (args.check, p), file=sys.stderr)
        sys.exit(1)
    print("sbom.py: %s lists the %d crates compiled in, each with version, licence and SHA-256"
          % (os.path.basename(args.check), len(want)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cargo-sbom")
    parser.add_argument("--binary")
    parser.add_argument("--artefact")
    parser.add_argument("--out")
    parser.add_argument("--check")
    parser.add_argument("--target")
    args = parser.parse_args()
    if args.check and args.target:
        check(args)
    elif args.cargo_sbom and args.target and args.binary and args.artefact and args.out:
        write(args)
    else:
        parser.error("give --cargo-sbom, --target, --binary, --artefact and --out, or --check and --target")


if __name__ == "__main__":
    main()
