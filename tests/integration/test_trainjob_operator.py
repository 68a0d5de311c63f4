"""TrainJobOperator with the real Kubeflow Trainer v2.3.0 and JobSet v0.12.0 on the real node (issue 35).

Each case runs the operator as Airflow runs it (execute / defer / trigger / execute_complete / on_kill) against a
TrainJob of this project's runtime ``openmpi-mpiuser`` (deploy/trainjob-mpi-runtime.yaml): images/mpi's Open MPI pi
program with real ranks on the node pods, mpirun on the launcher pod. What is checked is what the cluster shows
independently of the provider: the ranks' host names are the node pods', the task log holds the launcher pod's log
as the kubelet serves it (every line once), the failed TrainJob's launcher container exit code, a fresh TrainJob
(another uid) per Airflow try, and after a kill no TrainJob, JobSet or pod left.
"""

from __future__ import annotations

import math
import re

import pytest
from kubernetes import client, watch

from airflow_mpi.function_task.function_call import mounted_call_secret
from airflow_mpi.jobspec.kinds import TRAINJOB
from airflow_mpi.operators import TrainJobOperator
from airflow_mpi.version_compat import AirflowException, AirflowFailException
from tests.integration.test_cluster_smoke import watch_pods
from tests.integration.test_operator import Background, ctx, record  # noqa: F401
from tests.integration.test_real_mpi import PI_LINE, RANK_LINE, pod_log
from tests.integration.test_task_mpi import UPSTREAM, decorated, ranks_report, run
from tests.integration.trainjob_runtime import RUNTIME, TRAINER

pytestmark = pytest.mark.trainjob

PI = "/home/mpiuser/pi"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
LAUNCHER = f"{JOBSET_NAME}={{}},jobset.sigs.k8s.io/replicatedjob-name=launcher"
JOBSET = ("jobset.x-k8s.io", "v1alpha2")


def pi_operator(task_id: str, namespace: str, **kwargs) -> TrainJobOperator:
    kwargs.setdefault("program", [PI])
    kwargs.setdefault("workers", 2)
    return TrainJobOperator(task_id=task_id, namespace=namespace, poll_interval=2, **kwargs)


def launcher_pods(k8s, namespace: str, name: str) -> list:
    pods = client.CoreV1Api(k8s).list_namespaced_pod(namespace, label_selector=LAUNCHER.format(name)).items
    return sorted(pods, key=lambda p: p.metadata.creation_timestamp)


def trainjob(k8s, namespace: str, name: str) -> dict:
    return client.CustomObjectsApi(k8s).get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)


def assert_real_ranks(k8s, namespace: str, name: str, lines: list[str], workers: int, slots: int) -> None:
    """Every rank ran, ``slots`` of them on each node pod of this TrainJob (their host names), pi came out right,
    and the task log holds the launcher pod's log as the kubelet serves it, every line exactly once."""
    hosts = {int(m[1]): m[3].split(".")[0] for m in map(RANK_LINE.match, lines) if m}
    assert sorted(hosts) == list(range(workers * slots)), lines
    assert sorted(hosts.values()) == sorted(
        f"{name}-node-0-{i}" for i in range(workers) for _ in range(slots)
    )
    (pi,) = [m for m in map(PI_LINE.match, lines) if m]
    assert int(pi[2]) == workers * slots and math.isclose(float(pi[1]), math.pi, abs_tol=0.01)
    (launcher,) = launcher_pods(k8s, namespace, name)
    served = pod_log(k8s, namespace, launcher.metadata.name)
    assert [ln for ln in lines if ln in set(served)] == served


def test_pi_runs_real_ranks_on_the_node_pods_and_streams_the_launcher_log_once(
    trainjob_real_node, real_k8s, real_namespace, real_conn, record
):
    op = pi_operator("tj_pi", real_namespace, slots_per_worker=2, on_finish_action="keep")
    xcom = op.execute(ctx(op.task_id))
    assert xcom["condition"] == "Complete" and xcom["launcher_attempts"] == 1
    assert_real_ranks(real_k8s, real_namespace, xcom["name"], record.lines, workers=2, slots=2)
    job = trainjob(real_k8s, real_namespace, xcom["name"])
    assert job["spec"]["runtimeRef"]["name"] == RUNTIME
    assert job["spec"]["trainer"]["numNodes"] == 2 and job["spec"]["trainer"]["numProcPerNode"] == 2


def test_pi_runs_deferred_through_the_trigger(
    trainjob_real_node, real_k8s, real_namespace, real_conn, record
):
    op = pi_operator("tj_deferred", real_namespace, deferrable=True, on_finish_action="keep")
    xcom = run(op, deferrable=True)  # execute, the trigger rebuilt as the triggerer does, the resume
    assert xcom["condition"] == "Complete"
    assert_real_ranks(real_k8s, real_namespace, xcom["name"], record.lines, workers=2, slots=1)


def test_a_failing_program_fails_each_try_with_its_exit_code_and_each_retry_is_a_fresh_trainjob(
    trainjob_real_node, real_k8s, real_namespace, real_conn, record
):
    """retries=1 and a program that exits 3: two tries, each its own TrainJob (the runtime's launcher Job runs once),
    each failure retryable (Airflow counts the tries), naming the exit code the launcher container really had."""
    program = ["sh", "-c", "echo attempt on $(hostname); exit 3"]
    uids = []
    for try_number in (1, 2):
        op = pi_operator("tj_fails", real_namespace, program=program, workers=1, retries=1)
        with pytest.raises(AirflowException) as failure:
            op.execute(ctx(op.task_id, try_number))
        assert type(failure.value) is not AirflowFailException  # Airflow retries it
        name = op.build_manifest(ctx(op.task_id, try_number))["metadata"]["name"]
        job = trainjob(real_k8s, real_namespace, name)
        assert {c["type"] for c in job["status"]["conditions"] if c["status"] == "True"} >= {"Failed"}
        uids.append(job["metadata"]["uid"])
        (launcher,) = launcher_pods(real_k8s, real_namespace, name)
        assert launcher.status.container_statuses[0].state.terminated.exit_code == 3
        first, *explained = str(failure.value).splitlines()
        assert "launcher exit codes: 3" in first, str(failure.value)
        assert any(line.startswith(f"cause: launcher pod {launcher.metadata.name}") for line in explained)
    assert len(set(uids)) == 2  # the first try's failed TrainJob replaced by a fresh one
    assert sum(ln.startswith("attempt on ") for ln in record.lines) == 2  # one line per try, none doubled


def test_killing_the_task_deletes_the_trainjob_its_jobset_and_pods(
    trainjob_real_node, real_k8s, real_namespace, real_conn, record
):
    op = pi_operator("tj_killed", real_namespace, program=["sleep", "600"])
    worker = Background(op.execute, ctx(op.task_id))
    name = op.build_manifest(ctx(op.task_id))["metadata"]["name"]
    watch_pods(
        real_k8s,
        real_namespace,
        LAUNCHER.format(name),
        lambda pods: any(p.status.phase == "Running" for p in pods.values()),
        timeout=180,
    )
    op.on_kill()
    # the pods go once the kubelet stopped their containers; the TrainJob (Foreground) after its JobSet
    watch_pods(real_k8s, real_namespace, f"{JOBSET_NAME}={name}", lambda pods: not pods, timeout=120)
    co = client.CustomObjectsApi(real_k8s)
    await_none(co, real_namespace, TRAINER, "trainjobs")
    assert not co.list_namespaced_custom_object(*JOBSET, real_namespace, "jobsets")["items"]
    assert isinstance(worker.result(120), AirflowException)


def test_task_mpi_runs_the_function_on_every_node_pods_ranks_and_rank_zeros_value_is_the_xcom(
    trainjob_real_node, real_k8s, real_namespace, real_conn, record
):
    """``@task.mpi`` on a TrainJob: the call Secret reaches the node pods through the TrainJob's runtimePatch (the
    launcher, mpirun only, never mounts it); every rank runs the function with the upstream XCom."""
    op = decorated(
        ranks_report, real_namespace, "openmpi", UPSTREAM, api_version=TRAINJOB.api_version,
        on_finish_action="keep", call_kwargs={"scale": 2},
    )  # fmt: skip
    value = run(op, deferrable=False)
    n = 2 * 2  # workers x slots of decorated(): node pods x numProcPerNode
    assert value == {"rank": 0, "size": n, "sum_of_ranks": n * (n - 1) // 2, "label": "from upstream",
                     "scaled": [6, 8, 10]}  # fmt: skip
    said = sorted(
        int(m[1]) for m in (re.search(r"rank (\d+) of 4 got from upstream$", ln) for ln in record.lines) if m
    )
    assert said == list(range(n))
    name = op.build_manifest(ctx(op.task_id))["metadata"]["name"]
    job = trainjob(real_k8s, real_namespace, name)
    secret = mounted_call_secret(job)
    # the JobSet the Trainer made: the runtime's node pods mount the Secret, its launcher does not
    jobset = client.CustomObjectsApi(real_k8s).get_namespaced_custom_object(
        *JOBSET, real_namespace, "jobsets", name
    )
    mounting = {
        rj["name"]: [v["name"] for v in rj["template"]["spec"]["template"]["spec"].get("volumes") or []
                     if (v.get("secret") or {}).get("secretName") == secret]
        for rj in jobset["spec"]["replicatedJobs"]
    }  # fmt: skip
    assert mounting == {"node": ["airflow-mpi-call"], "launcher": []}, mounting
    owners = (
        client.CoreV1Api(real_k8s).read_namespaced_secret(secret, real_namespace).metadata.owner_references
    )
    assert [(o.kind, o.uid) for o in owners] == [
        ("TrainJob", job["metadata"]["uid"])
    ]  # deleted with the TrainJob


def await_none(co: client.CustomObjectsApi, namespace: str, group_version: tuple, plural: str) -> None:
    """Watch ``plural`` in ``namespace`` until none is left (fails the test after 120 s)."""
    listing = co.list_namespaced_custom_object(*group_version, namespace, plural)
    left = {o["metadata"]["name"] for o in listing["items"]}
    if not left:
        return
    for event in watch.Watch().stream(
        co.list_namespaced_custom_object, *group_version, namespace, plural,
        resource_version=listing["metadata"]["resourceVersion"], timeout_seconds=120,
    ):  # fmt: skip
        if event["type"] == "DELETED":
            left.discard(event["object"]["metadata"]["name"])
            if not left:
                return
    pytest.fail(f"{plural} {sorted(left)} still in {namespace} after 120 s")
