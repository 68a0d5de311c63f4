"""The operator under a real Kueue (v0.17.0) and the real mpi-operator (v0.8.2), on simulated (kwok) nodes: queued,
admitted, preempted and timed out in the queue, as the task log tells it.

The ClusterQueue's quota is cpu 2 / memory 2Gi; each job here is one launcher and one worker requesting 500m cpu each
(1 cpu where said), so two jobs fill it and a third one waits. Each test's tasks log
into their own recorder (by task id), as the operator's and the trigger's ``self.log``. The tasks run as the service
account bound only to the shipped role (deploy/rbac.yaml), so the role's Workload rule is proven too.

What the task log says about Kueue is checked against the Workloads themselves, not against the provider's own
wording (tests/integration/kueue_history.py: ``WorkloadHistory``, ``assert_told_as_workloads``).
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator

import pytest

from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.version_compat import AirflowException, TaskDeferred
from localcluster import kueue as lk
from tests.integration.kueue_history import (
    NOT_YET,
    WorkloadHistory,
    assert_logs_told_as_workloads,
    kueue_lines,
)
from tests.integration.test_kueue_cluster import Jobs
from tests.integration.test_operator import LINES, Recorder, ctx, operator, wait_gone

pytestmark = pytest.mark.needs_simulation

REQUESTS = {"requests": {"cpu": "500m", "memory": "256Mi"}}
QUEUED = f"is queued by Kueue in LocalQueue {lk.LOCAL_QUEUE}"
ADMITTED = re.compile(r"was admitted by Kueue: ClusterQueue \S+, flavor .+? after (.+?) in the queue")


@pytest.fixture
def workloads(kueue_cluster, kueue_namespace) -> Iterator[WorkloadHistory]:
    with WorkloadHistory(kueue_cluster.api_client(), kueue_namespace) as history:
        yield history


@pytest.fixture
def kueue_conn(monkeypatch, kueue_cluster, kueue_namespace, tmp_path) -> str:
    from tests.integration.least_privilege import (
        apply_role,
        bound_service_account_kubeconfig,
        use_as_kubernetes_default,
    )

    api = kueue_cluster.api_client()
    config = bound_service_account_kubeconfig(
        api, str(kueue_cluster.kubeconfig_path), kueue_namespace, apply_role(api), tmp_path / "sa-kubeconfig"
    )
    kueue_cluster.set_launcher_logs(kueue_namespace, LINES)
    return use_as_kubernetes_default(monkeypatch, config, kueue_namespace)


@pytest.fixture
def logs(monkeypatch):
    """One Recorder per task id: the operator's (task_id) and its trigger's (the job name holds the task id)."""
    from airflow_mpi.operators import MPIJobOperator

    recorders: dict[str, Recorder] = {}

    def of(obj) -> Recorder:
        task = getattr(obj, "task_id", None) or next(t for t in recorders if f"-{t}-" in obj.name)
        return recorders.setdefault(task, Recorder())

    for cls in (MPIJobOperator, MPIJobTrigger):
        monkeypatch.setattr(cls, "log", property(of))
    return recorders


def queued_op(task_id: str, namespace: str, **kwargs):
    kwargs.setdefault("workers", 1)
    return operator(
        task_id,
        namespace,
        queue_name=lk.LOCAL_QUEUE,
        launcher_resources=kwargs.pop("launcher_resources", REQUESTS),
        worker_resources=kwargs.pop("worker_resources", REQUESTS),
        **kwargs,
    )


def defer(op) -> MPIJobTrigger:
    """Submit ``op``'s job; the trigger, rebuilt as the triggerer would."""
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx(op.task_id))
    return MPIJobTrigger(**deferred.value.trigger.serialize()[1])


def assert_queued_for_quota_then_admitted(lines: list[str]) -> str:
    """A job's Kueue lines: queued (the first line may come before Kueue's scheduler gave a reason: "waiting for Kueue
    to admit it"), with the quota as the reason, then admitted once, last, after some seconds. Returns that line."""
    assert all(QUEUED in ln for ln in lines[:-1]) and any(
        "insufficient unused quota" in ln for ln in lines
    ), lines
    admitted = [ln for ln in lines if ADMITTED.search(ln)]
    assert len(admitted) == 1 and lines[-1] == admitted[0], lines
    waited = ADMITTED.search(admitted[0]).group(1)
    assert re.fullmatch(r"\d+s", waited) and waited != "0s", admitted
    return admitted[0]


def fails_for_queue_timeout(op, logs, history: WorkloadHistory, wait_deleted, kind: str = "MPIJob") -> str:
    """``op`` (``queue_timeout=3``, a job of ``kind`` that is not admitted) fails with Kueue's reason, having logged the
    job queued, and its job is deleted (``wait_deleted(name)`` returns once it is); its lines and that reason match
    the Workloads. Returns the job's name."""
    with pytest.raises(
        AirflowException,
        match=rf"{kind} (\S+) was not admitted by Kueue within queue_timeout=3s "
        rf"\(LocalQueue {lk.LOCAL_QUEUE}: (couldn't assign flavors|{NOT_YET})",
    ) as failed:
        op.execute(ctx(op.task_id))
    assert QUEUED in kueue_lines(logs[op.task_id])[0]
    name, why = re.search(
        rf"{kind} (\S+) was not admitted .*?: (.*)\); it is deleted", str(failed.value)
    ).group(1, 2)
    assert f"-{op.task_id}-" in name
    wait_deleted(name)
    assert_logs_told_as_workloads(logs, history, kind)
    assert history.of_job(name, kind).explains(why), (
        why,
        history.of_job(name, kind),
    )  # the reason is Kueue's
    return name


def run_trigger(trigger: MPIJobTrigger) -> dict:
    async def first_event():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(first_event())


def run_until_first_attempt_logged(
    trigger: MPIJobTrigger, recorder: Recorder
) -> tuple[threading.Thread, dict]:
    """``trigger`` run in a thread, its event into the dict returned, once its first launcher attempt is in the task
    log (``recorder``): a job preempted only then. A launcher deleted before the trigger read it leaves nothing to
    read (a real kubelet deletes its log too); seen when a loaded CI machine streamed late."""
    result: dict = {}
    waiter = threading.Thread(target=lambda: result.update(run_trigger(trigger)))
    waiter.start()
    recorder.await_lines(lambda lines: lines.count(LINES[-1]) == 1, 60, "first attempt's last line")
    return waiter, result


def assert_evicted_once_then_readmitted(lines: list[str]) -> None:
    """A preempted job's Kueue lines: evicted (Preempted) once, then queued again and admitted last."""
    evicted = [ln for ln in lines if "was evicted by Kueue (Preempted:" in ln]
    assert len(evicted) == 1, lines
    after = lines[lines.index(evicted[0]) :]
    assert any(QUEUED in ln for ln in after) and ADMITTED.search(after[-1]), lines


def test_three_jobs_for_a_quota_of_two_queue_and_all_succeed(kueue_conn, kueue_namespace, workloads, logs):
    ns = kueue_namespace
    first, second = (defer(queued_op(t, ns, deferrable=True, run_duration="6s")) for t in ("first", "second"))
    # (that queueing counts against neither the startup nor the schedule timeout is a unit test's: test_monitor_kueue;
    # here a 1 s startup_timeout failed once in CI because the busy mpi-operator took longer to say Created)
    third = queued_op("third", ns)
    xcom = third.execute(ctx("third"))

    assert xcom["condition"] == "Succeeded"
    lines = kueue_lines(logs["third"])
    admitted = assert_queued_for_quota_then_admitted(lines)  # after one of the first two finished
    order = logs["third"].lines
    assert order.index(lines[0]) < order.index(admitted) < order.index(LINES[0])
    assert logs["third"].payload_lines() == LINES
    for task, trigger in (("first", first), ("second", second)):
        event = run_trigger(trigger)
        assert event["status"] == "success", event
        assert logs[task].payload_lines() == LINES
        assert not any(QUEUED in ln for ln in logs[task].lines)
    assert_logs_told_as_workloads(logs, workloads)


def test_preempted_job_is_reported_readmitted_and_its_log_stays_exactly_once(
    kueue_cluster, kueue_conn, kueue_namespace, workloads, logs
):
    ns = kueue_namespace
    jobs = Jobs(kueue_cluster.api_client(), ns)
    low = defer(queued_op("low", ns, deferrable=True, run_duration="8s", workload_priority_class="low"))
    waiter, result = run_until_first_attempt_logged(low, logs["low"])
    jobs.uids[low.name] = low.uid
    jobs.running_pods(low.name)
    big = {"requests": {"cpu": "1", "memory": "256Mi"}}
    high = queued_op(
        "high",
        ns,
        run_duration="1s",
        workload_priority_class="high",
        launcher_resources=big,
        worker_resources=big,
    )
    assert high.execute(ctx("high"))["condition"] == "Succeeded"
    waiter.join(180)
    assert not waiter.is_alive()

    assert result["status"] == "success", result
    assert result["evictions"] == 1 and result["launcher_attempts"] == 2
    assert_evicted_once_then_readmitted(kueue_lines(logs["low"]))
    # the program started over: each attempt's lines once, under its own header; the eviction added an attempt
    # that backoffLimit (0) does not count
    headers = logs["low"].headers()
    assert [h.split(",")[0] for h in headers] == [
        "========== launcher attempt 1 of 1",
        "========== launcher attempt 2 of 2",
    ]
    assert logs["low"].payload_lines() == LINES * 2
    assert_logs_told_as_workloads(logs, workloads)
    assert workloads.of_job(low.name).evicted_counts == {"Preempted": 1}, workloads.of_job(
        low.name
    )  # Kueue's count


def test_job_queued_longer_than_queue_timeout_fails_clearly_and_is_deleted(
    kueue_cluster, kueue_conn, kueue_namespace, workloads, logs
):
    ns = kueue_namespace
    big = {"requests": {"cpu": "1", "memory": "256Mi"}}
    holder = defer(
        queued_op(
            "holder", ns, deferrable=True, run_duration="60s", launcher_resources=big, worker_resources=big
        )
    )
    late = queued_op("late", ns, queue_timeout=3)
    fails_for_queue_timeout(
        late, logs, workloads, lambda name: wait_gone(kueue_cluster.api_client(), ns, name)
    )
    jobs = Jobs(kueue_cluster.api_client(), ns)
    jobs.uids[holder.name] = holder.uid
    jobs.running_pods(holder.name)  # the other job is left alone
