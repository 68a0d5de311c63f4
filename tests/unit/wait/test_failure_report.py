"""A failed wait's report (wait/failure_report.py through the monitor and the trigger): what is read when, what
is awaited and for how long. The cluster here changes pods one watch event at a time, as the test says, and serves
a pod's log only while the pod exists (as the API server does)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from airflow_mpi.hooks.errors import PodLogUnavailable
from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.wait import failure_causes as fc
from airflow_mpi.wait.contract import WaitOptions, WaitResult
from airflow_mpi.wait.monitor import JobMonitor
from tests.unit.fakes import FakeAsyncHook, job, pod

NOW = datetime.now(UTC)


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch):
    from airflow_mpi.wait import monitor as monitor_module

    monkeypatch.setattr(monitor_module, "utcnow", lambda: NOW)


class Cluster(FakeAsyncHook):
    """Pods change by :meth:`change` only, each change one pod watch event; logs are served while the pod exists."""

    def __init__(self, job_obj: dict, pods: list, logs: dict) -> None:
        super().__init__(job_obj=job_obj, logs=logs)
        self.__dict__.update(
            current={p.metadata.name: p for p in pods}, changes=asyncio.Queue(), reads=asyncio.Queue()
        )

    def _pods(self) -> list:
        return list(self.current.values())

    def change(self, event_type: str, obj) -> None:
        if event_type == "DELETED":
            self.current.pop(obj.metadata.name)
        else:
            self.current[obj.metadata.name] = obj
        self.changes.put_nowait((event_type, obj))

    async def watch_objects(self, kind, namespace, **kwargs):
        if kind != "pods":
            async for event in super().watch_objects(kind, namespace, **kwargs):
                yield event
            return
        while True:
            event_type, obj = await self.changes.get()
            yield event_type, obj, "1"
            self.changes.task_done()  # the hub applied it

    async def read_pod_log(self, pod_name, namespace, **kwargs):
        if pod_name not in self.current:
            raise PodLogUnavailable(
                pod_name, namespace, kwargs.get("container"), 404, f'pods "{pod_name}" not found'
            )
        self.reads.put_nowait(pod_name)
        async for line in super().read_pod_log(pod_name, namespace, **kwargs):
            yield line


def failed_job(policy: str | None) -> dict:
    obj = job("job", "ns", ("Created", "x"), ("Failed", "BackoffLimitExceeded"))
    if policy:
        obj["spec"] = {"runPolicy": {"cleanPodPolicy": policy}}
    return obj


def worker(name: str, **kw):
    return pod(name, role="worker", container="worker", memory_limit="128Mi", **kw)


LAUNCHER = pod("job-launcher-a", state="terminated", exit_code=137, reason="Error", phase="Failed")
LOGS = {
    ("job-worker-0", False): ["2026-11-24T13:00:00Z Server listening on 0.0.0.0 port 2222."],
    ("job-worker-1", False): [
        "2026-11-24T13:00:00Z Server listening on 0.0.0.0 port 2222.",
        "2026-11-24T13:00:01Z Accepted publickey for mpiuser",
    ],
    ("job-launcher-a", False): [
        "2026-11-24T13:00:02Z rank 1 start",
        "2026-11-24T13:00:03Z mpirun noticed that process rank 1 exited on signal 9",
    ],
}


def monitor(hook, **kw) -> JobMonitor:
    return JobMonitor(
        hook, "job", "ns", emit=lambda line: None, submitted_at=NOW, poll_interval=0.01, get_logs=False, **kw
    )


def clean_up(hook: Cluster, name: str, reason: str, deletion: datetime) -> None:
    """The mpi-operator deletes a live worker; sshd ends on SIGTERM (0); on cgroup v1 an OOM kill of a rank in the
    container's cgroup shows as the container's reason only now; the kubelet then removes the pod."""
    hook.change("MODIFIED", worker(name, deletion=deletion))
    ended = worker(name, state="terminated", exit_code=0, reason=reason, phase="Succeeded", deletion=deletion)
    hook.change("MODIFIED", ended)
    hook.change("DELETED", ended)


async def test_an_oom_killed_rank_is_named_once_the_clean_up_ends_its_worker_and_its_log_was_read_before():
    hook = Cluster(failed_job("Running"), [LAUNCHER, worker("job-worker-0"), worker("job-worker-1")], LOGS)
    run = asyncio.create_task(monitor(hook, tail_lines=5).run())
    # at the verdict: the live workers' logs (the clean-up is about to delete them) and the failed launcher's
    assert {await hook.reads.get() for _ in range(3)} == {"job-worker-0", "job-worker-1", "job-launcher-a"}
    assert not run.done()  # awaiting the workers' ends, not sleeping: nothing changed yet
    for name, reason in (("job-worker-0", "Completed"), ("job-worker-1", "OOMKilled")):
        clean_up(hook, name, reason, NOW + timedelta(seconds=30))
    result = await asyncio.wait_for(run, 10)
    failure = result.failure
    assert failure["causes"] == [
        "worker pod job-worker-1 (container worker): OOMKilled: out of memory, memory limit 128Mi; a process of the "
        "container was killed, the container itself ended with exit code 0",
        "launcher pod job-launcher-a (container launcher): Error, exit code 137 (128 + 9: SIGKILL)",
    ]
    assert [(t["pod"], t["lines"]) for t in failure["tails"]] == [
        ("job-worker-1", ["Server listening on 0.0.0.0 port 2222.", "Accepted publickey for mpiuser"]),
        ("job-launcher-a", ["rank 1 start", "mpirun noticed that process rank 1 exited on signal 9"]),
    ]
    assert result.cause == "oom"  # seen only once the clean-up ended the worker
    event = result.to_event()
    assert json.loads(json.dumps(event)) == event  # plain JSON: it travels in a trigger event
    assert WaitResult.from_event(json.loads(json.dumps(event))) == result


async def test_the_rank_mpirun_reports_dead_is_named_before_the_launchers_exit_code():
    """A rank killed as a process of its worker: the worker pod lives on, only mpirun's words name it."""
    logs = {
        **LOGS,
        ("job-launcher-a", False): [
            "2026-11-24T13:00:03Z mpirun noticed that process rank 1 with PID 0 on node job-worker-1 "
            "exited on signal 9 (Killed)."
        ],
    }
    hook = Cluster(failed_job(None), [LAUNCHER, worker("job-worker-0"), worker("job-worker-1")], logs)
    result = await asyncio.wait_for(monitor(hook).run(), 10)
    assert result.failure["causes"] == [
        "rank 1 on job-worker-1: signal 9 (SIGKILL), as mpirun reports it",
        "launcher pod job-launcher-a (container launcher): Error, exit code 137 (128 + 9: SIGKILL)",
    ]


async def test_with_clean_pod_policy_none_running_workers_are_not_awaited():
    hook = Cluster(failed_job(None), [LAUNCHER, worker("job-worker-0")], LOGS)
    result = await asyncio.wait_for(monitor(hook).run(), 10)  # the clock is frozen: only no waiting ends this
    assert result.failure["causes"] == [
        "launcher pod job-launcher-a (container launcher): Error, exit code 137 (128 + 9: SIGKILL)"
    ]
    assert [t["pod"] for t in result.failure["tails"]] == ["job-launcher-a"]


async def test_a_worker_that_outlives_its_grace_period_is_not_awaited_longer():
    stuck = worker("job-worker-0", deletion=NOW - timedelta(seconds=fc.SETTLE_SLACK + 1))
    hook = Cluster(failed_job("Running"), [LAUNCHER, stuck], LOGS)
    result = await asyncio.wait_for(monitor(hook).run(), 10)
    assert len(result.failure["causes"]) == 1


async def test_a_worker_deleted_before_the_verdict_is_named_from_its_last_state():
    """The pod watch may report the clean-up before the MPIJob watch reports the failure."""
    running = job("job", "ns", ("Created", "x"), ("Running", "x"))
    running["spec"] = {"runPolicy": {"cleanPodPolicy": "Running"}}
    hook = Cluster(running, [LAUNCHER, worker("job-worker-0")], LOGS)
    run = asyncio.create_task(monitor(hook, tail_lines=5).run())
    clean_up(hook, "job-worker-0", "OOMKilled", NOW + timedelta(seconds=30))
    await hook.changes.join()
    hook.job_obj = failed_job("Running")
    failure = (await asyncio.wait_for(run, 10)).failure
    assert failure["causes"][0].startswith("worker pod job-worker-0 (container worker): OOMKilled")
    (tail, _) = failure["tails"]
    assert tail["pod"] == "job-worker-0" and tail["lines"] == [] and "HTTP 404" in tail["note"]


async def test_an_evicted_worker_replaced_by_the_mpi_operator_is_the_first_cause():
    """The Eviction API deletes worker 0 (DisruptionTarget set first), its sshd ends with the deletion's SIGTERM
    (no cause by itself: the clean-up ends workers that way too), the mpi-operator creates a new pod of the same
    name, and mpirun, having lost a rank, fails the launcher. The eviction is named before the launcher's exit."""
    running = job("job", "ns", ("Created", "x"), ("Running", "x"))
    hook = Cluster(running, [worker("job-worker-0"), worker("job-worker-1")], LOGS)
    run = asyncio.create_task(monitor(hook, tail_lines=5).run())
    why = ("EvictionByEvictionAPI", "Eviction API: evicting")
    deletion = NOW + timedelta(seconds=30)
    hook.change("MODIFIED", worker("job-worker-0", disruption=why, deletion=deletion))
    hook.change(
        "DELETED",
        worker(
            "job-worker-0",
            disruption=why,
            deletion=deletion,
            state="terminated",
            exit_code=255,
            reason="Error",
            phase="Failed",
        ),
    )
    hook.change("ADDED", worker("job-worker-0", uid="uid-job-worker-0-again"))
    hook.change("ADDED", LAUNCHER)
    await hook.changes.join()
    hook.job_obj = failed_job(None)
    result = await asyncio.wait_for(run, 10)
    assert result.cause == "disrupted"
    causes = result.failure["causes"]
    assert causes == [
        "worker pod job-worker-0 (container worker): disrupted (EvictionByEvictionAPI: Eviction API: "
        "evicting)",
        "launcher pod job-launcher-a (container launcher): Error, exit code 137 (128 + 9: SIGKILL)",
    ]


async def test_a_worker_that_failed_by_itself_is_kept_and_read_and_no_tails_when_turned_off():
    failed = worker("job-worker-0", state="terminated", exit_code=255, reason="Error", phase="Failed")
    hook = Cluster(failed_job("Running"), [LAUNCHER, failed], LOGS)
    result = await asyncio.wait_for(monitor(hook).run(), 10)
    assert result.failure["causes"][0] == "worker pod job-worker-0 (container worker): Error, exit code 255"
    assert result.cause == "program"
    assert [t["pod"] for t in result.failure["tails"]] == ["job-worker-0", "job-launcher-a"]
    hook = Cluster(failed_job("Running"), [LAUNCHER, failed], LOGS)
    result = await asyncio.wait_for(monitor(hook, tail_lines=0).run(), 10)
    assert result.failure["tails"] == [] and len(result.failure["causes"]) == 2
    assert hook.reads.empty()


async def test_a_succeeded_job_has_no_report():
    done = job("job", "ns", ("Created", "x"), ("Succeeded", "x"))
    hook = Cluster(done, [pod("job-launcher-a", state="terminated", phase="Succeeded")], LOGS)
    result = await monitor(hook).run()
    assert result.outcome == "success" and result.failure is None and hook.reads.empty()


async def test_the_trigger_carries_the_report_and_its_tail_lines(monkeypatch):
    import contextlib

    trigger = MPIJobTrigger(
        name="job",
        namespace="ns",
        submitted_at=NOW.isoformat(),
        options=WaitOptions(poll_interval=0.01, get_logs=False, tail_lines=1),
    )
    assert MPIJobTrigger(**trigger.serialize()[1]).options.tail_lines == 1
    hook = Cluster(failed_job(None), [LAUNCHER], LOGS)

    @contextlib.asynccontextmanager
    async def use():
        yield hook

    monkeypatch.setattr(trigger, "_hook", use)
    (event,) = [e async for e in trigger.run()]
    assert event.payload["failure"]["tails"][0]["lines"] == [
        "mpirun noticed that process rank 1 exited on signal 9"
    ]
