"""The provider on ``kubeflow.org/v1`` with the real training-operator v1.9.4 and real ranks (issue 34).

What Flyte's MPI plugin users bring: a ``kubeflow.org/v1`` MPIJob whose launcher runs ``mpirun`` through the
controller's ``kubexec.sh`` (kubectl delivered by its init container, no SSH). Each case runs the operator as Airflow
runs it (execute / defer / trigger / execute_complete / on_kill), on the node of ``v1_real_node``.
"""

from __future__ import annotations

import math
import os
import uuid

import pytest
from kubernetes import client

from airflow_mpi.jobspec.naming import DEPLOYMENT_LABEL
from airflow_mpi.operators import MPIJobOperator
from airflow_mpi.sensors import MPIJobSensor
from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.version_compat import AirflowException, AirflowFailException, TaskDeferred
from localcluster.mpi_images import MPI_IMAGES
from localcluster.node_container import await_image
from tests.integration.test_cluster_smoke import watch_mpijob
from tests.integration.test_operator import Background, ctx, record, run_trigger, true_conditions, wait_gone  # noqa: F401
from tests.integration.test_real_mpi import IMPLEMENTATION, PI_LINE, RANK_LINE, pod_log
from tests.integration.test_task_mpi import UPSTREAM, decorated, ranks_report, run

pytestmark = pytest.mark.v1_node

V1 = "kubeflow.org/v1"
IMAGE = MPI_IMAGES["openmpi"]
PI = "/home/mpiuser/pi"
# Flyte's MPI command (flytekitplugins-kfmpi): its backend puts this in the v1 launcher
FLYTE_MPIRUN = [
    "mpirun", "--allow-run-as-root", "-bind-to", "none", "-map-by", "slot", "-x", "LD_LIBRARY_PATH", "-x", "PATH",
    "-x", "NCCL_DEBUG=INFO", "-mca", "pml", "ob1", "-mca", "btl", "^openib",
]  # fmt: skip


def flyte_manifest(workers: int = 2, slots: int = 1) -> dict:
    """A ``kubeflow.org/v1`` MPIJob as Flyte's backend writes one: slotsPerWorker, runPolicy, Launcher/Worker with
    image and command, the workers without one (the controller runs ``sleep`` there)."""
    container = {"name": "mpi", "image": IMAGE}
    return {
        "apiVersion": V1,
        "kind": "MPIJob",
        "spec": {
            "slotsPerWorker": slots,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {**container, "command": [*FLYTE_MPIRUN, "-np", str(workers * slots), PI]}
                            ]
                        }
                    },
                },
                "Worker": {"replicas": workers, "template": {"spec": {"containers": [dict(container)]}}},
            },
        },
    }


def launcher_pod(k8s, namespace: str, name: str):
    return client.CoreV1Api(k8s).read_namespaced_pod(f"{name}-launcher", namespace)


def assert_real_ranks(k8s, namespace: str, name: str, lines: list[str], workers: int, slots: int) -> None:
    """Every rank ran, ``slots`` of them on each worker pod of this job, pi came out right, and the task log holds
    the launcher's log as the kubelet serves it, every line exactly once."""
    hosts = {int(m[1]): m[3].split(".")[0] for m in map(RANK_LINE.match, lines) if m}
    assert sorted(hosts) == list(range(workers * slots))
    assert sorted(hosts.values()) == sorted(
        f"{name}-worker-{i}" for i in range(workers) for _ in range(slots)
    )
    (pi,) = [m for m in map(PI_LINE.match, lines) if m]
    assert int(pi[2]) == workers * slots and math.isclose(float(pi[1]), math.pi, abs_tol=0.01)
    served = pod_log(k8s, namespace, f"{name}-launcher")
    assert [ln for ln in lines if ln in set(served)] == served


def test_a_flyte_shaped_v1_job_as_base_manifest_runs_real_ranks(v1_k8s, v1_namespace, v1_conn, record):
    op = MPIJobOperator(
        task_id="flyte_base", namespace=v1_namespace, api_version=V1, base_manifest=flyte_manifest(),
        on_finish_action="keep", poll_interval=2,
    )  # fmt: skip
    xcom = op.execute(ctx(op.task_id))
    assert xcom["condition"] == "Succeeded" and xcom["launcher_attempts"] == 1
    assert_real_ranks(v1_k8s, v1_namespace, xcom["name"], record.lines, workers=2, slots=1)
    pod = launcher_pod(v1_k8s, v1_namespace, xcom["name"])
    labels = pod.metadata.labels
    assert labels["training.kubeflow.org/job-role"] == "master"
    assert labels["training.kubeflow.org/replica-type"] == "launcher"
    assert [c.name for c in pod.spec.init_containers] == ["kubectl-delivery"]  # the controller's, not SSH


@pytest.mark.parametrize("flavour", ["intel", "mpich"])
def test_hydra_implementations_run_through_the_controllers_kubexec(
    v1_k8s, v1_namespace, v1_conn, record, flavour
):
    """Intel MPI and MPICH from ``program``: the controller writes an Open MPI hostfile and wires only Open MPI and
    Intel MPI to its kubexec.sh; the kind's launcher command rewrites the hostfile and gives Hydra's proxies the
    launcher's address (jobspec/kinds/mpijob_v1.py)."""
    image = MPI_IMAGES[flavour]
    await_image(image)  # built and loaded in the background of the session (tests/integration/conftest.py)
    op = MPIJobOperator(
        task_id=flavour, namespace=v1_namespace, api_version=V1, image=image, program=[PI], workers=2,
        slots_per_worker=2, mpi_implementation=IMPLEMENTATION[flavour], on_finish_action="keep", poll_interval=2,
    )  # fmt: skip
    xcom = op.execute(ctx(op.task_id))
    assert xcom["condition"] == "Succeeded"
    assert_real_ranks(v1_k8s, v1_namespace, xcom["name"], record.lines, workers=2, slots=2)


def test_flyte_shaped_parameters_run_deferred(v1_k8s, v1_namespace, v1_conn, record):
    op = MPIJobOperator(
        task_id="flyte_params", namespace=v1_namespace, api_version=V1, image=IMAGE, program=[PI], workers=2,
        slots_per_worker=2, deferrable=True, on_finish_action="keep", poll_interval=2,
    )  # fmt: skip
    xcom = run(op, deferrable=True)  # execute, the trigger rebuilt as the triggerer does, the resume
    assert xcom["condition"] == "Succeeded"
    assert_real_ranks(v1_k8s, v1_namespace, xcom["name"], record.lines, workers=2, slots=2)


def test_retries_are_fresh_jobs_of_one_attempt_each(v1_k8s, v1_namespace, v1_conn, record):
    """retries=2 and a program that fails: three tries, each its own job whose launcher runs once (the controller
    cannot run one launcher exactly three times), each attempt's line once; every try's failure stays retryable
    (Airflow, not the job, counts the tries)."""
    program = ["sh", "-c", "echo attempt on $(hostname); exit 3"]
    uids = []
    for try_number in (1, 2, 3):
        op = MPIJobOperator(
            task_id="fails", namespace=v1_namespace, api_version=V1, image=IMAGE, program=program, workers=1,
            retries=2, poll_interval=2,
        )  # fmt: skip
        with pytest.raises(AirflowException) as failure:
            op.execute(ctx("fails", try_number))
        assert type(failure.value) is not AirflowFailException  # Airflow retries it
        assert "launcher exit codes: 3" in str(failure.value).splitlines()[0]
        name = op.build_manifest(ctx("fails", try_number))["metadata"]["name"]
        job = client.CustomObjectsApi(v1_k8s).get_namespaced_custom_object(
            "kubeflow.org", "v1", v1_namespace, "mpijobs", name
        )
        assert "Failed" in true_conditions(job)
        uids.append(job["metadata"]["uid"])
        pod = launcher_pod(v1_k8s, v1_namespace, name)
        assert pod.spec.restart_policy == "Never" and pod.status.container_statuses[0].restart_count == 0
    assert len(set(uids)) == 3  # a fresh job per try (the earlier try's failed job replaced)
    assert sum(ln.startswith("attempt on ") for ln in record.lines) == 3  # one line per attempt, none doubled
    headers = [ln.split(",")[0] for ln in record.lines if ln.startswith("========== launcher attempt")]
    assert headers == ["========== launcher attempt 1 of 1"] * 3


def test_an_invalid_v1_job_fails_the_wait_with_the_controllers_reason(v1_k8s, v1_namespace, v1_conn, record):
    """The controller's own validation (a hand-written job with two launchers; the operator refuses that before
    submitting): its Warning event MPIJobFailedValidation ends a deferred sensor's wait with its message."""
    name = f"invalid-{uuid.uuid4().hex[:6]}"
    body = flyte_manifest()
    body["metadata"] = {"name": name}
    body["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2
    client.CustomObjectsApi(v1_k8s).create_namespaced_custom_object(
        "kubeflow.org", "v1", v1_namespace, "mpijobs", body
    )
    sensor = MPIJobSensor(
        task_id="sense", job_name=name, namespace=v1_namespace, api_version=V1, poke_interval=1, timeout=300,
        deferrable=True,
    )  # fmt: skip
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(ctx("sense"))
    event = run_trigger(MPIJobTrigger(**deferred.value.trigger.serialize()[1]))
    with pytest.raises(AirflowFailException) as failure:
        sensor.execute_complete(ctx("sense"), event)
    assert str(failure.value) == (
        f"MPIJob {v1_namespace}/{name} invalid: MPIJob failed validation because MPIReplicaSpec is not valid: "
        "There must be only 1 launcher replica"
    )  # the controller's own message, from its Warning event MPIJobFailedValidation


def test_killing_the_task_deletes_the_v1_job_and_stops_its_containers(v1_k8s, v1_namespace, v1_conn, record):
    op = MPIJobOperator(
        task_id="killed", namespace=v1_namespace, api_version=V1, image=IMAGE, program=["sleep", "600"],
        workers=2, poll_interval=2,
    )  # fmt: skip
    worker = Background(op.execute, ctx("killed"))
    name = op.build_manifest(ctx("killed"))["metadata"]["name"]
    watch_mpijob(v1_k8s, v1_namespace, name, lambda o: "Running" in true_conditions(o), version="v1")
    op.on_kill()
    wait_gone(
        v1_k8s, v1_namespace, name, version="v1"
    )  # pods are gone once the kubelet stopped their containers
    assert isinstance(worker.result(120), AirflowException)


def test_task_mpi_runs_the_function_on_every_v1_rank(v1_namespace, v1_conn, record):
    """``@task.mpi`` on v1: the call Secret is mounted in the workers' main container, which ``kubexec.sh`` runs
    each rank in (``kubectl exec``); rank 0's value is the XCom."""
    op = decorated(ranks_report, v1_namespace, "openmpi", UPSTREAM, api_version=V1, call_kwargs={"scale": 2})
    value = run(op, deferrable=False)
    n = 4  # test_task_mpi's WORKERS x SLOTS
    assert value == {"rank": 0, "size": n, "sum_of_ranks": n * (n - 1) // 2, "label": "from upstream",
                     "scaled": [6, 8, 10]}  # fmt: skip
    assert sum(" got from upstream" in ln for ln in record.lines) == n


def test_the_orphan_sweep_deletes_a_failed_tasks_v1_job(v1_k8s, v1_namespace, v1_conn, monkeypatch, record):
    """A task that failed while its v1 job ran (its worker gone): the scheduler's sweep, reading the place the task
    recorded (with its api_version), deletes that job."""
    from airflow_mpi.jobspec.orphans import TaskKey, TryState
    from airflow_mpi.plugins.orphan_listener import sweep_places

    op = MPIJobOperator(
        task_id="orphaned", namespace=v1_namespace, api_version=V1, image=IMAGE, program=["sleep", "600"],
        workers=1, deferrable=True, clean_pod_policy="All",
    )  # fmt: skip
    with pytest.raises(TaskDeferred) as deferred:  # submitted; the worker then died
        op.execute(ctx("orphaned"))
    name = deferred.value.trigger.serialize()[1]["name"]
    job = client.CustomObjectsApi(v1_k8s).get_namespaced_custom_object(
        "kubeflow.org", "v1", v1_namespace, "mpijobs", name
    )
    assert (
        job["spec"]["cleanPodPolicy"] == "All"
    )  # v1 keeps it at the top of the spec (deprecated there in v1.9)
    watch_mpijob(v1_k8s, v1_namespace, name, lambda o: "Running" in true_conditions(o), version="v1")
    ti = ctx("orphaned")["ti"]
    key = TaskKey(ti.dag_id, ti.task_id, ti.run_id, ti.map_index)
    place = {"name": name, "namespace": v1_namespace, "kubernetes_conn_id": v1_conn, "api_version": V1}
    failed = {key: TryState("failed", 1, None)}
    installation = os.environ[
        "AIRFLOW__AIRFLOW_MPI__INSTALLATION"
    ]  # the one holding this deployment (tests/conftest.py)
    deployment = op.build_manifest(ctx("orphaned"))["metadata"]["labels"][DEPLOYMENT_LABEL]
    assert sweep_places([(key, place)], deployment, lambda keys: failed, installation=installation) == [name]
    wait_gone(v1_k8s, v1_namespace, name, version="v1")
