"""Real MPI on a real node: launcher and workers are containers, ranks are processes, exit codes are theirs.

Nothing here is scripted: the mpi-operator wires launcher and workers (SSH keys, hostfile, headless Service),
CoreDNS resolves ``<job>-worker-<i>.<job>.<ns>.svc``, mpirun starts ``workers x slots`` ranks of images/mpi's
pi program over SSH, and the kubelet serves the launcher's log. The operator runs as Airflow runs it
(execute / defer / trigger / execute_complete / on_kill).
"""

from __future__ import annotations

import math
import re

import pytest
from kubernetes import client

from airflow_mpi.operators import MPIJobOperator
from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.version_compat import AirflowException, AirflowFailException, TaskDeferred
from localcluster.mpi_images import MPI_IMAGES
from localcluster.node_container import await_image
from tests.integration.test_cluster_smoke import watch_mpijob
from tests.integration.test_operator import Background, ctx, record, run_trigger, true_conditions, wait_gone  # noqa: F401

RANK_LINE = re.compile(r"^rank (\d+) of (\d+) on (\S+)$")
PI_LINE = re.compile(r"^pi is approximately (\d+\.\d+) \((\d+) ranks")
IMPLEMENTATION = {"openmpi": "OpenMPI", "mpich": "MPICH", "intel": "Intel"}


def real_job(flavour: str = "openmpi") -> dict:
    """images/mpi's images follow the mpi-operator's conventions (mpiuser runs mpirun, the workers its sshd on 2222):
    the operator's defaults are all they need (the launcher is created once every worker's sshd listens). Waits for
    the image if the real node is still loading it."""
    await_image(MPI_IMAGES[flavour])
    return {"image": MPI_IMAGES[flavour], "mpi_implementation": IMPLEMENTATION[flavour], "poll_interval": 2}


def real_operator(task_id: str, namespace: str, flavour: str = "openmpi", **kwargs) -> MPIJobOperator:
    """An MPIJobOperator running images/mpi's pi program (real_job's conventions)."""
    kwargs.setdefault("program", ["/home/mpiuser/pi"])
    kwargs.setdefault("workers", 2)
    return MPIJobOperator(task_id=task_id, namespace=namespace, **{**real_job(flavour), **kwargs})


def launcher_pods(k8s, namespace: str) -> list:
    pods = (
        client.CoreV1Api(k8s)
        .list_namespaced_pod(namespace, label_selector="training.kubeflow.org/job-role=launcher")
        .items
    )
    return sorted(pods, key=lambda p: p.metadata.creation_timestamp)


def pod_log(k8s, namespace: str, pod: str) -> list[str]:
    """The container's log as the kubelet serves it (raw: kubernetes-client 36 returns a bytes repr otherwise)."""
    resp = client.CoreV1Api(k8s).read_namespaced_pod_log(pod, namespace, _preload_content=False)
    return resp.data.decode().splitlines()


@pytest.mark.parametrize(
    ("flavour", "deferrable"),
    [("openmpi", False), ("mpich", True), ("intel", True)],
)
def test_pi_runs_on_real_ranks_and_streams_the_launcher_log_once(
    real_k8s, real_namespace, real_conn, record, flavour, deferrable
):
    workers, slots = 2, 2
    op = real_operator(
        f"pi_{flavour}",
        real_namespace,
        flavour,
        workers=workers,
        slots_per_worker=slots,
        deferrable=deferrable,
        on_finish_action="keep",
    )
    if deferrable:
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(ctx(op.task_id))
        event = run_trigger(
            MPIJobTrigger(**deferred.value.trigger.serialize()[1])
        )  # as the triggerer rebuilds it
        xcom = op.execute_complete(ctx(op.task_id), event)
    else:
        xcom = op.execute(ctx(op.task_id))
    assert xcom["condition"] == "Succeeded" and xcom["launcher_attempts"] == 1

    # every rank ran, each on a worker pod of this job, `slots` ranks per worker
    ranks = {int(m[1]): m[3] for m in map(RANK_LINE.match, record.lines) if m}
    assert sorted(ranks) == list(range(workers * slots))
    hosts = sorted(h.split(".")[0] for h in ranks.values())
    assert hosts == sorted(f"{xcom['name']}-worker-{i}" for i in range(workers) for _ in range(slots))
    (pi,) = [m for m in map(PI_LINE.match, record.lines) if m]
    assert int(pi[2]) == workers * slots and math.isclose(float(pi[1]), math.pi, abs_tol=0.01)

    # the task log holds the launcher's real log, every line exactly once
    (launcher,) = launcher_pods(real_k8s, real_namespace)
    real_lines = pod_log(real_k8s, real_namespace, launcher.metadata.name)
    assert [ln for ln in record.lines if ln in set(real_lines)] == real_lines


def test_failing_program_fails_the_task_with_its_exit_code_after_backoff_limit_attempts(
    real_k8s, real_namespace, real_conn, record
):
    program = ["sh", "-c", "echo attempt on $(hostname); exit 3"]
    op = real_operator(
        "fails", real_namespace, program=program, workers=1, retries=1, on_finish_action="keep"
    )
    with pytest.raises(AirflowFailException, match="BackoffLimitExceeded") as failure:
        op.execute(ctx("fails"))
    pods = launcher_pods(real_k8s, real_namespace)
    assert len(pods) == 2  # retries=1 -> runPolicy.backoffLimit=1: two attempts, two real pods
    for pod in pods:
        (state,) = pod.status.container_statuses
        assert state.state.terminated.exit_code == 3 and pod.spec.restart_policy == "Never"
    headers = [ln for ln in record.lines if ln.startswith("========== launcher attempt")]
    assert [h.split(",")[0] for h in headers] == [
        "========== launcher attempt 1 of 2",
        "========== launcher attempt 2 of 2",
    ]
    assert sum(ln.startswith("attempt on ") for ln in record.lines) == 2  # one line per attempt, none doubled
    first, *explained = str(failure.value).splitlines()
    assert first.endswith("launcher exit codes: 3, 3")
    # the rank, as Open MPI's mpirun reports it; the last attempt's pod with its cause; the last lines of its log
    assert explained[:2] == [
        "cause: rank 0: exit code 3, as mpirun reports it",
        f"cause: launcher pod {pods[-1].metadata.name} (container launcher): Error, exit code 3",
    ]
    last_lines = pod_log(real_k8s, real_namespace, pods[-1].metadata.name)[-10:]
    assert explained[2:] == [
        f"last {len(last_lines)} log lines of launcher {pods[-1].metadata.name} (container launcher):",
        *(f"    {line}" for line in last_lines),
    ]


def test_killing_the_task_deletes_the_job_and_stops_its_containers(
    real_k8s, real_namespace, real_conn, record
):
    op = real_operator("killed", real_namespace, program=["sleep", "600"], workers=2)
    worker = Background(op.execute, ctx("killed"))
    name = op.build_manifest(ctx("killed"))["metadata"]["name"]
    watch_mpijob(real_k8s, real_namespace, name, lambda o: "Running" in true_conditions(o))
    op.on_kill()
    wait_gone(real_k8s, real_namespace, name)  # pods are gone only once the kubelet stopped their containers
    assert isinstance(worker.result(120), AirflowException)
