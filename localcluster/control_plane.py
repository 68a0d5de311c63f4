"""The control plane of a simulated cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
the kwok controller: ``kwokctl create cluster --runtime binary`` with our binaries, as local processes.

Its components ("kwokctl components") can be stopped and started again with the exact command line kwokctl
used, as a kubelet restarts static pods (``restart_apiserver``, ``ensure_components``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from . import atomic_file, component_keeper, yaml_files
from . import build as _build
from . import ports as _ports
from .cluster_objects import KWOK_CRDS
from .processes import kill_pid, pid_alive
from .state import ClusterState, cache_root
from .waiting import ClusterError, wait_until

# the kwokctl options naming every port its binary runtime would otherwise pick itself (why: ports.py)
KWOKCTL_PORTS = (
    "etcdPort",
    "etcdPeerPort",
    "kubeApiserverPort",
    "kwokControllerPort",
    "kubeControllerManagerPort",
    "kubeSchedulerPort",
)


def _log(msg: str) -> None:
    print(f"[localcluster] {msg}", file=sys.stderr, flush=True)


def _port_free(port: int, host: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


class ControlPlane(ClusterState):
    """A kwokctl cluster (binary runtime) named ``name``, every port on ``bind_address``."""

    def __init__(
        self,
        name: str,
        *,
        verbose: bool = True,
        bind_address: str = "127.0.0.1",
        apiserver_port: int | None = None,
        apiserver_sans: Sequence[str] = (),
        extra_args: Sequence[str] = (),
        keep_components: bool = True,
    ) -> None:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name):
            raise ValueError(f"cluster name must be a DNS label: {name!r}")
        self.name = name
        self.verbose = verbose
        # the defaults keep every component on loopback; the real node's container (localcluster.serve) serves
        # the API on all its interfaces at a fixed port, under the names other containers reach it by
        self.bind_address = bind_address
        self.apiserver_port = apiserver_port
        self.apiserver_sans = tuple(apiserver_sans)
        self.extra_args = tuple(extra_args)  # kwokctl --extra-args values: "<component>=<flag>=<value>"
        # a component keeper runs beside the components (localcluster/component_keeper.py); a real node's
        # container passes False: its own loop restarts them
        self.keep_components = keep_components
        self._api_client: Any = None
        self._configuration: tuple[tuple[str, int, int], list[dict]] | None = None

    def info(self, msg: str) -> None:
        if self.verbose:
            _log(f"{self.name}: {msg}")

    # ------------------------------------------------------------------ tools and API
    def bin_dir(self) -> Path:
        """The main build this cluster runs (recorded at start; built when not known)."""
        state = self.read_state()
        if state.get("bin_dir") and Path(state["bin_dir"]).is_dir():
            return Path(state["bin_dir"])
        return _build.build(verbose=self.verbose)

    def kwokctl(
        self, *args: str, check: bool = True, capture: bool = False, timeout: float = 300
    ) -> subprocess.CompletedProcess:
        bin_dir = self.bin_dir()
        env = dict(os.environ)
        env["KWOK_WORKDIR"] = str(self.kwok_workdir)
        env["KWOK_KUBECTL_BINARY"] = str(bin_dir / "kubectl")
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env.pop("KUBECONFIG", None)
        cmd = [str(bin_dir / "kwokctl"), "--name", self.name, *args]
        return subprocess.run(
            cmd,
            env=env,
            check=check,
            timeout=timeout,
            text=True,
            capture_output=capture,
            stdin=subprocess.DEVNULL,
        )

    def api_client(self) -> Any:
        """A kubernetes.client.ApiClient for this cluster (cached)."""
        if self._api_client is None:
            from kubernetes import config as kconfig

            self._api_client = kconfig.new_client_from_config(config_file=str(self.kubeconfig_path))
        return self._api_client

    def _get(self, path: str, timeout: float = 5) -> tuple[int, str]:
        resp = self.api_client().call_api(
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
        wait_until(lambda: self._get("/readyz")[0] == 200, timeout, f"kube-apiserver /readyz of {self.name}")

    def server_url(self) -> str:
        cfg = yaml.safe_load(self.kubeconfig_path.read_text())
        return cfg["clusters"][0]["cluster"]["server"]

    # ------------------------------------------------------------------ create / delete
    def create(self, bin_dir: Path, timeout: float) -> None:
        """``kwokctl create cluster``; returns once the API server is ready."""
        kwokctl_config = self.state_dir / "kwokctl.yaml"
        options: dict[str, Any] = {
            # every component (etcd, kube-apiserver, ...) listens on ``bind_address`` only, on ports claimed
            "bindAddress": self.bind_address,
            **dict(zip(KWOKCTL_PORTS, _ports.claim(len(KWOKCTL_PORTS), cache_root() / "ports.json"))),
        }
        if self.apiserver_port:
            options["kubeApiserverPort"] = self.apiserver_port
        if self.apiserver_sans:
            options["kubeApiserverCertSANs"] = list(self.apiserver_sans)
        kwokctl_config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                    "kind": "KwokctlConfiguration",
                    "options": options,
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
        self.info("kwokctl create cluster (binary runtime)")
        res = self.kwokctl(*args, timeout=timeout + 30, check=False, capture=True)
        (self.logs_dir / "kwokctl.log").write_text(res.stdout + res.stderr)
        if res.returncode != 0:
            raise ClusterError(
                f"kwokctl create cluster failed ({res.returncode}): {res.stderr.strip()[-2000:]}"
            )
        shutil.copyfile(self.kwokctl_cluster_dir / "kubeconfig.yaml", self.kubeconfig_path)
        self._link_logs()
        self._api_client = None
        self.wait_ready(timeout)
        self.write_state(kwok_config=str(self.kwokctl_cluster_dir / "kwok.yaml"), server=self.server_url())
        self.revive_early_exits()
        if self.keep_components:
            component_keeper.start(self)

    def revive_early_exits(self) -> None:
        """Start again any component that exited while the API server was starting, and record the pids.

        kwokctl starts every component at once, and kube-controller-manager waits a bounded time for the API
        server to become healthy, then exits for good: in a CI run of 2026-11-28 on a loaded machine, the API
        server took 24.6 s, the controller manager gave up after 15 s, nothing removed the new nodes'
        not-ready taint, and no node became Ready.
        A kubelet restarts such a static pod; this is that restart, with the API server ready this time.
        """
        restarted = self.ensure_components()
        if restarted:
            self.info(f"restarted {', '.join(restarted)} (exited before the API server was ready)")
        self.record_components()

    def delete(self, keep_logs: bool) -> None:
        """``kwokctl delete cluster``, then kill whatever survived; logs copied first when ``keep_logs``."""
        component_keeper.stop(self)  # first: it would start the components again
        if keep_logs:
            with contextlib.suppress(Exception):
                self._collect_logs()
        if self.kwokctl_cluster_dir.exists():
            res = self.kwokctl("delete", "cluster", check=False, capture=True, timeout=120)
            if res.returncode != 0:
                self.info(f"kwokctl delete cluster failed ({res.returncode}): {res.stderr.strip()[-500:]}")
        # belt and braces: nothing of ours may survive
        pids_dir = self.kwokctl_cluster_dir / "pids"
        for pid_file in pids_dir.glob("*.pid") if pids_dir.is_dir() else []:
            with contextlib.suppress(Exception):
                kill_pid(int(pid_file.read_text().strip()))
        shutil.rmtree(self.kwok_workdir, ignore_errors=True)
        self._api_client = None

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

    # ------------------------------------------------------------------ components
    def _component(self, name: str) -> dict:
        for doc in self._kwokctl_configuration():
            for comp in doc.get("components") or []:
                if comp.get("name") == name:
                    return comp
        raise ClusterError(f"component {name!r} not found in {self.kwokctl_cluster_dir / 'kwok.yaml'}")

    def _kwokctl_configuration(self) -> list[dict]:
        """kwokctl's configuration, parsed again only when its file changed: the restart loops of
        ``localcluster serve`` ask for it every second, and a parse costs 50 ms of CPU (15 % of a core each)."""
        path = self.kwokctl_cluster_dir / "kwok.yaml"
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        if self._configuration is None or self._configuration[0] != key:
            docs = [d for d in yaml_files.read_all(path) if d]
            self._configuration = (key, [d for d in docs if d.get("kind") == "KwokctlConfiguration"][:1])
        return self._configuration[1]

    def kwok_server_url(self) -> str:
        """The URL of kwok's kubelet server (pod logs, exec), from its ``--server-address``."""
        for arg in self._component("kwok-controller").get("args") or []:
            if arg.startswith("--server-address="):
                return "https://" + arg.split("=", 1)[1]
        raise ClusterError(
            f"kwok-controller has no --server-address in {self.kwokctl_cluster_dir / 'kwok.yaml'}"
        )

    def component_names(self) -> list[str]:
        for doc in self._kwokctl_configuration():
            return [c["name"] for c in doc.get("components") or []]
        return []

    def _pid_file(self, binary: str) -> Path:
        return self.kwokctl_cluster_dir / "pids" / f"{Path(binary).name}.pid"

    def component_pid(self, name: str) -> int | None:
        try:
            pid = int(self._pid_file(self._component(name)["binary"]).read_text().strip())
        except (ClusterError, FileNotFoundError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def record_components(self) -> None:
        self.write_state(components={n: self.component_pid(n) for n in self.component_names()})

    def stop_component(self, name: str, grace: float = 20) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds (0: at once, a crash rather than a shutdown)."""
        comp = self._component(name)
        pid = self.component_pid(name)
        # the pid file goes first: a pid file whose process is gone means a crash to the component keeper
        with contextlib.suppress(FileNotFoundError):
            self._pid_file(comp["binary"]).unlink()
        if pid is not None:
            kill_pid(pid, timeout=grace)

    @contextlib.contextmanager
    def frozen_component(self, name: str) -> Iterator[int]:
        """Freeze a running component (SIGSTOP) inside the block, thaw it (SIGCONT) after; yields its pid. Alive
        throughout, so the component keeper leaves it be: for kwok, nothing a kubelet would do happens meanwhile."""
        pid = self.component_pid(name)
        if pid is None:
            raise ClusterError(f"{name} is not running")
        os.kill(pid, signal.SIGSTOP)
        try:
            yield pid
        finally:
            os.kill(pid, signal.SIGCONT)

    def start_component(self, name: str) -> int:
        """(Re)start a kwokctl-managed component with the exact command line kwokctl used; returns its pid."""
        comp = self._component(name)
        if self.component_pid(name) is not None:
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
        atomic_file.write_text(self._pid_file(comp["binary"]), str(proc.pid))
        return proc.pid

    def restart_component(self, name: str) -> None:
        with self._components_lock():  # one act to a keeper: no start of its own in between
            self.stop_component(name)
            self.start_component(name)
        self.record_components()

    def restart_apiserver(
        self, timeout: float = 120, down_hook: Callable[[], None] | None = None, grace: float = 5
    ) -> None:
        """Stop kube-apiserver (SIGTERM, like a control-plane restart), then start it again on the same port.

        ``down_hook`` (optional callable) runs while the API server is down.  Returns once /readyz is ok
        again. ``grace``: seconds the graceful shutdown may take before SIGKILL (0: kill it at once, like a
        crash, when the test needs the API server gone and not how it says goodbye to its clients). A SIGTERM
        closes the listener at once and ends watches within 2 s; a following log stream then keeps the old
        process alive until its 60 s request drain, which took every restart to the SIGKILL (20 s before):
        5 s covers the goodbye to watches, and every second longer lengthens the outage that the controllers'
        backoffs (the mpi-operator's lease, the Job controller's retries) then add to.
        """
        self.info("restarting kube-apiserver")
        t0 = time.monotonic()
        self.stop_component("kube-apiserver", grace=grace)
        t_stop = time.monotonic() - t0
        port = int(self.server_url().rsplit(":", 1)[1].split("/")[0])
        released = f"port {port} to be released"
        wait_until(lambda: _port_free(port, "127.0.0.1") or _port_free(port, "0.0.0.0"), 30, released)
        if down_hook is not None:
            down_hook()
        self.start_component("kube-apiserver")
        self.wait_ready(timeout)
        restarted = self.ensure_components()
        self.record_components()
        self.info(
            f"kube-apiserver back (stopped in {t_stop:.1f}s, down {time.monotonic() - t0:.1f}s)"
            + (f"; restarted {restarted}" if restarted else "")
        )

    def ensure_components(self, crashed_only: bool = False) -> list[str]:
        """Start any kwokctl component that is not running (what a kubelet does for static pods); with
        ``crashed_only``, only those whose pid file names a process that is gone (``stop_component`` removes the
        file: a deliberate stop stays stopped). One caller at a time (a lock file): the component keeper and
        ``restart_apiserver`` must not both start the same component."""
        restarted = []
        names = self.component_names()  # FileNotFoundError: no cluster (any more)
        with self._components_lock():
            for name in names:
                if self.component_pid(name) is None and (not crashed_only or self._pid_file_left(name)):
                    self.start_component(name)
                    restarted.append(name)
        return restarted

    def _pid_file_left(self, name: str) -> bool:
        return self._pid_file(self._component(name)["binary"]).exists()

    @contextlib.contextmanager
    def _components_lock(self) -> Iterator[None]:
        with open(self.kwokctl_cluster_dir / "components.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
