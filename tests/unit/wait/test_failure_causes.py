"""wait/failure_causes.py: a failed try's cause named from its pods' plain summaries, bounded."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_mpi.function_task.rank_runner import MARKER
from airflow_mpi.wait import failure_causes as fc
from airflow_mpi.wait.contract import Cause
from airflow_mpi.wait.progress import PodSummary

T0 = datetime(2026, 11, 24, 13, 0, tzinfo=UTC)


def worker(name: str = "pi-worker-1", **fields) -> PodSummary:
    base = {
        "role": "worker",
        "created": T0,
        "phase": "Running",
        "scheduled": True,
        "container": "worker",
        "state": "running",
    }
    return PodSummary(name=name, **{**base, **fields})


def ended(name: str = "pi-worker-1", **fields) -> PodSummary:
    return worker(name, state="terminated", **fields)


def launcher(name: str, created: datetime, exit_code: int = 1) -> PodSummary:
    return PodSummary(
        name=name,
        role="launcher",
        created=created,
        phase="Failed",
        scheduled=True,
        container="launcher",
        state="terminated",
        exit_code=exit_code,
        terminated_reason="Error",
    )


@pytest.mark.parametrize(
    ("code", "signal", "text"),
    [
        (137, None, "exit code 137 (128 + 9: SIGKILL)"),
        (143, None, "exit code 143 (128 + 15: SIGTERM)"),
        (139, None, "exit code 139 (128 + 11: SIGSEGV)"),
        (3, None, "exit code 3"),
        (255, None, "exit code 255"),  # 128 + 127: no signal
        (None, 6, "signal 6 (SIGABRT)"),
        (134, 6, "exit code 134 (128 + 6: SIGABRT), signal 6 (SIGABRT)"),
    ],
)
def test_exit_codes_name_the_signal_they_stand_for(code, signal, text):
    assert fc.exit_text(code, signal) == text


def test_oom_on_cgroup_v1_names_the_limit_and_says_the_container_itself_lived_on():
    # a rank over the limit was killed; sshd (the main process) ended with 0 when the clean-up stopped it
    pod = ended(
        exit_code=0, terminated_reason="OOMKilled", memory_limit="128Mi", deleting=True, phase="Succeeded"
    )
    assert fc.pod_cause(pod) == (
        "worker pod pi-worker-1 (container worker): OOMKilled: out of memory, memory limit 128Mi; a process of the "
        "container was killed, the container itself ended with exit code 0"
    )


def test_a_disruption_is_a_cause_but_a_plain_deletion_by_the_clean_up_is_not():
    cleaned = ended(exit_code=143, deleting=True, phase="Failed")
    assert fc.pod_cause(cleaned) is None
    evicted = replace(cleaned, disruption="EvictionByEvictionAPI: Eviction API: evicting")
    assert fc.pod_cause(evicted) == (
        "worker pod pi-worker-1 (container worker): disrupted (EvictionByEvictionAPI: Eviction API: evicting)"
    )
    # the replacement of the same name failed too: both named, the disruption first, a repeat once
    failed = ended(exit_code=1, phase="Failed", terminated_reason="Error")
    assert fc.causes([failed], [evicted, evicted]) == [fc.pod_cause(evicted), fc.pod_cause(failed)]


def test_an_end_before_the_clean_up_asked_for_the_deletion_is_a_cause_even_if_seen_after_it():
    """Seen first on a pod being deleted (the kubelet, loaded, reported the exit after the mpi-operator's clean-up
    had begun: run R38), a container that ended before the deletion was asked for failed by itself; one that ended
    at or after it was ended by the clean-up (timestamps are whole seconds: a tie is the clean-up's)."""
    asked = T0 + timedelta(seconds=40)
    being_deleted = {
        "deleting": True,
        "deletion_deadline": asked + timedelta(seconds=30),
        "deletion_grace": 30.0,
    }
    before = ended(
        exit_code=3, terminated_reason="Error", finished_at=asked - timedelta(seconds=1), **being_deleted
    )
    assert fc.pod_cause(before) == "worker pod pi-worker-1 (container worker): Error, exit code 3"
    assert fc.failed_pods([before]) == [before]
    for at in (asked, asked + timedelta(seconds=2)):
        assert fc.pod_cause(replace(before, finished_at=at)) is None  # the clean-up's end, whatever its code
    # what it cannot tell apart stays the clean-up's: no end time, or no grace period known
    assert fc.pod_cause(replace(before, finished_at=None)) is None
    assert fc.pod_cause(replace(before, deletion_grace=None)) is None


def test_oom_of_the_main_process_names_limit_exit_code_and_signal():
    pod = ended(exit_code=137, terminated_reason="OOMKilled", memory_limit="1Gi", phase="Failed")
    assert fc.pod_cause(pod) == (
        "worker pod pi-worker-1 (container worker): OOMKilled: out of memory, memory limit "
        "1Gi, exit code 137 (128 + 9: SIGKILL)"
    )
    unlimited = replace(pod, memory_limit=None)
    assert "no memory limit (the node ran out of memory)" in fc.pod_cause(unlimited)


def test_an_evicted_pod_says_the_kubelets_why():
    pod = worker(
        phase="Failed",
        state="terminated",
        exit_code=137,
        terminated_reason="Error",
        deleting=False,
        pod_reason="Evicted",
        pod_message="The node was low on resource: memory.",
    )
    cause = fc.pod_cause(pod)
    assert cause.startswith(
        "worker pod pi-worker-1 (container worker): Evicted: The node was low on resource: memory."
    )


def test_the_failure_kind_is_oom_before_a_disruption_before_the_programs_own_failure():
    program = launcher("pi-launcher", T0, exit_code=1)
    assert fc.failure_kind([program, worker()]) is Cause.PROGRAM
    # cgroup v1: the container lived on and ended with 0 when the clean-up stopped it, OOMKilled all the same
    oom = ended(exit_code=0, terminated_reason="OOMKilled", deleting=True, phase="Succeeded")
    assert fc.failure_kind([program, oom]) is Cause.OOM
    restarted = worker(restart_count=1, last_terminated_reason="OOMKilled", last_exit_code=137)
    assert fc.failure_kind([restarted]) is Cause.OOM
    evicted = worker(phase="Failed", state="terminated", exit_code=137, pod_reason="Evicted")
    assert fc.failure_kind([program, evicted]) is Cause.DISRUPTED
    assert fc.failure_kind([program, evicted, oom]) is Cause.OOM
    # disrupted during the wait, replaced since by a pod of the same name
    assert (
        fc.failure_kind([program], [replace(worker(), disruption="PreemptionByScheduler")]) is Cause.DISRUPTED
    )
    # a plain deletion by the clean-up is no failure, whatever it ended with
    assert fc.failure_kind([program, ended(exit_code=143, deleting=True)]) is Cause.PROGRAM
    assert fc.report([], [], fc.failure_kind([oom]))["kind"] == "oom"


def test_a_container_that_kept_failing_gives_its_restarts_and_how_it_last_ended():
    pod = worker(
        state="waiting",
        waiting_reason="CrashLoopBackOff",
        restart_count=5,
        last_terminated_reason="Error",
        last_exit_code=1,
    )
    assert fc.pod_cause(pod) == (
        "worker pod pi-worker-1 (container worker): restarted 5 times, now CrashLoopBackOff; "
        "previous container ended: Error, exit code 1"
    )
    oom = replace(pod, last_terminated_reason="OOMKilled", last_exit_code=137, memory_limit="64Mi")
    assert fc.pod_cause(oom).endswith("previous container ended: OOMKilled, memory limit 64Mi")


@pytest.mark.parametrize(
    "pod",
    [
        worker(),  # running
        ended(exit_code=0, terminated_reason="Completed", phase="Succeeded"),  # ended well
        ended(exit_code=137, terminated_reason="Error", deleting=True),  # killed by the clean-up's deletion
        ended(exit_code=143, terminated_reason="Error", deleting=True),
        worker(phase="Pending", state="waiting", waiting_reason="ContainerCreating"),
    ],
    ids=["running", "completed", "deleted-137", "deleted-143", "pending"],
)
def test_no_cause_where_nothing_failed(pod):
    assert fc.pod_cause(pod) is None


def test_failed_workers_in_order_then_only_the_newest_failed_launcher():
    pods = [
        launcher("pi-launcher-a", T0, 1),
        worker("pi-worker-0"),
        ended("pi-worker-1", exit_code=2, terminated_reason="Error", phase="Failed"),
        launcher("pi-launcher-b", T0 + timedelta(minutes=1), 3),
        ended("pi-worker-2", exit_code=0, terminated_reason="OOMKilled", deleting=True),
    ]
    assert [p.name for p in fc.failed_pods(pods)] == ["pi-worker-1", "pi-worker-2", "pi-launcher-b"]
    assert fc.causes(pods)[-1] == "launcher pod pi-launcher-b (container launcher): Error, exit code 3"


def test_causes_are_counted_past_the_limit():
    pods = [
        ended(f"pi-worker-{i}", exit_code=1, terminated_reason="Error", phase="Failed") for i in range(20)
    ]
    lines = fc.causes(pods)
    assert len(lines) == fc.MAX_CAUSES + 1 and lines[-1] == f"... and {20 - fc.MAX_CAUSES} more failed pods"


def test_a_failure_seen_at_the_verdict_survives_the_clean_up_and_an_oom_shows_at_the_end():
    failed = ended("pi-worker-0", exit_code=255, terminated_reason="Error", phase="Failed")
    running = worker("pi-worker-1")
    later = [
        replace(failed, deleting=True),  # cleanPodPolicy All deleted it afterwards: still the cause
        ended("pi-worker-1", exit_code=0, terminated_reason="OOMKilled", memory_limit="128Mi", deleting=True),
    ]
    merged = {p.name: p for p in fc.merge_observations([failed, running], later)}
    assert merged["pi-worker-0"] == failed
    assert merged["pi-worker-1"].terminated_reason == "OOMKilled"


def test_which_workers_ends_are_awaited_depends_on_the_clean_pod_policy():
    live, pending = worker("pi-worker-0"), worker("pi-worker-1", phase="Pending", state=None)
    deleting = worker("pi-worker-2", deleting=True, deletion_deadline=T0 + timedelta(seconds=30))
    done = ended("pi-worker-3", exit_code=1, phase="Failed")
    pods = [live, pending, deleting, done]
    assert fc.awaited_workers(pods, "None") == [deleting]  # workers keep running: only a deletion under way
    assert fc.awaited_workers(pods, "Running") == [live, pending, deleting]
    assert fc.awaited_workers(pods, "All") == [live, pending, deleting]


def test_the_settle_deadline_is_the_grace_period_bounded():
    assert fc.settle_deadline([], T0) is None
    deleting = worker(deleting=True, deletion_deadline=T0 + timedelta(seconds=30))
    assert fc.settle_deadline([deleting], T0) == T0 + timedelta(seconds=30 + fc.SETTLE_SLACK)
    to_be_deleted = worker(grace_period=2.0)
    assert fc.settle_deadline([to_be_deleted], T0) == T0 + timedelta(
        seconds=fc.DELETION_START + 2 + fc.SETTLE_SLACK
    )
    assert fc.settle_deadline([worker()], T0) == T0 + timedelta(
        seconds=fc.DELETION_START + fc.DEFAULT_GRACE + fc.SETTLE_SLACK
    )
    patient = worker(deleting=True, deletion_deadline=T0 + timedelta(hours=1))
    assert fc.settle_deadline([patient], T0) == T0 + timedelta(seconds=fc.MAX_SETTLE)


def test_tails_are_read_of_failed_workers_first_then_of_the_doomed_ones():
    failed = ended("pi-worker-9", exit_code=1, phase="Failed")
    doomed = [worker(f"pi-worker-{i}") for i in range(6)]
    assert fc.tail_candidates([*doomed, failed], "None") == [failed]
    assert fc.tail_candidates([*doomed, failed], "Running") == [failed, *doomed[: fc.MAX_WORKER_TAILS - 1]]


def test_a_restarted_container_that_runs_again_is_read_from_its_previous_instance():
    assert fc.reads_previous(worker(restart_count=2))
    assert not fc.reads_previous(ended(restart_count=2, exit_code=1))
    assert not fc.reads_previous(worker())


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.text(max_size=700), max_size=300),
    max_lines=st.integers(0, 500),
    max_bytes=st.integers(0, 5000),
)
def test_a_tail_is_the_newest_lines_within_lines_and_bytes(lines, max_lines, max_bytes):
    tail = fc.bound_tail(lines, max_lines, max_bytes)
    assert len(tail) <= min(max_lines, fc.MAX_TAIL_LINES)
    assert sum(len(line.encode()) + 1 for line in tail) <= max_bytes
    assert all(len(line) <= fc.LINE_CHARS for line in tail)
    clipped = [fc.clip(line, fc.LINE_CHARS) for line in lines if MARKER not in line]
    assert tail == (clipped[len(clipped) - len(tail) :] if tail else [])  # the newest ones, in order


def test_result_marker_lines_are_never_quoted():
    lines = ["rank 1 says hi", f"[1,0]<stdout>:{MARKER} abc value 0 1 2 eJy=", "last"]
    assert fc.bound_tail(lines, 10) == ["rank 1 says hi", "last"]


_text = st.text(min_size=0, max_size=3000)


@settings(max_examples=100, deadline=None)
@given(
    pods=st.lists(
        st.builds(
            PodSummary,
            name=st.text(min_size=1, max_size=60),
            role=st.sampled_from(["worker", "launcher"]),
            created=st.none() | st.just(T0),
            phase=st.sampled_from([None, "Running", "Failed", "Succeeded", "Pending"]),
            scheduled=st.booleans(),
            container=st.none() | st.text(max_size=60),
            restart_count=st.integers(0, 10**6),
            state=st.sampled_from([None, "waiting", "running", "terminated"]),
            waiting_reason=st.none() | _text,
            exit_code=st.none() | st.integers(-(2**31), 2**31),
            terminated_reason=st.none() | _text,
            signal=st.none() | st.integers(0, 300),
            termination_message=st.none() | _text.map(fc.clip),
            last_terminated_reason=st.none() | _text,
            last_exit_code=st.none() | st.integers(0, 255),
            pod_reason=st.none() | st.sampled_from(["Evicted", "DeadlineExceeded"]),
            pod_message=st.none() | _text.map(fc.clip),
            memory_limit=st.none() | st.sampled_from(["128Mi", "1Gi"]),
            deleting=st.booleans(),
        ),
        max_size=40,
    ),
    tails=st.lists(st.lists(_text, max_size=200), max_size=10),
)
def test_a_report_stays_small_plain_json_whatever_the_pods_say(pods, tails):
    entries = [
        fc.tail_entry(pods[0] if pods else worker(), fc.bound_tail(lines, fc.MAX_TAIL_LINES), None)
        for lines in tails
    ]
    report = fc.report(fc.causes(pods), entries)
    size = len(json.dumps(report).encode())
    # causes (a 1,000-character line each, plus the count) and tails (TAIL_BYTES each, JSON-escaped at most 6x)
    assert size <= (fc.MAX_CAUSES + 1) * 6 * 2 * fc.MAX_TEXT + (fc.MAX_WORKER_TAILS + 1) * 6 * (
        fc.TAIL_BYTES + 600
    )
    assert json.loads(json.dumps(report)) == report
    assert all(len(cause) <= 2 * fc.MAX_TEXT for cause in report["causes"])


def test_explain_quotes_causes_and_the_last_lines_of_each_tail():
    failure = {
        "causes": ["worker pod w (container worker): Error, exit code 3"],
        "tails": [
            {
                "pod": "w",
                "role": "worker",
                "container": "worker",
                "lines": [f"l{i}" for i in range(30)],
                "note": None,
            },
            {"pod": "l", "role": "launcher", "container": None, "lines": [], "note": "unavailable (x)"},
        ],
    }
    lines = fc.explain(failure)
    assert lines[0] == "cause: worker pod w (container worker): Error, exit code 3"
    assert lines[1] == f"last {fc.ERROR_TAIL_LINES} log lines of worker w (container worker):"
    assert lines[2 : 2 + fc.ERROR_TAIL_LINES] == [f"    l{i}" for i in range(30 - fc.ERROR_TAIL_LINES, 30)]
    assert lines[-1] == "log of launcher l: unavailable (x)"
    assert fc.explain(None) == [] and fc.explain({}) == []
