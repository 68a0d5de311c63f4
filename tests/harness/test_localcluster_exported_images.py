"""The compose stack's node keeps an image it imported from an export of the same content (localcluster/serve.py,
localcluster/image_archive.py's ``content_key``): two exports of one image differ only in what Docker made for the
exporter's container, and the key sees through exactly that; any change of the image's own files, or of its
recorded settings, is a new key and a new import.

The exports here are made as images/mpi/export-image makes them (GNU tar of a root directory); the node is a
stand-in that records imports and labels as containerd would (the real node: tests/compose, the switch to the
KubernetesExecutor).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from localcluster.image_archive import content_key
from localcluster.node_image_store import image_labels
from localcluster.processes import child_env
from localcluster.serve import CONTENT_KEY_LABEL, import_exported_images

REF = "airflow-mpi/mpi-pi:openmpi"
IMAGE_TIME = 1_700_000_000  # the image's files: one time, as a build leaves them


def rootfs(tmp_path: Path, name: str, *, container_time: int, hostname: str = "c0ffee") -> Path:
    """A root directory as the exporter's container sees it: the image's files, plus Docker's per container."""
    root = tmp_path / name
    (root / "etc").mkdir(parents=True)
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/pi").write_bytes(b"\x7fELF pi")
    (root / "usr/bin/mpirun").symlink_to("pi")
    (root / "etc/passwd").write_text("mpiuser:x:1000:1000::/home/mpiuser:/bin/sh\n")
    for path in [
        root / "usr/bin/pi",
        root / "usr/bin/mpirun",
        root / "etc/passwd",
        root / "usr/bin",
        root / "usr",
    ]:
        os.utime(path, (IMAGE_TIME, IMAGE_TIME), follow_symlinks=False)  # a link's own time
    # Docker's, at each container's creation: its name and addresses, /.dockerenv, /etc/mtab's link
    (root / "etc/hostname").write_text(f"{hostname}\n")
    (root / "etc/hosts").write_text(f"172.20.0.9 {hostname}\n")
    (root / "etc/resolv.conf").write_text("nameserver 127.0.0.11\n")
    (root / ".dockerenv").write_text("")
    (root / "etc/mtab").symlink_to("/proc/mounts")
    for path in ["etc/hostname", "etc/hosts", "etc/resolv.conf", ".dockerenv", "etc", "."]:
        os.utime(root / path, (container_time, container_time))
    os.utime(root / "etc/mtab", (container_time, container_time), follow_symlinks=False)
    return root


def export(root: Path, out: Path, env: str = "PATH=/usr/bin:/bin\n") -> Path:
    """What images/mpi/export-image writes: the tar of ``root``, the settings and the environment."""
    out.mkdir(parents=True, exist_ok=True)
    stem = REF.replace("/", "_").replace(":", "_")
    subprocess.run(
        ["tar", "--numeric-owner", "-cf", str(out / f"{stem}.tar"), "."],
        cwd=root,
        check=True,
        env=child_env(),
    )
    (out / f"{stem}.json").write_text(json.dumps({"ref": REF, "workdir": "/home/mpiuser"}) + "\n")
    (out / f"{stem}.env").write_text(env)
    return out / f"{stem}.json"


def key(settings: Path) -> str:
    return content_key(settings.with_suffix(".tar"), settings)


def test_two_exports_of_one_image_have_one_key(tmp_path):
    first = export(rootfs(tmp_path, "a", container_time=IMAGE_TIME + 100, hostname="aaa"), tmp_path / "out-a")
    second = export(
        rootfs(tmp_path, "b", container_time=IMAGE_TIME + 900, hostname="bbb"), tmp_path / "out-b"
    )
    # the archives differ (the exporter's own files and times), the image they carry does not
    assert first.with_suffix(".tar").read_bytes() != second.with_suffix(".tar").read_bytes()
    assert key(first) == key(second)


@pytest.mark.parametrize(
    "change",
    [
        "a byte of a file, same size and time",
        "a file's mode",
        "a file's time",
        "a link's target",
        "a file added",
        "the environment",
    ],
)
def test_a_change_to_the_image_is_a_new_key(tmp_path, change):
    before = export(rootfs(tmp_path, "a", container_time=IMAGE_TIME + 100), tmp_path / "out-a")
    root = rootfs(tmp_path, "b", container_time=IMAGE_TIME + 100)
    env = "PATH=/usr/bin:/bin\n"
    if change == "a byte of a file, same size and time":
        (root / "usr/bin/pi").write_bytes(b"\x7fELF PI")
        os.utime(root / "usr/bin/pi", (IMAGE_TIME, IMAGE_TIME))
    elif change == "a file's mode":
        (root / "usr/bin/pi").chmod(0o755)
    elif change == "a file's time":
        os.utime(root / "etc/passwd", (IMAGE_TIME + 1, IMAGE_TIME + 1))
    elif change == "a link's target":
        (root / "usr/bin/mpirun").unlink()
        (root / "usr/bin/mpirun").symlink_to("/usr/bin/pi")
        os.utime(root / "usr/bin/mpirun", (IMAGE_TIME, IMAGE_TIME), follow_symlinks=False)
    elif change == "a file added":
        (root / "etc/motd").write_text("")
        os.utime(root / "etc/motd", (IMAGE_TIME, IMAGE_TIME))
    else:
        env += "OMPI_MCA_plm=rsh\n"
    for path in [
        "usr/bin",
        "etc",
        ".",
    ]:  # what the change did to the directories' times, as Docker's files do
        os.utime(root / path, (IMAGE_TIME + 100 if path in ("etc", ".") else IMAGE_TIME,) * 2)
    after = export(root, tmp_path / "out-b", env=env)
    assert key(before) != key(after)


# `ctr -n k8s.io images ls name==...` on a node after an import and `ctr images label` (real output's layout)
MEDIA = "application/vnd.docker.distribution.manifest.v2+json"


def listing(labels: str) -> str:
    return "\n".join(
        [
            "REF TYPE DIGEST SIZE PLATFORMS LABELS",
            f"docker.io/{REF} {MEDIA} sha256:130ba348 338.5 MiB linux/amd64 {labels}",
        ]
    )


def test_the_labels_of_an_image_from_ctr_s_listing():
    cri = "io.cri-containerd.image=managed"
    assert image_labels(listing(f"{cri},{CONTENT_KEY_LABEL}=50bef45c"), REF) == {
        "io.cri-containerd.image": "managed",
        CONTENT_KEY_LABEL: "50bef45c",
    }
    assert image_labels(listing("-"), REF) == {}
    assert image_labels(listing(cri), "airflow-mpi/mpi-pi:mpich") is None


class Containerd:
    """Stand-in for the node's containerd (localcluster/node_containerd.py): an import makes the image, with no
    labels; ``label_image`` sets them."""

    def __init__(self):
        self.labels: dict[str, dict[str, str]] = {}
        self.imports: list[str] = []

    def image_labels(self, ref: str) -> dict[str, str] | None:
        return self.labels.get(ref)

    def import_archive(self, archive: Path) -> None:
        assert archive.exists()
        self.imports.append(archive.name)
        self.labels[REF] = {}

    def label_image(self, ref: str, labels: dict[str, str]) -> None:
        self.labels[ref].update(labels)


def test_the_node_keeps_an_image_exported_again_and_imports_a_changed_one(tmp_path):
    containerd = Containerd()
    images = tmp_path / "images"
    export(rootfs(tmp_path, "a", container_time=IMAGE_TIME + 100, hostname="aaa"), images)
    assert import_exported_images(containerd, images, tmp_path) == ([REF], [])
    # the next `up`: the exporter ran again, in a new container
    export(rootfs(tmp_path, "b", container_time=IMAGE_TIME + 900, hostname="bbb"), images)
    assert import_exported_images(containerd, images, tmp_path) == ([], [REF])
    # the image rebuilt with a changed file: imported again
    root = rootfs(tmp_path, "c", container_time=IMAGE_TIME + 900)
    (root / "usr/bin/pi").write_bytes(b"\x7fELF p2")
    export(root, images)
    assert import_exported_images(containerd, images, tmp_path) == ([REF], [])
    assert len(containerd.imports) == 2
    assert not list(tmp_path.glob("*.image.tar"))  # the archives made for ctr are removed
