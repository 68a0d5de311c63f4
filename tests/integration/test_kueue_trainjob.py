"""TrainJobOperator under a real Kueue (v0.17.0, its TrainJob integration ``trainer.kubeflow.org/trainjob``) with
Kubeflow Trainer v2.3.0 and JobSet v0.12.0, on simulated (kwok) nodes: queued, then admitted, preempted and admitted
again, and timed out in the queue, as the task log tells it (issue 35). Marked ``trainjob``.

The cluster is the session's ``kueue_cluster`` with Trainer and JobSet added on first use
(``kueue_trainjob_cluster``): Kueue, which reads its integrations at start, restarts with the TrainJob one and its
TrainJob webhooks (localcluster/kueue.py): 16-20 s measured, on top of the Kueue cluster's start. The runtime
``openmpi-mpiuser`` asks no resources: Kueue counts what a TrainJob's pods request, so these jobs ask it through
``resources_per_node``, which Trainer v2.3.0 (and Kueue's PodSets, built from the runtime as Trainer would) gives the
launcher. 1500m cpu of the ClusterQueue's 2: one
TrainJob at a time. kwok ends the launcher after 8 s (localcluster/behaviour.py), or as a job's ``runtimePatches`` say
(tests/integration/trainjob_runtime.py ``launcher_runs``).

The task log's Kueue lines are checked against the Workloads (tests/integration/kueue_history.py), as for MPIJobs
(test_kueue_operator.py, whose fixtures these tests share).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from airflow_mpi.operators import TrainJobOperator
from localcluster import kueue as lk
from tests.integration.kueue_history import (
    WorkloadHistory,
    assert_logs_told_as_workloads,
    kueue_lines,
)
from tests.integration.test_kueue_operator import (  # noqa: F401 - fixtures
    QUEUED,
    assert_evicted_once_then_readmitted,
    assert_queued_for_quota_then_admitted,
    defer,
    fails_for_queue_timeout,
    kueue_conn,
    logs,
    run_trigger,
    run_until_first_attempt_logged,
)
from tests.integration.test_operator import LINES, ctx
from tests.integration.test_trainjob_operator import await_none
from tests.integration.trainjob_runtime import TRAINER, TRAINER_CONTROLLERS, apply_runtime, launcher_runs

pytestmark = [pytest.mark.needs_simulation, pytest.mark.trainjob]

KIND = "TrainJob"
HALF_AND_MORE = {"requests": {"cpu": "1500m", "memory": "256Mi"}}  # of cpu 2: one TrainJob at a time
TOO_BIG = {"requests": {"cpu": "3", "memory": "256Mi"}}  # more than the ClusterQueue has


@pytest.fixture(scope="session")
def kueue_trainjob_cluster(kueue_cluster):
    """The session's Kueue cluster running Trainer and JobSet too (added on first use; Kueue restarted with its
    TrainJob integration), with the runtime ``openmpi-mpiuser``."""
    kueue_cluster.add_controllers(TRAINER_CONTROLLERS)
    apply_runtime(kueue_cluster.api_client())
    return kueue_cluster


@pytest.fixture
def tj_namespace(kueue_trainjob_cluster, kueue_namespace, kueue_conn) -> Iterator[str]:
    """``kueue_namespace`` (LocalQueue ``user-queue``), its launchers' log served from their ``node`` container; at
    teardown its TrainJobs are deleted first, so that their Workloads go (``kueue_namespace`` awaits that)."""
    kueue_trainjob_cluster.set_launcher_logs(kueue_namespace, LINES, containers=("node",))
    yield kueue_namespace
    client.CustomObjectsApi(kueue_trainjob_cluster.api_client()).delete_collection_namespaced_custom_object(
        *TRAINER, kueue_namespace, "trainjobs"
    )


@pytest.fixture
def tj_workloads(kueue_trainjob_cluster, tj_namespace) -> Iterator[WorkloadHistory]:
    with WorkloadHistory(kueue_trainjob_cluster.api_client(), tj_namespace) as history:
        yield history


def queued_trainjob(task_id: str, namespace: str, **kwargs) -> TrainJobOperator:
    kwargs.setdefault("resources_per_node", HALF_AND_MORE)
    return TrainJobOperator(
        task_id=task_id, namespace=namespace, program=["/home/mpiuser/pi"], workers=2, poll_interval=1,
        queue_name=lk.LOCAL_QUEUE, **kwargs,
    )  # fmt: skip


def test_a_trainjob_that_does_not_fit_beside_another_is_queued_then_admitted_and_completes(
    kueue_trainjob_cluster,
    tj_namespace,
    tj_workloads,
    logs,
):
    ns = tj_namespace
    first = defer(queued_trainjob("first", ns, deferrable=True))
    second = queued_trainjob("second", ns)
    xcom = second.execute(ctx("second"))

    assert xcom["condition"] == "Complete"
    lines = kueue_lines(logs["second"])
    assert all(ln.startswith(f"{KIND} ") for ln in lines), lines
    assert_queued_for_quota_then_admitted(lines)  # once the first finished
    assert logs["second"].payload_lines() == LINES
    event = run_trigger(first)
    assert event["status"] == "success", event
    assert not any(QUEUED in ln for ln in logs["first"].lines)
    assert_logs_told_as_workloads(logs, tj_workloads, KIND)
    # each was admitted by the Workload Kueue made for it, once
    for name in (xcom["name"], event["name"]):
        assert len(tj_workloads.of_job(name, KIND).admissions) == 1, tj_workloads.of_job(name, KIND)


def test_a_trainjob_queued_longer_than_queue_timeout_fails_clearly_and_is_deleted(
    kueue_trainjob_cluster,
    tj_namespace,
    tj_workloads,
    logs,
):
    ns = tj_namespace
    late = queued_trainjob("late", ns, queue_timeout=3, resources_per_node=TOO_BIG)
    co = client.CustomObjectsApi(kueue_trainjob_cluster.api_client())
    fails_for_queue_timeout(
        late, logs, tj_workloads, lambda _: await_none(co, ns, TRAINER, "trainjobs"), KIND
    )


def test_a_preempted_trainjob_is_reported_readmitted_and_its_log_stays_exactly_once(
    kueue_trainjob_cluster,
    tj_namespace,
    tj_workloads,
    logs,
):
    """Kueue suspends the preempted TrainJob (spec.suspend); Trainer v2.3.0 suspends its JobSet, whose batch Jobs
    delete their pods (uncounted by backoffLimit); re-admitted, the JobSet resumes the node Job, then the launcher's
    once the nodes are Ready: a new launcher pod, the program from the start."""
    ns = tj_namespace
    low = defer(
        queued_trainjob("low", ns, deferrable=True, workload_priority_class="low")
    )  # kwok: 8 s a launcher
    waiter, result = run_until_first_attempt_logged(low, logs["low"])
    high = queued_trainjob("high", ns, workload_priority_class="high", base_manifest=launcher_runs("1s"))
    assert high.execute(ctx("high"))["condition"] == "Complete"
    waiter.join(120)
    assert not waiter.is_alive()

    assert result["status"] == "success" and result["condition"] == "Complete", result
    assert result["evictions"] == 1 and result["launcher_attempts"] == 2, result
    lines = kueue_lines(logs["low"])
    assert all(ln.startswith(f"{KIND} ") for ln in lines), lines
    assert_evicted_once_then_readmitted(lines)
    # the program started over on a new launcher pod of the same launcher Job: each attempt's lines once, under its
    # own header (a TrainJob's runtime holds its launcher's backoffLimit: no "of N")
    headers = logs["low"].headers()
    assert [h.split(",")[0] for h in headers] == [
        "========== launcher attempt 1",
        "========== launcher attempt 2",
    ], headers
    pods = [h.split(", pod ")[1].split()[0] for h in headers]
    assert len(set(pods)) == 2 and all(p.startswith(f"{low.name}-launcher-0-0-") for p in pods), headers
    assert result["uid"] == low.uid, result  # the same TrainJob throughout
    assert logs["low"].payload_lines() == LINES * 2
    assert_logs_told_as_workloads(logs, tj_workloads, KIND)
    assert tj_workloads.of_job(low.name, KIND).evicted_counts == {"Preempted": 1}, tj_workloads.of_job(
        low.name, KIND
    )  # Kueue's count
