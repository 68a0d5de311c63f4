"""Which MPIJobs are orphans: live jobs of this deployment whose task instance no longer waits for them (pure).

A task instance normally deletes its live MPIJob itself (``on_kill`` of the worker or the trigger). It cannot when
nothing of it runs any more: marked failed/success before a triggerer picked up its trigger, its worker lost, its DAG
run deleted. The orphan listener (plugins/orphan_listener.py) finds such jobs by the identity annotations every job
carries (jobspec/naming.py) and deletes them.

Only jobs of *this* deployment (``naming.DEPLOYMENT_LABEL``) are ever orphans, whatever this database says of a task
instance of the same name (naming.py: whose a job is). Only *live* jobs are orphans: a finished job holds nothing and
stays under ``on_finish_action`` (a Succeeded job is what a clear or retry reattaches to). A task instance that may
still run (queued, up for retry, cleared, ...) keeps its job.

Which *try* a state is about matters: names are per task instance, not per try, so a cleared task instance's next
try makes its job under the same name. A finish request is judged when the worker gets to it, maybe after a clear
and a new try: the state it carries (the listener's view, maybe not committed yet) judges only the job of the try it
was about (or an older try's job, while the database still holds that try), never a newer try's. A job made by a
release that did not record its try is judged by the database alone.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from airflow_mpi.jobspec.naming import (
    DAG_ID_LABEL,
    DEPLOYMENT_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MAP_INDEX_LABEL,
    RUN_ID_LABEL,
    TASK_ID_LABEL,
    TASK_INSTANCE_ID_ANNOTATION,
    TRY_NUMBER_LABEL,
)
from airflow_mpi.jobspec.status import job_state

# Task instance states after which no try of it runs again on its own.
FINISHED_TI_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"


def deployment_selector(deployment: str) -> str:
    """The label selector of this deployment's jobs (the sweep lists nothing else)."""
    return f"{MANAGED_SELECTOR},{DEPLOYMENT_LABEL}={deployment}"


class TaskKey(NamedTuple):
    """A task instance, as the identity annotations of its MPIJob name it."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int


def task_key_of(job: dict, deployment: str) -> TaskKey | None:
    """The task instance of ``deployment`` that created ``job``; None for a job not made by it."""
    metadata = job.get("metadata") or {}
    labels = metadata.get("labels") or {}
    if labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE or labels.get(DEPLOYMENT_LABEL) != deployment:
        return None
    annotations = metadata.get("annotations") or {}
    keys = (DAG_ID_LABEL, TASK_ID_LABEL, RUN_ID_LABEL, MAP_INDEX_LABEL)
    values: list[Any] = [annotations.get(k) for k in keys]
    if not all(isinstance(v, str) and v for v in values):
        return None
    try:
        map_index = int(values[3])
    except ValueError:
        return None
    return TaskKey(values[0], values[1], values[2], map_index)


class TryState(NamedTuple):
    """A task instance's state and the try it is about: as the database holds it, or as a finish request saw it.
    ``ti_id``: the try's unique id (Airflow 3's task instance UUID, new with each try; None where there is none)."""

    state: str | None
    try_number: int | None = None
    ti_id: str | None = None


def state_text(state: object) -> str | None:
    """A task instance state (an enum, its text or None) as text."""
    return None if state is None else str(getattr(state, "value", state))


class JobTry(NamedTuple):
    """The try that made a job (None: not recorded, a job of an older release)."""

    try_number: int | None
    ti_id: str | None


def job_try(job: dict) -> JobTry:
    """From the job's try-number label (its raw annotation must not say otherwise: unsure then) and its
    task-instance-id annotation."""
    metadata = job.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    number = (metadata.get("labels") or {}).get(TRY_NUMBER_LABEL)
    raw, ti_id = annotations.get(TRY_NUMBER_LABEL, number), annotations.get(TASK_INSTANCE_ID_ANNOTATION)
    return JobTry(
        int(number) if isinstance(number, str) and number.isdigit() and raw == number else None,
        ti_id if isinstance(ti_id, str) and ti_id else None,
    )


def is_live(job: dict) -> bool:
    return not (job.get("metadata") or {}).get("deletionTimestamp") and not job_state(job).terminal


def is_orphan(
    job: dict, deployment: str, committed: TryState | None, reported: TryState | None = None
) -> bool:
    """A live job of ``deployment`` whose task instance is gone from its database (``committed`` None) or finished.

    ``committed``: its task instance in the database, read after the job was listed (so about the job's try or a
    later one). ``reported``: the state a finish request carries, which may be newer than the database (not
    committed yet) or older (a clear and a new try came since): it judges only a job it is about (:func:`_about`).
    """
    if task_key_of(job, deployment) is None or not is_live(job):
        return False
    if committed is None:
        return True
    made = job_try(job)
    if committed.state in FINISHED_TI_STATES and not _newer(made.try_number, committed.try_number):
        return True
    return reported is not None and reported.state in FINISHED_TI_STATES and _about(made, reported, committed)


def unsure(job: dict, reported: TryState | None) -> bool:
    """True when ``reported`` was not applied to ``job`` only because the job does not say which try made it."""
    return (
        reported is not None and reported.state in FINISHED_TI_STATES and job_try(job) == JobTry(None, None)
    )


def _newer(number: int | None, than: int | None) -> bool:
    return number is not None and than is not None and number > than


def _about(made: JobTry, reported: TryState, committed: TryState) -> bool:
    """``reported`` judges the job its own try made, even after a clear (the job of a try marked failed stops), or
    a job an older try made while the database still holds the reported try (a try that reattached to it finished).
    Never a newer try's job, nor one when the database went back to an earlier try (a DAG run made again)."""
    if _newer(reported.try_number, committed.try_number):
        return False
    if made.ti_id and reported.ti_id:
        if made.ti_id == reported.ti_id:
            return True
    elif made.try_number is not None and made.try_number == reported.try_number:
        return True
    current = (
        reported.ti_id == committed.ti_id
        if reported.ti_id and committed.ti_id
        else reported.try_number is not None and reported.try_number == committed.try_number
    )
    return current and _newer(reported.try_number, made.try_number)


def orphans(
    jobs: list[dict],
    deployment: str,
    committed: dict[TaskKey, TryState],
    reported: dict[TaskKey, TryState] | None = None,
) -> list[dict]:
    """The orphans among ``jobs``: ``committed`` maps every task instance of ``deployment`` that exists to its
    state in the database, ``reported`` some of them to the state a finish request carries."""
    found = []
    for job in jobs:
        key = task_key_of(job, deployment)
        if key is not None and is_orphan(job, deployment, committed.get(key), (reported or {}).get(key)):
            found.append(job)
    return found
