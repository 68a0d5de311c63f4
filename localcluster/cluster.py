"""A local Kubernetes cluster made of real upstream components, with simulated (kwok) nodes.

    control plane: etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok controller
                   (kwokctl, binary runtime; localcluster/control_plane.py)
    + controllers chosen by name (localcluster/controllers): the mpi-operator (v2beta1 clusters), Kueue, ...,
      each a local process under a restart loop with the cluster's kubeconfig.

NODES ARE SIMULATED: no container runs.  kwok plays the kubelet on every node; pod statuses follow the kwok
Stages of ``localcluster/stages.py`` steered by ``localcluster/behaviour.py``.  Log lines are files that tests
write; kwok serves them through the API server's ``pods/log`` endpoint (localcluster/pod_logs.py).
Files: localcluster/state.py.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import behaviour as bh
from . import build as _build
from . import cluster_objects as _objects
from . import controllers as _controllers
from . import pod_logs as _pod_logs
from .cluster_objects import API_V1, API_V2BETA1, API_VERSIONS
from .control_plane import ControlPlane
from .controllers import Controller
from .state import ClusterPaths, list_clusters
from .waiting import ClusterError

DEFAULT_NAME = "airflow-mpi"
MPI_OPERATOR = "mpi-operator"
KUEUE = "kueue"

__all__ = [
    "API_V1",
    "API_V2BETA1",
    "API_VERSIONS",
    "DEFAULT_NAME",
    "ClusterError",
    "ClusterPaths",
    "LocalCluster",
    "list_clusters",
]


def _chosen(api_version: str, run_operator: bool | None, controllers: Sequence[str]) -> tuple[str, ...]:
    """The controllers a cluster of ``api_version`` runs: the mpi-operator (by default for v2beta1) and
    ``controllers``, checked against the registry and the API."""
    run_operator = (api_version == API_V2BETA1) if run_operator is None else run_operator
    return _controllers.select([*([MPI_OPERATOR] if run_operator else []), *controllers], api_version)


class LocalCluster(ControlPlane):
    """One local cluster: a control plane, simulated nodes and the controllers named in ``controllers``.

    ``api_version`` "v2beta1": the mpi-operator's CRD, and the mpi-operator runs (``run_operator``, default
    True); "v1": the training-operator's kubeflow.org/v1 MPIJob CRD only (no controller). ``controllers``:
    more controllers by name (``localcluster.controllers.REGISTRY``; built on first use); ``kueue=True`` is
    ``controllers=("kueue",)``.
    """

    def __init__(
        self,
        name: str = DEFAULT_NAME,
        api_version: str = API_V2BETA1,
        *,
        nodes: int = bh.NODE_COUNT,
        run_operator: bool | None = None,
        verbose: bool = True,
        bind_address: str = "127.0.0.1",
        apiserver_port: int | None = None,
        apiserver_sans: Sequence[str] = (),
        extra_args: Sequence[str] = (),
        kueue: bool = False,
        controllers: Sequence[str] = (),
        keep_components: bool = True,
    ) -> None:
        if api_version not in API_VERSIONS:
            raise ValueError(f"api_version must be one of {API_VERSIONS}, not {api_version!r}")
        super().__init__(
            name,
            verbose=verbose,
            bind_address=bind_address,
            apiserver_port=apiserver_port,
            apiserver_sans=apiserver_sans,
            extra_args=extra_args,
            keep_components=keep_components,
        )
        self.api_version = api_version
        self.nodes = nodes
        self.controllers: tuple[str, ...] = _chosen(
            api_version, run_operator, [*([KUEUE] if kueue else []), *controllers]
        )
        self._controllers: dict[str, Controller] = {}

    @property
    def run_operator(self) -> bool:
        return MPI_OPERATOR in self.controllers

    @property
    def kueue(self) -> bool:
        return KUEUE in self.controllers

    def controller(self, name: str) -> Any:
        """The handle on controller ``name`` (any in the registry; those in ``controllers`` start with the
        cluster): ``start()``, ``stop()``, ``ready()``, ``wait_ready()``, ``pid()``, ``logs()``, ``status()``;
        Kueue's also ``create_local_queue(namespace)``."""
        if name not in self._controllers:
            if name not in _controllers.REGISTRY:
                raise ClusterError(f"no controller named {name!r}; known: {sorted(_controllers.REGISTRY)}")
            self._controllers[name] = _controllers.REGISTRY[name](self)
        return self._controllers[name]

    @classmethod
    def existing(cls, name: str = DEFAULT_NAME, verbose: bool = True) -> LocalCluster:
        """Handle on a cluster started earlier (e.g. by `python -m localcluster up`)."""
        probe = cls(name, verbose=verbose)
        state = probe.read_state()
        if not state:
            raise ClusterError(f"no local cluster named {name!r} (state dir {probe.state_dir})")
        api_version = state.get("api_version", API_V2BETA1)
        if "controllers" in state:
            chosen = {"run_operator": False, "controllers": state["controllers"]}
        else:  # a state file written before controllers were named
            chosen = {"run_operator": state.get("run_operator"), "kueue": bool(state.get("kueue"))}
        return cls(name, api_version, nodes=state.get("nodes", bh.NODE_COUNT), verbose=verbose, **chosen)

    # ------------------------------------------------------------------ lifecycle
    def is_running(self) -> bool:
        return (
            self.kubeconfig_path.exists()
            and self.component_pid("kube-apiserver") is not None
            and self.ready()
        )

    def start(self, timeout: float = 300) -> LocalCluster:
        """Build (if needed) and start the cluster; returns self. Replaces a cluster of that name."""
        t0 = time.monotonic()
        bin_dir = _build.build(verbose=self.verbose)
        addons = _controllers.addons(self.controllers)
        addon_dirs = {f"{a}_bin_dir": str(_build.build_addon(a, verbose=self.verbose)) for a in addons}
        if self.read_state() or self.kwokctl_cluster_dir.exists():
            self.info("replacing an existing cluster of that name")
            self.stop(keep_logs=False)
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self.state_dir.mkdir(parents=True)
        self.logs_dir.mkdir()
        self.pod_logs_dir.mkdir()
        addon_modules = sorted({t.module for a in addons for t in _build.ADDONS[a].tools})
        self.write_state(
            name=self.name,
            api_version=self.api_version,
            nodes=self.nodes,
            controllers=list(self.controllers),
            bin_dir=str(bin_dir),
            **addon_dirs,
            versions=_build.pinned_versions(_build.modules(addons=False) + addon_modules),
            phase="starting",
        )
        try:
            self.create(bin_dir, timeout)
            self.info(f"kube-apiserver ready ({time.monotonic() - t0:.1f}s)")
            self._setup(bin_dir, timeout)
            self._start_controllers()
        except BaseException:
            self.info(f"start failed; stopping it. Component logs: {self.logs_dir}")
            with contextlib.suppress(Exception):
                self.stop(keep_logs=True)
            raise
        elapsed = time.monotonic() - t0
        self.write_state(phase="running", started_seconds=round(elapsed, 1))
        self.info(f"up in {elapsed:.1f}s; KUBECONFIG={self.kubeconfig_path}")
        return self

    def _setup(self, bin_dir: Path, timeout: float) -> None:
        """kwok's Stages, the MPIJob CRD, what the controllers need first, then the nodes."""
        from kubernetes import client

        api = self.api_client()
        _objects.install_stages(api, bin_dir, timeout)
        _objects.install_mpijob_crd(api, self.api_version, bin_dir, timeout)
        self._prepare_controllers(timeout)
        # a controller manager still waiting when /readyz turned ok may give up a poll later, before nodes exist
        self.revive_early_exits()
        try:
            _objects.create_nodes(client.CoreV1Api(api), self.nodes, timeout, self.info)
        except ClusterError as e:
            if stopped := [n for n in self.component_names() if self.component_pid(n) is None]:
                raise ClusterError(f"{e}; not running: {', '.join(stopped)}") from e
            raise

    def switch_api(self, api_version: str, controllers: Sequence[str] = (), timeout: float = 300) -> None:
        """Serve the other MPIJob API from now on, on the same control plane and nodes (and so the images a real
        node holds): stop the controllers, replace the MPIJob CRD (every MPIJob goes with it), then prepare and
        start the controllers ``controllers`` (and the mpi-operator for v2beta1), as a start would."""
        chosen = _chosen(api_version, None, controllers)
        t0 = time.monotonic()
        for name in reversed(self.controllers):
            self.controller(name).stop()
        api = self.api_client()
        _objects.delete_mpijob_crd(api, timeout)
        _objects.install_mpijob_crd(api, api_version, self.bin_dir(), timeout)
        self.info(f"MPIJob CRD replaced by kubeflow.org/{api_version}'s ({time.monotonic() - t0:.1f}s)")
        self.api_version, self.controllers = api_version, chosen
        self.write_state(api_version=api_version, controllers=list(chosen))
        self._prepare_controllers(timeout, crd_replaced=True)
        self._start_controllers()
        self.info(
            f"serves kubeflow.org/{api_version} MPIJobs now ({', '.join(chosen) or 'no controller'}; "
            f"{time.monotonic() - t0:.1f}s)"
        )

    def add_controllers(self, controllers: Sequence[str], timeout: float = 300) -> tuple[str, ...]:
        """Start the controllers ``controllers`` (and those they require) on the running cluster, as a start would
        have (prepared, the controller manager restarted for their CRDs, started in registry order); those already
        running are left alone. Returns the names started (a test session's cluster takes on Trainer only when a
        TrainJob test asks for it)."""
        chosen = _controllers.select([*self.controllers, *controllers], self.api_version)
        added = tuple(n for n in chosen if n not in self.controllers)
        if not added:
            return added
        t0 = time.monotonic()
        addons = _controllers.addons(added)
        self.write_state(
            controllers=list(chosen),
            **{f"{a}_bin_dir": str(_build.build_addon(a, verbose=self.verbose)) for a in addons},
        )
        self.controllers = chosen
        self._prepare_controllers(timeout, names=added)
        for name in added:
            ctl = self.controller(name)
            ctl.start(ctl.start_timeout)
        for name in chosen:
            if name not in added:
                self.controller(name).controllers_added(added, timeout)
        self.info(f"added {', '.join(added)} ({time.monotonic() - t0:.1f}s)")
        return added

    def _prepare_controllers(
        self, timeout: float, crd_replaced: bool = False, names: Sequence[str] | None = None
    ) -> None:
        """What the chosen controllers (or those of ``names``) need before they start (CRDs, certificates)."""
        prepared = [self.controller(n) for n in (self.controllers if names is None else names)]
        for ctl in prepared:
            ctl.prepare(timeout)
        if crd_replaced or any(ctl.restarts_controller_manager for ctl in prepared):
            # The garbage collector discovers new CRDs every 30 s (hard-coded); until it watches the MPIJob
            # kind and the controllers' kinds (e.g. a deleted MPIJob keeps its Kueue Workload, and so its
            # quota). A controller manager started now finds them at once.
            self.restart_component("kube-controller-manager")

    def _start_controllers(self) -> None:
        for name in self.controllers:
            ctl = self.controller(name)
            ctl.start(ctl.start_timeout)

    def stop(self, keep_logs: bool = True) -> None:
        """Stop every process of the cluster and delete its data (component logs are kept in ``logs_dir``)."""
        # every registered controller, not only those chosen: a pid file may be left by an earlier start
        for name in reversed(_controllers.REGISTRY):
            self.controller(name).stop()
        self.delete(keep_logs)
        if keep_logs and self.state_dir.exists():
            self.write_state(phase="stopped")
            with contextlib.suppress(FileNotFoundError):
                self.kubeconfig_path.unlink()
        else:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ served pod logs
    def set_launcher_logs(
        self,
        namespace: str,
        lines: Sequence[str],
        previous_lines: Sequence[str] | None = None,
        *,
        containers: Sequence[str] = (bh.LAUNCHER_CONTAINER,),
    ) -> Path:
        """Serve ``lines`` as the logs of the given containers of every pod in ``namespace``.

        Writes ``pod-logs/<namespace>/current.log`` (and ``previous.log`` for ``previous=true``, i.e. a
        restarted container) in CRI format and (re)creates the kwok ``ClusterLogs`` object
        ``logs-<namespace>`` selecting the namespace.  Plain messages get increasing timestamps starting now;
        lines already in CRI format (``<RFC3339Nano> stdout F <text>``) are written as given.  Returns the
        current log file, to which ``append_launcher_logs`` adds lines (``follow=True`` readers see them).
        Returns once kwok serves them (it may be seconds late, e.g. after an API server outage: pod_logs).
        Note: kwok keeps a follow stream open until the client closes it, even after the container terminated
        (a kubelet would end it).
        """
        return _pod_logs.serve_logs(
            self.api_client(),
            self.kwok_server_url(),
            self.pod_logs_dir,
            namespace,
            lines,
            previous_lines,
            containers,
        )

    def append_launcher_logs(self, namespace: str, lines: Sequence[str]) -> None:
        """Append lines to the current log file of ``namespace`` (followers receive them)."""
        _pod_logs.append_logs(self.pod_logs_dir, namespace, lines)

    def clear_launcher_logs(self, namespace: str) -> None:
        _pod_logs.clear_logs(self.api_client(), self.pod_logs_dir, namespace)

    # ------------------------------------------------------------------ status
    def status(self) -> dict:
        state = self.read_state()
        comps = {}
        if self.kwokctl_cluster_dir.exists():
            comps = {n: self.component_pid(n) for n in self.component_names()}
        return {
            "name": self.name,
            "api_version": state.get("api_version", self.api_version),
            "phase": state.get("phase", "absent"),
            "ready": bool(comps.get("kube-apiserver")) and self.ready(),
            "server": state.get("server"),
            "kubeconfig": str(self.kubeconfig_path) if self.kubeconfig_path.exists() else None,
            "components": comps,
            "controllers": {
                n: self.controller(n).status() for n in state.get("controllers", self.controllers)
            },
            "logs": str(self.logs_dir),
            "versions": state.get("versions", {}),
            "simulated_nodes": f"{state.get('nodes', self.nodes)} x (cpu {bh.NODE_CPU}, "
            f"memory {bh.NODE_MEMORY}, {bh.GPU_RESOURCE} {bh.NODE_GPUS}) - kwok, no containers run",
        }
