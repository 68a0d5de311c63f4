"""Why a failed MPIJob failed, named from its pods' summaries (pure): the text a failed task's error carries.

The MPIJob's condition only says that the launcher Job ran out of attempts ("BackoffLimitExceeded"); users of the
mpi-operator ask for the cause behind it (kubeflow/mpi-operator#90: a worker killed for out-of-memory shows only as
a failed launcher; #461: the pods are cleaned up before their logs can be read).

On a cgroup v1 node an MPI rank over the worker's memory limit is killed as a *process*: the worker's main process
(sshd) lives on and the container shows ``OOMKilled`` only once it ends, which, for a failed job, is when the
``cleanPodPolicy`` (Running or All) deletes the still running workers. So a worker that ends *while being deleted*
is a cause only when it ran out of memory: any other end (``Completed``, or 137/143 from the deletion's own
signals) is the clean-up. :func:`awaited_workers` and :func:`settle_deadline` say which ends are still to come and
for how long (wait/failure_report.py awaits them).

Everything that leaves here is bounded (texts, lines, bytes, pods): it travels in trigger events, stored in
Airflow's metadata database.
"""

from __future__ import annotations

import signal as signals
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from airflow_mpi.function_task.rank_runner import MARKER
from airflow_mpi.jobspec.spec import CLEAN_ALL, CLEAN_RUNNING
from airflow_mpi.jobspec.vocabulary import LAUNCHER, TERMINAL_PHASES, WORKER, PodPhase
from airflow_mpi.wait.contract import Cause
from airflow_mpi.wait.log_groups import escape
from airflow_mpi.wait.progress import EVICTED, PodSummary

OOM_KILLED = "OOMKilled"
DELETING_POLICIES = frozenset({CLEAN_RUNNING, CLEAN_ALL})  # the cleanPodPolicy values deleting live workers

MAX_TEXT = 500  # characters of one text from the cluster (termination or eviction message)
MAX_CAUSES = 8  # causes named; more failed pods are counted
MAX_WORKER_TAILS = 4  # failed workers whose last log lines are read (the launcher's comes on top)
MAX_TAIL_LINES = 100  # lines of one tail, whatever worker_log_tail_lines asks
TAIL_BYTES = 2048  # bytes of one tail (the newest lines are kept)
LINE_CHARS = 300  # characters of one tail line
ERROR_TAIL_LINES = 10  # lines of each tail quoted in the exception (the task log gets the whole tail)

DELETION_START = 10.0  # seconds the mpi-operator gets to start deleting the live workers (measured: 30 ms)
DEFAULT_GRACE = 30.0  # Kubernetes' default terminationGracePeriodSeconds
SETTLE_SLACK = 5.0  # seconds after a grace period for the kubelet's last status of the pod
MAX_SETTLE = 60.0  # seconds at most spent awaiting the workers' ends after the verdict


def clip(text: str | None, limit: int = MAX_TEXT) -> str | None:
    """``text`` cut to ``limit`` characters (marked), None stays None."""
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def signal_name(number: int) -> str | None:
    try:
        return signals.Signals(number).name
    except ValueError:
        return None


def exit_text(code: int | None, signal: int | None = None) -> str:
    """``exit code 137 (128 + 9: SIGKILL)``: shells and container runtimes report a death by signal N as 128 + N."""
    parts = []
    if code is not None:
        by_signal = signal_name(code - 128) if code > 128 else None
        parts.append(f"exit code {code}" + (f" (128 + {code - 128}: {by_signal})" if by_signal else ""))
    if signal:
        parts.append(f"signal {signal}" + (f" ({signal_name(signal)})" if signal_name(signal) else ""))
    return ", ".join(parts)


def _container(pod: PodSummary) -> str:
    return f"{pod.role} pod {pod.name}" + (f" (container {pod.container})" if pod.container else "")


def _oom_text(pod: PodSummary) -> str:
    limit = (
        f"memory limit {pod.memory_limit}"
        if pod.memory_limit
        else "no memory limit (the node ran out of memory)"
    )
    text = f"{OOM_KILLED}: out of memory, {limit}"
    if pod.exit_code is not None and pod.exit_code < 128:
        # cgroup v1: the kernel killed a process of the container (an MPI rank); the main process lived on
        text += f"; a process of the container was killed, the container itself ended with {exit_text(pod.exit_code)}"
    elif pod.exit_code is not None:
        text += f", {exit_text(pod.exit_code, pod.signal)}"
    return text


def _ended_by_deletion(pod: PodSummary) -> bool:
    """Being deleted, and not known to have ended before the deletion was asked for: a container that ended by itself
    first may still be reported only after it (a loaded kubelet, the clean-up right after the launcher's failure)."""
    if not pod.deleting:
        return False
    if pod.finished_at is None or pod.deletion_deadline is None or pod.deletion_grace is None:
        return True  # nothing to tell the two apart by: the clean-up's, as before
    return pod.finished_at >= pod.deletion_deadline - timedelta(seconds=pod.deletion_grace)


def _ended_text(pod: PodSummary) -> str | None:
    """How the current container ended, when that was a failure."""
    if pod.state != "terminated":
        return None
    if pod.terminated_reason == OOM_KILLED:
        text = _oom_text(pod)
    elif _ended_by_deletion(pod) or not (pod.exit_code or pod.signal):
        return None  # ended by the deletion (the clean-up), or ended well
    else:
        text = ", ".join(p for p in (pod.terminated_reason, exit_text(pod.exit_code, pod.signal)) if p)
    return text + (f"; message: {pod.termination_message}" if pod.termination_message else "")


def _restarts_text(pod: PodSummary) -> str | None:
    if not pod.restart_count:
        return None
    text = f"restarted {pod.restart_count} time{'s' if pod.restart_count > 1 else ''}"
    if pod.state == "waiting" and pod.waiting_reason:
        text += f", now {pod.waiting_reason}"
    last = [p for p in (pod.last_terminated_reason, exit_text(pod.last_exit_code)) if p]
    if last:
        text += "; previous container ended: " + (
            f"{OOM_KILLED}, memory limit {pod.memory_limit}"
            if pod.last_terminated_reason == OOM_KILLED and pod.memory_limit
            else ", ".join(last)
        )
    return text


def pod_cause(pod: PodSummary) -> str | None:
    """One line naming why ``pod`` failed, or None when it did not (running, succeeded, ended by its deletion)."""
    evicted = pod.pod_reason == EVICTED or (pod.phase == PodPhase.FAILED and pod.pod_reason)
    reason = (
        (f"{pod.pod_reason}: {pod.pod_message}" if pod.pod_message else pod.pod_reason) if evicted else None
    )
    # a disruption (an eviction through the API, a preemption) deletes the pod: not the job's clean-up
    disrupted = f"disrupted ({pod.disruption})" if pod.disruption and not evicted else None
    # restarts: a worker restarted under a running MPI job broke it, even if it runs again
    parts = [part for part in (reason, disrupted, _ended_text(pod), _restarts_text(pod)) if part]
    if not parts:
        return None
    return clip(f"{_container(pod)}: " + "; ".join(parts), 2 * MAX_TEXT)


def _oom_killed(pod: PodSummary) -> bool:
    return OOM_KILLED in (pod.terminated_reason, pod.last_terminated_reason)


def _disrupted(pod: PodSummary) -> bool:
    return bool(pod.disruption) or pod.pod_reason == EVICTED


def failure_kind(pods: Sequence[PodSummary], disrupted: Sequence[PodSummary] = ()) -> Cause:
    """The failure's kind (the exceptions' class, the metrics' tag): a pod OOMKilled, else a pod evicted or disrupted
    (``disrupted``: seen with a DisruptionTarget during the wait), else the program's own failure."""
    failed = failed_pods(pods)
    if any(_oom_killed(p) for p in failed):
        return Cause.OOM
    if disrupted or any(_disrupted(p) for p in failed):
        return Cause.DISRUPTED
    return Cause.PROGRAM


def failed_pods(pods: Sequence[PodSummary]) -> list[PodSummary]:
    """The pods with a cause: every failed worker (in the given order), then the newest failed launcher (the
    last attempt: the exit codes of all of them are reported apart)."""
    workers = [p for p in pods if p.role == WORKER and pod_cause(p)]
    launchers = sorted(
        (p for p in pods if p.role == LAUNCHER and pod_cause(p)),
        key=lambda p: -p.created.timestamp() if p.created else 0.0,
    )  # newest first
    return workers + launchers[:1]


def causes(
    pods: Sequence[PodSummary], disrupted: Sequence[PodSummary] = (), ranks: Sequence[str] = ()
) -> list[str]:
    """The cause lines of :func:`failed_pods`, after those of the ``disrupted`` pods (seen with a DisruptionTarget
    during the wait, perhaps replaced since by a pod of the same name: the disruption came first) and the ``ranks``
    mpirun reports dead (wait/mpirun_report.py: more precise than the launcher's exit code), at most MAX_CAUSES (the
    rest counted)."""
    named = list(
        dict.fromkeys(
            [
                *(cause for p in disrupted if (cause := pod_cause(p))),
                *ranks,
                *(cause for p in failed_pods(pods) if (cause := pod_cause(p))),
            ]
        )
    )
    lines = named[:MAX_CAUSES]
    if len(named) > MAX_CAUSES:
        lines.append(f"... and {len(named) - MAX_CAUSES} more failed pods")
    return lines


def merge_observations(at_verdict: Sequence[PodSummary], latest: Iterable[PodSummary]) -> list[PodSummary]:
    """One summary per pod: as seen at the verdict when it had failed by then (a clean-up that deletes it later
    must not hide that), else the latest observation (its end during the clean-up: an OOM kill shows then)."""
    merged = {p.name: p for p in at_verdict}
    for pod in latest:
        if pod.name not in merged or not pod_cause(merged[pod.name]):
            merged[pod.name] = pod
    return list(merged.values())


# ---------------------------------------------------------------------- awaiting the workers' ends
def _settled(pod: PodSummary) -> bool:
    return pod.state == "terminated" or pod.phase in TERMINAL_PHASES


def awaited_workers(pods: Sequence[PodSummary], clean_pod_policy: str | None) -> list[PodSummary]:
    """Live workers whose end is still to come and will be seen: the ones being deleted, and, when the
    ``cleanPodPolicy`` deletes live workers, the Running and Pending ones (the mpi-operator's deleteWorkerPods)."""
    deleting = clean_pod_policy in DELETING_POLICIES
    return [
        p
        for p in pods
        if p.role == WORKER
        and not _settled(p)
        and (p.deleting or (deleting and p.phase in (PodPhase.RUNNING, PodPhase.PENDING)))
    ]


def settle_deadline(awaited: Sequence[PodSummary], verdict_at: datetime) -> datetime | None:
    """Until when the ends of ``awaited`` are worth waiting for: their grace periods plus slack, bounded."""
    if not awaited:
        return None
    ends = []
    for pod in awaited:
        if pod.deletion_deadline is not None:
            ends.append(pod.deletion_deadline + timedelta(seconds=SETTLE_SLACK))
        else:
            grace = pod.grace_period if pod.grace_period is not None else DEFAULT_GRACE
            ends.append(verdict_at + timedelta(seconds=DELETION_START + grace + SETTLE_SLACK))
    return min(max(ends), verdict_at + timedelta(seconds=MAX_SETTLE))


# ---------------------------------------------------------------------- log tails
def tail_candidates(pods: Sequence[PodSummary], clean_pod_policy: str | None) -> list[PodSummary]:
    """Workers whose log is read at the verdict, before a clean-up can delete them: the failed ones, then the
    live ones about to be deleted (one of them may turn out OOMKilled once it ends); MAX_WORKER_TAILS at most."""
    failed = [p for p in pods if p.role == WORKER and pod_cause(p)]
    doomed = [p for p in awaited_workers(pods, clean_pod_policy) if p not in failed]
    return (failed + doomed)[:MAX_WORKER_TAILS]


def reads_previous(pod: PodSummary) -> bool:
    """The informative log of a restarted container that is not terminated is its previous instance's."""
    return pod.restart_count > 0 and pod.state != "terminated"


def bound_tail(lines: Iterable[str], max_lines: int, max_bytes: int = TAIL_BYTES) -> list[str]:
    """The last lines within the bounds, never rank 0's result marker lines (``@task.mpi``: its return value)."""
    kept: list[str] = []
    budget = max_bytes
    for line in reversed([ln for ln in lines if MARKER not in ln]):
        if len(kept) >= min(max_lines, MAX_TAIL_LINES):
            break
        line = clip(line, LINE_CHARS) or ""
        size = len(line.encode()) + 1
        if size > budget:
            break
        kept.append(line)
        budget -= size
    return kept[::-1]


def tail_entry(pod: PodSummary, lines: list[str] | None, note: str | None = None) -> dict:
    return {
        "pod": pod.name,
        "role": pod.role,
        "container": pod.container,
        "lines": lines or [],
        "note": clip(note),
    }


def report(cause_lines: list[str], tails: list[dict], kind: Cause = Cause.PROGRAM) -> dict:
    """The failure report of a wait's payload: causes, then the tails of the failed pods (bounded above), and the
    failure's kind (:func:`failure_kind`)."""
    return {
        "causes": cause_lines[: MAX_CAUSES + 1],
        "tails": tails[: MAX_WORKER_TAILS + 1],
        "kind": kind.value,
    }


def explain(failure: dict | None, error_tail_lines: int = ERROR_TAIL_LINES) -> list[str]:
    """The lines a failed task's error adds to the MPIJob's condition: each cause, then the last lines of each
    failed pod's log."""
    if not failure:
        return []
    lines = [f"cause: {cause}" for cause in failure.get("causes") or []]
    for tail in failure.get("tails") or []:
        shown = (tail.get("lines") or [])[-error_tail_lines:] if error_tail_lines else []
        container = f" (container {tail['container']})" if tail.get("container") else ""
        where = f"{tail.get('role')} {tail.get('pod')}{container}"
        if tail.get("note"):
            lines.append(f"log of {where}: {tail['note']}")
        elif shown:
            lines.append(f"last {len(shown)} log lines of {where}:")
            lines += [f"    {escape(line)}" for line in shown]  # the error is in the task log too
    return lines
