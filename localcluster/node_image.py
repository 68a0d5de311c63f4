"""The real node's image (images/kube) and the add-on builds mounted into a node container.

The image carries what every node needs: the main build's binaries (``localcluster.build.build``) and this
package. Add-ons (``build.ADDONS``: Kueue, the training-operator, JobSet, Kubeflow Trainer) are not in it: a node
whose cluster asks for one gets this host's build of it bind-mounted read-only at ``/opt/localcluster/<name>``, with
``$AIRFLOW_MPI_<NAME>_BIN_DIR`` naming it (``addon_mounts``), so a node that runs none of them (the demo's) never
builds one. The compose stack has no host build to mount: its image is the Dockerfile's last stage, ``with-addons``,
with the builds of ``COMPOSE_ADDONS`` inside (``build_image(compose=True)`` builds it from this host's builds,
docker-compose.yaml from the sources).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from . import build as _build
from . import build_ledger, build_log
from .processes import child_env
from .waiting import ClusterError

REPO = Path(__file__).resolve().parent.parent
DOCKERFILE = REPO / "images" / "kube" / "Dockerfile"
IMAGE_REPO = "airflow-mpi/kube"
COMPOSE_TAG = f"{IMAGE_REPO}:local"  # what docker-compose.yaml runs (its default AIRFLOW_MPI_TAG)
ADDON_ROOT = "/opt/localcluster"  # an add-on's build in a node container: <ADDON_ROOT>/<name>
NODE_TARGET, COMPOSE_TARGET = "node", "with-addons"  # images/kube/Dockerfile's stages
# the add-ons built into the compose stack's image (its kube service runs `serve --kueue --controller trainer`;
# Trainer requires JobSet); images/kube/Dockerfile's prebuilt and with-addons stages copy each by this name
COMPOSE_ADDONS = ("jobset", "kueue", "trainer")


def node_log(msg: str) -> None:
    """A line of the real node's host side (building, loading, starting) in the harness's stderr."""
    print(f"[localcluster.node] {msg}", file=sys.stderr, flush=True)


def docker(
    *args: str, check: bool = True, capture: bool = True, timeout: float | None = 600, **kw
) -> subprocess.CompletedProcess:
    res = subprocess.run(
        ["docker", *args],
        capture_output=capture,
        text=True,
        timeout=timeout,
        check=False,
        env=child_env(),
        **kw,
    )
    if check and res.returncode != 0:
        raise ClusterError(
            f"docker {' '.join(args[:3])} failed ({res.returncode}): {(res.stderr or '').strip()[-2000:]}"
        )
    return res


def ensure_docker() -> None:
    """Docker engine, buildx, the base image (scripts/docker-setup: idempotent, about a second when done)."""
    subprocess.run([str(REPO / "scripts" / "docker-setup")], check=True, env=child_env())


def image_tag(bin_dir: Path, baked: dict[str, Path]) -> str:
    """Tag from the build keys of the binaries and of the add-ons built into the image (``baked``) plus everything
    else that goes into it. Add-ons mounted at run time are not part of it."""
    h = hashlib.sha256("\0".join([bin_dir.name, *(d.name for d in baked.values())]).encode())
    for path in [DOCKERFILE, *sorted((REPO / "localcluster").rglob("*.py"))]:
        h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return f"{IMAGE_REPO}:{h.hexdigest()[:12]}"


def build_image(verbose: bool = True, compose: bool = False) -> str:
    """Build images/kube from the cached binaries (no-op when that tag exists); returns the tag.

    ``compose``: the compose stack's image (the ``with-addons`` stage: the builds of ``COMPOSE_ADDONS`` inside, each
    found through its ``$AIRFLOW_MPI_<NAME>_BIN_DIR``); otherwise ``NodeCluster``'s, no add-on inside. No other tag
    is set: ``python -m localcluster node image --compose`` tags it ``airflow-mpi/kube:local`` (``COMPOSE_TAG``), the
    name docker-compose.yaml runs, and nothing else touches that name."""
    ensure_docker()
    bin_dir = _build.build(verbose=verbose)
    baked = {name: _build.build_addon(name, verbose=verbose) for name in COMPOSE_ADDONS} if compose else {}
    tag = image_tag(bin_dir, baked)
    what = "node image (images/kube" + (f", with {', '.join(COMPOSE_ADDONS)})" if compose else ")")
    with build_ledger.timed(what) as entry:
        if docker("image", "inspect", tag, check=False).returncode != 0:
            entry.built = True
            log = build_log.log_path(_build.cache_root(), "node-image")
            if verbose:
                node_log(f"building {what} {tag} (a minute or two the first time); full output: {log}")
            _docker_build(tag, bin_dir, baked, build_log.begin(log, f"{what}: docker build of {tag}"))
    if verbose:
        node_log(f"{entry.line()}: {tag}")
    return tag


def _docker_build(tag: str, bin_dir: Path, baked: dict[str, Path], log: Path) -> None:
    context = _build.cache_root() / "images" / "kube-context"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    shutil.copytree(bin_dir, context / "bin", copy_function=os.link)  # hard links: no copy of ~400 MB
    for name in COMPOSE_ADDONS:  # images/kube's prebuilt stage copies each (empty unless baked)
        (context / name).mkdir()
    for name, path in baked.items():
        shutil.copytree(path, context / name, copy_function=os.link, dirs_exist_ok=True)
    shutil.copytree(
        REPO / "localcluster", context / "localcluster", ignore=shutil.ignore_patterns("__pycache__", "*.sum")
    )
    target = COMPOSE_TARGET if baked else NODE_TARGET
    try:
        build_log.run(
            ["docker", "buildx", "build", "--load", "--progress=plain", "--build-arg", "BINARIES=prebuilt",
             "--target", target, "-f", str(DOCKERFILE), "-t", tag, str(context)],
            log, node_log, what=f"docker build of {tag}", timeout=1800,
        )  # fmt: skip
    finally:
        shutil.rmtree(context, ignore_errors=True)


def addon_mounts(names: Iterable[str], verbose: bool = True) -> tuple[dict[str, Path], list[str]]:
    """This host's builds of the add-ons ``names`` (built if needed) and the ``docker run`` arguments that mount
    each read-only at ``/opt/localcluster/<name>`` and name it there (``$AIRFLOW_MPI_<NAME>_BIN_DIR``)."""
    dirs = {name: _build.build_addon(name, verbose=verbose).resolve() for name in sorted(set(names))}
    args: list[str] = []
    for name, path in dirs.items():
        inside = f"{ADDON_ROOT}/{name}"
        args += ["--mount", f"type=bind,src={path},dst={inside},readonly"]
        args += ["-e", f"{_build.addon_variable(name)}={inside}"]
    return dirs, args
