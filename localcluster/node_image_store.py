"""The containerd image store of a test session's node container, kept for the next session's node.

A node container imports each image its pods run (``docker save | ctr images import``: ``NodeCluster.load_images``).
The real-node test session's images are 5.3 GB, and importing them cost about 150 CPU s in every run (Horovod's
2.8 GB image alone 72 s and 90 CPU s on a quiet machine). A node started with ``image_store=<purpose>`` takes one of
a few named Docker volumes of that purpose as its /var/lib/containerd, locked for the node's lifetime (one
containerd per store), and leaves it behind when the node is removed: the next node of that purpose finds the images,
and ``load_images`` imports one again only when its Docker image ID changed (``has_image``). The node starts with
none of the earlier node's containers (``RealNode.start``). Nodes of the CLI and the demo keep a volume of their
own, removed with them. ``docker volume ls --filter label=airflow-mpi.node-image-store`` lists the stores.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Callable

from . import build as _build

SLOTS = 3  # nodes of one purpose at once (test runs side by side); one more gets a volume of its own
VOLUME_LABEL = "airflow-mpi.node-image-store"


class ImageStore:
    """One kept store, taken: ``volume`` is this node's /var/lib/containerd until ``release``."""

    def __init__(self, volume: str, lock_fd: int) -> None:
        self.volume = volume
        self._lock_fd: int | None = lock_fd

    @classmethod
    def take(cls, purpose: str, docker: Callable[..., object]) -> ImageStore | None:
        """The first free store of ``purpose`` (``None`` when every slot is taken). A free store's lock has no
        living holder, so a container still on its volume was left by a killed session: it is removed first, or
        two containerds would write one store."""
        locks = _build.cache_root() / "images"
        locks.mkdir(parents=True, exist_ok=True)
        # stores of another cache (another $AIRFLOW_MPI_CACHE) have other locks: their volumes are others too
        cache = hashlib.sha256(str(_build.cache_root().resolve()).encode()).hexdigest()[:8]
        for slot in range(SLOTS):
            fd = os.open(locks / f"node-store-{purpose}-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            volume = f"airflow-mpi-node-images-{purpose}-{slot}-{cache}"
            left = docker("ps", "-aq", "--filter", f"volume={volume}", check=False).stdout.split()
            if left:
                docker("rm", "-f", *left, check=False)
            docker("volume", "create", "--label", f"{VOLUME_LABEL}={purpose}", volume)
            return cls(volume, fd)
        return None

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def normalized(ref: str) -> str:
    """``ref`` as containerd names an image imported from ``docker save`` (Docker's short names in full)."""
    first, _, rest = ref.partition("/")
    if not rest:
        return f"docker.io/library/{ref}"
    if "." in first or ":" in first or first == "localhost":
        return ref
    return f"docker.io/{ref}"


def _rows(ctr_listing: str) -> list[list[str]]:
    """The rows of ``ctr images ls`` output, split into fields (REF TYPE DIGEST SIZE(2) PLATFORMS LABELS)."""
    return [fields for fields in (line.split() for line in ctr_listing.splitlines()[1:]) if len(fields) >= 3]


def images(ctr_listing: str) -> dict[str, str]:
    """Name -> manifest digest of each image in ``ctr images ls`` output."""
    return {fields[0]: fields[2] for fields in _rows(ctr_listing)}


def image_labels(ctr_listing: str, ref: str) -> dict[str, str] | None:
    """The labels of ``ref`` in ``ctr images ls`` output (its last column: ``k=v,...`` or ``-``); None when absent."""
    for fields in _rows(ctr_listing):
        if fields[0] == normalized(ref):
            return dict(label.split("=", 1) for label in fields[-1].split(",") if "=" in label)
    return None


def has_image(present: dict[str, str], ref: str, image_id: str) -> bool:
    """Whether a node whose containerd lists ``present`` (``images``) holds ``ref`` as Docker's image ``image_id``:
    containerd's CRI plugin names each image by its config digest too, which is Docker's image ID."""
    digest = present.get(normalized(ref))
    return bool(image_id) and digest is not None and present.get(image_id) == digest
