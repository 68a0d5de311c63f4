"""The wait's contract: how a wait on one MPIJob is asked for (:class:`WaitOptions`), how it can end
(:class:`Outcome`) and what it reports (:class:`WaitResult`).

One spelling for the operator (sync and deferrable), the trigger and the sensor. Both travel as plain JSON:
the options as one trigger argument (``to_dict``), the result as the trigger's event (``to_event``); the code
between the wait and operators/outcome.py holds the typed objects. This module imports nothing of the wait's,
so every part of it (wait/progress.py's verdicts included) can use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import Any

DEFAULT_TAIL_LINES = 20  # lines of each failed pod's log in a failure's report (worker_log_tail_lines)


class Outcome(StrEnum):
    """How a wait ended: the result's ``status`` (a ``str``: equal to its value, JSON as it; ``str()`` and
    ``format()`` give the value, as in a log line or an error message)."""

    SUCCESS = "success"  # the job Succeeded
    TARGET = "target"  # the job reached the awaited condition (the sensor's target_condition)
    FAILED = "failed"  # the job Failed
    WORKER_FAILED = "worker_failed"  # a worker failed before the launcher started (wait/progress.py)
    INVALID = "invalid"  # the mpi-operator refused the spec (a ValidationError event)
    UNSCHEDULABLE = "unschedulable"  # a pod could not be scheduled or started within schedule_timeout
    STARTUP_TIMEOUT = "startup_timeout"  # no Created condition within startup_timeout
    QUEUE_TIMEOUT = "queue_timeout"  # not admitted by Kueue within queue_timeout (wait/queueing.py)
    TIMEOUT = "timeout"  # the wait's deadline (execution_timeout, the sensor's timeout) passed
    DELETED = "deleted"  # the job was deleted or replaced by another of its name
    ERROR = "error"  # the wait itself failed (the trigger's event) or refused to follow the job

    @property
    def succeeded(self) -> bool:
        """The wait got what it waited for: the task returns its XCom."""
        return self in (Outcome.SUCCESS, Outcome.TARGET)


class Cause(StrEnum):
    """Why a wait that did not succeed ended, in one word: the failure's kind (``WaitResult.cause``). The metrics'
    ``cause`` tag, the exceptions' ``cause`` attribute (airflow_mpi/exceptions.py) and the lineage facet's."""

    PROGRAM = (
        "program"  # the job failed, no pod was killed from outside: the program's own exit (the default)
    )
    OOM = "oom"  # a pod of the failed job was OOMKilled
    DISRUPTED = "disrupted"  # a pod of the failed job was evicted or disrupted (a drain, a preemption)
    INVALID = Outcome.INVALID.value
    UNSCHEDULABLE = Outcome.UNSCHEDULABLE.value
    STARTUP_TIMEOUT = Outcome.STARTUP_TIMEOUT.value
    QUEUE_TIMEOUT = Outcome.QUEUE_TIMEOUT.value
    TIMEOUT = Outcome.TIMEOUT.value
    DELETED = Outcome.DELETED.value
    ERROR = Outcome.ERROR.value


# the outcomes of a failed job, whose cause its failure report names (wait/failure_causes.py failure_kind)
FAILED_JOB = (Outcome.FAILED, Outcome.WORKER_FAILED)


def _time(value: datetime | str | None) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


@dataclass(frozen=True)
class WaitOptions:
    """How to wait for one MPIJob: the operator's task parameters of the wait, or the sensor's equivalents."""

    poll_interval: float = 10.0  # seconds between checks without a change of the job or its pods
    startup_timeout: float | None = 120.0  # seconds until the job must be Created (None: no limit)
    schedule_timeout: float | None = 300.0  # seconds a pod may stay unscheduled / not started
    queue_timeout: float | None = None  # seconds a job may wait in a Kueue queue at a stretch
    get_logs: bool = True  # stream the launcher's log into the task log
    max_attempts: int | None = None  # launcher attempts the job may make (backoffLimit + 1; None: unknown)
    tail_lines: int = DEFAULT_TAIL_LINES  # of each failed pod's log in a failure's report (0: none)
    deadline: datetime | None = None  # the wait ends "timeout" then (and deletes the job it owns)
    target_condition: str | None = None  # a condition that ends the wait ("target") before the job finishes
    owns_job: bool = True  # False: someone else's job (the sensor's), never deleted

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (the deadline as ISO text): a trigger argument."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["deadline"] = self.deadline.isoformat() if self.deadline else None
        return data

    @classmethod
    def of_task(
        cls, settings: Mapping[str, Any], *, max_attempts: int | None, deadline: datetime | None
    ) -> WaitOptions:
        """How an MPI task waits, from its task parameters (operators/task_params.py), in the worker and in the
        trigger alike."""
        return cls(
            poll_interval=settings["poll_interval"],
            startup_timeout=settings["startup_timeout"],
            schedule_timeout=settings["schedule_timeout"],
            queue_timeout=settings["queue_timeout"],
            get_logs=settings["get_logs"],
            max_attempts=max_attempts,
            deadline=deadline,
            tail_lines=settings["worker_log_tail_lines"],  # of each failed pod's log, in a failed try's error
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> WaitOptions:
        """From ``to_dict``'s form; a missing key takes its default, an unknown one (a later release's) is
        ignored."""
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in (data or {}).items() if key in known}
        if "deadline" in values:
            values["deadline"] = _time(values["deadline"])
        return cls(**values)


# The event's keys, in the order the wait has always written them; "status" is the outcome's value.
EVENT_KEYS = (
    "status",
    "message",
    "warnings",
    "name",
    "namespace",
    "uid",
    "condition",
    "reason",
    "start_time",
    "completion_time",
    "job_message",
    "launcher_pods",
    "launcher_attempts",
    "launcher_exit_codes",
    "log_state",
    "failure",
    "evictions",
    "creation_time",
    "created_time",
    "queued_seconds",
)
_LISTS = ("warnings", "launcher_pods", "launcher_exit_codes")


@dataclass(frozen=True)
class WaitResult:
    """What a wait on one MPIJob concluded and saw; on the wire, the trigger's event (``to_event``)."""

    outcome: Outcome
    name: str | None = None
    namespace: str | None = None
    message: str | None = None  # why the wait ended (the job's condition message, the timeout, the refusal)
    warnings: list[str] = field(default_factory=list)  # the job's and pods' Warning events, one line each
    uid: str | None = None  # the incarnation followed
    # the job's last state (jobspec/status.py JobState); None: the job was never read
    condition: str | None = None
    reason: str | None = None
    start_time: str | None = None
    completion_time: str | None = None
    job_message: str | None = None
    launcher_pods: list[str] = field(default_factory=list)
    launcher_attempts: int = 0
    launcher_exit_codes: list[int] = field(default_factory=list)  # of ended launchers, oldest first
    log_state: dict[str, Any] | None = None  # how far the launcher's log was read (wait/log_pump.py LogState)
    failure: dict[str, Any] | None = None  # why a failed job failed (wait/failure_report.py), bounded
    evictions: int = 0  # Kueue evictions seen (wait/queueing.py)
    # the metrics' times (operators/metrics.py): the job's creationTimestamp, its Created condition's transition,
    # the seconds it spent in a Kueue queue (None: not queued by Kueue)
    creation_time: str | None = None
    created_time: str | None = None
    queued_seconds: float | None = None
    # False: the event of a trigger from before the failure reports (it has no "failure" key), whose failed
    # workers' last lines are read after the wait instead (operators/outcome.py)
    failure_gathered: bool = True
    result: dict[str, Any] | None = None  # rank 0's value, as the trigger read it (@task.mpi: RankResult)

    @property
    def cause(self) -> Cause | None:
        """Why the wait did not succeed (None: it did): a failed job's kind from its failure report, else the
        outcome's."""
        if self.outcome.succeeded:
            return None
        if self.outcome in FAILED_JOB:
            kind = (self.failure or {}).get("kind")  # none in an earlier release's event
            return next((cause for cause in Cause if cause == kind), Cause.PROGRAM)
        return Cause(self.outcome.value)

    @classmethod
    def of_error(
        cls,
        name: str,
        namespace: str,
        message: str,
        *,
        uid: str | None = None,
        log_state: dict[str, Any] | None = None,
    ) -> WaitResult:
        """A wait that could not conclude (an error of its own, a refusal to follow the job)."""
        return cls(Outcome.ERROR, name, namespace, message, uid=uid, log_state=log_state)

    def to_event(self) -> dict[str, Any]:
        """The trigger's event payload: plain JSON, the keys :data:`EVENT_KEYS` (and ``result`` when set)."""
        event: dict[str, Any] = {key: getattr(self, key) for key in EVENT_KEYS[1:]}
        event = {"status": self.outcome.value, **event, **{key: list(event[key]) for key in _LISTS}}
        if not self.failure_gathered:
            del event["failure"]
        if self.result is not None:
            event["result"] = self.result
        return event

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> WaitResult:
        """From a trigger's event, also one of an earlier release (fewer keys: their defaults)."""
        values = {key: event[key] for key in EVENT_KEYS[1:] if key in event}
        values.update({key: list(values.get(key) or []) for key in _LISTS})
        values["evictions"] = values.get("evictions") or 0
        outcome = Outcome(event.get("status") or Outcome.ERROR)
        return cls(outcome, **values, failure_gathered="failure" in event, result=event.get("result"))
