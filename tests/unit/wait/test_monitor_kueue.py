"""A wait on a job with Kueue's queue label: the hub watches the namespace's Workloads (an older Kueue's API version,
or none at all, or none allowed, never fails the wait) and the task log says queued, admitted, timed out."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from airflow_mpi.wait.monitor import JobMonitor
from airflow_mpi.wait.progress import Timeouts
from tests.unit.fakes import FakeAsyncHook, job

NOW = datetime(2026, 11, 22, 10, 0, 30, tzinfo=UTC)  # 30 s after the fake job's creation
QUEUE = {"kueue.x-k8s.io/queue-name": "user-queue"}
PENDING = (
    "couldn't assign flavors to pod set launcher: insufficient unused quota for cpu in flavor default-flavor"
)


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch):
    from airflow_mpi.wait import monitor as monitor_module

    monkeypatch.setattr(monitor_module, "utcnow", lambda: NOW)


def queued_job(*conditions, labels=QUEUE) -> dict:
    obj = job("job", "ns", ("Created", "MPIJobCreated"), *conditions, labels=labels)
    obj["metadata"]["uid"] = "u1"
    return obj


def workload(reserved: bool, uid: str = "u1") -> dict:
    condition = {
        "type": "QuotaReserved",
        "status": str(reserved),
        "reason": "QuotaReserved" if reserved else "Pending",
        "message": "Quota reserved" if reserved else PENDING,
        "lastTransitionTime": "2026-11-22T10:00:20Z",
    }
    status = {"conditions": [condition]}
    if reserved:
        status["admission"] = {
            "clusterQueue": "cluster-queue",
            "podSetAssignments": [{"name": "launcher", "flavors": {"cpu": "default-flavor"}}],
        }
    owner = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "job", "uid": uid}
    return {"metadata": {"name": f"mpijob-job-{uid}", "ownerReferences": [owner]}, "status": status}


async def run_until_admitted(hook: FakeAsyncHook, lines: list[str], queued_text: str) -> dict:
    # set by the task log's line that says ``queued_text``: then Kueue admits the job
    queued = asyncio.Event()

    def emit(line: str) -> None:
        lines.append(line)
        if queued_text in line:
            queued.set()

    wait = asyncio.create_task(
        JobMonitor(
            hook,
            "job",
            "ns",
            emit=emit,
            submitted_at=NOW,
            poll_interval=5,
            get_logs=False,
            timeouts=Timeouts(1, 1),
        ).run()
    )
    await asyncio.wait_for(queued.wait(), 5)
    hook.workloads = [workload(True), workload(False, uid="someone-elses")]
    hook.job_obj = queued_job(("Succeeded", "MPIJobSucceeded"))
    return await asyncio.wait_for(wait, 5)


async def test_queued_then_admitted_job_is_told_from_its_own_workload():
    hook = FakeAsyncHook(job_obj=queued_job(("Suspended", "MPIJobSuspended")), workloads=[workload(False)])
    lines: list[str] = []
    result = await run_until_admitted(hook, lines, "is queued by Kueue")
    assert result.outcome == "success"  # queued past its startup and schedule timeouts (1 s): not counted
    assert result.queued_seconds == 20  # the metrics' time queued: from the job's creation to its admission
    assert lines == [
        f"MPIJob job is queued by Kueue in LocalQueue user-queue: {PENDING}",
        "MPIJob job was admitted by Kueue: ClusterQueue cluster-queue, flavor default-flavor after 20s "
        "in the queue",
    ]
    assert hook.workload_versions == ["v1beta2"]


@pytest.mark.parametrize(
    "refused, versions, hint",
    [
        ({"v1beta2": 404}, ["v1beta2", "v1beta1"], False),  # a Kueue before v0.15
        ({"v1beta2": 404, "v1beta1": 404}, ["v1beta2", "v1beta1"], True),  # no Kueue Workloads at all
        ({"v1beta2": 403}, ["v1beta2"], True),  # a role without the Workload rule
    ],
)
async def test_workloads_of_an_older_kueue_or_none_visible_never_fail_the_wait(refused, versions, hint):
    hook = FakeAsyncHook(
        job_obj=queued_job(("Suspended", "MPIJobSuspended")),
        workloads=[workload(False)],
        workloads_refused=refused,
    )
    lines: list[str] = []
    result = await run_until_admitted(hook, lines, "is queued by Kueue")
    assert result.outcome == "success" and hook.workload_versions == versions
    assert ("its Kueue Workload is not visible" in lines[0]) is hint
    assert ("after 30s in the queue" in lines[1]) if hint else ("ClusterQueue cluster-queue" in lines[1])


async def test_a_job_queued_past_queue_timeout_ends_the_wait():
    hook = FakeAsyncHook(job_obj=queued_job(("Suspended", "MPIJobSuspended")), workloads=[workload(False)])
    result = await JobMonitor(
        hook,
        "job",
        "ns",
        emit=[].append,
        submitted_at=NOW,
        get_logs=False,
        timeouts=Timeouts(queue_timeout=30),
    ).run()
    assert result.outcome == "queue_timeout"
    assert result.message.startswith("MPIJob job was not admitted by Kueue within queue_timeout=30s")


async def test_a_job_without_the_queue_label_watches_no_workloads():
    hook = FakeAsyncHook(job_obj=queued_job(("Succeeded", "x"), labels={}))
    result = await JobMonitor(hook, "job", "ns", emit=[].append, submitted_at=NOW, get_logs=False).run()
    assert result.outcome == "success" and "workloads" not in hook.lists
