"""``python -m localcluster serve``: the real node's container entrypoint (images/kube).

Starts, in this container, a whole cluster: the control plane and the mpi-operator of a
:class:`~localcluster.cluster.LocalCluster` serving the API on all interfaces, plus one real node
(:class:`~localcluster.realnode.RealNode`: containerd, kubelet, CoreDNS) and, optionally, kwok nodes beside it and
Kueue (``--kueue``: its queues, plus a LocalQueue ``user-queue`` in each ``--local-queue`` namespace) or other
controllers by name (``--controller NAME``), and the manifests of ``--apply FILE`` applied once they run (the
compose stack's Kubeflow Trainer runtime, deploy/trainjob-mpi-runtime.yaml).
Imports the images that exporter containers left in ``--images-dir``, writes a kubeconfig for other containers,
then marks itself ready (``READY_FILE``, the compose healthcheck) and keeps every process alive until SIGTERM,
when it stops the pods, the node and the control plane in that order.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import yaml

from . import atomic_file, component_keeper
from . import kueue as _kueue
from .cluster import LocalCluster
from .image_archive import content_key, exported_archive
from .node_containerd import Containerd
from .processes import StopSignal, child_env
from .realnode import RealNode, node_ip
from .waiting import wait_until

READY_FILE = Path("/run/airflow-mpi/ready")
KUBECONFIG = Path("/run/airflow-mpi/kubeconfig")  # inlined certificates, server https://127.0.0.1:6443
API_PORT = 6443
# the `kubernetes` Service's ClusterIP: the first address of kube-apiserver's default --service-cluster-ip-range
# (10.0.0.0/24; kwokctl sets none); in the API server's certificate so that pods can reach it (route_api_service)
API_SERVICE_IP = "10.0.0.1"
CLUSTER_NAME = "node"


def _log(msg: str) -> None:
    print(f"[localcluster.serve] {msg}", file=sys.stderr, flush=True)


# on each image imported here: image_archive.content_key of its export
CONTENT_KEY_LABEL = "airflow-mpi.content-key"


def import_exported_images(
    containerd: Containerd, images_dir: Path, work_dir: Path
) -> tuple[list[str], list[str]]:
    """Import every ``<name>.tar`` + ``<name>.json`` pair written by images/mpi/export-image into the node's
    ``containerd`` (through an archive made in ``work_dir``), but an image it holds from an export of the same
    content (its store kept in a volume: ``up`` after ``down``, a switch to docker-compose.kubernetes.yaml; an import
    took about 6 s for Open MPI's 350 MB, its key 1.5 s). Returns the references imported, and those kept."""
    imported, kept = [], []
    for settings in sorted(images_dir.glob("*.json")) if images_dir.is_dir() else []:
        rootfs = settings.with_suffix(".tar")
        if not rootfs.exists():
            continue
        ref = yaml.safe_load(settings.read_text())["ref"]
        key = content_key(rootfs, settings)
        if (containerd.image_labels(ref) or {}).get(CONTENT_KEY_LABEL) == key:
            kept.append(ref)
            continue
        archive = work_dir / f"{settings.stem}.image.tar"
        try:
            containerd.import_archive(exported_archive(rootfs, settings, archive))
        finally:
            archive.unlink(missing_ok=True)
        containerd.label_image(ref, {CONTENT_KEY_LABEL: key})
        imported.append(ref)
    return imported, kept


def export_kubeconfig(src: Path, dest: Path, server: str) -> None:
    """Write the admin kubeconfig for use elsewhere: certificates inlined, ``server`` as the reader reaches the API."""
    cfg = yaml.safe_load(src.read_text())
    for cluster in cfg["clusters"]:
        cluster["cluster"]["server"] = server
        _inline(cluster["cluster"], "certificate-authority")
    for user in cfg["users"]:
        _inline(user["user"], "client-certificate")
        _inline(user["user"], "client-key")
    dest.parent.mkdir(parents=True, exist_ok=True)
    atomic_file.write_text(dest, yaml.safe_dump(cfg), mode=0o644)


def _inline(entry: dict, key: str) -> None:
    if key in entry:
        entry[f"{key}-data"] = base64.b64encode(Path(entry.pop(key)).read_bytes()).decode()


def create_local_queues(cluster: LocalCluster, namespaces: list[str], timeout: float = 60) -> None:
    """A LocalQueue ``user-queue`` (feeding ``cluster-queue``) in each namespace, created if missing; returns once
    Kueue reports each Active (a job sent to it from then on is queued, never "LocalQueue doesn't exist")."""
    from kubernetes import client

    api = cluster.api_client()
    core = client.CoreV1Api(api)
    co = client.CustomObjectsApi(api)
    for ns in namespaces:
        namespace = {"metadata": {"name": ns}}
        for create in (
            partial(core.create_namespace, namespace),
            partial(_kueue.create_local_queue, api, ns),
        ):
            try:
                create()
            except client.exceptions.ApiException as exc:
                if exc.status != 409:  # already there (the default namespace, or a restart)
                    raise

        def active(ns: str = ns) -> bool:
            lq = co.get_namespaced_custom_object(
                _kueue.GROUP, _kueue.VERSION, ns, "localqueues", _kueue.LOCAL_QUEUE
            )
            return (_kueue.condition(lq, "Active") or {}).get("status") == "True"

        wait_until(active, timeout, f"LocalQueue {ns}/{_kueue.LOCAL_QUEUE} Active", interval=0.25)


def apply_manifests(cluster: LocalCluster, files: Sequence[Path]) -> None:
    """``kubectl apply -f`` each file, as a user would, once the controllers run: their webhooks (Trainer's
    validates a ClusterTrainingRuntime) answer by then, and an object the API refuses fails the start with its
    reason."""
    kubectl = Path(cluster.read_state()["bin_dir"]) / "kubectl"
    for path in files:
        res = subprocess.run(
            [str(kubectl), f"--kubeconfig={cluster.kubeconfig_path}", "apply", "-f", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            env=child_env(),
        )
        if res.returncode:
            raise RuntimeError(f"kubectl apply -f {path} failed ({res.returncode}): {res.stderr.strip()}")
        _log(f"applied {path}: {' '.join(res.stdout.split())}")


def route_api_service(cluster: LocalCluster, node: RealNode) -> None:
    """Let pods reach the API server through the ``kubernetes`` Service (in-cluster clients: kubectl in v1
    launchers); its ClusterIP must be the one the API server's certificate names."""
    from kubernetes import client

    ip = (
        client.CoreV1Api(cluster.api_client())
        .read_namespaced_service("kubernetes", "default")
        .spec.cluster_ip
    )
    if ip != API_SERVICE_IP:
        raise RuntimeError(
            f"the kubernetes Service has ClusterIP {ip}, not {API_SERVICE_IP} (serve.API_SERVICE_IP)"
        )
    node.route_api_service(ip, API_PORT)


def serve(
    *,
    kwok_nodes: int,
    api_version: str,
    images_dir: Path,
    kubeconfig_out: Path | None,
    server: str,
    kueue: bool = False,
    local_queues: list[str] | None = None,
    container_log_max_size: str | None = None,
    controllers: Sequence[str] = (),
    apply: Sequence[Path] = (),
) -> int:
    if local_queues and not (kueue or "kueue" in controllers):
        raise ValueError("--local-queue needs --kueue")
    stopping = StopSignal((signal.SIGTERM, signal.SIGINT))
    READY_FILE.unlink(missing_ok=True)
    t0 = time.monotonic()
    sans = sorted({socket.gethostname(), node_ip(), "kube", "localhost", "127.0.0.1", API_SERVICE_IP})
    cluster = LocalCluster(
        CLUSTER_NAME,
        api_version,
        nodes=kwok_nodes,
        bind_address="0.0.0.0",
        apiserver_port=API_PORT,
        apiserver_sans=sans,
        # the node's name resolves nowhere (no DNS for nodes): reach its kubelet by address
        extra_args=["kube-apiserver=kubelet-preferred-address-types=InternalIP,Hostname"],
        kueue=kueue,
        controllers=controllers,
        keep_components=False,  # the loop below restarts those that crash (component_keeper.look)
    )
    cluster.start()
    node = RealNode(
        Path(cluster.read_state()["bin_dir"]),
        cluster.kubeconfig_path,
        cluster.pki_dir,
        cluster.state_dir / "node",
        cluster.logs_dir,
        container_log_max_size,
    )
    try:
        if local_queues:
            create_local_queues(cluster, local_queues)
            _log(f"Kueue: LocalQueue {_kueue.LOCAL_QUEUE} Active in {', '.join(local_queues)}")
        apply_manifests(cluster, apply)
        node.start()
        route_api_service(cluster, node)
        imported, kept = import_exported_images(node.containerd, images_dir, node.state_dir)
        if imported:
            _log(f"imported images: {', '.join(imported)}")
        if kept:
            _log(f"kept images (the node has them from an export of the same content): {', '.join(kept)}")
        export_kubeconfig(cluster.kubeconfig_path, KUBECONFIG, f"https://127.0.0.1:{API_PORT}")
        if kubeconfig_out:
            export_kubeconfig(cluster.kubeconfig_path, kubeconfig_out, server)
        READY_FILE.parent.mkdir(parents=True, exist_ok=True)
        READY_FILE.write_text(str(os.getpid()))
        _log(
            f"ready in {time.monotonic() - t0:.1f}s: API {server}, node {node_ip()}, logs {cluster.logs_dir}"
        )
        while not stopping:
            restarted = node.supervise() + component_keeper.look(cluster)
            if restarted:
                _log(f"restarted {', '.join(restarted)}")
            stopping.wait(1)
    finally:
        READY_FILE.unlink(missing_ok=True)
        _log("stopping node and control plane")
        node.stop()
        cluster.stop()
    return 0
