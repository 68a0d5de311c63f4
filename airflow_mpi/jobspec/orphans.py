"""Which MPIJobs are orphans: live jobs of this deployment whose task instance no longer waits for them (pure).

A task instance normally deletes its live MPIJob itself (``on_kill`` of the worker or the trigger). It cannot when
nothing of it runs any more: marked failed/success before a triggerer picked up its trigger, its worker lost, its DAG
run deleted. The orphan listener (plugins/orphan_listener.py) finds such jobs by the identity annotations every job
carries (jobspec/naming.py) and deletes them.

Only jobs of *this* deployment (``naming.DEPLOYMENT_LABEL``) are ever orphans, whatever this database says of a task
instance of the same name (naming.py: whose a job is). Only *live* jobs are orphans: a finished job holds nothing and
stays under ``on_finish_action`` (a Succeeded job is what a clear or retry reattaches to). A task instance that may
still run (queued, up for retry, cleared, ...) keeps its job.
"""

from __future__ import annotations

from typing import NamedTuple

from airflow_mpi.jobspec.naming import (
    DAG_ID_LABEL, DEPLOYMENT_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, MAP_INDEX_LABEL, RUN_ID_LABEL, TASK_ID_LABEL,
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
    values = [annotations.get(k) for k in (DAG_ID_LABEL, TASK_ID_LABEL, RUN_ID_LABEL, MAP_INDEX_LABEL)]
    if not all(isinstance(v, str) and v for v in values):
        return None
    try:
        map_index = int(values[3])
    except ValueError:
        return None
    return TaskKey(values[0], values[1], values[2], map_index)


def is_live(job: dict) -> bool:
    return not (job.get("metadata") or {}).get("deletionTimestamp") and not job_state(job).terminal


def is_orphan(job: dict, deployment: str, ti_found: bool, ti_state: str | None) -> bool:
    """A live job of ``deployment`` whose task instance is gone from its database or finished."""
    if task_key_of(job, deployment) is None or not is_live(job):
        return False
    return not ti_found or ti_state in FINISHED_TI_STATES


def orphans(jobs: list[dict], deployment: str, ti_states: dict[TaskKey, str | None]) -> list[dict]:
    """The orphans among ``jobs``; ``ti_states`` maps every task instance of ``deployment`` that exists to its state."""
    found = []
    for job in jobs:
        key = task_key_of(job, deployment)
        if key is not None and is_orphan(job, deployment, key in ti_states, ti_states.get(key)):
            found.append(job)
    return found
