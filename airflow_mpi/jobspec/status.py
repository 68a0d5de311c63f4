"""Reading an MPIJob object's status: which condition it is in and whether it is finished.

Both API versions report ``status.conditions`` with types Created, Running, Restarting,
Succeeded, Failed and Suspended; v1 sometimes writes odd reasons (``MPIJobMPIJobFailed``), so
decisions are made on the condition *type*, never on the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_mpi.jobspec.spec import CLEAN_NONE
from airflow_mpi.jobspec.vocabulary import TERMINAL_CONDITIONS, JobCondition

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


def _true_conditions(obj: dict[str, Any]) -> list[dict[str, Any]]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return [c for c in conditions if str(c.get("status")) == "True" and c.get("type") in KNOWN_CONDITIONS]


def true_condition_types(obj: dict[str, Any]) -> set[str]:
    """Every condition type currently True (a job can be Created and Running at once)."""
    return {c["type"] for c in _true_conditions(obj)}


def job_state(obj: dict[str, Any]) -> JobState:
    metadata = obj.get("metadata") or {}
    status = obj.get("status") or {}
    true_conditions = _true_conditions(obj)
    terminal = [c for c in true_conditions if c["type"] in TERMINAL_CONDITIONS]
    if terminal:
        current = terminal[-1]
    elif true_conditions:
        # Newest transition wins; the list order is the operator's insertion order as a tiebreak.
        indexed = list(enumerate(true_conditions))
        current = max(indexed, key=lambda ic: (ic[1].get("lastTransitionTime") or "", ic[0]))[1]
    else:
        current = None
    return JobState(
        name=metadata.get("name", ""),
        namespace=metadata.get("namespace", ""),
        resource_version=metadata.get("resourceVersion"),
        condition=current["type"] if current else None,
        reason=current.get("reason") if current else None,
        message=current.get("message") if current else None,
        start_time=status.get("startTime"),
        completion_time=status.get("completionTime"),
        created=any(c["type"] == JobCondition.CREATED for c in true_conditions),
        terminal=bool(terminal),
        succeeded=bool(terminal) and current is not None and current["type"] == JobCondition.SUCCEEDED,
        creation_time=metadata.get("creationTimestamp"),
        created_time=next(
            (c.get("lastTransitionTime") for c in true_conditions if c["type"] == JobCondition.CREATED), None
        ),
    )


def clean_pod_policy(obj: dict[str, Any]) -> str:
    """The MPIJob's ``cleanPodPolicy`` (v2beta1 ``spec.runPolicy``; v1 also ``spec.cleanPodPolicy``): which pods
    the controller deletes once the job finished (Running: the live workers; All; None). Unset is None, the
    controllers' default (the operator submits Running unless told otherwise)."""
    spec = obj.get("spec") or {}
    return (spec.get("runPolicy") or {}).get("cleanPodPolicy") or spec.get("cleanPodPolicy") or CLEAN_NONE
