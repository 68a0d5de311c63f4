"""Deciding, from summaries of the MPIJob, its pods and its events, whether a wait is over and why (pure). A wait
fails fast where waiting longer cannot help:

* the mpi-operator has no admission webhook: an invalid MPIJob only gets a ``ValidationError`` Warning event
  and never a ``Created`` condition;
* pods that cannot be scheduled (or whose image cannot be pulled) stay Pending forever, holding the other
  pods' GPUs, unless somebody gives up on them;
* a worker that fails before the launcher exists (its sshd never started: the startup probe gave up, the image
  has no sshd) is neither recreated nor counted as the job's failure by mpi-operator v0.8.2 (only an eviction
  is): with ``WaitForWorkersReady`` the launcher never comes and the other workers hold their GPUs forever.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from airflow_mpi.jobspec.kinds import DEFAULT_KIND, JobKind
from airflow_mpi.jobspec.status import JobState, running
from airflow_mpi.jobspec.vocabulary import LAUNCHER, WORKER, PodPhase
from airflow_mpi.wait.contract import Outcome

IMAGE_ERRORS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
FATAL_WAITING = frozenset({"InvalidImageName", "CreateContainerConfigError", "CreateContainerError"})
EVICTED = "Evicted"  # a pod reason the mpi-operator itself turns into the job's failure
# Outcomes whose pods are examined for the failure's report (wait/failure_causes.py) and named in the error.
EXPLAINED = (Outcome.FAILED, Outcome.WORKER_FAILED)


@dataclass(frozen=True)
class PodSummary:
    """What the waiter needs to know about one pod (wait/summaries.py)."""

    name: str
    role: str  # "launcher" | "worker"
    created: datetime | None
    phase: str | None
    scheduled: bool
    container: str | None = None
    restart_count: int = 0
    state: str | None = None  # "waiting" | "running" | "terminated" | None (not started)
    waiting_reason: str | None = None
    waiting_message: str | None = None
    exit_code: int | None = None
    # why the pod or its main container ended (wait/failure_causes.py names a failed try's cause from these)
    terminated_reason: str | None = None  # "OOMKilled", "Error", "Completed", ...
    signal: int | None = None  # the terminated state's signal, when the runtime reports one
    termination_message: str | None = None  # the container's termination message (bounded by the hooks)
    last_terminated_reason: str | None = None  # of the previous container of a restarted one
    last_exit_code: int | None = None
    pod_reason: str | None = None  # status.reason / status.message: "Evicted" and the kubelet's why
    pod_message: str | None = None
    memory_limit: str | None = None  # the main container's resources.limits.memory
    deleting: bool = False  # metadata.deletionTimestamp is set: the pod is being deleted
    deletion_deadline: datetime | None = None  # metadata.deletionTimestamp: the end of its grace period
    # metadata.deletionGracePeriodSeconds: the deadline less it is when the deletion was asked for
    deletion_grace: float | None = None
    finished_at: datetime | None = None  # the main container's terminated state's finishedAt
    grace_period: float | None = None  # spec.terminationGracePeriodSeconds
    # the DisruptionTarget condition ("EvictionByEvictionAPI: Eviction API: evicting"): evicted, preempted, ...
    disruption: str | None = None


@dataclass(frozen=True)
class EventSummary:
    type: str
    reason: str
    message: str
    object_name: str
    count: int = 1


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome | None  # None while the wait goes on
    message: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.outcome is not None


@dataclass(frozen=True)
class Timeouts:
    startup_timeout: float | None = 120.0  # seconds until the job must be Created
    schedule_timeout: float | None = 300.0  # seconds a pod may stay unscheduled / not started
    queue_timeout: float | None = (
        None  # seconds a job may wait in a Kueue queue at a stretch (wait/queueing.py)
    )


def _warning_lines(events: list[EventSummary]) -> list[str]:
    """Warning events verbatim, one line each, as users know them from ``kubectl describe``."""
    return [f"{e.object_name}: {e.reason}: {e.message}" for e in events if e.type == "Warning"]


def _stuck_pod(pod: PodSummary, now: datetime, timeouts: Timeouts) -> str | None:
    """Why ``pod`` counts as unable to start, or None."""
    waiting = f"pod {pod.name}: {pod.waiting_reason}: {pod.waiting_message or ''}".rstrip(": ")
    if pod.waiting_reason in FATAL_WAITING:
        return waiting
    if timeouts.schedule_timeout is None or pod.phase != PodPhase.PENDING:
        return None
    if ((now - pod.created).total_seconds() if pod.created else 0.0) < timeouts.schedule_timeout:
        return None
    if not pod.scheduled:
        return f"pod {pod.name} was not scheduled within {timeouts.schedule_timeout:g}s"
    return waiting if pod.waiting_reason in IMAGE_ERRORS else None


def _failed_before_launch(pods: list[PodSummary]) -> str | None:
    """Why a worker failed while there is no launcher yet (see the module docstring), or None.

    A worker being deleted is not one: a suspended or preempted job's pods are deleted, and the kubelet kills their
    containers and reports them Failed on their way out (a Kueue preemption in CI was read as a crashed worker)."""
    if any(p.role == LAUNCHER for p in pods):
        return None
    for pod in pods:
        if (
            pod.role == WORKER
            and pod.phase == PodPhase.FAILED
            and pod.pod_reason != EVICTED
            and not pod.deleting
        ):
            how = ", ".join(
                str(part)
                for part in (
                    pod.terminated_reason or pod.pod_reason,
                    f"exit code {pod.exit_code}" if pod.exit_code is not None else None,
                    pod.termination_message or pod.pod_message,
                )
                if part
            )
            return (
                f"worker pod {pod.name} failed before the launcher started ({how or 'no detail'}); the "
                "mpi-operator does not replace it, so the launcher would never start: does its container run "
                "sshd, listening on the SSH port?"
            )
    return None


def derived_state(state: JobState, kind: JobKind, pods: list[PodSummary]) -> JobState:
    """``state`` with what its kind derives from the pods (a TrainJob is Running while its launcher pod runs)."""
    return running(state, kind, any(p.role == LAUNCHER and p.phase == PodPhase.RUNNING for p in pods))


def assess(
    state: JobState,
    pods: list[PodSummary],
    events: list[EventSummary],
    *,
    now: datetime,
    submitted_at: datetime,
    timeouts: Timeouts,
    target_condition: str | None = None,
    current_conditions: set[str] | None = None,
    kind: JobKind = DEFAULT_KIND,
) -> Verdict:
    warnings = _warning_lines(events)
    if state.terminal:
        return Verdict(Outcome.SUCCESS if state.succeeded else Outcome.FAILED, state.describe(), warnings)
    if target_condition and target_condition in (current_conditions or set()):
        return Verdict(Outcome.TARGET, state.describe(), warnings)
    if not state.created:
        invalid = [e for e in events if kind.is_invalid_event(e.reason)]
        if invalid:
            return Verdict(Outcome.INVALID, "; ".join(e.message for e in invalid), warnings)
        if (
            timeouts.startup_timeout is not None
            and (now - submitted_at).total_seconds() >= timeouts.startup_timeout
        ):
            return Verdict(
                Outcome.STARTUP_TIMEOUT,
                f"{kind.kind} {state.name} got no {kind.state.created_text} within "
                f"{timeouts.startup_timeout:g}s: is the {kind.controller} running and watching this namespace?",
                warnings,
            )
        return Verdict(None, state.describe(), warnings)
    failed_worker = None if kind.state.fails_on_failed_worker else _failed_before_launch(pods)
    if failed_worker:
        return Verdict(Outcome.WORKER_FAILED, failed_worker, warnings)
    stuck = [reason for reason in (_stuck_pod(p, now, timeouts) for p in pods) if reason]
    if stuck:
        scheduling = [
            w for w in warnings if "Failed" in w or "BackOff" in w
        ]  # FailedScheduling, FailedMount, ...
        return Verdict(Outcome.UNSCHEDULABLE, "; ".join(stuck + scheduling), warnings)
    return Verdict(None, state.describe(), warnings)
