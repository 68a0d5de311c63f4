"""The users' stack: docker-compose.yaml, started as a user starts it (`docker compose up -d --wait`).

One stack for this package's tests (down before the other suites run), under its own compose project name
(``airflow-mpi-test-<pid>``), UI port and image tag (``AIRFLOW_MPI_TAG=test-<pid>`` for the Airflow, Postgres and
node images), so it never touches a user's own `airflow-mpi` stack nor runs another worktree's images; stacks and
tags of dead sessions are removed at the next start. The node image comes from this machine's cached build of the
pinned Go modules, Kueue, JobSet and Kubeflow Trainer (``localcluster.node_image``, the same Dockerfile's final stage
as compose's own build) so the Go toolchain does not run twice; every other image is built by compose. Teardown is
`docker compose down -v`, then the session's tags are removed.
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
from localcluster.processes import child_env  # noqa: E402
from tests.compose.images import compose_build  # noqa: E402

PROJECT = f"airflow-mpi-test-{os.getpid()}"
TAG = f"test-{os.getpid()}"  # docker-compose.yaml's AIRFLOW_MPI_TAG for this session
DAGS = ["mpi_pi", "mpi_pi_queued", "trainjob_pi"]
LAST = "test_down_v_leaves_nothing_behind"  # takes the stack down: runs after every other test of the package
SWITCHED = "test_kubernetes_executor.py"  # switches the stack to the KubernetesExecutor: after the others, before LAST
NODE_KUBECONFIG = "/run/airflow-mpi/kubeconfig"  # written by localcluster/serve.py inside the kube service
ARTIFACTS = REPO / ".artifacts" / "compose"


class ComposeStack:
    def __init__(self, docker, port: int) -> None:
        self.docker = docker
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.username = self.password = "admin"

    def kubectl(self, *args: str) -> str:
        """kubectl inside the kube service (the in-stack cluster is not published to the host)."""
        return self.docker.compose.execute(
            "kube", ["kubectl", f"--kubeconfig={NODE_KUBECONFIG}", *args], tty=False
        )

    def kube_objects(self, kind: str) -> list[dict]:
        return json.loads(self.kubectl("get", kind, "--all-namespaces", "-o", "json"))["items"]

    def save_logs(self) -> None:
        """Every service's output into .artifacts/compose/compose.log (kept for post-mortems)."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(
            ["docker", "compose", "-p", PROJECT, "logs", "--no-color", "--timestamps"],
            capture_output=True,
            text=True,
            env=child_env(),
        )
        if res.stdout:
            (ARTIFACTS / "compose.log").write_text(res.stdout)

    def client(self) -> AirflowClient:
        c = AirflowClient(self.base_url, self.username, self.password)
        c.login()
        return c


def pytest_collection_modifyitems(items):
    """The package's tests in their order, then ``SWITCHED`` (the stack switched to the KubernetesExecutor), then
    ``LAST``, whatever order the files were given in."""
    here = Path(__file__).resolve().parent
    ours = [i for i, item in enumerate(items) if Path(item.path).resolve().is_relative_to(here)]

    def order(item) -> tuple[bool, bool]:
        return item.name == LAST, Path(item.path).name == SWITCHED

    for i, item in zip(ours, sorted((items[i] for i in ours), key=order)):
        items[i] = item


def _dead(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _reap_stale_projects() -> None:
    """Stacks and image tags of test sessions that are gone."""
    res = subprocess.run(
        ["docker", "compose", "ls", "-a", "--format", "json"], capture_output=True, text=True, env=child_env()
    )
    for project in json.loads(res.stdout or "[]"):
        m = re.fullmatch(r"airflow-mpi-test-(\d+)", project["Name"])
        if m and _dead(int(m.group(1))):
            subprocess.run(
                ["docker", "compose", "-p", project["Name"], "down", "-v", "--remove-orphans"],
                capture_output=True,
                env=child_env(),
            )
    res = subprocess.run(
        ["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "airflow-mpi/*"],
        capture_output=True,
        text=True,
        env=child_env(),
    )
    stale = [
        ref
        for ref in res.stdout.split()
        if (m := re.fullmatch(r"airflow-mpi/[^:]+:test-(\d+)", ref)) and _dead(int(m.group(1)))
    ]
    if stale:
        subprocess.run(["docker", "image", "rm", *stale], capture_output=True, env=child_env())


def _image_ids(docker, names: set[str]) -> dict[str, str]:
    return {name: docker.image.inspect(name).id for name in names if docker.image.exists(name)}


def _remove_replaced(docker, before: dict[str, str], after: dict[str, str]) -> None:
    """Remove exactly the images this build replaced under the shared tags (the MPI images; left dangling
    otherwise); one still used by a container stays, and no other image is touched. The session's own tags
    (Airflow: 711 MB, rebuilt by every provider change) go at teardown."""
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

    from localcluster.node_image import build_image

    # ensures Docker (scripts/docker-setup); this worktree's node image with its add-ons inside, as compose builds it
    kube_image = build_image(compose=True)
    _reap_stale_projects()
    port = free_port()
    os.environ["AIRFLOW_MPI_UI_PORT"] = str(
        port
    )  # compose interpolates it into the api-server's published port
    os.environ["AIRFLOW_MPI_TAG"] = TAG  # ... and this into the names of the images it builds and runs
    docker = DockerClient(compose_files=[REPO / "docker-compose.yaml"], compose_project_name=PROJECT)
    services = docker.compose.config().services
    docker.image.tag(kube_image, services["kube"].image)
    built_by_compose = [s for s in services if s != "kube"]
    images = {services[s].image for s in built_by_compose}
    ours = {services[s].image for s in services if services[s].image.endswith(f":{TAG}")}
    shared = images - ours  # the MPI images: the example DAGs name them
    before = _image_ids(docker, shared)
    stack = ComposeStack(docker, port)
    try:
        compose_build(built_by_compose, PROJECT, "compose images (Airflow, PostgreSQL, MPI)")
        _remove_replaced(docker, before, _image_ids(docker, shared))
        docker.compose.up(detach=True, wait=True)
        probe = stack.client()
        try:
            probe.wait_for_dags(DAGS, timeout=180)
        finally:
            probe.close()
        yield stack
    finally:
        stack.save_logs()
        docker.compose.down(volumes=True, remove_orphans=True, timeout=60)
        subprocess.run(
            ["docker", "image", "rm", *sorted(ours)], capture_output=True, env=child_env()
        )  # untag; unused layers go
        os.environ.pop("AIRFLOW_MPI_UI_PORT", None)
        os.environ.pop("AIRFLOW_MPI_TAG", None)


@pytest.fixture(scope="package")
def client(compose_stack):
    c = compose_stack.client()
    yield c
    c.close()


def wait_for(probe, timeout: float, what: str):
    return wait_until(probe, timeout=timeout, interval=0.5, what=what)
