"""End-to-end fixtures: one Kubernetes cluster and one PostgreSQL + Airflow 3 stack (api-server, scheduler,
dag-processor, triggerer; LocalExecutor) shared by every test of this package, started in parallel (the stack only
when a test uses it).

Cluster, by the same switches as tests/integration:
* default: a local cluster (``localcluster``: real control plane + mpi-operator, SIMULATED kwok nodes), stopped
  when the package's tests are done (every local cluster picks its own ports, so scripts/test runs tests/integration
  with a cluster of its own beside this one);
* ``AIRFLOW_MPI_CLUSTER_NAME=name``: reuse a running local cluster (``python -m localcluster up --name name``);
* ``AIRFLOW_MPI_KUBECONFIG=/path``: a real cluster with the mpi-operator (checks of the simulated log lines are
  limited to what a real pi run prints as well).

Service logs and task logs stay under .artifacts/e2e/airflow-home/ (gitignored) for inspection after a run.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # airflowstack/ and localcluster/ are dev-only folders, not installed
    sys.path.insert(0, str(REPO))

from airflowstack import AirflowStack, kube  # noqa: E402

ARTIFACTS = REPO / ".artifacts" / "e2e"
E2E_DAGS = Path(__file__).resolve().parent / "dags"
NAMESPACE = "airflow-e2e"
# the extra links' templates (docs/links-and-logs.md) in kubernetes_default: test_ui.py follows them in the browser
LINK_TEMPLATES = {
    "airflow_mpi_job_url": "https://console.invalid/mpijob/{namespace}/{name}",
    "airflow_mpi_pod_url": "https://console.invalid/pod/{namespace}/{pod}",
}
# one name per test session: a local cluster of the same name would be replaced (engineers share one machine)
LOCAL_CLUSTER_NAME = f"e2e-{os.getpid()}"


def _require_installed() -> None:
    try:
        importlib.metadata.distribution("airflow-mpi")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(
            "airflow-mpi is not installed in this environment: run scripts/bootstrap first", pytrace=False
        )


@pytest.fixture(scope="package")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="package")
def dags_folder(tmp_path_factory) -> Path:
    """The repository's example DAGs plus the e2e-only DAGs, linked into one folder."""
    folder = tmp_path_factory.mktemp("dags")
    for src in sorted((REPO / "dags").glob("*.py")) + sorted(E2E_DAGS.glob("*.py")):
        (folder / src.name).symlink_to(src)
    return folder


class ClusterBoot:
    """The package's cluster coming up in a background thread (the Airflow services start meanwhile);
    ``ready()`` waits for it and makes NAMESPACE, once."""

    def __init__(self, cluster: kube.Cluster):
        self.cluster = cluster
        self._starting = kube.Starting(cluster)
        self._ready = False

    def ready(self) -> kube.Cluster:
        if not self._ready:
            self._starting.wait()
            self.cluster.ensure_namespace(NAMESPACE)
            self._ready = True
        return self.cluster

    def stop(self) -> None:
        self._starting.join()
        self.cluster.stop()


@pytest.fixture(scope="package")
def cluster_boot():
    _require_installed()
    boot = ClusterBoot(
        kube.open_cluster(
            kubeconfig=kube.env_kubeconfig(),
            name=LOCAL_CLUSTER_NAME,
            reuse=os.environ.get("AIRFLOW_MPI_CLUSTER_NAME") or None,
        )
    )
    try:
        yield boot
    finally:
        boot.stop()


@pytest.fixture(scope="package")
def airflow_stack(cluster_boot, dags_folder, artifacts_dir):
    """The Airflow services, started while the cluster boots; their roles granted on it once it is up."""
    cluster = cluster_boot.cluster
    home = artifacts_dir / "airflow-home"
    shutil.rmtree(home, ignore_errors=True)
    # the kubeconfig paths are known before the cluster exists: the services only need them in their connection
    roles = role_kubeconfigs(artifacts_dir) if kube.env_kubeconfig() is None else None
    stack = AirflowStack(
        dags_folder, home=home, kubeconfig=cluster.kubeconfig, namespace=NAMESPACE, service_kubeconfigs=roles
    )
    stack.connection_extras = LINK_TEMPLATES  # read when the services start
    try:
        stack.start()
        cluster_boot.ready()
        if roles:
            grant_roles(cluster, roles)
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="package")
def cluster(request, cluster_boot):
    """The package's cluster, up, with NAMESPACE. A test that uses the Airflow stack as well gets the stack started
    first (it comes up while the cluster boots); one that needs the cluster alone (``airflow dags test`` on Airflow
    2.11, which runs on SQLite) starts no Airflow 3 services: about 40 CPU s and a minute under load."""
    if "airflow_stack" in request.fixturenames:
        request.getfixturevalue("airflow_stack")
    return cluster_boot.ready()


def role_kubeconfigs(artifacts_dir: Path) -> dict[str, Path]:
    """Each service's kubeconfig, as docs/security.md grants the roles of deploy/rbac.yaml: the API server as the
    sweeper (its orphan listener), the triggerer and the scheduler, whose LocalExecutor task processes are its
    children, as the workers' role (a superset of the sweeper's, so the scheduler's own sweeps run with it)."""
    folder = artifacts_dir / "kubeconfigs"
    folder.mkdir(parents=True, exist_ok=True)
    workers, sweeper = folder / "workers", folder / "sweeper"
    return {"api-server": sweeper, "scheduler": workers, "triggerer": workers, "dag-processor": workers}


def grant_roles(cluster, kubeconfigs: dict[str, Path]) -> None:
    """The shipped roles, each bound in NAMESPACE to a service account of its own; their kubeconfigs written where
    the services' connections point."""
    from tests.integration.least_privilege import (
        SWEEPER_ROLE,
        WORKER_ROLE,
        apply_role,
        bound_service_account_kubeconfig,
        shipped_role,
    )

    api = cluster.api_client()
    for role, dest in ((WORKER_ROLE, kubeconfigs["scheduler"]), (SWEEPER_ROLE, kubeconfigs["api-server"])):
        apply_role(api, shipped_role(role))
        bound_service_account_kubeconfig(
            api, str(cluster.kubeconfig), NAMESPACE, role, dest, service_account=f"e2e-{role}"
        )


@pytest.fixture(scope="package")
def client(airflow_stack):
    return airflow_stack.client()


@pytest.fixture(scope="package")
def custom_api(cluster):
    from kubernetes import client as k8s

    return k8s.CustomObjectsApi(cluster.api_client())


def mpijobs(custom_api, label_selector: str | None = None) -> list[dict]:
    kwargs = {"label_selector": label_selector} if label_selector else {}
    return custom_api.list_namespaced_custom_object(
        "kubeflow.org", "v2beta1", NAMESPACE, "mpijobs", **kwargs
    )["items"]
