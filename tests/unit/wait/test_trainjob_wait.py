"""Following a TrainJob from the cluster back: whose pods are its own (the owner chain pod -> batch Job -> JobSet ->
TrainJob, never labels), the watch hub and the wait to Complete with the launcher's log once, a failure's causes
named from node pods ``<job>-node-0-<i>-<x>``, and the checks' GETs (the JobSet and the two batch Jobs, once per
job)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace as NS

import pytest

from airflow_mpi.hooks.ownership import Owner, owner_objects
from airflow_mpi.jobspec.kinds.trainjob import TRAINJOB
from airflow_mpi.wait import watch_hub
from airflow_mpi.wait.monitor import JobMonitor
from tests.unit.trainjob_objects import (
    COMPLETE,
    FAILED,
    JOB_UIDS,
    JOBSET_UID,
    UID,
    TrainJobHook,
    batch_job,
    job_ref,
    jobs_status,
    jobset,
    launcher_pod,
    node_pod,
    tj_pod,
    trainjob,
)
from tests.unit.wait.test_monitor import NOW, frozen_clock  # noqa: F401 - the fixture

OWNER = Owner("pi", UID, job_kind=TRAINJOB)
CHAIN = [jobset(), batch_job("launcher"), batch_job("node")]
RUNNING = trainjob(jobs=jobs_status(active=1), rv="2")
DONE = trainjob(COMPLETE, jobs=jobs_status(succeeded=1), rv="3")
LOG = ["2026-11-22T10:00:01Z rank 0 of 2 on pi-node-0-0", "2026-11-22T10:00:02Z pi is approximately 3.14"]


def forged(name: str, replicated: str, owner: object = None) -> NS:
    """A co-tenant's pod with the JobSet's labels (and perhaps a controller reference of its own)."""
    return tj_pod(name, replicated, owner=owner, role="worker" if replicated == "node" else "launcher")


def test_a_pod_counts_only_once_its_job_its_jobset_and_the_trainjob_are_checked():
    pods = [launcher_pod(), node_pod(0), node_pod(1)]
    assert [OWNER.owns(p) for p in pods] == [None, None, None]  # a GET of the chain tells
    assert OWNER.unchecked(pods) == set(JOB_UIDS.values())
    known = OWNER.learn(CHAIN, OWNER.unchecked(pods))
    assert [known.owns(p) for p in pods] == [True, True, True]
    assert known.verified == {JOBSET_UID, *JOB_UIDS.values()}


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        (forged("pi-launcher-0-0-forge", "launcher"), "labels only"),
        (
            forged("pi-node-0-0-forge", "node", job_ref("node", uid="uid-squatter")),
            "a Job of that name, not it",
        ),
        (
            forged(
                "pi-node-0-0-forge",
                "node",
                NS(kind="Job", name="pi-other-0", uid=JOB_UIDS["node"], controller=True),
            ),
            "another Job's name",
        ),
        (
            forged(
                "pi-node-0-0-forge", "node", NS(kind="JobSet", name="pi", uid=JOBSET_UID, controller=True)
            ),
            "the JobSet",
        ),
        (
            forged(
                "pi-node-0-0-forge",
                "node",
                NS(kind="TrainJob", name="pi", uid="uid-earlier", controller=True),
            ),
            "an earlier TrainJob",
        ),
    ],
)
def test_a_cotenants_pod_with_the_labels_is_not_the_trainjobs(pod, why):
    known = OWNER.learn(CHAIN, OWNER.unchecked([pod]) | set(JOB_UIDS.values()))
    assert known.owns(pod) is False, why


def test_jobs_under_a_jobset_the_trainjob_does_not_control_are_nobodys():
    """A co-tenant made the JobSet ``pi`` (or its Jobs) before the Trainer: the chain does not reach the TrainJob."""
    pods = [launcher_pod(), node_pod(0)]
    squatted = [jobset(owner_uid="uid-squatter"), batch_job("launcher"), batch_job("node")]
    assert [OWNER.learn(squatted, OWNER.unchecked(pods)).owns(p) for p in pods] == [False, False]
    orphans = [jobset(), batch_job("launcher", owner_uid="uid-other-jobset"), batch_job("node")]
    known = OWNER.learn(orphans, OWNER.unchecked(pods))
    assert [known.owns(p) for p in pods] == [False, True]
    assert [OWNER.learn(None, OWNER.unchecked(pods)).owns(p) for p in pods] == [False, False]  # not readable


def test_the_check_is_a_get_of_the_jobset_and_of_each_batch_job():
    steps = owner_objects("ns", "pi", TRAINJOB)
    call = next(steps)
    gets = []
    try:
        while True:
            kw = call.kwargs
            gets.append((kw["group"], kw["version"], kw["plural"], kw["name"]))
            call = steps.send(
                {"metadata": {"name": kw["name"]}} if kw["plural"] != "jobs" or "node" in kw["name"] else None
            )
    except StopIteration as stop:
        found = stop.value
    assert gets == [
        ("jobset.x-k8s.io", "v1alpha2", "jobsets", "pi"),
        ("batch", "v1", "jobs", "pi-launcher-0"),
        ("batch", "v1", "jobs", "pi-node-0"),
    ]
    assert [o["metadata"]["name"] for o in found] == ["pi", "pi-node-0"]  # the absent launcher Job left out


def monitor(hook, lines, **kw) -> JobMonitor:
    kw.setdefault("poll_interval", 0.01)
    return JobMonitor(hook, "pi", "ns", emit=lines.append, submitted_at=NOW, **kw)


async def test_the_wait_follows_it_to_complete_its_launchers_log_once_a_cotenants_pod_ignored():
    decoy = forged("pi-launcher-0-0-forge", "launcher")
    launcher = launcher_pod(state="terminated", phase="Succeeded")
    hook = TrainJobHook(
        job_obj=RUNNING,
        watch_script=[[("MODIFIED", DONE)]],
        launchers=[decoy, launcher],
        workers=[node_pod(0), node_pod(1)],
        logs={
            (launcher.metadata.name, False): LOG,
            (decoy.metadata.name, False): ["2026-11-22T10:00:03Z FORGED"],
        },
    )
    lines: list[str] = []
    result = await monitor(hook, lines, uid=UID).run()
    assert (result.outcome, result.condition) == ("success", "Complete")
    assert result.launcher_pods == [launcher.metadata.name] and result.launcher_attempts == 1
    assert [ln for ln in lines if not ln.startswith(("=", "("))] == [
        "rank 0 of 2 on pi-node-0-0",
        "pi is approximately 3.14",
    ]
    assert [ln for ln in lines if ln.startswith("(ignoring pod")] == [
        "(ignoring pod pi-launcher-0-0-forge: it carries TrainJob pi's labels, but the job's controllers did not "
        "make it: not followed, not counted)"
    ]
    assert hook.owner_checks == ["pi"]  # one check: 3 GETs for the JobSet and both Jobs


async def test_the_chain_is_read_once_per_job_however_many_waits_and_changes():
    hook = TrainJobHook(job_obj=RUNNING, workers=[node_pod(0), node_pod(1)])
    async with (
        watch_hub.subscription(hook, "ns", "pi") as one,
        watch_hub.subscription(hook, "ns", "pi") as two,
    ):
        one.uid = two.uid = UID
        await one.settle()
        assert [p.metadata.name for p in one.worker_pods()] == ["pi-node-0-0-abcde", "pi-node-0-1-abcde"]
        seen = one.version
        hook.launchers = [launcher_pod()]
        await one.wait_change(seen, 30)
        assert len(await one.launchers()) == 1 and len(await two.launchers()) == 1
    assert hook.owner_checks == ["pi"]


async def test_a_failed_trainjobs_causes_name_its_node_pods_and_the_rank_mpirun_reports_dead():
    oom = node_pod(
        1, phase="Failed", state="terminated", exit_code=137, reason="OOMKilled", memory_limit="1Gi"
    )
    ended = node_pod(0, phase="Succeeded", state="terminated", exit_code=0, reason="Completed")
    launcher = launcher_pod(phase="Failed", state="terminated", exit_code=137, reason="Error")
    hook = TrainJobHook(
        job_obj=trainjob(FAILED, jobs=jobs_status(failed=1)),
        launchers=[launcher],
        workers=[ended, oom, forged("pi-node-0-7-forge", "node")],
        logs={
            (launcher.metadata.name, False): [
                "2026-11-22T10:00:03Z mpirun noticed that process rank 1 with PID 0 on node pi-node-0-1 "
                "exited on signal 9 (Killed)."
            ],
            (oom.metadata.name, False): ["2026-11-22T10:00:01Z Server listening on 0.0.0.0 port 2222."],
        },
    )
    lines: list[str] = []
    result = await asyncio.wait_for(monitor(hook, lines, get_logs=False, tail_lines=5).run(), 10)
    assert (result.outcome, result.reason) == ("failed", "FailedJobs")
    causes = result.failure["causes"]
    oom_cause = "worker pod pi-node-0-1-abcde (container node): OOMKilled: out of memory, memory limit 1Gi"
    assert any(cause.startswith(oom_cause) for cause in causes), causes
    assert "rank 1 on pi-node-0-1: signal 9 (SIGKILL), as mpirun reports it" in causes
    assert result.cause == "oom"
    assert "pi-node-0-7-forge" not in [request[0] for request in hook.log_requests]


async def test_a_wait_for_running_ends_once_its_launcher_pod_runs():
    """A TrainJob writes no Running condition: the wait (a sensor's target) derives it from the launcher pod."""
    hook = TrainJobHook(job_obj=RUNNING, workers=[node_pod(0), node_pod(1)])
    wait = asyncio.create_task(monitor(hook, [], target_condition="Running", get_logs=False).run())
    await asyncio.sleep(0.1)
    assert not wait.done()  # its node pods run, its launcher not yet
    hook.launchers = [launcher_pod()]
    result = await asyncio.wait_for(wait, 10)
    assert (result.outcome, result.condition) == ("target", "Running")


def test_its_kueue_lines_name_a_trainjob_its_suspend_field_and_the_trainer():
    tracker = monitor(TrainJobHook(job_obj=RUNNING), []).queue
    queued = {"metadata": {"name": "pi", "labels": {"kueue.x-k8s.io/queue-name": "q"}}, "status": {}}
    queued["status"]["conditions"] = [{"type": "Suspended", "status": "True"}]
    assert tracker.observe(queued, None, NOW)[0] == ["TrainJob pi is queued by Kueue in LocalQueue q: waiting for "
                                                     "Kueue to admit it"]  # fmt: skip
    assert (tracker.suspend_field, tracker.controller) == ("spec.suspend", "Kubeflow Trainer")
