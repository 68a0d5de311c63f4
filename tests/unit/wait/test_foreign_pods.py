"""A pod that carries a job's labels but that the job's controllers did not make (issue 32, item 3): whoever may
create pods in the namespace can make one. The wait neither follows nor counts it: none of its output reaches the
task log, it is no launcher attempt, no failed worker, no failure's cause; the task log names it once.

The cluster is the fakes' (tests/unit/fakes.py): their pods carry the controller references mpi-operator v0.8.2
gives (``controller_ref``), the foreign ones here none, or forged ones.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace as NS

import pytest

from airflow_mpi.wait import watch_hub
from airflow_mpi.wait.monitor import JobMonitor
from tests.unit.fakes import FakeAsyncHook, job, pod
from tests.unit.wait.test_monitor import FAILED_WORKER, NOW, frozen_clock, monitor  # noqa: F401 - the fixture

DONE = job("job", "ns", ("Created", "x"), ("Succeeded", "MPIJobSucceeded"))
RUNNING = job("job", "ns", ("Created", "x"), ("Running", "x"))
REAL_LINES = ["2026-11-22T10:00:05Z pi is 3.14", "2026-11-22T10:00:06Z done"]
FORGED_LINES = ["2026-11-22T10:00:01Z FORGED rank 0 result: 666"]
#: the pods that claim the launcher's place: only labels; a controller reference to a Job of the launcher Job's
#: name, but not its uid; to another MPIJob of the same name (an earlier incarnation); to the MPIJob, not controller
CLAIMS = {
    "labels only": None,
    "forged launcher Job": NS(
        api_version="batch/v1", kind="Job", name="job-launcher", uid="forged", controller=True
    ),
    "earlier incarnation": NS(
        api_version="kubeflow.org/v2beta1", kind="MPIJob", name="job", uid="uid-before", controller=True
    ),
    "owner, not controller": NS(
        api_version="kubeflow.org/v2beta1", kind="MPIJob", name="job", uid="uid-job", controller=False
    ),
}


def ignored(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.startswith("(ignoring pod")]


@pytest.mark.parametrize("claim", CLAIMS.values(), ids=CLAIMS.keys())
async def test_a_pod_with_the_launchers_labels_is_no_attempt_and_none_of_its_output_reaches_the_task_log(
    claim,
):
    forged = pod(
        "job-launcher-forged",
        created="2026-11-22T10:00:00",
        state="terminated",
        phase="Succeeded",
        owner=claim,
    )
    real = pod("job-launcher-a", created="2026-11-22T10:00:04", state="terminated", phase="Succeeded")
    hook = FakeAsyncHook(
        job_obj=DONE,
        launchers=[forged, real],
        logs={("job-launcher-forged", False): FORGED_LINES, ("job-launcher-a", False): REAL_LINES},
    )
    lines: list[str] = []
    result = await monitor(hook, lines).run()
    assert result.outcome == "success"
    assert not [ln for ln in lines if "FORGED" in ln], lines
    assert [ln for ln in lines if not ln.startswith(("=", "("))] == ["pi is 3.14", "done"]
    assert result.launcher_pods == ["job-launcher-a"] and result.launcher_attempts == 1
    assert ignored(lines) == [
        "(ignoring pod job-launcher-forged: it carries MPIJob job's labels, but the job's "
        "controllers did not make it: not followed, not counted)"
    ]
    assert "job-launcher-forged" not in [request[0] for request in hook.log_requests]


async def test_a_failed_pod_with_a_workers_labels_before_the_launcher_neither_ends_the_wait_nor_deletes_the_job():
    """Counted, it was a worker failed before the launcher started: ``worker_failed``, and the task deleted the
    real job. Ignored, the wait goes on to the real launcher's outcome."""
    foreign = pod(
        "job-worker-9",
        role="worker",
        phase="Failed",
        state="terminated",
        exit_code=1,
        reason="Error",
        container="worker",
        owner=None,
    )
    hook = FakeAsyncHook(
        job_obj=RUNNING, workers=[pod("job-worker-0", role="worker", container="worker"), foreign]
    )
    lines: list[str] = []
    noted = asyncio.Event()

    def emit(line: str) -> None:
        lines.append(line)
        if line.startswith("(ignoring pod job-worker-9"):
            noted.set()

    wait = asyncio.create_task(
        JobMonitor(hook, "job", "ns", emit=emit, submitted_at=NOW, poll_interval=0.01).run()
    )
    note = asyncio.create_task(noted.wait())
    await asyncio.wait({wait, note}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    note.cancel()
    assert not wait.done(), f"the wait ended on a pod that is not the job's: {wait.result()}"
    hook.launchers = [pod("job-launcher-a", state="terminated", phase="Succeeded")]
    hook.job_obj = DONE
    result = await asyncio.wait_for(wait, 30)
    assert result.outcome == "success" and hook.deleted == []
    assert len(ignored(lines)) == 1 and result.failure is None


async def test_a_failed_jobs_report_names_and_reads_only_the_jobs_own_pods():
    foreign = pod(
        "job-worker-9",
        role="worker",
        phase="Failed",
        state="terminated",
        exit_code=137,
        reason="OOMKilled",
        container="worker",
        owner=None,
    )
    failed = job("job", "ns", ("Created", "x"), ("Failed", "BackoffLimitExceeded"))
    hook = FakeAsyncHook(
        job_obj=failed,
        workers=[FAILED_WORKER, foreign],
        logs={
            ("job-worker-1", False): ["2026-11-22T10:00:01Z real end"],
            ("job-worker-9", False): FORGED_LINES,
        },
    )
    lines: list[str] = []
    result = await monitor(hook, lines, get_logs=False, tail_lines=5).run()
    assert result.outcome == "failed"
    assert result.failure["causes"] == ["worker pod job-worker-1 (container worker): Error, exit code 1"]
    assert [tail["pod"] for tail in result.failure["tails"]] == ["job-worker-1"]
    assert "job-worker-9" not in [request[0] for request in hook.log_requests]
    assert len(ignored(lines)) == 1


async def test_the_launcher_job_is_read_once_per_job_not_per_pod_or_change():
    """The launcher Job's uid is one GET (shared by every wait on the job), however many launcher attempts and
    changes follow; a worker's controller, the MPIJob, needs none."""
    hook = FakeAsyncHook(job_obj=RUNNING, workers=[pod("job-worker-0", role="worker")])
    async with (
        watch_hub.subscription(hook, "ns", "job") as one,
        watch_hub.subscription(hook, "ns", "job") as two,
    ):
        assert [p.metadata.name for p in await one.launchers()] == [] and len(one.worker_pods()) == 1
        for attempt in range(3):
            seen = one.version
            hook.launchers = [
                *hook.launchers,
                pod(f"job-launcher-{attempt}", created=f"2026-11-22T10:0{attempt}:00"),
            ]
            await one.wait_change(seen, 30)
            assert len(await one.launchers()) == attempt + 1 and len(await two.launchers()) == attempt + 1
    assert hook.__dict__["launcher_job_gets"] == ["job"]


async def test_a_launcher_job_that_the_mpijob_does_not_control_makes_no_launcher():
    """A co-tenant made the Job ``<name>-launcher`` before the mpi-operator (which then refuses to use it) and
    pods under it: the Job's controller is not the MPIJob, so neither are its pods the job's."""

    class Squatted(FakeAsyncHook):
        async def get_launcher_job(self, name, namespace):
            job_ = await super().get_launcher_job(name, namespace)
            job_["metadata"]["ownerReferences"] = []
            return job_

    hook = Squatted(
        job_obj=DONE,
        launchers=[pod("job-launcher-a", state="terminated", phase="Succeeded")],
        logs={("job-launcher-a", False): FORGED_LINES},
    )
    lines: list[str] = []
    result = await monitor(hook, lines).run()
    assert result.launcher_pods == [] and not [ln for ln in lines if "FORGED" in ln]
    assert len(ignored(lines)) == 1
