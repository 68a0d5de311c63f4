"""Reading a job object's status: which condition it is in and whether it is finished, as its kind reads it
(``JobKind.state``, the kind found by the object's apiVersion).

Both MPIJob API versions report ``status.conditions`` with types Created, Running, Restarting,
Succeeded, Failed and Suspended; v1 sometimes writes odd reasons (``MPIJobMPIJobFailed``), so
decisions are made on the condition *type*, never on the reason. A TrainJob writes only Suspended, Complete and
Failed: it is Created once the Trainer acknowledged it (``status.jobsStatus``: its JobSet exists, or any condition)
and Running while its launcher pod runs (:func:`running`, from the pods, as the Kubeflow SDK derives it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from airflow_mpi.jobspec.kinds import JobKind, kind_or_default
from airflow_mpi.jobspec.spec import CLEAN_NONE
from airflow_mpi.jobspec.vocabulary import JobCondition

KNOWN_CONDITIONS = tuple(condition.value for condition in JobCondition)  # plain text, as error messages show


@dataclass(frozen=True)
class JobState:
    name: str
    namespace: str
    resource_version: str | None
    condition: str | None
    reason: str | None
    message: str | None
    start_time: str | None
    completion_time: str | None
    created: bool
    terminal: bool
    succeeded: bool
    creation_time: str | None = None  # metadata.creationTimestamp: when it was submitted
    created_time: str | None = None  # when the controller made it Created (its condition's transition)

    def describe(self) -> str:
        detail = ": ".join(p for p in (self.reason, self.message) if p)
        return f"{self.condition or 'Pending'}" + (f" ({detail})" if detail else "")


def kind_of(obj: dict[str, Any], kind: JobKind | None = None) -> JobKind:
    """``kind``, else the kind of the object's apiVersion (the default kind's when it has none)."""
    return kind or kind_or_default(obj.get("apiVersion"))


def _true_conditions(obj: dict[str, Any], kind: JobKind | None = None) -> list[dict[str, Any]]:
    known = kind_of(obj, kind).conditions or KNOWN_CONDITIONS
    conditions = (obj.get("status") or {}).get("conditions") or []
    return [c for c in conditions if str(c.get("status")) == "True" and c.get("type") in known]


def true_condition_types(obj: dict[str, Any], kind: JobKind | None = None) -> set[str]:
    """Every condition type currently True (a job can be Created and Running at once)."""
    return {c["type"] for c in _true_conditions(obj, kind)}


def _created(
    obj: dict[str, Any], kind: JobKind, true_conditions: list[dict[str, Any]]
) -> tuple[bool, str | None]:
    """Whether the controller made the job's objects, and when: its Created condition, or (a kind without one)
    its acknowledgement, a filled status field or any condition at all (then no time is known)."""
    reading = kind.state
    if reading.created is not None:
        when = next(
            (c.get("lastTransitionTime") for c in true_conditions if c["type"] == reading.created), None
        )
        return any(c["type"] == reading.created for c in true_conditions), when
    status = obj.get("status") or {}
    return bool((reading.acknowledged and status.get(reading.acknowledged)) or status.get("conditions")), None


def _times(
    obj: dict[str, Any], kind: JobKind, created: bool, terminal: list[dict[str, Any]]
) -> tuple[str | None, str | None]:
    """When the job started and completed: its status's ``startTime`` and ``completionTime`` (the MPIJob
    controllers write them), or for a kind whose status has neither (TrainJob) its conditions' transitions: started
    when Kueue last resumed it (Suspended turned False) or, never suspended, when it was created once the controller
    acknowledged it; completed when its terminal condition turned True. The task's XCom, its run-time metric and
    its log links read these."""
    status = obj.get("status") or {}
    if not kind.state.times_from_conditions:
        return status.get("startTime"), status.get("completionTime")
    suspended = next(
        (c for c in status.get("conditions") or [] if c.get("type") == JobCondition.SUSPENDED.value), None
    )
    if not created or (suspended is not None and str(suspended.get("status")) == "True"):
        start = None  # not acknowledged yet, or queued
    elif suspended is not None:
        start = suspended.get("lastTransitionTime")
    else:
        start = (obj.get("metadata") or {}).get("creationTimestamp")
    return start, (terminal[-1].get("lastTransitionTime") if terminal else None)


def job_state(obj: dict[str, Any], kind: JobKind | None = None) -> JobState:
    kind = kind_of(obj, kind)
    reading = kind.state
    metadata = obj.get("metadata") or {}
    true_conditions = _true_conditions(obj, kind)
    terminal = [c for c in true_conditions if c["type"] in (reading.succeeded, reading.failed)]
    if terminal:
        current = terminal[-1]
    elif true_conditions:
        # Newest transition wins; the list order is the operator's insertion order as a tiebreak.
        indexed = list(enumerate(true_conditions))
        current = max(indexed, key=lambda ic: (ic[1].get("lastTransitionTime") or "", ic[0]))[1]
    else:
        current = None
    created, created_time = _created(obj, kind, true_conditions)
    start_time, completion_time = _times(obj, kind, created, terminal)
    return JobState(
        name=metadata.get("name", ""),
        namespace=metadata.get("namespace", ""),
        resource_version=metadata.get("resourceVersion"),
        condition=current["type"] if current else None,
        reason=current.get("reason") if current else None,
        message=current.get("message") if current else None,
        start_time=start_time,
        completion_time=completion_time,
        created=created,
        terminal=bool(terminal),
        succeeded=bool(terminal) and current is not None and current["type"] == reading.succeeded,
        creation_time=metadata.get("creationTimestamp"),
        created_time=created_time,
    )


def running(state: JobState, kind: JobKind, launcher_running: bool) -> JobState:
    """``state`` as Running when its kind writes no Running condition (``StateReading.running_from_pods``) and
    its launcher pod runs: neither finished nor suspended."""
    if not kind.state.running_from_pods or not launcher_running or state.terminal or state.condition:
        return state
    return replace(state, condition=JobCondition.RUNNING.value, reason=None, message=None)


def clean_pod_policy(obj: dict[str, Any], kind: JobKind | None = None) -> str:
    """Which pods the controller deletes once the job finished (Running: the live workers; All; None): the kind's
    own (TrainJob: its JobSet deletes its active Jobs, Running) or the MPIJob's ``cleanPodPolicy`` (v2beta1
    ``spec.runPolicy``; v1 also ``spec.cleanPodPolicy``). Unset is None, the controllers' default (the operator
    submits Running unless told otherwise)."""
    if (policy := kind_of(obj, kind).state.clean_pod_policy) is not None:
        return policy
    spec = obj.get("spec") or {}
    return (spec.get("runPolicy") or {}).get("cleanPodPolicy") or spec.get("cleanPodPolicy") or CLEAN_NONE
