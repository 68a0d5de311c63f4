"""What a fresh simulated cluster gets before anything runs on it: kwok's Stages, the MPIJob CRD, the nodes.

Each waits on the API (a CRD Established, every Node Ready through a watch), bounded by ``timeout``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from . import behaviour as bh
from . import build as _build
from . import stages as _stages
from . import yaml_files
from .waiting import ClusterError, wait_until

API_V2BETA1 = "v2beta1"
API_V1 = "v1"
API_VERSIONS = (API_V2BETA1, API_V1)
KWOK_GROUP = "kwok.x-k8s.io"
KWOK_VERSION = "v1alpha1"
KWOK_CRDS = ("Stage", "Logs", "ClusterLogs")
MPIJOB_CRD = "mpijobs.kubeflow.org"  # the CRD's name in both APIs


def _read_crd(ext: Any, name: str) -> Any:
    """The CRD ``name``, or None when there is none (``ext``: an ApiextensionsV1Api)."""
    from kubernetes.client.exceptions import ApiException

    try:
        return ext.read_custom_resource_definition(name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def crd_established(ext: Any, name: str) -> bool:
    """The CRD ``name`` exists and is Established (``ext``: an ApiextensionsV1Api)."""
    crd = _read_crd(ext, name)
    return crd is not None and any(
        c.type == "Established" and c.status == "True" for c in (crd.status.conditions or [])
    )


def install_crds(api: Any, crds: Iterable[dict], timeout: float, what: str) -> None:
    """Create ``crds`` and wait until each is Established."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api)
    crds = list(crds)
    for crd in crds:
        ext.create_custom_resource_definition(crd)
    wait_until(lambda: all(crd_established(ext, c["metadata"]["name"]) for c in crds), timeout, what)


def install_stages(api: Any, bin_dir: Path, timeout: float) -> None:
    """kwok's node Stages (from its module ``bin_dir/stages``) and our pod Stages (localcluster/stages.py)."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api)
    crds = [f"{p}.{KWOK_GROUP}" for p in ("stages", "logs", "clusterlogs")]
    wait_until(lambda: all(crd_established(ext, c) for c in crds), timeout, "kwok CRDs")
    co = client.CustomObjectsApi(api)
    node_stages = sorted((bin_dir / "stages").glob("*.yaml"))
    for obj in [yaml.safe_load(p.read_text()) for p in node_stages] + _stages.pod_stages():
        co.create_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "stages", obj)


def install_mpijob_crd(api: Any, api_version: str, bin_dir: Path, timeout: float) -> None:
    """The mpi-operator's (v2beta1) or the training-operator's (v1) MPIJob CRD: both are named
    ``mpijobs.kubeflow.org``, hence one per cluster."""
    crd = yaml_files.read(_build.crd_path(api_version, bin_dir))
    install_crds(api, [crd], timeout, "MPIJob CRD")


def delete_mpijob_crd(api: Any, timeout: float) -> None:
    """Delete the MPIJob CRD, and with it every MPIJob (their pods and Jobs then go to the garbage collector);
    returns once the API has removed it, so that the other API's CRD of the same name can be created."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api)
    ext.delete_custom_resource_definition(MPIJOB_CRD)
    wait_until(lambda: _read_crd(ext, MPIJOB_CRD) is None, timeout, f"CRD {MPIJOB_CRD} deleted")


def node_manifest(name: str) -> dict:
    """A simulated node (kwok plays its kubelet: annotation ``kwok.x-k8s.io/node=fake``)."""
    resources = {
        "cpu": bh.NODE_CPU,
        "memory": bh.NODE_MEMORY,
        "pods": bh.NODE_PODS,
        "ephemeral-storage": bh.NODE_EPHEMERAL_STORAGE,
        bh.GPU_RESOURCE: str(bh.NODE_GPUS),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                bh.NODE_LABEL: bh.NODE_LABEL_VALUE,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/role": "agent",
                "node-role.kubernetes.io/agent": "",
            },
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "status": {"capacity": resources, "allocatable": resources},
    }


def node_ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or [])) and not any(
        t.key.startswith("node.kubernetes.io/") for t in (node.spec.taints or [])
    )


def create_nodes(core: Any, count: int, timeout: float, info: Callable[[str], None]) -> None:
    """``count`` simulated nodes ``kwok-node-<i>``, watched until each is Ready (``core``: a CoreV1Api)."""
    names = [f"{bh.NODE_NAME_PREFIX}{i}" for i in range(count)]
    for name in names:
        core.create_node(node_manifest(name))
    await_nodes_ready(core, names, timeout)
    info(f"{count} simulated nodes Ready")


def await_nodes_ready(core: Any, names: list[str], timeout: float) -> None:
    """Watch the nodes ``names`` until each is Ready and without a ``node.kubernetes.io/`` taint (the
    controller manager removes the not-ready taint the API server gave each new node)."""
    from kubernetes import watch

    pending = set(names)
    w = watch.Watch()
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        lst = core.list_node()
        pending -= {n.metadata.name for n in lst.items if node_ready(n)}
        if not pending:
            break
        left = max(1, int(deadline - time.monotonic()))
        for ev in w.stream(
            core.list_node, resource_version=lst.metadata.resource_version, timeout_seconds=left
        ):
            n = ev["object"]
            if node_ready(n):
                pending.discard(n.metadata.name)
            if not pending:
                w.stop()
                break
    if pending:
        raise ClusterError(f"nodes not Ready: {sorted(pending)}")
