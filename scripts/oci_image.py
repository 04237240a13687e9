#!/usr/bin/env python3
"""Write an OCI image FROM scratch, as an OCI image layout in one tar.

The image holds the static binary (/usr/bin/redlock-run, the entrypoint)
and the CA certificates (/etc/ssl/certs/ca-certificates.crt, where
rustls-native-certs looks), nothing else: one layer, one manifest, an
index naming it VERSION. Written by hand rather than by a container tool
so that it is byte for byte reproducible and needs no root: every file
and directory is owned by 0:0 with a fixed mode, dated SOURCE_DATE_EPOCH,
entries sorted, gzip without a name or date, JSON with sorted keys.

    oci_image.py --binary PATH --certs PATH --arch amd64|arm64 \
        --version VERSION --out FILE.tar

Load it with `skopeo copy oci-archive:FILE.tar docker://REGISTRY/NAME:TAG`
or unpack it with `umoci unpack` (see docs/install.md).
"""

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile

PLATFORMS = {"amd64": {}, "arm64": {"variant": "v8"}}


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def tar_bytes(entries, mtime):
    """A tar of (name, mode, data-or-None-for-a-directory), in name order."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, mode, data in sorted(entries):
            info = tarfile.TarInfo(name)
            info.mode = mode
            info.mtime = mtime
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def descriptor(media_type, data):
    return {
        "mediaType": media_type,
        "digest": "sha256:" + hashlib.sha256(data).hexdigest(),
        "size": len(data),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--certs", required=True)
    parser.add_argument("--arch", required=True, choices=sorted(PLATFORMS))
    parser.add_argument("--version", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch or not epoch.isdigit():
        sys.exit("oci_image.py: SOURCE_DATE_EPOCH must be set (scripts/build-env.sh sets it)")
    mtime = int(epoch)
    created = datetime.datetime.fromtimestamp(mtime, datetime.timezone.utc)
    created = created.strftime("%Y-%m-%dT%H:%M:%SZ")

    with open(args.binary, "rb") as f:
        binary = f.read()
    with open(args.certs, "rb") as f:
        certs = f.read()
    layer = tar_bytes(
        [
            ("etc", 0o755, None),
            ("etc/ssl", 0o755, None),
            ("etc/ssl/certs", 0o755, None),
            ("etc/ssl/certs/ca-certificates.crt", 0o644, certs),
            ("usr", 0o755, None),
            ("usr/bin", 0o755, None),
            ("usr/bin/redlock-run", 0o755, binary),
        ],
        mtime,
    )
    compressed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=9) as gz:
        gz.write(layer)
    layer_gz = compressed.getvalue()

    platform = {"architecture": args.arch, "os": "linux", **PLATFORMS[args.arch]}
    config = canonical(
        {
            **platform,
            "created": created,
            "config": {
                "Entrypoint": ["/usr/bin/redlock-run"],
                "Env": ["PATH=/usr/bin"],
                # nobody: no root inside the container unless asked for.
                "User": "65534:65534",
                "Labels": {
                    "org.opencontainers.image.title": "redlock-run",
                    "org.opencontainers.image.version": args.version,
                    "org.opencontainers.image.licenses": "MIT OR Apache-2.0",
                },
            },
            "rootfs": {
                "type": "layers",
                "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()],
            },
            "history": [{"created": created, "created_by": "scripts/oci_image.py"}],
        }
    )
    manifest = canonical(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": descriptor("application/vnd.oci.image.config.v1+json", config),
            "layers": [descriptor("application/vnd.oci.image.layer.v1.tar+gzip", layer_gz)],
            "annotations": {"org.opencontainers.image.created": created},
        }
    )
    index = canonical(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    **descriptor("application/vnd.oci.image.manifest.v1+json", manifest),
                    "platform": platform,
                    "annotations": {"org.opencontainers.image.ref.name": args.version},
                }
            ],
        }
    )
    entries = [
        ("oci-layout", 0o644, canonical({"imageLayoutVersion": "1.0.0"})),
        ("index.json", 0o644, index),
        ("blobs", 0o755, None),
        ("blobs/sha256", 0o755, None),
    ]
    for blob in (layer_gz, config, manifest):
        entries.append(("blobs/sha256/" + hashlib.sha256(blob).hexdigest(), 0o644, blob))
    tmp = args.out + ".part"
    with open(tmp, "wb") as f:
        f.write(tar_bytes(entries, mtime))
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
