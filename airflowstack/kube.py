"""The cluster side of the e2e tests and the demo: which cluster, its namespace, and the simulated pi output.

Three kinds: a real cluster (a kubeconfig), the local cluster with a REAL node (localcluster.node_container:
containers run, the MPI images of images/mpi are loaded into it; the demo's default), and the local cluster with
SIMULATED kwok nodes, where no container runs and the launcher's log lines are served from a file
(``LocalCluster.set_launcher_logs``, a kwok ClusterLogs per namespace; the e2e suite's scripted scenarios).
The DAGs stay as they would be on a real cluster; only this module knows which kind it is.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def pi_output(np: int, job: str = "mpi-pi") -> list[str]:
    """What ``mpirun -np <np> /home/mpiuser/pi`` prints (the mpi-operator's pi example)."""
    lines = [f"Workers: {np}"]
    lines += [f"Rank {rank} on host {job}-worker-{rank}" for rank in range(np)]
    lines.append("pi is approximately 3.1415926535897931")
    return lines


@dataclass
class Cluster:
    """A kubeconfig plus, for the local cluster, the LocalCluster that serves simulated logs."""

    kubeconfig: Path
    local: Any = (
        None  # localcluster.LocalCluster (simulated nodes) or localcluster.node_container.NodeCluster
    )
    owned: bool = False  # started by us: stop it at the end
    mpi_targets: tuple[str, ...] | None = None  # images/mpi targets a real node gets (None: all)
    _client: Any = field(default=None, repr=False)

    @property
    def simulated(self) -> bool:
        return self.local is not None and getattr(self.local, "kind", "kwok") == "kwok"

    def api_client(self):
        if self.simulated:
            return self.local.api_client()
        if self._client is None:
            from kubernetes import config

            self._client = config.new_client_from_config(config_file=str(self.kubeconfig))
        return self._client

    def ensure_namespace(self, namespace: str) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        try:
            core.read_namespace(namespace)
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise
            core.create_namespace({"metadata": {"name": namespace, "labels": {"airflow-mpi.io/test": "e2e"}}})

    def serve_launcher_logs(self, namespace: str, lines: list[str]) -> None:
        """On the simulated cluster: every launcher pod in ``namespace`` prints ``lines``. No-op on a real cluster."""
        if self.simulated:
            self.local.set_launcher_logs(namespace, lines)

    def stop(self) -> None:
        if self.owned and self.local is not None:
            self.local.stop()


def open_cluster(
    *,
    kubeconfig: str | None = None,
    name: str = "airflow-mpi",
    reuse: str | None = None,
    real_node: bool = False,
    mpi_targets: tuple[str, ...] | None = None,
    controllers: tuple[str, ...] = (),
) -> Cluster:
    """A real cluster (``kubeconfig``), a running local one (``reuse``: its name), or a new local one (``name``),
    simulated or, with ``real_node``, with a node that runs containers (and ``controllers`` beside the
    mpi-operator: the demo's ``--dag trainjob_pi`` asks for Kubeflow Trainer)."""
    if kubeconfig:
        return Cluster(Path(kubeconfig).resolve())
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from localcluster import LocalCluster

    if real_node:
        from localcluster.node_container import NodeCluster

        node = NodeCluster(name, controllers=controllers)
        return Cluster(node.kubeconfig_path, local=node, owned=True, mpi_targets=mpi_targets)

    if reuse:
        local = LocalCluster.existing(reuse)
        if not local.is_running():
            raise RuntimeError(
                f"local cluster {reuse!r} is not running (python -m localcluster up --name {reuse})"
            )
        return Cluster(local.kubeconfig_path, local=local, owned=False)
    local = LocalCluster(name)
    return Cluster(local.kubeconfig_path, local=local, owned=True)


def start(cluster: Cluster) -> Cluster:
    """Start a local cluster opened by :func:`open_cluster` (no-op for real or reused clusters)."""
    if cluster.owned and cluster.local is not None:
        cluster.local.start()
        if not cluster.simulated:  # a real node pulls nothing: give it the MPI images of images/mpi
            from localcluster.mpi_images import build_mpi_images

            targets = cluster.mpi_targets
            cluster.local.load_images(build_mpi_images(*([targets] if targets else [])))
    return cluster


class Starting(threading.Thread):
    """:func:`start` in a background thread (the cluster comes up while Airflow does); ``wait()`` re-raises."""

    def __init__(self, cluster: Cluster):
        super().__init__(daemon=True, name="cluster-start")
        self.cluster, self.error = cluster, None
        self.start()

    def run(self) -> None:
        try:
            start(self.cluster)
        except BaseException as exc:  # noqa: BLE001 - re-raised by wait() in the caller's thread
            self.error = exc

    def wait(self) -> Cluster:
        self.join()
        if self.error is not None:
            raise self.error
        return self.cluster


def env_kubeconfig() -> str | None:
    """``AIRFLOW_MPI_KUBECONFIG``: the project's switch to a real cluster (see README)."""
    return os.environ.get("AIRFLOW_MPI_KUBECONFIG") or None
