from __future__ import annotations

import asyncio
import contextlib
import itertools
from datetime import UTC, datetime, timedelta

import pytest

from airflow_mpi.hooks import retries
from airflow_mpi.hooks.errors import WatchExpired
from airflow_mpi.jobspec.status import job_state
from airflow_mpi.wait import watch_hub
from airflow_mpi.wait.monitor import JobMonitor
from airflow_mpi.wait.progress import Timeouts, assess
from airflow_mpi.wait.summaries import pod_summary as summary
from tests.unit.fakes import FakeAsyncHook, job, pod

NOW = datetime.now(UTC)


def failed_worker(**changes):
    """Worker 1, its container terminated with an error (``changes`` override the pod's fields)."""
    fields = dict(
        role="worker", phase="Failed", state="terminated", exit_code=1, reason="Error", container="worker"
    )
    return pod("job-worker-1", **{**fields, **changes})


FAILED_WORKER = failed_worker()
# the same worker deleted (the kubelet kills a deleted pod's containers, exit 137, and reports it Failed)
DELETED_WORKER = failed_worker(exit_code=137, deletion=NOW)


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch):
    """The monitor's clock stays at NOW: verdicts that depend on elapsed time (a pod Pending past its schedule
    timeout) must not change with how long the suite ran before this module (a full CI run took minutes)."""
    from airflow_mpi.wait import monitor as monitor_module

    monkeypatch.setattr(monitor_module, "utcnow", lambda: NOW)


def monitor(hook, lines, **kw):
    kw.setdefault("submitted_at", NOW)
    kw.setdefault("poll_interval", 0.01)
    return JobMonitor(hook, "job", "ns", emit=lines.append, **kw)


async def test_success_streams_each_line_once_across_a_cut_stream():
    running = job("job", "ns", ("Created", "MPIJobCreated"), ("Running", "MPIJobRunning"), rv="2")
    done = job("job", "ns", ("Created", "x"), ("Succeeded", "MPIJobSucceeded"), rv="3")
    hook = FakeAsyncHook(
        job_obj=running,
        watch_script=[[("MODIFIED", done)]],
        launchers=[pod("job-launcher-a", state="terminated", phase="Succeeded")],
        logs={
            ("job-launcher-a", False): [
                "2026-11-22T10:00:01.1Z one",
                "2026-11-22T10:00:01.2Z two",
                "2026-11-22T10:00:02Z three",
            ]
        },
        log_failures={"job-launcher-a": 2},
    )
    lines: list[str] = []
    result = await monitor(hook, lines).run()
    assert result.outcome == "success"
    assert lines[0] == "========== launcher attempt 1, pod job-launcher-a =========="
    assert [ln for ln in lines if not ln.startswith("=")] == ["one", "two", "three"]
    assert result.launcher_pods == ["job-launcher-a"] and result.launcher_attempts == 1
    assert hook.deleted == []


class RotatingKubelet(FakeAsyncHook):
    """A kubelet serves only the current log file: after the first read was cut, it rotated the file away."""

    async def read_pod_log(self, pod, namespace, **kwargs):
        if self.log_requests:  # a resumed read: "two" and "three" went with the rotated file
            self.logs[(pod, False)] = self.logs[(pod, False)][3:]
        async for line in super().read_pod_log(pod, namespace, **kwargs):
            yield line


async def test_lines_the_kubelet_rotated_away_before_a_resumed_read_are_said_missing_never_silently():
    done = job("job", "ns", ("Created", "x"), ("Succeeded", "MPIJobSucceeded"), rv="3")
    hook = RotatingKubelet(
        job_obj=done,
        launchers=[pod("job-launcher-a", state="terminated", phase="Succeeded")],
        logs={
            ("job-launcher-a", False): [
                "2026-11-22T10:00:01.1Z one",
                "2026-11-22T10:00:01.2Z two",
                "2026-11-22T10:00:02Z three",
                "2026-11-22T10:00:09Z four",
                "2026-11-22T10:00:10Z five",
            ]
        },
        log_failures={"job-launcher-a": 2},
    )
    lines: list[str] = []
    assert (await monitor(hook, lines).run()).outcome == "success"
    shown = [ln for ln in lines if not ln.startswith("=")]
    assert shown[:2] == ["one", "two"] and shown[3:] == ["four", "five"]
    assert shown[2] == (
        "(launcher log job-launcher-a/launcher/0: the log server no longer serves the lines after "
        "2026-11-22T10:00:01.200000000Z up to 2026-11-22T10:00:09.000000000Z, e.g. the kubelet rotated them away "
        "(containerLogMaxSize) while this reader was not following; lines printed in between, if any, are not in "
        "this log)"
    )


async def test_every_attempt_gets_a_header_in_order():
    failed = job("job", "ns", ("Created", "x"), ("Failed", "BackoffLimitExceeded"))
    hook = FakeAsyncHook(
        job_obj=failed,
        launchers=[
            pod(
                "job-launcher-2",
                created="2026-11-22T10:00:10",
                state="terminated",
                exit_code=3,
                phase="Failed",
            ),
            pod(
                "job-launcher-1",
                created="2026-11-22T10:00:00",
                state="terminated",
                exit_code=1,
                phase="Failed",
            ),
        ],
        logs={
            ("job-launcher-1", False): ["2026-11-22T10:00:01Z first"],
            ("job-launcher-2", False): ["2026-11-22T10:00:11Z second"],
        },
    )
    lines: list[str] = []
    result = await monitor(hook, lines, max_attempts=2).run()
    assert result.outcome == "failed" and result.reason == "BackoffLimitExceeded"
    assert lines == [
        "========== launcher attempt 1 of 2, pod job-launcher-1 ==========",
        "first",
        "========== launcher attempt 2 of 2, pod job-launcher-2 ==========",
        "second",
    ]
    assert result.launcher_attempts == 2
    assert result.launcher_exit_codes == [1, 3]  # oldest attempt first


async def test_restarted_container_log_is_read_with_previous():
    done = job("job", "ns", ("Created", "x"), ("Succeeded", "x"))
    hook = FakeAsyncHook(
        job_obj=done,
        launchers=[pod("job-launcher-a", state="terminated", restart_count=1, phase="Succeeded")],
        logs={
            ("job-launcher-a", True): ["2026-11-22T10:00:01Z before restart"],
            ("job-launcher-a", False): ["2026-11-22T10:00:05Z after restart"],
        },
    )
    lines: list[str] = []
    await monitor(hook, lines).run()
    assert [ln for ln in lines if not ln.startswith("=")] == ["before restart", "after restart"]
    assert "container restart 1" in lines[2]


async def test_watch_expiry_and_disconnect_are_survived(monkeypatch):
    monkeypatch.setattr(retries, "OUTAGE_RETRY_DELAY", 0)
    created = job("job", "ns", ("Created", "x"), rv="5")
    done = job("job", "ns", ("Created", "x"), ("Succeeded", "x"), rv="9")
    hook = FakeAsyncHook(
        job_obj=created,
        watch_script=[WatchExpired("job", "ns", "5"), ConnectionError("cut"), [("MODIFIED", done)]],
    )
    result = await monitor(hook, [], get_logs=False).run()
    assert result.outcome == "success" and hook.watch_script == []
    # after the 410 the hub lists again (the version may be compacted); after a cut it resumes without a list
    assert hook.lists.count("mpijobs") == 2
    assert hook.watch_versions[:3] == ["5", "5", "5"]


@pytest.mark.parametrize(
    "events_watch_forbidden", [False, True], ids=["hub-watches-events", "wait-lists-events"]
)
async def test_validation_error_event_fails_fast(events_watch_forbidden):
    hook = FakeAsyncHook(
        job_obj=job("job", "ns"),
        events_watch_forbidden=events_watch_forbidden,
        events=[
            {
                "type": "Warning",
                "reason": "ValidationError",
                "message": "spec.mpiReplicaSpecs[Worker].replicas: bad",
                "involvedObject": {"name": "job"},
            }
        ],
    )
    result = await monitor(hook, [], get_logs=False).run()
    assert result.outcome == "invalid" and "replicas: bad" in result.message


async def test_unschedulable_pod_after_schedule_timeout_surfaces_events():
    created = job("job", "ns", ("Created", "x"))
    hook = FakeAsyncHook(
        job_obj=created,
        workers=[
            pod(
                "job-worker-0",
                role="worker",
                phase="Pending",
                state=None,
                scheduled=False,
                created="2020-01-01T00:00:00",
            )
        ],
        events=[
            {
                "type": "Warning",
                "reason": "FailedScheduling",
                "message": "0/4 nodes are available: Insufficient nvidia.com/gpu",
                "involvedObject": {"name": "job-worker-0"},
            }
        ],
    )
    result = await monitor(hook, [], get_logs=False, timeouts=Timeouts(120, 5)).run()
    assert result.outcome == "unschedulable"
    assert "Insufficient nvidia.com/gpu" in result.message


async def test_a_worker_failed_before_the_launch_ends_the_wait_naming_it_and_its_log():
    """WaitForWorkersReady: mpi-operator v0.8.2 neither replaces a failed worker nor fails the job; the launcher
    would never come, the other workers would hold their GPUs forever."""
    hook = FakeAsyncHook(
        job_obj=job("job", "ns", ("Created", "x")),
        workers=[pod("job-worker-0", role="worker", container="worker"), FAILED_WORKER],
        logs={("job-worker-1", False): ["sshd: no hostkeys available -- exiting."]},
    )
    result = await monitor(hook, [], get_logs=False).run()
    assert result.outcome == "worker_failed"
    assert result.message.startswith(
        "worker pod job-worker-1 failed before the launcher started (Error, exit code 1)"
    )
    assert result.failure["causes"] == ["worker pod job-worker-1 (container worker): Error, exit code 1"]
    assert result.failure["tails"][0]["lines"] == ["sshd: no hostkeys available -- exiting."]


@pytest.mark.parametrize(
    "pods",
    [
        [FAILED_WORKER, pod("job-launcher-a")],  # the launcher runs: its mpirun fails, and the job with it
        [
            pod("job-worker-1", role="worker", phase="Failed", pod_reason="Evicted")
        ],  # the mpi-operator fails the job
        [DELETED_WORKER],  # killed on its way out: its job was suspended or preempted (Kueue)
    ],
    ids=["launcher-started", "evicted", "deleted"],
)
def test_a_failed_worker_is_left_to_the_mpi_operator_once_it_acts_on_it(pods):
    state = job_state(job("job", "ns", ("Created", "x")))
    verdict = assess(state, [summary(p) for p in pods], [], now=NOW, submitted_at=NOW, timeouts=Timeouts())
    assert verdict.outcome is None


async def test_startup_timeout_without_created():
    hook = FakeAsyncHook(job_obj=job("job", "ns"))
    result = await monitor(
        hook, [], get_logs=False, submitted_at=NOW - timedelta(seconds=10), timeouts=Timeouts(5, 300)
    ).run()
    assert result.outcome == "startup_timeout"


async def test_deadline_deletes_the_job_when_owned_only():
    running = job("job", "ns", ("Created", "x"), ("Running", "x"))
    owned = FakeAsyncHook(job_obj=running)
    result = await monitor(owned, [], get_logs=False, deadline=NOW - timedelta(seconds=1)).run()
    assert result.outcome == "timeout" and owned.deleted == [("job", "ns")]
    watched = FakeAsyncHook(job_obj=running)
    await monitor(watched, [], get_logs=False, deadline=NOW - timedelta(seconds=1), owns_job=False).run()
    assert watched.deleted == []


async def test_deleted_job_ends_the_wait():
    hook = FakeAsyncHook(job_obj=None)
    assert (await monitor(hook, [], get_logs=False).run()).outcome == "deleted"


async def test_a_job_replaced_under_its_name_is_not_followed_nor_deleted():
    """Someone deleted the task's job and made another under the same name: not this task's job."""
    other = job("job", "ns", ("Created", "x"), ("Running", "x"))
    other["metadata"]["uid"] = "someone-elses"
    hook = FakeAsyncHook(job_obj=other)
    result = await monitor(hook, [], get_logs=False, uid="ours").run()
    assert result.outcome == "deleted" and "replaced by another MPIJob" in result.message
    assert result.uid == "ours" and hook.deleted == []


async def test_target_condition_reached():
    hook = FakeAsyncHook(job_obj=job("job", "ns", ("Created", "x"), ("Running", "x")))
    result = await monitor(hook, [], get_logs=False, target_condition="Running").run()
    assert result.outcome == "target"


async def test_drain_resumes_from_state_without_duplicates():
    done = job("job", "ns", ("Created", "x"), ("Succeeded", "x"))
    logs = {
        ("job-launcher-a", False): [
            "2026-11-22T10:00:01Z a",
            "2026-11-22T10:00:01Z b",
            "2026-11-22T10:00:02Z c",
        ]
    }
    hook = FakeAsyncHook(job_obj=done, launchers=[pod("job-launcher-a", state="running")], logs=logs)
    first: list[str] = []
    m = monitor(hook, first)
    # the trigger printed the first two lines, then handed over
    log_pass = m.logs.cursor.new_pass("job-launcher-a/launcher/0")
    for raw in logs[("job-launcher-a", False)][:2]:
        log_pass.accept(raw)
    m.logs.streams.append("job-launcher-a/launcher/0")
    state = m.logs.to_dict()
    hook.launchers = [pod("job-launcher-a", state="terminated")]
    resumed: list[str] = []
    await monitor(hook, resumed, log_state=state).drain_logs()
    assert resumed == ["c"]


@pytest.mark.parametrize("status", [403, 401, 400])
async def test_client_errors_are_not_retried(status):
    from kubernetes_asyncio.client.exceptions import ApiException

    err = ApiException(status=status, reason="no")
    hook = FakeAsyncHook(job_obj=job("job", "ns", ("Created", "x")), watch_script=[err])
    with pytest.raises(ApiException):
        await monitor(hook, [], get_logs=False).run()


async def test_server_errors_are_retried():
    from kubernetes_asyncio.client.exceptions import ApiException

    done = job("job", "ns", ("Created", "x"), ("Succeeded", "x"))
    hook = FakeAsyncHook(
        job_obj=job("job", "ns", ("Created", "x")),
        watch_script=[ApiException(status=503, reason="restarting"), [("MODIFIED", done)]],
    )
    assert (await monitor(hook, [], get_logs=False).run()).outcome == "success"


@pytest.mark.parametrize("status", [403, 401])
async def test_authorization_errors_while_an_api_server_comes_back_are_retried(monkeypatch, status):
    """A restarted API server refuses non-admin identities until its RBAC/auth caches synced (least privilege)."""
    from kubernetes_asyncio.client.exceptions import ApiException

    monkeypatch.setattr(retries, "OUTAGE_RETRY_DELAY", 0)
    done = job("job", "ns", ("Created", "x"), ("Succeeded", "x"))
    hook = FakeAsyncHook(
        job_obj=job("job", "ns", ("Created", "x")),
        watch_script=[
            ConnectionError("refused"),
            ApiException(status=status, reason="not synced"),
            [("MODIFIED", done)],
        ],
    )
    assert (await monitor(hook, [], get_logs=False).run()).outcome == "success"


async def test_a_follow_stream_that_never_ends_is_left_once_the_container_stopped():
    """Some log servers keep a follow stream open after the container exited."""
    import asyncio

    done = job("job", "ns", ("Created", "x"), ("Succeeded", "x"), rv="3")
    running = job("job", "ns", ("Created", "x"), ("Running", "x"), rv="2")

    class EndlessFollow(FakeAsyncHook):
        async def read_pod_log(self, pod_name, namespace, *, follow=False, **kw):
            async for line in super().read_pod_log(pod_name, namespace, follow=follow, **kw):
                yield line
            if follow:
                self.launchers = [pod("job-launcher-a", state="terminated")]
                self.job_obj = done
                await asyncio.Event().wait()  # hangs like a stream that is never closed

    hook = EndlessFollow(
        job_obj=running,
        launchers=[pod("job-launcher-a", state="running")],
        logs={("job-launcher-a", False): ["2026-11-22T10:00:01Z only"]},
    )
    lines: list[str] = []
    result = await asyncio.wait_for(monitor(hook, lines).run(), 30)
    assert result.outcome == "success"
    assert [ln for ln in lines if not ln.startswith("=")] == ["only"]
    assert [r[3] for r in hook.log_requests][:2] == [True, False]  # followed, then read the rest


class KubeletFollow(FakeAsyncHook):
    """A kubelet's follow stream: it ends by itself once the container exited (``exits``: whether it did), before
    the pod's status says so (the status follows ``status_after`` seconds later)."""

    exits: bool = True
    status_after: float = 0.2

    async def read_pod_log(self, pod_name, namespace, *, follow=False, **kw):
        import asyncio

        async for line in super().read_pod_log(pod_name, namespace, follow=follow, **kw):
            yield line
        if follow and self.exits and self.launchers[0].status.container_statuses[0].state.running:
            done = job("job", "ns", ("Created", "x"), ("Succeeded", "x"), rv="3")
            asyncio.get_running_loop().call_later(self.status_after, self._report_exit, done)

    def _report_exit(self, done):
        self.launchers = [pod("job-launcher-a", state="terminated")]
        self.job_obj = done


async def test_a_kubelet_ending_the_follow_before_the_status_says_so_is_not_followed_again():
    running = job("job", "ns", ("Created", "x"), ("Running", "x"), rv="2")
    hook = KubeletFollow(
        job_obj=running,
        launchers=[pod("job-launcher-a", state="running")],
        logs={("job-launcher-a", False): ["2026-11-22T10:00:01Z only"]},
    )
    lines: list[str] = []
    result = await monitor(hook, lines).run()
    assert result.outcome == "success"
    assert [ln for ln in lines if not ln.startswith("=")] == ["only"]
    assert [r[3] for r in hook.log_requests] == [True, False]  # followed once, then read the rest


class RotatingFollow(KubeletFollow):
    """A kubelet whose log rotates while it is followed (``rotate_to``: the current file's lines afterwards), and
    whose reads of the current file's start may fail (``probe_error``)."""

    rotate_to: list | None = None
    probe_error: BaseException | None = None
    probe_answer: str | None = None  # what the read of the current file's start gets instead of the file

    async def read_pod_log(self, pod_name, namespace, *, follow=False, limit_bytes=None, **kw):
        if limit_bytes is not None and self.probe_error is not None:
            raise self.probe_error
        if limit_bytes is not None and self.probe_answer is not None:
            yield self.probe_answer
            return
        async for line in super().read_pod_log(
            pod_name, namespace, follow=follow, limit_bytes=limit_bytes, **kw
        ):
            yield line
        if follow and self.rotate_to is not None:
            self.logs[(pod_name, False)] = self.rotate_to


ROTATED_LOG = [
    "2026-11-22T10:00:01.1Z one",
    "2026-11-22T10:00:01.2Z two",
    "2026-11-22T10:00:02Z three",
    "2026-11-22T10:00:09.5Z four",
    "2026-11-22T10:00:10Z five",
]


def rotating(rotate_to=None, probe_error=None) -> RotatingFollow:
    running = job("job", "ns", ("Created", "x"), ("Running", "x"), rv="2")
    hook = RotatingFollow(
        job_obj=running,
        launchers=[pod("job-launcher-a", state="running")],
        logs={("job-launcher-a", False): list(ROTATED_LOG)},
    )
    hook.rotate_to, hook.probe_error = rotate_to, probe_error
    return hook


async def test_a_log_rotated_while_followed_is_said_once_with_where_the_node_keeps_the_old_file():
    hook = rotating(rotate_to=ROTATED_LOG[3:])
    lines: list[str] = []
    assert (await monitor(hook, lines).run()).outcome == "success"
    shown = [ln for ln in lines if not ln.startswith("=")]
    assert shown[:5] == ["one", "two", "three", "four", "five"] and len(shown) == 6
    assert shown[5] == (
        "(launcher log job-launcher-a/launcher/0: the kubelet rotated this log while it was followed "
        "(containerLogMaxSize; its current file starts at 2026-11-22T10:00:09.500000000Z). At a rotation the last "
        "line or two containerd writes to the old file can miss the follow, and the API serves only the current "
        "file: a line that seems missing is in the node's rotated files, "
        "/var/log/pods/ns_job-launcher-a_<pod uid>/launcher/0.log.<time>)"
    )
    assert hook.log_probes == ["job-launcher-a"]


async def test_a_log_rotated_after_its_last_line_is_said_too():
    """The kubelet rotated the log once more after the container's last output: the current file is empty."""
    hook = rotating(rotate_to=[])
    lines: list[str] = []
    assert (await monitor(hook, lines).run()).outcome == "success"
    shown = [ln for ln in lines if not ln.startswith("=")]
    assert shown[:5] == ["one", "two", "three", "four", "five"] and len(shown) == 6
    assert (
        "the kubelet rotated this log while it was followed (containerLogMaxSize; its current file is empty)"
        in shown[5]
    )


async def test_an_error_text_instead_of_the_files_start_says_nothing():
    hook = rotating()
    hook.probe_answer = "unable to retrieve container logs for containerd://abc"
    lines: list[str] = []
    assert (await monitor(hook, lines).run()).outcome == "success"
    assert [ln for ln in lines if not ln.startswith("=")] == ["one", "two", "three", "four", "five"]


async def test_a_container_restarted_after_its_follow_is_no_rotation():
    """restartPolicy OnFailure: the container's new instance writes a newer file of its own; nothing is said."""

    class Restarting(RotatingFollow):
        def _report_exit(self, done):  # the container failed and runs again: its old log is the previous one
            self.logs[("job-launcher-a", True)] = list(ROTATED_LOG)
            self.logs[("job-launcher-a", False)] = ["2026-11-22T10:00:20Z again"]
            self.launchers = [pod("job-launcher-a", state="terminated", restart_count=1)]
            self.job_obj = done

    running = job("job", "ns", ("Created", "x"), ("Running", "x"), rv="2")
    hook = Restarting(
        job_obj=running,
        launchers=[pod("job-launcher-a", state="running")],
        logs={("job-launcher-a", False): list(ROTATED_LOG)},
    )
    hook.status_after = 0
    lines: list[str] = []
    assert (await monitor(hook, lines).run()).outcome == "success"
    assert [ln for ln in lines if not ln.startswith("=")] == ["one", "two", "three", "four", "five", "again"]


@pytest.mark.parametrize(
    "probe_error", [None, ConnectionError("kubelet gone")], ids=["not-rotated", "probe-fails"]
)
async def test_a_follow_of_a_log_not_seen_rotated_says_nothing_more(probe_error):
    hook = rotating(probe_error=probe_error)
    lines: list[str] = []
    assert (await monitor(hook, lines).run()).outcome == "success"
    assert [ln for ln in lines if not ln.startswith("=")] == ["one", "two", "three", "four", "five"]
    assert hook.log_probes == ([] if probe_error else ["job-launcher-a"])
    assert [r[3] for r in hook.log_requests] == [True, False]  # the probe is no read of the log itself


class CountedRequests(list):
    """A fake hook's ``log_requests`` that sets ``reached`` once it holds ``count`` of them: a test awaits the
    monitor's next read of the log instead of polling the list."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count
        self.reached = asyncio.Event()

    def append(self, request) -> None:
        super().append(request)
        if len(self) >= self.count:
            self.reached.set()


async def test_a_follow_ended_while_the_container_still_runs_is_resumed_without_losing_lines(monkeypatch):
    import asyncio

    from airflow_mpi.wait import log_pump

    monkeypatch.setattr(log_pump, "EOF_SETTLE", 0.05)
    running = job("job", "ns", ("Created", "x"), ("Running", "x"), rv="2")
    log = ["2026-11-22T10:00:01Z one"]
    requests = CountedRequests(2)
    hook = KubeletFollow(
        job_obj=running,
        launchers=[pod("job-launcher-a", state="running")],
        logs={("job-launcher-a", False): log},
        log_requests=requests,
    )
    hook.exits = False

    async def more_output_then_exit():
        await requests.reached.wait()  # the first follow ended (a proxy dropped it), the container runs on
        log.append("2026-11-22T10:00:03Z two")
        hook.exits = True

    writer = asyncio.create_task(more_output_then_exit())
    lines: list[str] = []
    result = await asyncio.wait_for(monitor(hook, lines).run(), 30)
    await writer
    assert result.outcome == "success"
    assert [ln for ln in lines if not ln.startswith("=")] == ["one", "two"]
    follows = [r[3] for r in hook.log_requests]
    assert follows[:2] == [True, True] and follows[-1] is False


async def test_pending_pods_cost_no_event_listing_until_one_is_stuck(monkeypatch):
    """Events can only explain a stuck pod (or a ValidationError before Created): a queue of Pending jobs lists none."""
    import asyncio

    from airflow_mpi.wait import monitor as monitor_module

    calls: list[str] = []
    twenty_checks = asyncio.Event()
    checks: list[int] = []

    def counting_assess(*args, **kwargs):
        checks.append(1)
        if len(checks) == 20:
            twenty_checks.set()
        return assess(*args, **kwargs)

    assess = monitor_module.assess
    monkeypatch.setattr(monitor_module, "assess", counting_assess)

    class Counting(FakeAsyncHook):
        async def job_events(self, name, namespace):
            calls.append(name)
            return await super().job_events(name, namespace)

    pending = pod(
        "job-worker-0", role="worker", phase="Pending", state=None, scheduled=False, created=NOW.isoformat()
    )
    hook = Counting(job_obj=job("job", "ns", ("Created", "x")), workers=[pending])
    task = asyncio.create_task(monitor(hook, [], get_logs=False, timeouts=Timeouts(120, 300)).run())
    await asyncio.wait_for(twenty_checks.wait(), 30)
    assert calls == [] and not task.done()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task  # the wait leaves its hub


async def test_a_succeeded_job_whose_launcher_pod_is_gone_says_its_log_could_not_be_read():
    """cleanPodPolicy All / the launcher Job's TTL removed the pod before this try read anything."""
    done = job("job", "ns", ("Created", "x"), ("Succeeded", "MPIJobSucceeded"))
    lines: list[str] = []
    result = await monitor(FakeAsyncHook(job_obj=done, launchers=[]), lines).run()
    assert result.outcome == "success"
    assert len(lines) == 1 and "launcher's log could not be read: its pod is gone" in lines[0], lines


async def test_a_launcher_pod_gone_mid_read_is_told_once_and_nothing_else_is_claimed():
    done = job("job", "ns", ("Created", "x"), ("Succeeded", "x"))
    logs = {("job-launcher-a", False): ["2026-11-22T10:00:01Z a", "2026-11-22T10:00:02Z b"]}
    hook = FakeAsyncHook(job_obj=done, launchers=[pod("job-launcher-a", state="running")], logs=logs)
    m = monitor(hook, [])
    log_pass = m.logs.cursor.new_pass("job-launcher-a/launcher/0")
    log_pass.accept(logs[("job-launcher-a", False)][0])  # "a" was read, then the trigger handed over
    m.logs.streams.append("job-launcher-a/launcher/0")
    hook.launchers = []  # the pod is gone before the rest was read
    resumed: list[str] = []
    await monitor(hook, resumed, log_state=m.logs.to_dict()).drain_logs()
    assert resumed == [
        "(launcher log job-launcher-a/launcher/0 could not be read to its end: its pod is gone; "
        "lines it printed after the last one above, if any, are not in this log)"
    ]


class Restarting(FakeAsyncHook):
    """An API server that refuses ``failures`` reads (each error in turn) before it answers again."""

    def __init__(self, *args, failures: list[BaseException], **kwargs):
        super().__init__(*args, **kwargs)
        self.__dict__["failures"] = list(failures)

    async def get_mpijob(self, name, namespace):
        if self.failures:
            raise self.failures.pop(0)
        return await super().get_mpijob(name, namespace)


def _api_error(status: int):
    from kubernetes_asyncio.client.exceptions import ApiException

    return ApiException(status=status, reason="x")


async def test_the_first_read_rides_out_an_api_server_restart(monkeypatch, caplog):
    """A restart between the create and the wait's first GET (a CI run): longer than one call's own retries, and
    an API server that is back but has not synced its RBAC caches yet (403), still a success."""
    import logging

    from airflow_mpi.hooks import retries

    monkeypatch.setattr(retries, "OUTAGE_RETRY_DELAY", 0)
    outage = [ConnectionRefusedError(111, "Connect call failed")] * 8 + [_api_error(503), _api_error(403)]
    done = job("job", "ns", ("Created", "x"), ("Succeeded", "x"))
    hook = Restarting(job_obj=done, failures=outage)
    with caplog.at_level(logging.WARNING, logger="airflow_mpi.hooks.retries"):
        result = await monitor(hook, [], get_logs=False).run()
    assert result.outcome == "success" and hook.failures == []
    assert len([r for r in caplog.records if "Kubernetes API unavailable" in r.getMessage()]) == len(outage)


@pytest.mark.parametrize("status", [403, 401, 400])
async def test_a_refusal_on_the_first_read_fails_at_once(monkeypatch, status):
    """Outside an outage a 401/403 is the answer (a service account without rights), not a blip to wait out."""
    from airflow_mpi.hooks import retries

    monkeypatch.setattr(retries, "OUTAGE_RETRY_DELAY", 0)
    hook = Restarting(
        job_obj=job("job", "ns", ("Created", "x")), failures=[_api_error(status), _api_error(503)]
    )
    with pytest.raises(Exception) as err:
        await monitor(hook, [], get_logs=False).run()
    assert getattr(err.value, "status", None) == status and len(hook.failures) == 1


@pytest.mark.parametrize("window, succeeds", [(60.0, True), (0.0, False)])
async def test_a_refusal_on_the_first_read_just_after_another_call_met_the_outage(
    monkeypatch, window, succeeds
):
    """A wait's read sent just after the API server came back (its watches met the outage, not this read) gets the
    403 of an API server whose RBAC caches have not synced yet: still the outage, while another call saw the API
    fail within the window; the answer after it (a CI run: a task failed with a bare ApiException)."""
    from airflow_mpi.hooks import retries

    monkeypatch.setattr(retries, "OUTAGE_RETRY_DELAY", 0)
    monkeypatch.setattr(retries, "RECENT_FAILURE_WINDOW", window)
    retries.worth_retrying(ConnectionRefusedError(111, "Connect call failed"), in_outage=True)  # a watch's
    hook = Restarting(
        job_obj=job("job", "ns", ("Created", "x"), ("Succeeded", "x")), failures=[_api_error(403)]
    )
    if succeeds:
        assert (await monitor(hook, [], get_logs=False).run()).outcome == "success"
    else:
        with pytest.raises(Exception) as err:
            await monitor(hook, [], get_logs=False).run()
        assert getattr(err.value, "status", None) == 403
    assert hook.failures == []


async def test_an_outage_longer_than_the_limit_fails_the_wait(monkeypatch):
    from airflow_mpi.hooks import retries

    monkeypatch.setattr(retries, "OUTAGE_RETRY_DELAY", 0)
    monkeypatch.setattr(retries, "API_OUTAGE_LIMIT", 0)
    hook = Restarting(
        job_obj=job("job", "ns", ("Created", "x")), failures=[ConnectionRefusedError(111, "down")] * 3
    )
    with pytest.raises(ConnectionRefusedError):
        await monitor(hook, [], get_logs=False).run()
    assert len(hook.failures) == 2


async def test_a_job_waiting_to_be_created_lists_its_events_with_a_doubling_gap(monkeypatch):
    """Where the hub may not watch events: 1,000 jobs submitted at once wait minutes for the mpi-operator, their
    checks must not each cost a LIST. A ValidationError that comes late is still seen, within the gap (5 min)."""
    from airflow_mpi.wait import monitor as monitor_module

    clock = [NOW]
    checks: list[datetime] = []
    real_assess = monitor_module.assess

    def assess_every_5s(*args, **kwargs):  # each check: 5 s later
        clock[0] += timedelta(seconds=5)
        checks.append(clock[0])
        if len(checks) == 180:  # 15 min: the operator finally rejects the spec
            hook.events.append(
                {
                    "type": "Warning",
                    "reason": "ValidationError",
                    "message": "late: bad spec",
                    "involvedObject": {"name": "job"},
                }
            )
        return real_assess(*args, **kwargs)

    class Counting(FakeAsyncHook):
        async def job_events(self, name, namespace):
            listed.append(clock[0])
            return await super().job_events(name, namespace)

    listed: list[datetime] = []
    monkeypatch.setattr(monitor_module, "utcnow", lambda: clock[0])
    monkeypatch.setattr(monitor_module, "assess", assess_every_5s)
    hook = Counting(job_obj=job("job", "ns"), events_watch_forbidden=True)
    result = await monitor(hook, [], get_logs=False, timeouts=Timeouts(None, None), poll_interval=0).run()
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(listed)]
    assert result.outcome == "invalid" and "late: bad spec" in result.message
    assert gaps[:5] == [10, 20, 40, 80, 160] and max(gaps) <= 300, gaps
    assert len(listed) < 12 and len(checks) > 180  # instead of one LIST per check
    assert (listed[-1] - checks[179]).total_seconds() <= 300


@pytest.mark.parametrize(
    "events_watch_forbidden", [False, True], ids=["hub-watches-events", "wait-lists-events"]
)
async def test_a_startup_timeout_is_given_on_fresh_events(monkeypatch, events_watch_forbidden):
    """The verdict quotes the events of the moment it is given, not those of the last listing (nor only the
    ValidationErrors the hub watches)."""
    from airflow_mpi.wait import monitor as monitor_module

    clock = [NOW]
    monkeypatch.setattr(monitor_module, "utcnow", lambda: clock[0])
    hook = FakeAsyncHook(job_obj=job("job", "ns"), events_watch_forbidden=events_watch_forbidden)
    m = monitor(hook, [], get_logs=False, timeouts=Timeouts(60, None), submitted_at=NOW)
    async with watch_hub.subscription(hook, "ns", "job") as sub:
        assert not (await m._assess(hook.job_obj, sub)).done  # listed at NOW: nothing
        hook.events.append(
            {
                "type": "Warning",
                "reason": "FailedCreate",
                "message": "quota exceeded",
                "involvedObject": {"name": "job"},
            }
        )
        clock[0] = NOW + timedelta(
            seconds=61
        )  # past the startup timeout, before the next listing is due (gap)
        m._uncreated_gap = 600
        verdict = await m._assess(hook.job_obj, sub)
    assert verdict.outcome == "startup_timeout" and any("quota exceeded" in w for w in verdict.warnings), (
        verdict
    )


async def test_a_job_waiting_to_be_created_costs_no_event_listing_until_the_hubs_watch_sees_its_validation_error():
    """The hub watches the ValidationError events of the namespace's MPIJobs: a wait for a job not yet Created
    lists nothing while it waits (1,000 queued jobs made 1,675 event LISTs a minute), wakes when the event comes,
    and lists its job's events once, for the verdict's message. An earlier incarnation's event does not count."""
    import asyncio

    listed: list[str] = []

    class Counting(FakeAsyncHook):
        async def job_events(self, name, namespace):
            listed.append(name)
            return await super().job_events(name, namespace)

    current = job("job", "ns")
    current["metadata"]["uid"] = "uid-2"
    hook = Counting(
        job_obj=current,
        events=[
            {
                "type": "Warning",
                "reason": "ValidationError",
                "message": "old run",
                "involvedObject": {"name": "job", "uid": "uid-1"},
            }
        ],
    )
    task = asyncio.create_task(
        monitor(hook, [], get_logs=False, timeouts=Timeouts(None, None), poll_interval=0.001).run()
    )
    for _ in range(200):  # 200 checks of the job, at least: nothing listed, not over
        await asyncio.sleep(0.001)
    assert listed == [] and not task.done()
    hook.add_event(
        {
            "type": "Warning",
            "reason": "ValidationError",
            "message": "spec.slotsPerWorker: bad",
            "involvedObject": {"name": "job", "uid": "uid-2"},
        }
    )
    result = await asyncio.wait_for(task, 30)
    assert result.outcome == "invalid" and "slotsPerWorker: bad" in result.message
    assert listed == ["job"]


async def test_a_drain_of_a_launcher_that_still_runs_reads_again_at_a_steady_pace_not_back_to_back():
    """A drain (the wait is over: a sensor's target condition, ``attach_logs``) finds the launcher still running:
    it reads its log again once a second or when the pod changes, until the container ends."""
    logs = {("job-launcher-a", False): ["2026-11-22T10:00:01Z a"]}
    hook = FakeAsyncHook(
        job_obj=job("job", "ns", ("Created", "x"), ("Running", "x")),
        launchers=[pod("job-launcher-a", state="running")],
        logs=logs,
    )
    lines: list[str] = []
    drain = asyncio.create_task(monitor(hook, lines).drain_logs())
    await asyncio.sleep(1.5)
    hook.launchers = [pod("job-launcher-a", state="terminated", phase="Succeeded")]
    await asyncio.wait_for(drain, 5)
    assert [ln for ln in lines if not ln.startswith("=")] == ["a"]
    assert 2 <= len(hook.log_requests) <= 4, hook.log_requests  # was: hundreds of reads in that time
