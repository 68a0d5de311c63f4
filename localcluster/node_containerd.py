"""The real node's containerd as ``ctr`` reaches it, in the CRI plugin's namespace: the images the kubelet runs
(imported from archives, no registry: :mod:`localcluster.image_archive`; labelled with what they were made from)
and the containers and tasks a node leaves behind."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import IO

from .node_image_store import image_labels, normalized
from .processes import child_env

CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
CTR_NAMESPACE = "k8s.io"  # the CRI plugin's containerd namespace


class ContainerdError(RuntimeError):
    """A ``ctr`` request containerd refused."""


class Containerd:
    """``ctr`` requests to the node's containerd (it runs under RealNode's supervision)."""

    def ctr(self, *args: str, stdin: IO[bytes] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ctr", "--address", CONTAINERD_SOCKET, "--namespace", CTR_NAMESPACE, *args],
            stdin=stdin,
            capture_output=True,
            text=stdin is None,
            check=False,
            env=child_env(),
        )

    def answers(self) -> bool:
        return self.ctr("version").returncode == 0

    def import_archive(self, archive: Path) -> None:
        with open(archive, "rb") as f:
            res = self.ctr("images", "import", "-", stdin=f)
        if res.returncode != 0:
            raise ContainerdError(f"ctr images import {archive}: {res.stderr!r}")

    def label_image(self, ref: str, labels: dict[str, str]) -> None:
        res = self.ctr("images", "label", normalized(ref), *(f"{k}={v}" for k, v in labels.items()))
        if res.returncode != 0:
            raise ContainerdError(f"ctr images label {ref}: {res.stderr!r}")

    def image_labels(self, ref: str) -> dict[str, str] | None:
        """The labels of the image ``ref``; None when containerd has no such image."""
        return image_labels(self.ctr("images", "ls", f"name=={normalized(ref)}").stdout, ref)

    def delete_containers(self) -> bool:
        """Delete the containers (and their snapshots) an earlier node left in this store: a node container
        started on a kept image store (NodeCluster's ``image_store``) has the images of the node before it, and
        none of the pods of that node's cluster. Whether there were any."""
        left = self.ctr("containers", "list", "-q").stdout.split()
        for container in left:
            self.ctr("containers", "delete", container)
        return bool(left)

    def kill_tasks(self) -> None:
        """Kill the containers of every task (their shims would outlive containerd)."""
        for task in self.ctr("tasks", "list", "-q").stdout.split():
            self.ctr("tasks", "kill", "-s", "SIGKILL", task)
