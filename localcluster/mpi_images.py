"""images/mpi's images (its Dockerfile's targets and their tags) and their build with Docker's cache.

The example DAGs and the tests run them on the real node (localcluster/node_container.py loads them into it; the
compose stack exports them to its node: images/mpi/export-image).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Sequence
from pathlib import Path

from . import build as _build
from . import build_ledger
from .node_image import REPO, docker, ensure_docker, node_log

MPI_DOCKERFILE = REPO / "images" / "mpi" / "Dockerfile"
# the MPI images of images/mpi/Dockerfile (target -> tag); the example DAGs and tests run them on the real node
MPI_IMAGES = {
    "openmpi": "airflow-mpi/mpi-pi:openmpi",
    "mpich": "airflow-mpi/mpi-pi:mpich",
    "intel": "airflow-mpi/mpi-pi:intel",
}
# images that behave like the mpi-operator's own (mpioperator/mpi-pi:openmpi, :mpich, :intel), for its example
# manifests as they are (no mpirun wrapper, MPICH/Intel wait for DNS in their entrypoint); same MPI builds as above
UPSTREAM_IMAGES = {
    "openmpi-upstream": "airflow-mpi/mpi-pi:openmpi-upstream",
    "mpich-upstream": "airflow-mpi/mpi-pi:mpich-upstream",
    "intel-upstream": "airflow-mpi/mpi-pi:intel-upstream",
}
# what build_mpi_images() builds and `node load` / the real-node test fixture load when not told otherwise
DEFAULT_MPI_TARGETS = (*MPI_IMAGES, *UPSTREAM_IMAGES)
# Horovod + TensorFlow (CPU) on Open MPI: about 17 min to build, 2.9 GB; built only where a test needs it.
HOROVOD_IMAGE = "airflow-mpi/horovod:cpu"
IMAGE_TARGETS = {**MPI_IMAGES, **UPSTREAM_IMAGES, "horovod": HOROVOD_IMAGE}


def extra_ca_secret() -> list[str]:
    """``--secret`` for builds that use HTTPS (pip: mpich's mpi4py, intel), when this machine needs extra CA
    certificates (``AIRFLOW_MPI_EXTRA_CA``, else the bundle scripts/docker-setup writes; see docker-compose.yaml)."""
    path = os.environ.get("AIRFLOW_MPI_EXTRA_CA") or str(_build.cache_root() / "docker" / "extra-ca.pem")
    return ["--secret", f"id=extra_ca,src={path}"] if Path(path).is_file() else []


@contextlib.contextmanager
def _build_lock(target: str):
    """One build of a target at a time on this machine: a second builder (a test fixture while scripts/test's
    background build of the same image runs) waits for the first, then finds every layer in Docker's cache."""
    path = _build.cache_root() / "images" / f"{target}.build.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_mpi_images(targets: Sequence[str] = DEFAULT_MPI_TARGETS) -> list[str]:
    """Build the MPI images (Docker's layer cache makes a rebuild of unchanged files a few seconds)."""
    ensure_docker()
    for target in targets:
        t0 = time.monotonic()
        with _build_lock(target):
            res = docker(
                "buildx",
                "build",
                "--load",
                "--progress=plain",
                *extra_ca_secret(),
                "-f",
                str(MPI_DOCKERFILE),
                "--target",
                target,
                "-t",
                IMAGE_TARGETS[target],
                str(MPI_DOCKERFILE.parent),
                timeout=3600,
            )
        node_log(f"image {IMAGE_TARGETS[target]} ready ({time.monotonic() - t0:.0f}s)")
        build_ledger.note(
            f"image {IMAGE_TARGETS[target]}",
            bool(build_ledger.steps_ran(res.stdout + res.stderr)),
            time.monotonic() - t0,
        )
    return [IMAGE_TARGETS[t] for t in targets]
