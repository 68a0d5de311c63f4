"""The ``kubectl-delivery`` image (images/kubectl-delivery) that the training-operator's v1 launchers run first.

Built locally from the main build's kubectl (the pinned ``k8s.io/kubernetes``) and the delivery script: no image
is pulled, no registry is involved. ``NodeCluster.load_images`` puts it into a real node like the MPI images;
``localcluster.controllers.training_operator`` passes its ref as ``--mpi-kubectl-delivery-image``.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from . import build as _build
from . import build_ledger

DOCKERFILE = Path(__file__).resolve().parent.parent / "images" / "kubectl-delivery" / "Dockerfile"
KUBECTL_DELIVERY_IMAGE = "airflow-mpi/kubectl-delivery:local"


def build_kubectl_delivery_image(verbose: bool = True) -> str:
    """Build the image (Docker's layer cache makes an unchanged rebuild a second or two); returns its ref."""
    from .node_image import docker, ensure_docker

    ensure_docker()
    bin_dir = _build.build(verbose=verbose)
    t0 = time.monotonic()
    context = _build.cache_root() / "images" / f"kubectl-context-{os.getpid()}"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    try:
        os.link(bin_dir / "kubectl", context / "kubectl")  # a hard link: no copy
        shutil.copy2(DOCKERFILE.parent / "kubectl-delivery", context / "kubectl-delivery")
        res = docker(
            "buildx", "build", "--load", "--progress=plain", "-f", str(DOCKERFILE), "-t", KUBECTL_DELIVERY_IMAGE,
            str(context), timeout=900,
        )  # fmt: skip
    finally:
        shutil.rmtree(context, ignore_errors=True)
    if verbose:
        print(
            f"[localcluster.node] image {KUBECTL_DELIVERY_IMAGE} ready ({time.monotonic() - t0:.0f}s)",
            file=sys.stderr,
            flush=True,
        )
    build_ledger.note(
        f"image {KUBECTL_DELIVERY_IMAGE}",
        bool(build_ledger.steps_ran(res.stdout + res.stderr)),
        time.monotonic() - t0,
    )
    return KUBECTL_DELIVERY_IMAGE
