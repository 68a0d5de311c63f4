"""Turn a root filesystem into an image archive that containerd imports (``ctr images import``).

The real node has no registry to pull from. Images reach its containerd as archives in the format that
``docker save`` writes (``manifest.json`` + image config + one layer tar), which is also what this module
makes from a plain root filesystem tar: the pod sandbox binary (``pause``) and the images that the compose
stack's exporter services write into a shared volume (see images/mpi/export-image). ``content_key`` tells whether
two such exports hold the same image, so that a node keeps what it imported before (localcluster/serve.py).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path

CHUNK = 1 << 20


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def write_archive(
    out: Path,
    layer: Path,
    ref: str,
    *,
    env: Sequence[str] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",),
    entrypoint: Sequence[str] | None = None,
    workdir: str | None = None,
) -> Path:
    """Write ``out``: a one-layer image archive of the uncompressed tar ``layer``, tagged ``ref``."""
    diff_id = _sha256(layer)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": {
            "Env": list(env),
            **({"Entrypoint": list(entrypoint)} if entrypoint else {}),
            **({"WorkingDir": workdir} if workdir else {}),
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created_by": "localcluster.image_archive"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = f"{hashlib.sha256(config_bytes).hexdigest()}.json"
    manifest = [{"Config": config_name, "RepoTags": [ref], "Layers": [f"{diff_id}/layer.tar"]}]
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w") as tar:
        _add_bytes(tar, config_name, config_bytes)
        _add_bytes(tar, "manifest.json", json.dumps(manifest).encode())
        tar.add(layer, arcname=f"{diff_id}/layer.tar")
    tmp.replace(out)
    return out


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(data))


def binary_archive(out: Path, binary: Path, ref: str) -> Path:
    """An image holding one static binary at ``/<name>``, which is also its entrypoint (the pause image)."""
    layer = out.with_name(out.name + ".layer")
    with tarfile.open(layer, "w") as tar:
        tar.add(binary, arcname=binary.name)
    try:
        return write_archive(out, layer, ref, env=(), entrypoint=[f"/{binary.name}"])
    finally:
        layer.unlink(missing_ok=True)


def exported_archive(rootfs_tar: Path, settings: Path, out: Path) -> Path:
    """Archive of a root filesystem written by images/mpi/export-image, with the settings it recorded
    (``<name>.json``: reference and working directory; ``<name>.env``: the image's environment)."""
    meta = json.loads(settings.read_text())
    env_file = settings.with_suffix(".env")
    env = [line for line in env_file.read_text().splitlines() if "=" in line] if env_file.exists() else []
    return write_archive(out, rootfs_tar, meta["ref"], env=env, workdir=meta.get("workdir") or None)


# What an exported root filesystem holds of the exporter's container, not of its image: Docker makes these files when
# it creates a container (and /etc/mtab's link, and so sets the times of / and /etc), so two exports of one image
# differ only there (checked: two exports of one image, listed and hashed entry by entry).
CONTAINER_FILES = frozenset({"./.dockerenv", "./etc/hostname", "./etc/hosts", "./etc/resolv.conf"})
CONTAINER_TIMES = frozenset({".", "./etc", "./etc/mtab"})


def content_key(rootfs_tar: Path, settings: Path) -> str:
    """Digest of the image an export makes: every entry's name, type, mode, owner, time, link target and bytes, in
    any order, and the recorded settings, without what belongs to the exporter's container. Equal keys, equal
    images: a byte changed under the same size and time changes the key."""
    entries = []
    with tarfile.open(rootfs_tar, "r:") as tar:
        for member in tar:
            if member.name in CONTAINER_FILES:
                continue
            h = hashlib.sha256()
            mtime = 0 if member.name in CONTAINER_TIMES else member.mtime
            meta = [
                member.name,
                member.type.decode(),
                member.mode,
                member.uid,
                member.gid,
                mtime,
                member.linkname,
            ]
            h.update(json.dumps([*meta, member.size, member.devmajor, member.devminor]).encode())
            if member.isreg():
                f = tar.extractfile(member)
                assert f is not None  # a regular file's bytes
                while chunk := f.read(CHUNK):
                    h.update(chunk)
            entries.append(h.hexdigest())
    key = hashlib.sha256()
    for path in (settings, settings.with_suffix(".env")):
        key.update(path.read_bytes() if path.exists() else b"-")
    for entry in sorted(entries):
        key.update(entry.encode())
    return key.hexdigest()
