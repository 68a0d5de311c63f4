"""The users' stack: docker-compose.yaml, started as a user starts it (`docker compose up -d --wait`).

One stack for this package's tests (down before the other suites run), under its own compose project name
(``airflow-mpi-test-<pid>``) and UI port, so it never touches a user's own `airflow-mpi` stack; stacks of dead sessions are removed at the next start. The node
image comes from this machine's cached build of the pinned Go modules (``localcluster.node_container``, the same
Dockerfile's final stage as compose's own build) so the Go toolchain does not run twice; every other image is
built by compose. Teardown is `docker compose down -v`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # airflowstack/ and localcluster/ are dev-only folders, not installed
    sys.path.insert(0, str(REPO))

from airflowstack import AirflowClient, free_port, wait_until  # noqa: E402

PROJECT = f"airflow-mpi-test-{os.getpid()}"
NODE_KUBECONFIG = "/run/airflow-mpi/kubeconfig"  # written by localcluster/serve.py inside the kube service
ARTIFACTS = REPO / ".artifacts" / "compose"


class ComposeStack:
    def __init__(self, docker, port: int) -> None:
        self.docker = docker
        self.base_url = f"http://127.0.0.1:{port}"
        self.username = self.password = "admin"

    def kubectl(self, *args: str) -> str:
        """kubectl inside the kube service (the in-stack cluster is not published to the host)."""
        return self.docker.compose.execute("kube", ["kubectl", f"--kubeconfig={NODE_KUBECONFIG}", *args], tty=False)

    def kube_objects(self, kind: str) -> list[dict]:
        return json.loads(self.kubectl("get", kind, "--all-namespaces", "-o", "json"))["items"]

    def save_logs(self) -> None:
        """Every service's output into .artifacts/compose/compose.log (kept for post-mortems)."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(["docker", "compose", "-p", PROJECT, "logs", "--no-color", "--timestamps"],
                             capture_output=True, text=True)
        if res.stdout:
            (ARTIFACTS / "compose.log").write_text(res.stdout)

    def client(self) -> AirflowClient:
        c = AirflowClient(self.base_url, self.username, self.password)
        c.login()
        return c


def _reap_stale_projects() -> None:
    res = subprocess.run(["docker", "compose", "ls", "-a", "--format", "json"], capture_output=True, text=True)
    for project in json.loads(res.stdout or "[]"):
        m = re.fullmatch(r"airflow-mpi-test-(\d+)", project["Name"])
        if m and int(m.group(1)) != os.getpid():
            try:
                os.kill(int(m.group(1)), 0)
                continue
            except ProcessLookupError:
                subprocess.run(["docker", "compose", "-p", project["Name"], "down", "-v", "--remove-orphans"],
                               capture_output=True)


def _image_ids(docker, names: set[str]) -> dict[str, str]:
    return {name: docker.image.inspect(name).id for name in names if docker.image.exists(name)}


def _remove_replaced(docker, before: dict[str, str], after: dict[str, str]) -> None:
    """Remove exactly the images this build replaced (every provider change rebuilds the Airflow image: 711 MB
    each left dangling otherwise); one still used by a container stays, and no other image is touched."""
    from python_on_whales.exceptions import DockerException

    for name, old in before.items():
        if after.get(name) != old:
            try:
                docker.image.remove(old)
            except DockerException:
                pass  # still in use (a container, another tag): not ours to force


@pytest.fixture(scope="package")
def compose_stack():
    from python_on_whales import DockerClient

    from localcluster.node_container import build_image

    build_image()  # ensures Docker (scripts/docker-setup) and tags airflow-mpi/kube:local
    _reap_stale_projects()
    port = free_port()
    os.environ["AIRFLOW_MPI_UI_PORT"] = str(port)  # compose interpolates it into the api-server's published port
    docker = DockerClient(compose_files=[REPO / "docker-compose.yaml"], compose_project_name=PROJECT)
    services = docker.compose.config().services
    built_by_compose = [s for s in services if s != "kube"]
    images = {services[s].image for s in built_by_compose}
    before = _image_ids(docker, images)
    docker.compose.build(services=built_by_compose)
    _remove_replaced(docker, before, _image_ids(docker, images))
    stack = ComposeStack(docker, port)
    try:
        docker.compose.up(detach=True, wait=True)
        probe = stack.client()
        try:
            probe.wait_for_dags(["mpi_pi"], timeout=180)
        finally:
            probe.close()
        yield stack
    finally:
        stack.save_logs()
        docker.compose.down(volumes=True, remove_orphans=True, timeout=60)
        os.environ.pop("AIRFLOW_MPI_UI_PORT", None)


@pytest.fixture(scope="package")
def client(compose_stack):
    c = compose_stack.client()
    yield c
    c.close()


def wait_for(probe, timeout: float, what: str):
    return wait_until(probe, timeout=timeout, interval=0.5, what=what)
