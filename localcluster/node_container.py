"""Host side of the real-node cluster: run the node image with Docker, load images into its node.

``NodeCluster("name").start()`` runs images/kube (a control plane, the mpi-operator and one real node in one
privileged container; the image and the add-on builds mounted into it: localcluster/node_image.py), publishes its
API server on a free loopback port and writes a kubeconfig for this host at the same place a kwok cluster's would
be (``$AIRFLOW_MPI_CACHE/clusters/<name>/kubeconfig``), so tests and the demo use either kind of cluster the same
way. ``load_images()`` copies local Docker images into the node's containerd (``docker save | ctr images import``):
no registry is involved.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import yaml

from . import build as _build
from . import controllers as _controllers
from .cluster_objects import API_V2BETA1
from .mpi_images import IMAGE_TARGETS, build_mpi_images
from .node_image import addon_mounts, build_image, docker, node_log
from .node_image_store import ImageStore, has_image, images
from .processes import child_env
from .state import ClusterPaths
from .waiting import ClusterError

LABEL = "airflow-mpi.localcluster"
NODE_STATE = "/var/lib/airflow-mpi/clusters/node"  # LocalCluster("node") inside the container
READY_LINE = "[localcluster.serve] ready in"


# image ref -> the background loads of it (NodeCluster.provide_images) in this process
_PROVIDING: dict[str, list[Future]] = {}


def await_image(ref: str, timeout: float = 3600) -> None:
    """Wait until every node of this process that is being given ``ref`` in the background has it (no-op when
    none is). A failed build or load is raised here, in the test that needs the image."""
    for future in _PROVIDING.get(ref, []):
        future.result(timeout)


class NodeCluster(ClusterPaths):
    """A cluster with a real node, in a container named ``airflow-mpi-<name>``."""

    kind = "real-node"

    def __init__(
        self,
        name: str = "real",
        api_version: str = API_V2BETA1,
        *,
        kwok_nodes: int = 0,
        kueue: bool = False,
        container_log_max_size: str | None = None,
        controllers: Sequence[str] = (),
        addons: Sequence[str] = (),
        image_store: str | None = None,
    ) -> None:
        self.name = name
        self.api_version = api_version
        self.kwok_nodes = kwok_nodes
        self.kueue = kueue  # serve --kueue
        self.controllers = tuple(controllers)  # serve --controller NAME
        # the add-on builds mounted into the container: those its controllers run from, and ``addons`` (for a
        # later switch_api); a node that runs none builds none
        unknown = sorted(set(addons) - set(_build.ADDONS))
        if unknown:
            raise ValueError(f"unknown add-on(s) {unknown}; known: {sorted(_build.ADDONS)}")
        wanted = [*(["kueue"] if kueue else []), *controllers]
        self.addons = tuple(sorted({*_controllers.addons(wanted), *addons}))
        self.container_log_max_size = container_log_max_size  # serve --container-log-max-size
        self.container = f"airflow-mpi-{name}"
        self._providing: list[Future] = []  # provide_images' loads
        # the images it imports kept for the next node of this purpose (localcluster/node_image_store.py)
        self.image_store = image_store
        self._store: ImageStore | None = None

    def _volumes(self) -> list[str]:
        """Its own volumes (/var/lib/containerd, /var/lib/kubelet): removed with it."""
        return [f"{self.container}-containerd", f"{self.container}-kubelet"]

    def running(self) -> bool:
        res = docker("inspect", "-f", "{{.State.Running}}", self.container, check=False)
        return res.returncode == 0 and res.stdout.strip() == "true"

    def start(self, timeout: float = 300) -> NodeCluster:
        tag = build_image()
        addon_dirs, mounts = addon_mounts(self.addons)
        self.remove()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._store = ImageStore.take(self.image_store, docker) if self.image_store else None
        containerd, kubelet = self._volumes()
        if self._store:
            containerd = self._store.volume
        t0 = time.monotonic()
        docker(
            "run", "-d", "--name", self.container, "--hostname", self.name, "--privileged", "--init",
            "--label", f"{LABEL}={self.name}",
            "-v", f"{containerd}:/var/lib/containerd", "-v", f"{kubelet}:/var/lib/kubelet",
            "-p", "127.0.0.1::6443", *mounts,
            tag, f"--api-version={self.api_version}", f"--kwok-nodes={self.kwok_nodes}",
            *(["--kueue"] if self.kueue else []),
            *([f"--container-log-max-size={self.container_log_max_size}"] if self.container_log_max_size else []),
            *(f"--controller={name}" for name in self.controllers),
        )  # fmt: skip
        try:
            self._await_ready(timeout)
            self._write_kubeconfig()
        except BaseException:
            self.collect_logs()
            raise
        (self.state_dir / "state.json").write_text(
            json.dumps(
                {
                    "name": self.name,
                    "kind": self.kind,
                    "image": tag,
                    "api_version": self.api_version,
                    "kueue": self.kueue,
                    "addons": list(self.addons),
                    # prune() keeps the builds a running cluster uses
                    **{f"{name}_bin_dir": str(path) for name, path in addon_dirs.items()},
                    "phase": "running",
                }
            )
        )
        node_log(f"{self.name}: up in {time.monotonic() - t0:.1f}s; KUBECONFIG={self.kubeconfig_path}")
        return self

    def switch_api(self, api_version: str, controllers: Sequence[str] = ()) -> None:
        """The node's cluster serves the other MPIJob API from now on (``LocalCluster.switch_api`` in the
        container): same node, same images; every MPIJob of the old API is deleted."""
        from .serve import CLUSTER_NAME

        self._check_mounted(controllers)
        t0 = time.monotonic()
        res = docker(
            "exec", self.container, "python3", "-m", "localcluster", "switch-api", "--name", CLUSTER_NAME,
            f"--api-version={api_version}", *(f"--controller={name}" for name in controllers),
        )  # fmt: skip
        for line in res.stderr.splitlines():
            node_log(f"{self.name}: {line}")
        self.api_version, self.controllers = api_version, tuple(controllers)
        state = self.state_dir / "state.json"
        state.write_text(json.dumps({**json.loads(state.read_text()), "api_version": api_version}))
        node_log(f"{self.name}: serves kubeflow.org/{api_version} MPIJobs now ({time.monotonic() - t0:.1f}s)")

    def add_controllers(self, controllers: Sequence[str]) -> None:
        """The node's cluster runs the controllers ``controllers`` too from now on (``LocalCluster.add_controllers``
        in the container); their builds must be mounted (``addons``)."""
        from .serve import CLUSTER_NAME

        self._check_mounted(controllers)
        t0 = time.monotonic()
        res = docker(
            "exec", self.container, "python3", "-m", "localcluster", "add-controller", "--name", CLUSTER_NAME,
            *(f"--controller={name}" for name in controllers),
        )  # fmt: skip
        for line in res.stderr.splitlines():
            node_log(f"{self.name}: {line}")
        self.controllers = tuple(dict.fromkeys([*self.controllers, *controllers]))
        node_log(f"{self.name}: runs {', '.join(controllers)} now ({time.monotonic() - t0:.1f}s)")

    def _check_mounted(self, controllers: Sequence[str]) -> None:
        missing = sorted(set(_controllers.addons(controllers)) - set(self.addons))
        if missing:
            raise ClusterError(
                f"{self.container} has no build of {', '.join(missing)} mounted: start it with "
                f"NodeCluster(..., addons={missing!r})"
            )

    def _await_ready(self, timeout: float) -> None:
        """Follow the container's output until serve reports ready (or the container ends)."""
        proc = subprocess.Popen(
            ["docker", "logs", "-f", self.container],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=child_env(),
        )
        deadline = time.monotonic() + timeout
        tail: list[str] = []
        try:
            for line in proc.stdout:  # ends when the container stops
                tail = [*tail[-40:], line.rstrip()]
                if line.startswith(READY_LINE):
                    return
                if time.monotonic() > deadline:
                    break
        finally:
            proc.kill()
            proc.wait()
        state = "exited" if not self.running() else f"not ready after {timeout:.0f}s"
        raise ClusterError(f"node container {self.container} {state}; last output:\n" + "\n".join(tail))

    def _write_kubeconfig(self) -> None:
        port = docker("port", self.container, "6443/tcp").stdout.split(":")[-1].strip()
        cfg = yaml.safe_load(docker("exec", self.container, "cat", "/run/airflow-mpi/kubeconfig").stdout)
        for cluster in cfg["clusters"]:
            cluster["cluster"]["server"] = f"https://127.0.0.1:{port}"
        self.kubeconfig_path.write_text(yaml.safe_dump(cfg))

    def load_images(self, refs: Sequence[str]) -> None:
        """Copy local Docker images into the node's containerd (what a registry pull would do), but those it
        holds already (a kept image store: ``image_store``)."""
        present = images(docker("exec", self.container, "ctr", "-n", "k8s.io", "images", "ls").stdout)
        for ref in refs:
            t0 = time.monotonic()
            image_id = docker("image", "inspect", "-f", "{{.Id}}", ref, check=False).stdout.strip()
            if has_image(present, ref, image_id):
                node_log(f"{self.name}: has {ref} already (image {image_id[7:19]})")
                continue
            save = subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE, env=child_env())
            res = subprocess.run(
                ["docker", "exec", "-i", self.container, "ctr", "-n", "k8s.io", "images", "import", "-"],
                stdin=save.stdout, capture_output=True, text=True, check=False, env=child_env(),
            )  # fmt: skip
            save.stdout.close()
            if save.wait() != 0 or res.returncode != 0:
                raise ClusterError(f"loading {ref} into {self.container}: {res.stderr.strip()}")
            node_log(f"{self.name}: loaded {ref} ({time.monotonic() - t0:.1f}s)")

    def provide_images(self, targets: Sequence[str]) -> None:
        """Build (or find built) and load images/mpi ``targets`` into the node in a background thread, one after
        the other in the given order, while the caller goes on; ``await_image`` waits for one. The tests that need
        an image wait for it, so a session pays only for the loads that outrun its tests."""
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"images-{self.name}")
        chain = [pool.submit(lambda t=t: self.load_images(build_mpi_images([t]))) for t in targets]
        pool.shutdown(wait=False)
        for target, future in zip(targets, chain):
            _PROVIDING.setdefault(IMAGE_TARGETS[target], []).append(future)
        self._providing += chain

    def collect_logs(self, dest: Path | None = None) -> Path:
        """Copy the component and node logs out of the container (post-mortem)."""
        dest = dest or self.logs_dir
        dest.mkdir(parents=True, exist_ok=True)
        docker("cp", f"{self.container}:{NODE_STATE}/logs/.", str(dest), check=False)
        for link in [p for p in dest.iterdir() if p.is_symlink()]:  # the live components' logs: their files
            target = os.readlink(link)
            link.unlink()
            docker("cp", f"{self.container}:{target}", str(link), check=False)
        with open(dest / "container.log", "w") as f:
            subprocess.run(
                ["docker", "logs", self.container],
                stdout=f,
                stderr=subprocess.STDOUT,
                check=False,
                env=child_env(),
            )
        return dest

    def stop(self, keep_logs: bool = True) -> None:
        """Stop gracefully (serve stops pods, node, control plane), then remove the container and its volumes;
        background image loads not started yet are dropped."""
        for future in self._providing:
            future.cancel()
        if self.running():
            docker("stop", "-t", "60", self.container, check=False, timeout=120)
        if keep_logs and docker("inspect", self.container, check=False).returncode == 0:
            self.collect_logs()
        self.remove()
        if keep_logs:
            self.kubeconfig_path.unlink(missing_ok=True)
            (self.state_dir / "state.json").unlink(
                missing_ok=True
            )  # logs stay; `localcluster list` forgets it
        else:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    # ---------------------------------------------- faults (tests/integration/test_real_node_faults.py)
    def kill_process(self, name: str, signal: str = "KILL") -> None:
        """Signal the node's process ``name`` (kubelet, containerd, kube-apiserver...); serve's supervision loop starts
        a dead one again within a second, as systemd or the kubelet (static pods) does on a node. Waits first for the
        images ``provide_images`` is loading: a killed containerd would cut a load short (``ctr: failed to ingest``),
        a fault of the harness, not of the test."""
        for future in self._providing:
            future.result()
        docker("exec", self.container, "pkill", f"-{signal}", "-x", name)

    def kill_container(self, container_id: str, signal: str = "KILL") -> None:
        """Signal a pod container's first process from the node (a SIGKILL from inside its own PID namespace would be
        ignored): the container exits as if its program had been killed. ``container_id``: a pod status's
        ``containerID`` (``containerd://<id>``)."""
        cid = container_id.split("://")[-1]
        tasks = docker("exec", self.container, "ctr", "-n", "k8s.io", "tasks", "list").stdout.splitlines()
        pids = [line.split()[1] for line in tasks[1:] if line.split()[:1] == [cid]]
        if not pids:
            raise ClusterError(f"no running task for container {cid} on {self.container}")
        docker("exec", self.container, "kill", f"-{signal}", pids[0])

    def container_log_files(self, namespace: str, pod: str, container: str) -> list[list[str]]:
        """What the kubelet wrote for a pod container, file by file, oldest first (rotated ``0.log.<time>[.gz]``,
        then the live ``0.log``): CRI lines ``<time> <stream> <P|F> <text>``. Post-mortem evidence, read on the
        node: the API serves only the newest file."""
        script = (
            f'for f in /var/log/pods/{namespace}_{pod}_*/{container}/0.log*; do echo "== $f"; '
            'case "$f" in *.gz) zcat "$f" ;; *) cat "$f" ;; esac; done'
        )
        files: dict[str, list[str]] = {}
        for line in docker("exec", self.container, "sh", "-c", script).stdout.splitlines():
            if line.startswith("== "):
                name = Path(line[3:]).name
                files[name] = []
            elif files:
                files[name].append(line)
        # 0.log.20261125-044931[.gz]: the rotation time orders them; the live file is the newest
        return [files[n] for n in sorted(files, key=lambda n: (n == "0.log", n.removesuffix(".gz")))]

    @staticmethod
    def names() -> list[str]:
        """Names of the node clusters that have a container on this machine (running or not)."""
        res = docker(
            "ps", "-a", "--filter", f"label={LABEL}", "--format", f'{{{{.Label "{LABEL}"}}}}', check=False
        )
        return sorted(set(res.stdout.split()))

    def remove(self) -> None:
        """Remove the container and its own volumes; a kept image store (``image_store``) stays, unlocked."""
        docker("rm", "-f", "-v", self.container, check=False)
        docker("volume", "rm", "-f", *self._volumes(), check=False)
        if self._store:
            self._store.release()
            self._store = None
