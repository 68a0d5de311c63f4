"""Where a local cluster keeps its files on this machine, and its ``state.json`` (what ``status`` reports).

Layout (``$AIRFLOW_MPI_CACHE``, default ``~/.cache/airflow-mpi``)::

    bin/<key>/                  binaries + CRDs + kwok node stages (localcluster.build)
    bin/<addon>-<key>/          an add-on's binary and data (e.g. Kueue; built when a cluster asks for it)
    clusters/<name>/state.json  what `status` reports (ports, pids, versions)
    clusters/<name>/kubeconfig  admin kubeconfig (also printed by `python -m localcluster kubeconfig`)
    clusters/<name>/logs/       component logs + one log per controller (symlinks to the live files while
                                running, copies after stop: kept for post-mortem until the next start)
    clusters/<name>/pod-logs/   CRI log files served for pods (set_launcher_logs)
    clusters/<name>/kwok/       kwokctl's workdir (KWOK_WORKDIR): pki, etcd data, pids, live logs
    clusters/<name>/<controller>/  a controller's own files (e.g. Kueue's configuration and certificates)
    clusters/<name>/<controller>.pid  the pid of a controller's restart loop
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import build as _build


def cache_root() -> Path:
    return _build.cache_root()


def clusters_root() -> Path:
    return cache_root() / "clusters"


def list_clusters() -> list[str]:
    """Names of the clusters (either kind) that have a state file in the cache."""
    root = clusters_root()
    return sorted(p.name for p in root.iterdir() if (p / "state.json").exists()) if root.is_dir() else []


class ClusterPaths:
    """Where a local cluster of either kind (simulated nodes or a real node) keeps its state here."""

    name: str

    @property
    def state_dir(self) -> Path:
        return clusters_root() / self.name

    @property
    def kubeconfig_path(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def logs_dir(self) -> Path:
        """Component logs (kwok cluster: symlinks to the live files while running, copies after `stop()`)."""
        return self.state_dir / "logs"


class ClusterState(ClusterPaths):
    """The files of a kwokctl cluster and its ``state.json`` (written atomically, read tolerantly)."""

    @property
    def pod_logs_dir(self) -> Path:
        return self.state_dir / "pod-logs"

    @property
    def kwok_workdir(self) -> Path:
        return self.state_dir / "kwok"

    @property
    def kwokctl_cluster_dir(self) -> Path:
        return self.kwok_workdir / "clusters" / self.name

    @property
    def pki_dir(self) -> Path:
        return self.kwokctl_cluster_dir / "pki"

    @property
    def live_logs_dir(self) -> Path:
        return self.kwokctl_cluster_dir / "logs"

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    def read_state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_file.read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def write_state(self, **updates: Any) -> dict[str, Any]:
        """Merge ``updates`` into ``state.json``; returns the new state."""
        state = self.read_state()
        state.update(updates)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
        tmp.replace(self.state_file)
        return state
