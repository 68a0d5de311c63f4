"""What a controller of the local cluster is: a process run beside the control plane, under the restart loop.

A subclass says what it needs (``prepare``), what it runs (``launch``), when it is ready (``ready``) and what
to do once it first is (``after_ready``); this base class starts, awaits, stops and reports it, the same way
for every controller, with its pid in ``<state>/<name>.pid``, its log in ``logs/<name>.log`` and its record in
``state.json`` under ``state_key``.
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from localcluster import build as _build
from localcluster.processes import Launch, start_supervised, stop_supervised, supervisor_pid
from localcluster.waiting import ClusterError, wait_until

if TYPE_CHECKING:
    from localcluster.cluster import LocalCluster


class Controller:
    """One controller of a ``LocalCluster``; ``LocalCluster.controller(name)`` returns it."""

    name: ClassVar[str]  # the registry key: `up --controller NAME`, the log and pid file names
    addon: ClassVar[str | None] = None  # build.ADDONS entry its binary comes from (None: the main build)
    api_versions: ClassVar[tuple[str, ...] | None] = None  # MPIJob API versions it works with (None: any)
    # controllers it needs running (started before it: earlier in the registry); choosing it chooses them too
    requires: ClassVar[tuple[str, ...]] = ()
    # its prepare() installs CRDs: restart kube-controller-manager after it, so that its garbage collector
    # watches their kinds at once (it discovers new CRDs every 30 s, hard-coded)
    restarts_controller_manager: ClassVar[bool] = False
    ready_what: ClassVar[str] = (
        "it to be ready"  # for the timeout message: "waiting for <name>: <ready_what>"
    )
    ready_interval: ClassVar[float] = 0.25
    start_timeout: ClassVar[float] = 120  # what LocalCluster.start() allows it

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    # ------------------------------------------------------------------ where
    @property
    def pid_file(self) -> Path:
        return self.cluster.state_dir / f"{self.name}.pid"

    @property
    def log_path(self) -> Path:
        return self.cluster.logs_dir / f"{self.name}.log"

    @property
    def work_dir(self) -> Path:
        """The controller's own files (configuration, certificates), made on demand."""
        return self.cluster.state_dir / self.name

    @property
    def cert_dir(self) -> Path:
        """Its webhook certificates (``localcluster.webhook_certs``), for controllers that serve webhooks."""
        return self.work_dir / "certs"

    @property
    def state_key(self) -> str:
        return self.name.replace("-", "_")

    def record(self) -> dict[str, Any]:
        """What ``state.json`` holds for it ({} before its first start)."""
        return self.cluster.read_state().get(self.state_key) or {}

    def save(self, record: dict[str, Any]) -> None:
        self.cluster.write_state(**{self.state_key: record})

    def bin_dir(self) -> Path:
        """Where its binary is: its add-on's build (recorded at start) or the cluster's main build."""
        if self.addon is None:
            return self.cluster.bin_dir()
        recorded = self.cluster.read_state().get(f"{self.addon}_bin_dir")
        return Path(recorded) if recorded else _build.build_addon(self.addon, verbose=self.cluster.verbose)

    @staticmethod
    def environment() -> dict[str, str]:
        """This process's environment without ``$KUBECONFIG`` (controllers get ``--kubeconfig``; some let the
        variable win over the flag)."""
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        return env

    @staticmethod
    def private_mounts() -> list[str]:
        """``Launch.wrapper`` for a process in a private mount namespace (unprivileged: a user namespace too;
        an overlay mounted there needs Linux >= 5.11)."""
        unshare = ["unshare", "--mount", "--propagation", "private"]
        if os.geteuid() != 0:
            unshare[1:1] = ["--user", "--map-root-user"]
        return unshare

    def readyz(self) -> bool:
        """The ``/readyz`` of the ``health`` URL in its record answers 200 (controller-runtime managers)."""
        url = self.record().get("health")
        if not url or self.pid() is None:
            return False
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    # ------------------------------------------------------------------ what a controller says
    def prepare(self, timeout: float) -> None:
        """Before the nodes and any controller start (e.g. CRDs); once per cluster start. Default: nothing."""

    def launch(self, timeout: float) -> Launch:
        """The command to run under the restart loop."""
        raise NotImplementedError

    def ready(self) -> bool:
        """It serves (a probe; False while starting)."""
        raise NotImplementedError

    def after_ready(self, timeout: float) -> None:
        """After each start, once ready (e.g. objects made through its webhooks). Default: nothing."""

    def controllers_added(self, added: tuple[str, ...], timeout: float) -> None:
        """The running cluster runs the controllers ``added`` too from now on (``LocalCluster.add_controllers``),
        started and ready: what this one, already running, changes for them (e.g. Kueue's integrations). Default:
        nothing."""

    # ------------------------------------------------------------------ what every controller gets
    def pid(self) -> int | None:
        """The pid of its restart loop (None: not running)."""
        return supervisor_pid(self.pid_file)

    def start(self, timeout: float = 120) -> int:
        """Run it (no-op when it runs); returns once ready, with the restart loop's pid."""
        running = self.pid()
        if running is not None:
            return running
        pid = start_supervised(self.name, self.launch(timeout), self.log_path, self.pid_file)
        self.wait_ready(timeout)
        self.after_ready(timeout)
        self.cluster.info(f"{self.name} ready")
        return pid

    def wait_ready(self, timeout: float = 120) -> None:
        def check() -> bool:
            if self.pid() is None:
                raise ClusterError(f"{self.name} is not running; see {self.log_path}")
            return self.ready()

        wait_until(
            check, timeout, f"{self.name}: {self.ready_what} (log: {self.log_path})", self.ready_interval
        )

    def stop(self) -> None:
        """Stop its restart loop and the process it runs."""
        stop_supervised(self.pid_file)

    def logs(self) -> Path:
        return self.log_path

    def status(self) -> dict[str, Any]:
        return {"pid": self.pid(), "log": str(self.log_path), **self.record()}
