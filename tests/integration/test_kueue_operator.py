"""The operator under a real Kueue (v0.17.0) and the real mpi-operator (v0.8.2), on simulated (kwok) nodes: queued,
admitted, preempted and timed out in the queue, as the task log tells it.

The ClusterQueue's quota is cpu 2 / memory 2Gi; each job here is one launcher and one worker requesting 500m cpu each
(1 cpu where said), so two jobs fill it and a third one waits. Each test's tasks log
into their own recorder (by task id), as the operator's and the trigger's ``self.log``. The tasks run as the service
account bound only to the shipped role (deploy/rbac.yaml), so the role's Workload rule is proven too.
"""

from __future__ import annotations

import asyncio
import re
import threading

import pytest

from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.version_compat import AirflowException, TaskDeferred
from localcluster import kueue as lk
from tests.integration.test_kueue_cluster import Jobs, _true
from tests.integration.test_operator import LINES, Recorder, ctx, operator, wait_gone

pytestmark = pytest.mark.needs_simulation

REQUESTS = {"requests": {"cpu": "500m", "memory": "256Mi"}}
QUEUED = f"is queued by Kueue in LocalQueue {lk.LOCAL_QUEUE}"
ADMITTED = re.compile(rf"was admitted by Kueue: ClusterQueue {lk.CLUSTER_QUEUE}, flavor default-flavor after (.+?) in the queue")


@pytest.fixture
def kueue_conn(monkeypatch, kueue_cluster, kueue_namespace, tmp_path) -> str:
    from tests.integration.least_privilege import apply_role, bound_service_account_kubeconfig, use_as_kubernetes_default

    api = kueue_cluster.api_client()
    config = bound_service_account_kubeconfig(api, str(kueue_cluster.kubeconfig_path), kueue_namespace, apply_role(api),
                                              tmp_path / "sa-kubeconfig")
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
    return operator(task_id, namespace, queue_name=lk.LOCAL_QUEUE, launcher_resources=kwargs.pop("launcher_resources", REQUESTS),
                    worker_resources=kwargs.pop("worker_resources", REQUESTS), **kwargs)


def defer(op) -> MPIJobTrigger:
    """Submit ``op``'s job; the trigger, rebuilt as the triggerer would."""
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx(op.task_id))
    return MPIJobTrigger(**deferred.value.trigger.serialize()[1])


def run_trigger(trigger: MPIJobTrigger) -> dict:
    async def first_event():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(first_event())


def kueue_lines(recorder: Recorder) -> list[str]:
    return [ln for ln in recorder.lines if "by Kueue" in ln]


def test_three_jobs_for_a_quota_of_two_queue_and_all_succeed(kueue_conn, kueue_namespace, logs):
    ns = kueue_namespace
    first, second = (defer(queued_op(t, ns, deferrable=True, run_duration="6s")) for t in ("first", "second"))
    # (that queueing counts against neither the startup nor the schedule timeout is a unit test's: test_monitor_kueue;
    # here a 1 s startup_timeout failed once in CI because the busy mpi-operator took longer to say Created)
    third = queued_op("third", ns)
    xcom = third.execute(ctx("third"))

    assert xcom["condition"] == "Succeeded"
    lines = kueue_lines(logs["third"])
    # queued (the first line may come before Kueue's scheduler gave a reason: "waiting for Kueue to admit it"),
    # with the quota as the reason, then admitted once, last
    assert all(QUEUED in ln for ln in lines[:-1]) and any("insufficient unused quota" in ln for ln in lines), lines
    admitted = [ln for ln in lines if ADMITTED.search(ln)]
    assert len(admitted) == 1 and lines[-1] == admitted[0], lines
    waited = ADMITTED.search(admitted[0]).group(1)
    assert re.fullmatch(r"\d+s", waited) and waited != "0s", admitted  # it waited for one of the first two to finish
    order = logs["third"].lines
    assert order.index(lines[0]) < order.index(admitted[0]) < order.index(LINES[0])
    assert logs["third"].payload_lines() == LINES
    for task, trigger in (("first", first), ("second", second)):
        event = run_trigger(trigger)
        assert event["status"] == "success", event
        assert logs[task].payload_lines() == LINES
        assert not any(QUEUED in ln for ln in logs[task].lines)


def test_preempted_job_is_reported_readmitted_and_its_log_stays_exactly_once(kueue_cluster, kueue_conn,
                                                                             kueue_namespace, logs):
    ns = kueue_namespace
    jobs = Jobs(kueue_cluster.api_client(), ns)
    low = defer(queued_op("low", ns, deferrable=True, run_duration="8s", workload_priority_class="low"))
    result: dict = {}
    waiter = threading.Thread(target=lambda: result.update(run_trigger(low)))
    waiter.start()
    jobs.uids[low.name] = low.uid
    jobs.running_pods(low.name)
    big = {"requests": {"cpu": "1", "memory": "256Mi"}}
    high = queued_op("high", ns, run_duration="1s", workload_priority_class="high", launcher_resources=big,
                     worker_resources=big)
    assert high.execute(ctx("high"))["condition"] == "Succeeded"
    waiter.join(180)
    assert not waiter.is_alive()

    assert result["status"] == "success", result
    assert result["evictions"] == 1 and result["launcher_attempts"] == 2
    lines = kueue_lines(logs["low"])
    evicted = [ln for ln in lines if "was evicted by Kueue (Preempted:" in ln]
    assert len(evicted) == 1, lines
    after = lines[lines.index(evicted[0]):]
    assert any(QUEUED in ln for ln in after) and ADMITTED.search(after[-1]), lines
    # the program started over: each attempt's lines once, under its own header; the eviction added an attempt
    # that backoffLimit (0) does not count
    headers = logs["low"].headers()
    assert [h.split(",")[0] for h in headers] == ["========== launcher attempt 1 of 1", "========== launcher attempt 2 of 2"]
    assert logs["low"].payload_lines() == LINES * 2
    wl = jobs.workload(low.name, lambda w: _true(w, "Finished"), "Finished")
    assert wl["status"]["admission"]["clusterQueue"] == lk.CLUSTER_QUEUE


def test_job_queued_longer_than_queue_timeout_fails_clearly_and_is_deleted(kueue_cluster, kueue_conn,
                                                                          kueue_namespace, logs):
    ns = kueue_namespace
    big = {"requests": {"cpu": "1", "memory": "256Mi"}}
    holder = defer(queued_op("holder", ns, deferrable=True, run_duration="60s", launcher_resources=big,
                             worker_resources=big))
    late = queued_op("late", ns, queue_timeout=3)
    with pytest.raises(AirflowException, match=r"MPIJob (\S+) was not admitted by Kueue within queue_timeout=3s "
                                               rf"\(LocalQueue {lk.LOCAL_QUEUE}: (couldn't assign flavors|waiting for Kueue to admit it)") as failed:
        late.execute(ctx("late"))
    assert QUEUED in kueue_lines(logs["late"])[0]
    name = re.search(r"MPIJob (\S+) was not admitted", str(failed.value)).group(1)
    assert "-late-" in name
    wait_gone(kueue_cluster.api_client(), ns, name)
    jobs = Jobs(kueue_cluster.api_client(), ns)
    jobs.uids[holder.name] = holder.uid
    jobs.running_pods(holder.name)  # the other job is left alone
