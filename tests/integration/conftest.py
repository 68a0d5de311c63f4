"""Integration fixtures: a Kubernetes API server with the mpi-operator.

By default a local cluster is started once per session (``localcluster``: real etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and mpi-operator v0.8.2; SIMULATED kwok nodes, no container runs).

Environment:

* ``AIRFLOW_MPI_KUBECONFIG=/path``: use that (real) cluster instead; it must have the mpi-operator (v2beta1) installed.
  Tests marked ``needs_simulation`` (pod behaviour steered through ``localcluster.behaviour`` labels, served log
  lines, API server restarts) are skipped there, as are the real node's tests (``real_node``;
  ``v1_node``: those of its v1 switch).
* ``AIRFLOW_MPI_CLUSTER_NAME=name``: reuse a local cluster started with ``python -m localcluster up --name name``
  (left running at the end), which makes repeated runs start instantly.
* ``AIRFLOW_MPI_CACHE``: where binaries and cluster state live (default ``~/.cache/airflow-mpi``).

``kueue_cluster`` (session scope, started only when a test asks for it) is a third local cluster that runs Kueue too
(localcluster/kueue.py); it is not available against ``AIRFLOW_MPI_KUBECONFIG``. ``trainjob_cluster`` and
``trainjob_real_node`` are the session's ``cluster`` and ``real_node`` running Kubeflow Trainer and JobSet too, added
when a test first asks, with the MPI runtime applied (tests/integration/trainjob_runtime.py).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # localcluster/ is a dev-only folder, not installed
    sys.path.insert(0, str(REPO))

REAL_KUBECONFIG = os.environ.get("AIRFLOW_MPI_KUBECONFIG") or None
REUSE_NAME = os.environ.get("AIRFLOW_MPI_CLUSTER_NAME") or None
# one cluster name per pytest process, so that parallel sessions on one machine never share or kill each other's
# cluster; clusters of dead sessions (killed runs) are reaped at the next start.
SESSION_V2_NAME = f"it-v2beta1-{os.getpid()}"
SESSION_KUEUE_NAME = f"it-kueue-{os.getpid()}"
ARTIFACTS = REPO / ".artifacts" / "integration"
SIMULATION_SKIP_REASON = (
    "needs the local cluster's simulated pods (kwok stages, served log lines, API server restarts); "
    "AIRFLOW_MPI_KUBECONFIG points to a real cluster"
)


class RealCluster:
    """The subset of LocalCluster's API that makes sense on a real cluster."""

    simulated = False

    def __init__(self, kubeconfig: str, api_version: str = "v2beta1") -> None:
        self.kubeconfig_path = Path(kubeconfig)
        self.api_version = api_version
        self.name = "real"
        self._api_client = None

    def api_client(self):
        if self._api_client is None:
            from kubernetes import config as kconfig

            self._api_client = kconfig.new_client_from_config(config_file=str(self.kubeconfig_path))
        return self._api_client

    def set_launcher_logs(self, *args, **kwargs):
        pytest.skip(SIMULATION_SKIP_REASON)

    append_launcher_logs = clear_launcher_logs = restart_apiserver = set_launcher_logs


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).resolve().parent
    skip_sim = pytest.mark.skip(reason=SIMULATION_SKIP_REASON)
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)
            if "real_node" in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.real_node)
            if REAL_KUBECONFIG and item.get_closest_marker("needs_simulation"):
                item.add_marker(skip_sim)
    # the real node's tests in REAL_NODE_ORDER (a stable sort: each module's own order stays), in their places
    real = [i for i, item in enumerate(items) if item.get_closest_marker("real_node")]
    for i, item in zip(real, sorted((items[i] for i in real), key=_real_node_rank)):
        items[i] = item


def _alive(pid: int) -> bool:
    """A test session's process still runs (ours counts as alive)."""
    from localcluster.processes import pid_alive

    return pid_alive(pid)


def _reap_stale_sessions() -> None:
    from localcluster.cluster import LocalCluster, list_clusters

    for name in list_clusters():
        m = re.fullmatch(r"it-(?:v2beta1|v1|kueue|trainjob|expiry)-(\d+)", name)
        if m and not _alive(int(m.group(1))):
            LocalCluster(name, verbose=False).stop(keep_logs=False)


def _local(name: str, api_version: str, kueue: bool = False, *, artifacts: str | None = None, **kwargs):
    """Start (or reuse) a local cluster (``kwargs``: more of ``LocalCluster``'s, e.g. ``controllers``); yields it;
    stops it at the end unless reused.

    Component logs end up in .artifacts/integration/<v2beta1|v1|kueue|artifacts>/ (and in the cluster's state
    dir)."""
    from localcluster.cluster import LocalCluster

    _reap_stale_sessions()

    if REUSE_NAME and api_version == "v2beta1" and not kueue and not kwargs:
        c = LocalCluster.existing(REUSE_NAME)
        if not c.is_running():
            pytest.fail(
                f"AIRFLOW_MPI_CLUSTER_NAME={REUSE_NAME}: that local cluster is not running", pytrace=False
            )
        c.simulated = True
        yield c
        return
    c = LocalCluster(name, api_version, kueue=kueue, **kwargs)
    c.simulated = True
    try:
        c.start()
        yield c
    finally:
        c.stop()
        dest = ARTIFACTS / (artifacts or ("kueue" if kueue else api_version))
        shutil.rmtree(dest, ignore_errors=True)
        if c.logs_dir.is_dir():
            shutil.copytree(c.logs_dir, dest)


@pytest.fixture(scope="session")
def cluster():
    """v2beta1 cluster: ``.kubeconfig_path``, ``.api_client()``, ``.simulated``; on a local cluster also
    ``.set_launcher_logs()``, ``.append_launcher_logs()``, ``.restart_apiserver()`` (see localcluster.cluster)."""
    if REAL_KUBECONFIG:
        yield RealCluster(REAL_KUBECONFIG)
        return
    yield from _local(SESSION_V2_NAME, "v2beta1")


@pytest.fixture(scope="session")
def trainjob_cluster(cluster):
    """The session's simulated cluster (``cluster``) running JobSet and Kubeflow Trainer too, beside the
    mpi-operator (other CRDs), added on first use (``LocalCluster.add_controllers``: the sessions that run no
    TrainJob test never start them), with the MPI runtime ``openmpi-mpiuser`` applied. Its tests take the
    ``namespace`` fixture's namespaces."""
    from tests.integration.trainjob_runtime import TRAINER_CONTROLLERS, apply_runtime

    if not getattr(cluster, "simulated", False):
        pytest.skip(
            "needs the local cluster's Trainer and JobSet; AIRFLOW_MPI_KUBECONFIG points to another cluster"
        )
    cluster.add_controllers(TRAINER_CONTROLLERS)
    apply_runtime(cluster.api_client())
    return cluster


@pytest.fixture(scope="session")
def kueue_cluster():
    """v2beta1 local cluster with Kueue: ResourceFlavor ``default-flavor``, ClusterQueue ``cluster-queue`` (cpu 2,
    memory 2Gi, preemption within the queue by priority), WorkloadPriorityClasses ``low`` and ``high``.
    One per session (each test gets its own namespace and LocalQueue: ``kueue_namespace``)."""
    if REAL_KUBECONFIG:
        pytest.skip(
            "needs the local cluster's Kueue and its queues; AIRFLOW_MPI_KUBECONFIG points to another cluster"
        )
    yield from _local(SESSION_KUEUE_NAME, "v2beta1", kueue=True)


@pytest.fixture
def kueue_namespace(kueue_cluster, request):
    """A fresh namespace with the LocalQueue ``user-queue``. At teardown its MPIJobs are deleted and their Workloads
    awaited gone, so that the next test finds the ClusterQueue's quota free."""
    from kubernetes import client

    from localcluster import kueue as lk
    from localcluster.waiting import wait_until

    api = kueue_cluster.api_client()
    name, core = _make_namespace(api, request)
    kueue_cluster.controller("kueue").create_local_queue(name)
    yield name
    co = client.CustomObjectsApi(api)
    try:
        co.delete_collection_namespaced_custom_object("kubeflow.org", "v2beta1", name, "mpijobs")
        wait_until(
            lambda: not co.list_namespaced_custom_object(lk.GROUP, lk.VERSION, name, "workloads")["items"],
            60,
            f"the Workloads of {name} to be gone",
            interval=0.5,
        )
    finally:
        core.delete_namespace(name)


@pytest.fixture(scope="session")
def kubeconfig(cluster) -> str:
    return str(cluster.kubeconfig_path)


@pytest.fixture(scope="session")
def k8s(cluster):
    """kubernetes.client.ApiClient of the v2beta1 cluster."""
    return cluster.api_client()


def _make_namespace(api_client, request):
    from kubernetes import client

    slug = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"it-{slug}-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name, "labels": {"airflow-mpi.io/test": "integration"}}})
    return name, core


@pytest.fixture
def namespace(cluster, request):
    """A fresh namespace per test (deleted at teardown, with its served log lines)."""
    name, core = _make_namespace(cluster.api_client(), request)
    yield name
    if getattr(cluster, "simulated", False):
        cluster.clear_launcher_logs(name)
    try:
        _delete_mpijobs(core.api_client, name)
        core.delete_namespace(name)
    except Exception:  # noqa: BLE001 - cluster may be gone when the session ends badly
        pass


def _delete_mpijobs(api_client, namespace: str) -> None:
    """Every MPIJob of a test's namespace, deleted before the namespace: left to the namespace's deletion, each job
    is synced by the MPI controller into errors (a terminating namespace refuses its Services) and retried with
    backoff, queued ahead of the next tests' jobs (a hundred jobs delayed the next test's first sync by 45 s)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = client.CustomObjectsApi(api_client)
    for version in ("v2beta1", "v1"):  # the cluster serves one of them (one CRD name)
        try:
            custom.delete_collection_namespaced_custom_object("kubeflow.org", version, namespace, "mpijobs")
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture(scope="session")
def provider_role(k8s) -> str:
    """The shipped ClusterRole (deploy/rbac.yaml), applied once."""
    from tests.integration.least_privilege import apply_role

    return apply_role(k8s)


@pytest.fixture
def least_privilege_kubeconfig(k8s, kubeconfig, namespace, provider_role, tmp_path) -> str:
    """Kubeconfig of a service account of the test's namespace bound only to the shipped role."""
    from tests.integration.least_privilege import bound_service_account_kubeconfig

    return str(
        bound_service_account_kubeconfig(
            k8s, kubeconfig, namespace, provider_role, tmp_path / "sa-kubeconfig"
        )
    )


@pytest.fixture
def kubernetes_default_conn(monkeypatch, least_privilege_kubeconfig, namespace) -> str:
    """Airflow connection ``kubernetes_default`` (env): the test's namespace, as the least-privilege service account."""
    from tests.integration.least_privilege import use_as_kubernetes_default

    return use_as_kubernetes_default(monkeypatch, least_privilege_kubeconfig, namespace)


# ------------------------------------------------------------------ the real node (containers run for real)
SESSION_REAL_NAME = f"it-real-{os.getpid()}"


# The real node's tests, first to last: those that run only images/mpi's Open MPI image (loaded before the first
# test) come first, so that the other images (BACKGROUND_IMAGES) load in the background meanwhile
# (NodeCluster.provide_images), in the order of the modules that need them. The fault suite kills containerd, which
# would cut a load short: it comes after them (and NodeCluster.kill_process waits for the loads anyway). Horovod's
# 2.9 GB image is loaded by its own module, last. A module not named here runs in the middle.
REAL_NODE_ORDER = (
    "test_real_failure_causes",
    "test_real_mpi",
    "test_task_mpi",
    "test_first_run",
    "test_kueue_real_node",
    "test_real_horovod",
    # after Horovod: its node-process kills wait for the background image loads (a killed containerd cuts one short)
    "test_real_node_faults",
    # Kubeflow Trainer's: their fixture starts JobSet and Trainer on the node (trainjob_real_node), which the v1
    # switch stops again
    "test_trainjob_cluster",
    "test_trainjob_operator",
    # last: their fixture switches the session's node to kubeflow.org/v1 (v1_real_node)
    "test_v1_real_node",
    "test_v1_operator",
)
# loaded into the real node one after the other while the tests run, in the order they first need them: the Horovod
# image's import (165 s on a quiet machine, 330-390 s in a loaded run) then overlaps the modules before Horovod's
BACKGROUND_IMAGES = ("mpich", "intel", "openmpi-upstream", "mpich-upstream", "intel-upstream", "horovod")


def _real_node_rank(item) -> int:
    name = Path(str(item.fspath)).stem
    return REAL_NODE_ORDER.index(name) if name in REAL_NODE_ORDER else REAL_NODE_ORDER.index("test_first_run")


@pytest.fixture(scope="session")
def real_node():
    """A cluster whose node runs real containers (localcluster.node_container: control plane, mpi-operator,
    containerd + kubelet + CoreDNS in one privileged Docker container). images/mpi's Open MPI image is loaded
    before the first test; its other images load in the background meanwhile (``BACKGROUND_IMAGES``), and a test
    waits for the one it runs (``localcluster.node_container.await_image``). Its
    kubelet rotates a container's log past 64 KiB (checked every 3 s), so chatty launchers' streams cross rotations
    (test_real_node_faults.py). The training-operator's build is mounted into it for ``v1_real_node``, which
    switches it to kubeflow.org/v1 last, and JobSet's and Trainer's for ``trainjob_real_node``, which starts them
    before. Its containerd keeps the images for the next session's node (``image_store``: a run imports only
    the images that changed). Logs end up in .artifacts/integration/real-node/."""
    if REAL_KUBECONFIG:
        pytest.skip("AIRFLOW_MPI_KUBECONFIG is set: the real-node tests run against the local node container")
    from localcluster.controllers import addons
    from localcluster.mpi_images import build_mpi_images
    from localcluster.node_container import NodeCluster
    from tests.integration.trainjob_runtime import TRAINER_CONTROLLERS

    node = NodeCluster(
        SESSION_REAL_NAME,
        container_log_max_size="64Ki",
        addons=("training-operator", *addons(TRAINER_CONTROLLERS)),
        image_store="real-node",
    )
    yield from _node_session(
        node, build_mpi_images(["openmpi"]), ARTIFACTS / "real-node", later=BACKGROUND_IMAGES
    )


def _node_session(node, images, dest: Path, later: tuple[str, ...] = ()):
    """Start ``node`` (after reaping the nodes of killed sessions), load ``images``, give it the images/mpi targets
    ``later`` in the background, yield it; collect its logs into ``dest`` and remove it at the end."""
    _reap_stale_nodes()
    try:
        node.start()
        node.load_images(images)
        node.provide_images(later)
        yield node
    finally:
        shutil.rmtree(dest, ignore_errors=True)
        node.collect_logs(dest)
        node.stop(keep_logs=False)


def _reap_stale_nodes() -> None:
    from localcluster.node_container import NodeCluster

    for name in NodeCluster.names():  # node containers of test sessions that were killed
        m = re.fullmatch(r"it-real(?:kueue|trainjob)?-(\d+)", name)
        if m and not _alive(int(m.group(1))):
            NodeCluster(name).remove()


@pytest.fixture(scope="module")
def kueue_real_node():
    """A real-node cluster (as ``real_node``) that runs Kueue and its queues too, with the mpi-operator's own kind of
    Open MPI image (``openmpi-upstream``) loaded. One per test module; logs in
    .artifacts/integration/real-node-kueue/."""
    if REAL_KUBECONFIG:
        pytest.skip("AIRFLOW_MPI_KUBECONFIG is set: the real-node tests run against the local node container")
    from localcluster.mpi_images import build_mpi_images
    from localcluster.node_container import NodeCluster

    images = build_mpi_images(["openmpi-upstream"])
    node = NodeCluster(f"it-realkueue-{os.getpid()}", kueue=True, image_store="real-node-kueue")
    yield from _node_session(node, images, ARTIFACTS / "real-node-kueue")


@pytest.fixture(scope="session")
def trainjob_real_node(real_node):
    """The session's real node (``real_node``) running JobSet and Kubeflow Trainer too from now on (their builds are
    mounted from its start; ``NodeCluster.add_controllers``), with the MPI runtime ``openmpi-mpiuser`` applied: no
    second node boots and imports the images. The v1 switch (``v1_real_node``) stops them, so its modules come
    after the TrainJob ones (REAL_NODE_ORDER). Its tests take ``real_namespace`` and ``real_conn``."""
    from tests.integration.trainjob_runtime import TRAINER_CONTROLLERS, apply_runtime

    real_node.add_controllers(TRAINER_CONTROLLERS)
    apply_runtime(_client_of(real_node))
    return real_node


@pytest.fixture(scope="session")
def v1_real_node(real_node):
    """The session's real node (``real_node``), switched to ``kubeflow.org/v1`` MPIJobs for the rest of the
    session: its controller is then the real training-operator v1.9.4 (localcluster/controllers/training_operator.py)
    and the kubectl-delivery image its launchers start with (images/kubectl-delivery) is loaded. The node keeps
    its images (no second node imports them again), so the v1 modules run last (REAL_NODE_ORDER) and the
    v2beta1 tests refuse the node afterwards (``_real_node_still_v2beta1``)."""
    from localcluster.delivery_image import build_kubectl_delivery_image

    real_node.load_images([build_kubectl_delivery_image()])
    real_node.switch_api("v1", controllers=("training-operator",))
    return real_node


def _client_of(node):
    from kubernetes import config as kconfig

    return kconfig.new_client_from_config(config_file=str(node.kubeconfig_path))


def _namespace_in(api_client, request):
    """A fresh namespace for the test, deleted at teardown (a generator for a fixture to yield from)."""
    name, core = _make_namespace(api_client, request)
    yield name
    try:
        core.delete_namespace(name)
    except Exception:  # noqa: BLE001
        pass


def _default_conn(monkeypatch, node, namespace: str) -> str:
    from tests.integration.least_privilege import use_as_kubernetes_default

    return use_as_kubernetes_default(monkeypatch, node.kubeconfig_path, namespace)


@pytest.fixture(scope="session")
def real_k8s(real_node):
    return _client_of(real_node)


@pytest.fixture(autouse=True)
def _real_node_still_v2beta1(request):
    """A v2beta1 real-node test after the node was switched to v1 (an order REAL_NODE_ORDER rules out) fails
    here, naming why, instead of meeting the training-operator."""
    if "real_node" in request.fixturenames and "v1_real_node" not in request.fixturenames:
        node = request.getfixturevalue("real_node")
        assert node.api_version == "v2beta1", (
            f"the session's real node already serves kubeflow.org/{node.api_version}"
        )


@pytest.fixture
def real_namespace(real_k8s, request):
    yield from _namespace_in(real_k8s, request)


@pytest.fixture
def real_conn(monkeypatch, real_node, real_namespace) -> str:
    """``kubernetes_default`` pointing at the real node's cluster and the test's namespace."""
    return _default_conn(monkeypatch, real_node, real_namespace)


@pytest.fixture(scope="session")
def v1_k8s(v1_real_node):
    return _client_of(v1_real_node)


@pytest.fixture
def v1_namespace(v1_k8s, request):
    yield from _namespace_in(v1_k8s, request)


@pytest.fixture
def v1_conn(monkeypatch, v1_real_node, v1_namespace) -> str:
    """``kubernetes_default`` pointing at the v1 node's cluster and the test's namespace."""
    return _default_conn(monkeypatch, v1_real_node, v1_namespace)
