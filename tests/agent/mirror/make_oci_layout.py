#!/usr/bin/env python3
"""Writes an OCI image layout with one image (tag "v1"): one layer of SIZE random bytes.
Usage: make_oci_layout.py DIR SIZE. Prints the layer's digest."""
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile


def blob(directory, data):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(directory, "blobs", "sha256", digest), "wb") as f:
        f.write(data)
    return "sha256:" + digest


def main():
    directory, size = sys.argv[1], int(sys.argv[2])
    os.makedirs(os.path.join(directory, "blobs", "sha256"), exist_ok=True)
    payload = os.urandom(size)
    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w") as tar:
        info = tarfile.TarInfo("payload.bin")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    diff_id = "sha256:" + hashlib.sha256(tar_bytes.getvalue()).hexdigest()
    layer = gzip.compress(tar_bytes.getvalue(), mtime=0)
    layer_digest = blob(directory, layer)
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]},
                         "config": {}}).encode()
    config_digest = blob(directory, config)
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": layer_digest, "size": len(layer)}]}).encode()
    manifest_digest = blob(directory, manifest)
    with open(os.path.join(directory, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest, "size": len(manifest),
            "annotations": {"org.opencontainers.image.ref.name": "v1"}}]}, f)
    with open(os.path.join(directory, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    print(layer_digest)


if __name__ == "__main__":
    main()
