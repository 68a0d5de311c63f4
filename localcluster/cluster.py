"""A local Kubernetes cluster made of real upstream components, with simulated (kwok) nodes.

    etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok controller   (kwokctl, binary runtime)
    + the mpi-operator (v2beta1 clusters) as a local process with the cluster's kubeconfig
    + Kueue (``kueue=True`` only; see localcluster/kueue.py), a local process too.

NODES ARE SIMULATED: no container runs.  kwok plays the kubelet on every node; pod statuses follow the kwok
Stages of ``localcluster/stages.py`` steered by ``localcluster/behaviour.py``.  Log lines are files that tests
write; kwok serves them through the API server's ``pods/log`` endpoint.

Layout (``$AIRFLOW_MPI_CACHE``, default ``~/.cache/airflow-mpi``)::

    bin/<key>/                  binaries + CRDs + kwok node stages (localcluster.build)
    clusters/<name>/state.json  what `status` reports (ports, pids, versions)
    clusters/<name>/kubeconfig  admin kubeconfig (also printed by `python -m localcluster kubeconfig`)
    bin/kueue-<key>/            Kueue's binary, CRDs and webhook manifests (built only when a cluster asks for it)
    clusters/<name>/logs/       component logs + mpi-operator.log, kueue.log (symlinks to the live files while running,
                                copies after stop: kept for post-mortem until the next start of that name)
    clusters/<name>/pod-logs/   CRI log files served for pods (set_launcher_logs)
    clusters/<name>/kwok/       kwokctl's workdir (KWOK_WORKDIR): pki, etcd data, pids, live logs
    clusters/<name>/kueue/      Kueue's configuration and webhook certificates
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from . import behaviour as bh
from . import build as _build
from . import kueue as _kueue
from . import ports as _ports
from . import stages as _stages

API_V2BETA1 = "v2beta1"
API_V1 = "v1"
API_VERSIONS = (API_V2BETA1, API_V1)
KWOK_GROUP = "kwok.x-k8s.io"
KWOK_VERSION = "v1alpha1"
KWOK_CRDS = ("Stage", "Logs", "ClusterLogs")
MPI_OPERATOR_LOCK_NAMESPACE = "mpi-operator"
DEFAULT_NAME = "airflow-mpi"


class ClusterError(RuntimeError):
    pass


def _log(msg: str) -> None:
    print(f"[localcluster] {msg}", file=sys.stderr, flush=True)


def _now_rfc3339nano(t: float | None = None) -> str:
    t = time.time() if t is None else t
    dt = _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int((t % 1) * 1e9):09d}Z"


_CRI_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\S+ (stdout|stderr) [FP] ")


def cri_lines(lines: Iterable[str], start: float | None = None, step: float = 0.001) -> list[str]:
    """Format messages as CRI log lines ``<RFC3339Nano> stdout F <text>``; lines already in CRI format pass as is.

    Timestamps start at ``start`` (default: now) and grow by ``step`` seconds per line so that their order is
    stable and distinct even at second precision when ``step >= 1``.
    """
    t = time.time() if start is None else start
    out = []
    for i, line in enumerate(lines):
        line = line.rstrip("\n")
        out.append(line if _CRI_LINE.match(line) else f"{_now_rfc3339nano(t + i * step)} stdout F {line}")
    return out


# the kwokctl options naming every port its binary runtime would otherwise pick itself (localcluster/ports.py: why)
KWOKCTL_PORTS = ("etcdPort", "etcdPeerPort", "kubeApiserverPort", "kwokControllerPort", "kubeControllerManagerPort",
                 "kubeSchedulerPort")


def _free_port(port: int, host: str = "0.0.0.0") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def _pick_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # zombie?
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait(predicate, timeout: float, what: str, interval: float = 0.2):
    """Poll ``predicate`` (a readiness check) every ``interval`` s until it returns a truthy value or ``timeout``."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - readiness probes fail in many ways while starting
            last_exc = exc
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}" + (f": {last_exc}" if last_exc else ""))
        time.sleep(interval)


def cache_root() -> Path:
    return _build.cache_root()


def clusters_root() -> Path:
    return cache_root() / "clusters"


class ClusterPaths:
    """Where a local cluster of either kind (simulated nodes or a real node) keeps its state on this machine."""

    name: str

    @property
    def state_dir(self) -> Path:
        return clusters_root() / self.name

    @property
    def kubeconfig_path(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def logs_dir(self) -> Path:
        """Component logs (for a kwok cluster: symlinks to the live files while running, copies after `stop()`)."""
        return self.state_dir / "logs"


class LocalCluster(ClusterPaths):
    """One local cluster.  ``api_version`` "v2beta1": mpi-operator CRD + the real mpi-operator process;
    "v1": the training-operator's kubeflow.org/v1 MPIJob CRD only (no controller).  ``kueue=True`` (v2beta1):
    Kueue too, with its queues (localcluster/kueue.py); built on first use."""

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
    ) -> None:
        if api_version not in API_VERSIONS:
            raise ValueError(f"api_version must be one of {API_VERSIONS}, not {api_version!r}")
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name):
            raise ValueError(f"cluster name must be a DNS label: {name!r}")
        self.name = name
        self.api_version = api_version
        self.nodes = nodes
        self.run_operator = (api_version == API_V2BETA1) if run_operator is None else run_operator
        self.verbose = verbose
        # the defaults keep every component on loopback; the real node's container (localcluster.serve) serves
        # the API on all its interfaces at a fixed port, under the names other containers reach it by
        self.bind_address = bind_address
        self.apiserver_port = apiserver_port
        self.apiserver_sans = tuple(apiserver_sans)
        self.extra_args = tuple(extra_args)  # kwokctl --extra-args values: "<component>=<flag>=<value>"
        if kueue and api_version != API_V2BETA1:
            raise ValueError("kueue=True needs api_version v2beta1 (Kueue's MPIJob integration is kubeflow.org/v2beta1)")
        self.kueue = kueue
        self._api_client = None

    # ------------------------------------------------------------------ paths
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

    @property
    def operator_pid_file(self) -> Path:
        return self.state_dir / "mpi-operator.pid"

    @property
    def kueue_dir(self) -> Path:
        return self.state_dir / "kueue"

    @property
    def kueue_pid_file(self) -> Path:
        return self.state_dir / "kueue.pid"

    def _info(self, msg: str) -> None:
        if self.verbose:
            _log(f"{self.name}: {msg}")

    # ------------------------------------------------------------------ state
    def read_state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def _write_state(self, **updates: Any) -> dict:
        state = self.read_state()
        state.update(updates)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
        tmp.replace(self.state_file)
        return state

    @classmethod
    def existing(cls, name: str = DEFAULT_NAME, verbose: bool = True) -> LocalCluster:
        """Handle on a cluster started earlier (e.g. by `python -m localcluster up`)."""
        probe = cls(name, verbose=verbose)
        state = probe.read_state()
        if not state:
            raise ClusterError(f"no local cluster named {name!r} (state dir {probe.state_dir})")
        c = cls(name, state.get("api_version", API_V2BETA1), nodes=state.get("nodes", bh.NODE_COUNT), verbose=verbose)
        c.run_operator = state.get("run_operator", c.run_operator)
        c.kueue = state.get("kueue", False)
        return c

    # ------------------------------------------------------------------ env / tools
    def _bin(self) -> Path:
        state = self.read_state()
        if state.get("bin_dir") and Path(state["bin_dir"]).is_dir():
            return Path(state["bin_dir"])
        return _build.build(verbose=self.verbose)

    def _kwok_env(self, bin_dir: Path) -> dict:
        env = dict(os.environ)
        env["KWOK_WORKDIR"] = str(self.kwok_workdir)
        env["KWOK_KUBECTL_BINARY"] = str(bin_dir / "kubectl")
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env.pop("KUBECONFIG", None)
        return env

    def kwokctl(self, *args: str, check: bool = True, capture: bool = False, timeout: float = 300) -> subprocess.CompletedProcess:
        bin_dir = self._bin()
        cmd = [str(bin_dir / "kwokctl"), "--name", self.name, *args]
        return subprocess.run(
            cmd,
            env=self._kwok_env(bin_dir),
            check=check,
            timeout=timeout,
            text=True,
            capture_output=capture,
            stdin=subprocess.DEVNULL,
        )

    def api_client(self):
        """A kubernetes.client.ApiClient for this cluster (cached)."""
        if self._api_client is None:
            from kubernetes import config as kconfig

            self._api_client = kconfig.new_client_from_config(config_file=str(self.kubeconfig_path))
        return self._api_client

    def _get(self, path: str, timeout: float = 5) -> tuple[int, str]:
        client = self.api_client()
        resp = client.call_api(
            path, "GET", auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout
        )
        if isinstance(resp, tuple):  # older clients return (data, status, headers)
            resp = resp[0]
        return resp.status, resp.data.decode()

    def ready(self) -> bool:
        """GET /readyz == 200."""
        try:
            status, body = self._get("/readyz")
        except Exception:  # noqa: BLE001
            return False
        return status == 200 and body.strip() == "ok"

    def wait_ready(self, timeout: float = 120) -> None:
        _wait(lambda: self._get("/readyz")[0] == 200, timeout, f"kube-apiserver /readyz of {self.name}")

    # ------------------------------------------------------------------ lifecycle
    def is_running(self) -> bool:
        return self.kubeconfig_path.exists() and self._component_pid("kube-apiserver") is not None and self.ready()

    def start(self, timeout: float = 300) -> LocalCluster:
        """Build (if needed) and start the cluster; returns self.  An existing cluster of that name is replaced."""
        t0 = time.monotonic()
        bin_dir = _build.build(verbose=self.verbose)
        kueue_bin_dir = _build.build_addon("kueue", verbose=self.verbose) if self.kueue else None
        if self.read_state() or self.kwokctl_cluster_dir.exists():
            self._info("replacing an existing cluster of that name")
            self.stop(keep_logs=False)
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self.state_dir.mkdir(parents=True)
        self.logs_dir.mkdir()
        self.pod_logs_dir.mkdir()
        self._write_state(
            name=self.name,
            api_version=self.api_version,
            nodes=self.nodes,
            run_operator=self.run_operator,
            kueue=self.kueue,
            bin_dir=str(bin_dir),
            kueue_bin_dir=str(kueue_bin_dir) if kueue_bin_dir else None,
            versions=_build.pinned_versions(_build.modules(addons=self.kueue)),
            phase="starting",
        )
        try:
            self._create(bin_dir, timeout)
            self._info(f"kube-apiserver ready ({time.monotonic() - t0:.1f}s)")
            self._setup(bin_dir, timeout)
            if self.run_operator:
                self.start_mpi_operator()
            if self.kueue:
                self.start_kueue()
        except BaseException:
            self._info(f"start failed; stopping it. Component logs: {self.logs_dir}")
            with contextlib.suppress(Exception):
                self.stop(keep_logs=True)
            raise
        elapsed = time.monotonic() - t0
        self._write_state(phase="running", started_seconds=round(elapsed, 1))
        self._info(f"up in {elapsed:.1f}s; KUBECONFIG={self.kubeconfig_path}")
        return self

    def _create(self, bin_dir: Path, timeout: float) -> None:
        kwokctl_config = self.state_dir / "kwokctl.yaml"
        kwokctl_config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                    "kind": "KwokctlConfiguration",
                    # every component (etcd, kube-apiserver, ...) listens on loopback only, on ports claimed for it
                    "options": {
                        "bindAddress": self.bind_address,
                        **dict(zip(KWOKCTL_PORTS, _ports.claim(len(KWOKCTL_PORTS), cache_root() / "ports.json"))),
                        **({"kubeApiserverPort": self.apiserver_port} if self.apiserver_port else {}),
                        **({"kubeApiserverCertSANs": list(self.apiserver_sans)} if self.apiserver_sans else {}),
                    },
                }
            )
        )
        args = [
            "create",
            "cluster",
            f"--config={kwokctl_config}",
            "--runtime=binary",
            f"--etcd-binary={bin_dir / 'etcd'}",
            f"--kube-apiserver-binary={bin_dir / 'kube-apiserver'}",
            f"--kube-controller-manager-binary={bin_dir / 'kube-controller-manager'}",
            f"--kube-scheduler-binary={bin_dir / 'kube-scheduler'}",
            f"--kwok-controller-binary={bin_dir / 'kwok'}",
            f"--enable-crds={','.join(KWOK_CRDS)}",
            "--kube-admission=true",
            "--kube-authorization=true",
            "--kubeconfig=",  # never touch ~/.kube/config
            "--wait=0s",
            f"--timeout={int(timeout)}s",
            "--quiet-pull",
            # on SIGTERM, end open watches within 2 s (else graceful shutdown waits ~60 s for them): keeps
            # restart_apiserver() quick while still a graceful stop that clients see as a closed watch
            "--extra-args=kube-apiserver=shutdown-watch-termination-grace-period=2s",
            # single instances: without leader election they ride out an API server outage instead of exiting
            # when their lease cannot be renewed (nothing restarts them, unlike static pods under a kubelet)
            "--extra-args=kube-controller-manager=leader-elect=false",
            "--extra-args=kube-scheduler=leader-elect=false",
            # kwok plays the kubelet of its own (annotated) nodes only, never of a real node beside them
            "--extra-args=kwok-controller=manage-all-nodes=false",
            "--extra-args=kwok-controller=manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            # a real kubelet (localcluster.realnode) only serves logs and exec to clients it can authenticate
            f"--extra-args=kube-apiserver=kubelet-client-certificate={self.pki_dir / 'admin.crt'}",
            f"--extra-args=kube-apiserver=kubelet-client-key={self.pki_dir / 'admin.key'}",
            *(f"--extra-args={arg}" for arg in self.extra_args),
        ]
        self._info("kwokctl create cluster (binary runtime)")
        res = self.kwokctl(*args, timeout=timeout + 30, check=False, capture=True)
        (self.logs_dir / "kwokctl.log").write_text(res.stdout + res.stderr)
        if res.returncode != 0:
            raise ClusterError(f"kwokctl create cluster failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
        src = self.kwokctl_cluster_dir / "kubeconfig.yaml"
        shutil.copyfile(src, self.kubeconfig_path)
        self._link_logs()
        self._api_client = None
        self.wait_ready(timeout)
        self._write_state(
            kwok_config=str(self.kwokctl_cluster_dir / "kwok.yaml"),
            server=self._server_url(),
            components={n: self._component_pid(n) for n in self._component_names()},
        )

    def _server_url(self) -> str:
        cfg = yaml.safe_load(self.kubeconfig_path.read_text())
        return cfg["clusters"][0]["cluster"]["server"]

    def _setup(self, bin_dir: Path, timeout: float) -> None:
        from kubernetes import client

        api = self.api_client()
        ext = client.ApiextensionsV1Api(api)
        crds = [f"{p}.{KWOK_GROUP}" for p in ("stages", "logs", "clusterlogs")]
        _wait(lambda: all(self._crd_established(ext, c) for c in crds), timeout, "kwok CRDs")
        co = client.CustomObjectsApi(api)
        node_stages = sorted((bin_dir / "stages").glob("*.yaml"))
        stage_objs = [yaml.safe_load(p.read_text()) for p in node_stages] + _stages.pod_stages()
        for obj in stage_objs:
            co.create_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "stages", obj)
        # the MPIJob CRD
        crd = yaml.safe_load(_build.crd_path(self.api_version, bin_dir).read_text())
        ext.create_custom_resource_definition(crd)
        _wait(lambda: self._crd_established(ext, crd["metadata"]["name"]), timeout, "MPIJob CRD")
        if self.kueue:
            self._prepare_kueue(timeout)
            # The garbage collector discovers new CRDs every 30 s (hard-coded); until it watches the MPIJob and
            # Kueue kinds a deleted MPIJob keeps its Workload, and so its quota. A controller manager started now
            # finds them at once (as if the CRDs had been installed before the control plane started).
            self.stop_component("kube-controller-manager")
            self.start_component("kube-controller-manager")
            self._write_state(components={n: self._component_pid(n) for n in self._component_names()})
        self._create_nodes(client.CoreV1Api(api), timeout)

    @staticmethod
    def _crd_established(ext, name: str) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            crd = ext.read_custom_resource_definition(name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

    def _create_nodes(self, core, timeout: float) -> None:
        from kubernetes import watch

        resources = {
            "cpu": bh.NODE_CPU,
            "memory": bh.NODE_MEMORY,
            "pods": bh.NODE_PODS,
            bh.GPU_RESOURCE: str(bh.NODE_GPUS),
        }
        names = [f"{bh.NODE_NAME_PREFIX}{i}" for i in range(self.nodes)]
        for name in names:
            core.create_node(
                {
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
            )
        pending = set(names)
        w = watch.Watch()
        deadline = time.monotonic() + timeout
        rv = None
        while pending and time.monotonic() < deadline:
            lst = core.list_node()
            for n in lst.items:
                if self._node_ready(n):
                    pending.discard(n.metadata.name)
            if not pending:
                break
            rv = lst.metadata.resource_version
            for ev in w.stream(core.list_node, resource_version=rv, timeout_seconds=max(1, int(deadline - time.monotonic()))):
                n = ev["object"]
                if self._node_ready(n):
                    pending.discard(n.metadata.name)
                if not pending:
                    w.stop()
                    break
        if pending:
            raise ClusterError(f"nodes not Ready: {sorted(pending)}")
        self._info(f"{self.nodes} simulated nodes Ready")

    @staticmethod
    def _node_ready(node) -> bool:
        return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or [])) and not any(
            t.key.startswith("node.kubernetes.io/") for t in (node.spec.taints or [])
        )

    def stop(self, keep_logs: bool = True) -> None:
        """Stop every process of the cluster and delete its data (component logs are kept in ``logs_dir``)."""
        self.stop_kueue()
        self.stop_mpi_operator()
        if keep_logs:
            with contextlib.suppress(Exception):
                self._collect_logs()
        if self.kwokctl_cluster_dir.exists():
            res = self.kwokctl("delete", "cluster", check=False, capture=True, timeout=120)
            if res.returncode != 0:
                self._info(f"kwokctl delete cluster failed ({res.returncode}): {res.stderr.strip()[-500:]}")
        # belt and braces: nothing of ours may survive
        for pid_file in (self.kwokctl_cluster_dir / "pids").glob("*.pid") if self.kwokctl_cluster_dir.exists() else []:
            with contextlib.suppress(Exception):
                self._kill_pid(int(pid_file.read_text().strip()))
        shutil.rmtree(self.kwok_workdir, ignore_errors=True)
        self._api_client = None
        if keep_logs and self.state_dir.exists():
            self._write_state(phase="stopped")
            with contextlib.suppress(FileNotFoundError):
                self.kubeconfig_path.unlink()
        else:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def _link_logs(self) -> None:
        """While running, ``logs_dir`` holds symlinks to the live component logs (all logs in one folder)."""
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        if self.live_logs_dir.is_dir():
            for f in self.live_logs_dir.iterdir():
                dest = self.logs_dir / f.name
                if f.is_file() and not dest.exists():
                    dest.symlink_to(f)

    def _collect_logs(self) -> None:
        """Replace the symlinks by copies (the kwokctl workdir is deleted at stop)."""
        if self.live_logs_dir.is_dir():
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            for f in self.live_logs_dir.iterdir():
                if f.is_file():
                    dest = self.logs_dir / f.name
                    if dest.is_symlink():
                        dest.unlink()
                    shutil.copyfile(f, dest)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ components
    def _kwok_config(self) -> list[dict]:
        path = self.kwokctl_cluster_dir / "kwok.yaml"
        return [d for d in yaml.safe_load_all(path.read_text()) if d]

    def _component(self, name: str) -> dict:
        for doc in self._kwok_config():
            if doc.get("kind") == "KwokctlConfiguration":
                for comp in doc.get("components") or []:
                    if comp.get("name") == name:
                        return comp
        raise ClusterError(f"component {name!r} not found in {self.kwokctl_cluster_dir / 'kwok.yaml'}")

    def _component_names(self) -> list[str]:
        for doc in self._kwok_config():
            if doc.get("kind") == "KwokctlConfiguration":
                return [c["name"] for c in doc.get("components") or []]
        return []

    def _pid_file(self, binary: str) -> Path:
        return self.kwokctl_cluster_dir / "pids" / f"{Path(binary).name}.pid"

    def _component_pid(self, name: str) -> int | None:
        try:
            comp = self._component(name)
            pid = int(self._pid_file(comp["binary"]).read_text().strip())
        except (ClusterError, FileNotFoundError, ValueError):
            return None
        return pid if _pid_alive(pid) else None

    @staticmethod
    def _kill_pid(pid: int, timeout: float = 20) -> None:
        if not _pid_alive(pid):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while _pid_alive(pid):
                time.sleep(0.05)

    def stop_component(self, name: str, grace: float = 20) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds (0: at once, a crash rather than a shutdown)."""
        comp = self._component(name)
        pid = self._component_pid(name)
        if pid is not None:
            self._kill_pid(pid, timeout=grace)
        with contextlib.suppress(FileNotFoundError):
            self._pid_file(comp["binary"]).unlink()

    def start_component(self, name: str) -> int:
        """(Re)start a kwokctl-managed component with the exact command line kwokctl used; returns its pid."""
        comp = self._component(name)
        if self._component_pid(name) is not None:
            raise ClusterError(f"{name} is already running")
        workdir = comp.get("workDir") or str(self.kwokctl_cluster_dir)
        env = dict(os.environ)
        for e in comp.get("envs") or []:
            env[e["name"]] = e["value"]
        log_path = Path(workdir) / "logs" / f"{Path(comp['binary']).name}.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [comp["binary"], *(comp.get("args") or [])],
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        self._pid_file(comp["binary"]).write_text(str(proc.pid))
        return proc.pid

    def restart_apiserver(self, timeout: float = 120, down_hook=None, grace: float = 20) -> None:
        """Stop kube-apiserver (SIGTERM, like a control-plane restart), then start it again on the same port.

        ``down_hook`` (optional callable) runs while the API server is down.  Returns once /readyz is ok again.
        ``grace``: seconds the graceful shutdown may take before SIGKILL (0: kill it at once, like a crash, when the
        test needs the API server gone and not how it says goodbye to its clients).
        """
        self._info("restarting kube-apiserver")
        t0 = time.monotonic()
        self.stop_component("kube-apiserver", grace=grace)
        t_stop = time.monotonic() - t0
        port = int(self._server_url().rsplit(":", 1)[1].split("/")[0])
        _wait(lambda: _free_port(port, "127.0.0.1") or _free_port(port, "0.0.0.0"), 30, f"port {port} to be released")
        if down_hook is not None:
            down_hook()
        self.start_component("kube-apiserver")
        self.wait_ready(timeout)
        restarted = self.ensure_components()
        self._write_state(components={n: self._component_pid(n) for n in self._component_names()})
        self._info(
            f"kube-apiserver back (stopped in {t_stop:.1f}s, down {time.monotonic() - t0:.1f}s)"
            + (f"; restarted {restarted}" if restarted else "")
        )

    def ensure_components(self) -> list[str]:
        """Start any kwokctl component that is not running (what a kubelet does for static pods)."""
        restarted = []
        for name in self._component_names():
            if self._component_pid(name) is None:
                self.start_component(name)
                restarted.append(name)
        return restarted

    # ------------------------------------------------------------------ mpi-operator
    def _operator_pid(self) -> int | None:
        return self._supervisor_pid(self.operator_pid_file)

    def start_mpi_operator(self, timeout: float = 60) -> int:
        """Run the real mpi-operator binary against the cluster (all namespaces); returns the supervisor pid.

        The operator always runs leader election (no flag to turn it off; lease in namespace ``mpi-operator``) and
        exits when it loses the lease (e.g. the API server is down longer than its 5 s renew deadline), so it runs
        under a tiny restart loop, as a Deployment would restart it.
        """
        from kubernetes import client

        if self._operator_pid() is not None:
            return self._operator_pid()
        core = client.CoreV1Api(self.api_client())
        with contextlib.suppress(client.exceptions.ApiException):
            core.create_namespace({"metadata": {"name": MPI_OPERATOR_LOCK_NAMESPACE}})
        binary = str(self._bin() / "mpi-operator")
        args = [
            f"--kubeConfig={self.kubeconfig_path}",
            "--namespace=",  # all namespaces
            f"--lock-namespace={MPI_OPERATOR_LOCK_NAMESPACE}",
            "--threadiness=4",
            "--kube-api-qps=50",
            "--kube-api-burst=100",
            "--monitoring-port=0",
            # upstream hard-codes :8080; our build makes it configurable so clusters can run side by side
            f"--health-check-port={_pick_port()}",
        ]
        log_path = self.logs_dir / "mpi-operator.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # restart loop: a crashed/demoted operator comes back (1 s pause between runs, like a crash-loop backoff)
        script = (
            'trap \'kill -TERM "$pid" 2>/dev/null; wait "$pid"; exit 0\' TERM INT; '
            'while :; do "$@" & pid=$!; wait "$pid"; '
            'echo "[localcluster] mpi-operator exited with $?, restarting" >&2; sleep 1; done'
        )
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)  # the operator lets $KUBECONFIG override --kubeConfig
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", script, "mpi-operator", binary, *args],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        self.operator_pid_file.write_text(str(proc.pid))
        self._write_state(mpi_operator={"pid": proc.pid, "binary": binary, "args": args, "log": str(log_path)})
        self.wait_mpi_operator_leading(timeout)
        self._info("mpi-operator leading")
        return proc.pid

    def _operator_child_started(self) -> float | None:
        """Start time (epoch) of the mpi-operator process currently run by the supervisor loop."""
        sup = self._operator_pid()
        if sup is None:
            return None
        try:
            children = Path(f"/proc/{sup}/task/{sup}/children").read_text().split()
        except OSError:
            return None
        for child in children:
            with contextlib.suppress(OSError):
                if Path(f"/proc/{child}/exe").resolve().name == "mpi-operator":
                    return os.stat(f"/proc/{child}").st_ctime
        return None

    def mpi_operator_leading(self) -> bool:
        """The running operator process holds the leader lease (acquired since it started, renewed recently)."""
        from kubernetes import client

        started = self._operator_child_started()
        if started is None:
            return False

        coord = client.CoordinationV1Api(self.api_client())
        try:
            lease = coord.read_namespaced_lease("mpi-operator", MPI_OPERATOR_LOCK_NAMESPACE)
        except client.exceptions.ApiException:
            return False
        spec = lease.spec
        if not spec or not spec.holder_identity or not spec.renew_time:
            return False
        if spec.acquire_time is None or spec.acquire_time.timestamp() < started - 1:
            return False  # still the lease of a previous operator process
        age = (_dt.datetime.now(_dt.timezone.utc) - spec.renew_time).total_seconds()
        return age < (spec.lease_duration_seconds or 15)

    def wait_mpi_operator_leading(self, timeout: float = 60) -> None:
        def check():
            if self._operator_pid() is None:
                raise ClusterError(f"mpi-operator is not running; see {self.logs_dir / 'mpi-operator.log'}")
            return self.mpi_operator_leading()

        _wait(check, timeout, "the mpi-operator to take its leader lease", interval=0.25)

    def stop_mpi_operator(self) -> None:
        self._stop_supervised(self.operator_pid_file)

    def _stop_supervised(self, pid_file: Path) -> None:
        """SIGTERM the process group of a supervisor loop (SIGKILL after 15 s) and forget its pid file."""
        pid = self._supervisor_pid(pid_file)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self._pgroup_alive(pid):
                time.sleep(0.05)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            while _pid_alive(pid):
                time.sleep(0.05)
        with contextlib.suppress(FileNotFoundError):
            pid_file.unlink()

    @staticmethod
    def _supervisor_pid(pid_file: Path) -> int | None:
        try:
            pid = int(pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _pid_alive(pid) else None

    @staticmethod
    def _pgroup_alive(pgid: int) -> bool:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pgid, os.WNOHANG)  # reap the leader if it is our child (a zombie still counts for killpg)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True

    # ------------------------------------------------------------------ Kueue
    def _kueue_pid(self) -> int | None:
        return self._supervisor_pid(self.kueue_pid_file)

    # Run in a private mount namespace (unshare): a tmpfs-backed overlay on /etc gives Kueue the metrics certificate
    # directory it hard-codes (localcluster/kueue.py), bind mounts under /etc (a container's hosts, resolv.conf)
    # are carried over; then the same restart loop as the mpi-operator's.
    _KUEUE_SCRIPT = r"""
set -e
mnt=$1 certs=$2; shift 2
mount -t tmpfs -o size=4m,mode=0700 tmpfs "$mnt"
i=0
for p in $KEEP_MOUNTS; do
  i=$((i + 1)); if [ -d "$p" ]; then mkdir "$mnt/keep$i"; else : > "$mnt/keep$i"; fi
  mount --bind "$p" "$mnt/keep$i"
done
mkdir "$mnt/upper" "$mnt/work"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$mnt/upper,workdir=$mnt/work" /etc
i=0
for p in $KEEP_MOUNTS; do i=$((i + 1)); mount --bind "$mnt/keep$i" "$p"; done
mkdir -p METRICS_CERT_DIR
cp "$certs/tls.crt" "$certs/tls.key" METRICS_CERT_DIR/
set +e
trap 'kill -TERM "$pid" 2>/dev/null; wait "$pid"; exit 0' TERM INT
while :; do "$@" & pid=$!; wait "$pid"; echo "[localcluster] kueue exited with $?, restarting" >&2; sleep 1; done
""".replace("METRICS_CERT_DIR", _kueue.METRICS_CERT_DIR)

    def start_kueue(self, timeout: float = 120) -> int:
        """Run the real Kueue controller against the cluster; returns the supervisor pid.

        First start: makes the webhook CA and serving certificate and installs Kueue's CRDs (``start()`` does
        that early, see ``_wait_garbage_collector_knows_kueue``), starts the process (webhooks on
        ``127.0.0.1:<free port>``, health probes on another, metrics off, leader election off), waits for its
        ``/readyz`` (webhook server listening), installs the webhook configurations, creates the ResourceFlavor,
        WorkloadPriorityClasses and ClusterQueue, and waits for the ClusterQueue to be Active and for the garbage
        collector to handle Kueue's kinds. A later start (after ``stop_kueue()``) reuses ports, certificates, objects.
        """
        from kubernetes import client

        if self._kueue_pid() is not None:
            return self._kueue_pid()
        proc_state = self.read_state().get("kueue_process") or self._prepare_kueue(timeout)
        data_dir = Path(proc_state["binary"]).parent
        api = self.api_client()
        mnt = self.kueue_dir / "mnt"  # an empty directory here; a tmpfs inside Kueue's mount namespace
        mnt.mkdir(parents=True, exist_ok=True)
        unshare = ["unshare", "--mount", "--propagation", "private"]
        if os.geteuid() != 0:  # unprivileged: a user namespace too (overlay there needs Linux >= 5.11)
            unshare[1:1] = ["--user", "--map-root-user"]
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)  # controller-runtime prefers --kubeconfig, but be sure
        env["KEEP_MOUNTS"] = " ".join(self._mounts_under("/etc"))
        with open(proc_state["log"], "ab") as log:
            proc = subprocess.Popen(
                [*unshare, "/bin/sh", "-c", self._KUEUE_SCRIPT, "kueue", str(mnt), str(self.kueue_dir / "certs"),
                 proc_state["binary"], *proc_state["args"]],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )  # fmt: skip
        self.kueue_pid_file.write_text(str(proc.pid))
        self.wait_kueue_ready(timeout)
        if not proc_state["installed"]:
            ca = (self.kueue_dir / "certs" / "ca.crt").read_bytes()
            adm = client.AdmissionregistrationV1Api(api)
            for hooks in _kueue.webhook_configurations(data_dir, proc_state["webhook"], ca):
                if hooks["kind"] == "MutatingWebhookConfiguration":
                    adm.create_mutating_webhook_configuration(hooks)
                else:
                    adm.create_validating_webhook_configuration(hooks)
            # through Kueue's webhooks: proves the API server reaches them
            _wait(lambda: _kueue.create_queues(api) or True, timeout, "Kueue's queues (through its webhooks)", interval=0.5)
            _wait(lambda: _kueue.cluster_queue_active(api), timeout, f"ClusterQueue {_kueue.CLUSTER_QUEUE} Active")
            self._wait_garbage_collector_knows_kueue(timeout)
            proc_state["installed"] = True
            self._write_state(kueue_process=proc_state)
        self._info(f"Kueue ready (webhooks {proc_state['webhook']}, ClusterQueue {_kueue.CLUSTER_QUEUE} Active)")
        return proc.pid

    def _prepare_kueue(self, timeout: float) -> dict:
        """Ports, certificates, configuration and CRDs of Kueue (before its process starts); returns its state."""
        from kubernetes import client

        data_dir = Path(self.read_state().get("kueue_bin_dir") or _build.build_addon("kueue", verbose=self.verbose))
        api = self.api_client()
        cert_dir = self.kueue_dir / "certs"
        ca = _kueue.make_certificates(cert_dir)
        webhook_port, health_port = _pick_port(), _pick_port()
        url = f"https://127.0.0.1:{webhook_port}"
        ext = client.ApiextensionsV1Api(api)
        with contextlib.suppress(client.exceptions.ApiException):
            client.CoreV1Api(api).create_namespace({"metadata": {"name": _kueue.NAMESPACE}})
        crds = _kueue.crds(data_dir, url, ca)
        for crd in crds:
            ext.create_custom_resource_definition(crd)
        _wait(lambda: all(self._crd_established(ext, c["metadata"]["name"]) for c in crds), timeout, "Kueue CRDs")
        config = self.kueue_dir / "config.yaml"
        config.write_text(
            yaml.safe_dump(_kueue.configuration(webhook_port=webhook_port, health_port=health_port, cert_dir=cert_dir))
        )
        proc_state = {
            "binary": str(data_dir / "kueue"),
            "args": [f"--config={config}", f"--kubeconfig={self.kubeconfig_path}"],
            "webhook": url,
            "health": f"http://127.0.0.1:{health_port}",
            "log": str(self.logs_dir / "kueue.log"),
            "installed": False,
        }
        self._write_state(kueue_process=proc_state)
        return proc_state

    def _wait_garbage_collector_knows_kueue(self, timeout: float) -> None:
        """Wait until kube-controller-manager's garbage collector handles Kueue's kinds.

        It discovers new CRDs every 30 s (hard-coded); until then a deleted MPIJob's Workload is not removed, so its
        quota is not freed (``_setup`` restarts the controller manager after installing the CRDs, so this is quick).
        Probe: a WorkloadPriorityClass owned by a ClusterRole; once the role is deleted the collector deletes the
        class as soon as it watches Kueue's kinds (installed after the MPIJob CRD).
        """
        from kubernetes import client

        api = self.api_client()
        rbac = client.RbacAuthorizationV1Api(api)
        co = client.CustomObjectsApi(api)
        name = "airflow-mpi-gc-probe"
        t0 = time.monotonic()
        owner = rbac.create_cluster_role({"metadata": {"name": name}, "rules": []})
        ref = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": name, "uid": owner.metadata.uid}
        probe = {"apiVersion": f"{_kueue.GROUP}/{_kueue.VERSION}", "kind": "WorkloadPriorityClass",
                 "metadata": {"name": name, "ownerReferences": [ref]}, "value": 0}  # fmt: skip
        co.create_cluster_custom_object(_kueue.GROUP, _kueue.VERSION, "workloadpriorityclasses", probe)
        rbac.delete_cluster_role(name)

        def gone() -> bool:
            try:
                co.get_cluster_custom_object(_kueue.GROUP, _kueue.VERSION, "workloadpriorityclasses", name)
            except client.exceptions.ApiException as exc:
                if exc.status == 404:
                    return True
                raise
            return False

        _wait(gone, timeout, "the garbage collector to watch Kueue's kinds (it discovers new CRDs every 30 s)", interval=0.5)
        self._info(f"garbage collector handles Kueue's kinds (waited {time.monotonic() - t0:.1f}s)")

    @staticmethod
    def _mounts_under(top: str) -> list[str]:
        """Mount points below ``top`` in this process's mount namespace (e.g. Docker's /etc/hosts in a container)."""
        out = []
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                point = line.split()[4]
                if point.startswith(top.rstrip("/") + "/") and "\\" not in point:
                    out.append(point)
        return out

    def kueue_ready(self) -> bool:
        """Kueue's ``/readyz``: its webhook server is listening."""
        import urllib.request

        url = (self.read_state().get("kueue_process") or {}).get("health")
        if not url or self._kueue_pid() is None:
            return False
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def wait_kueue_ready(self, timeout: float = 120) -> None:
        log = self.logs_dir / "kueue.log"

        def check():
            if self._kueue_pid() is None:
                raise ClusterError(f"Kueue is not running; see {log}")
            return self.kueue_ready()

        _wait(check, timeout, f"Kueue's /readyz (log: {log})", interval=0.25)

    def stop_kueue(self) -> None:
        """Stop the Kueue process (its webhooks stay installed: MPIJob creates fail until it is back, as in a
        cluster whose Kueue is down)."""
        self._stop_supervised(self.kueue_pid_file)

    def create_local_queue(self, namespace: str, name: str = _kueue.LOCAL_QUEUE) -> dict:
        """A LocalQueue (default ``user-queue``) in ``namespace`` feeding the ClusterQueue ``cluster-queue``."""
        return _kueue.create_local_queue(self.api_client(), namespace, name)

    # ------------------------------------------------------------------ logs
    def set_launcher_logs(
        self,
        namespace: str,
        lines: Sequence[str],
        previous_lines: Sequence[str] | None = None,
        *,
        containers: Sequence[str] = (bh.LAUNCHER_CONTAINER,),
    ) -> Path:
        """Serve ``lines`` as the logs of the given containers of every pod in ``namespace``.

        Writes ``pod-logs/<namespace>/current.log`` (and ``previous.log`` for ``previous=true``, i.e. a restarted
        container) in CRI format and (re)creates the kwok ``ClusterLogs`` object ``logs-<namespace>`` selecting the
        namespace.  Plain messages get increasing timestamps starting now; lines already in CRI format
        (``<RFC3339Nano> stdout F <text>``) are written as given.  Returns the current log file, to which
        ``append_launcher_logs`` adds lines (``follow=True`` readers see them).  Note: kwok keeps a follow stream
        open until the client closes it, even after the container terminated (a kubelet would end it).
        """
        from kubernetes import client

        d = self.pod_logs_dir / namespace
        d.mkdir(parents=True, exist_ok=True)
        current = d / "current.log"
        previous = d / "previous.log"
        now = time.time()
        if previous_lines is not None:
            prev = cri_lines(previous_lines, start=now - 60)
            previous.write_text("".join(x + "\n" for x in prev))
        current.write_text("".join(x + "\n" for x in cri_lines(lines, start=now)))
        log_spec: dict = {"containers": list(containers), "logsFile": str(current)}
        if previous_lines is not None:
            log_spec["previousLogsFile"] = str(previous)
        obj = {
            "apiVersion": f"{KWOK_GROUP}/{KWOK_VERSION}",
            "kind": "ClusterLogs",
            "metadata": {"name": f"logs-{namespace}"},
            "spec": {"selector": {"matchNamespaces": [namespace]}, "logs": [log_spec]},
        }
        co = client.CustomObjectsApi(self.api_client())
        try:
            co.create_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "clusterlogs", obj)
        except client.exceptions.ApiException as exc:
            if exc.status != 409:
                raise
            existing = co.get_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "clusterlogs", obj["metadata"]["name"])
            obj["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            co.replace_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "clusterlogs", obj["metadata"]["name"], obj)
        return current

    def append_launcher_logs(self, namespace: str, lines: Sequence[str]) -> None:
        """Append lines to the current log file of ``namespace`` (followers receive them)."""
        current = self.pod_logs_dir / namespace / "current.log"
        with open(current, "a") as f:
            for x in cri_lines(lines):
                f.write(x + "\n")
            f.flush()

    def clear_launcher_logs(self, namespace: str) -> None:
        from kubernetes import client

        co = client.CustomObjectsApi(self.api_client())
        with contextlib.suppress(client.exceptions.ApiException):
            co.delete_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "clusterlogs", f"logs-{namespace}")
        shutil.rmtree(self.pod_logs_dir / namespace, ignore_errors=True)

    # ------------------------------------------------------------------ status
    def status(self) -> dict:
        state = self.read_state()
        comps = {}
        if self.kwokctl_cluster_dir.exists():
            for n in self._component_names():
                comps[n] = self._component_pid(n)
        return {
            "name": self.name,
            "api_version": state.get("api_version", self.api_version),
            "phase": state.get("phase", "absent"),
            "ready": bool(comps.get("kube-apiserver")) and self.ready(),
            "server": state.get("server"),
            "kubeconfig": str(self.kubeconfig_path) if self.kubeconfig_path.exists() else None,
            "components": comps,
            "mpi_operator_pid": self._operator_pid(),
            "kueue": state.get("kueue") and {"pid": self._kueue_pid(), **(state.get("kueue_process") or {})},
            "logs": str(self.logs_dir),
            "versions": state.get("versions", {}),
            "simulated_nodes": f"{state.get('nodes', self.nodes)} x (cpu {bh.NODE_CPU}, memory {bh.NODE_MEMORY}, "
            f"{bh.GPU_RESOURCE} {bh.NODE_GPUS}) - kwok, no containers run",
        }


def list_clusters() -> list[str]:
    root = clusters_root()
    return sorted(p.name for p in root.iterdir() if (p / "state.json").exists()) if root.is_dir() else []
