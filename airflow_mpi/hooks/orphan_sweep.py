"""The orphan sweep: delete the live MPIJobs of this deployment whose task instance no longer waits for them.

Which jobs are orphans is decided by ``jobspec/orphans.py``; the task instances' states come from a lookup the
caller provides (the metadata database), read after the listing; a finish request adds the state it saw, for the
try it was about. Only this deployment's jobs are listed (a label selector), and each deletion goes through
``delete_live_mpijob`` pinned to the uid that was judged, so a job that finishes meanwhile, or is replaced by another
object of the same name (a new try's job), is kept. It runs in the listener's background worker
(plugins/sweep_worker.py) within a time budget (:class:`BudgetedMPIJobHook`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from airflow_mpi.hooks.live_delete import DELETED
from airflow_mpi.hooks.mpijob import MPIJobHook
from airflow_mpi.hooks.protocols import MPIJobRequests
from airflow_mpi.hooks.requests import Call
from airflow_mpi.jobspec.orphans import (
    TaskKey,
    TryState,
    deployment_selector,
    is_live,
    job_try,
    orphans,
    task_key_of,
    unsure,
)

log = logging.getLogger(__name__)

StateLookup = Callable[[list[TaskKey]], dict[TaskKey, TryState]]


class SweepOverBudget(TimeoutError):
    """The sweep's time budget is spent: what is left waits for the next sweep."""


class BudgetedMPIJobHook(MPIJobHook):
    """The sync hook with a total time budget: short request timeouts, two attempts, nothing after ``deadline``
    (a ``time.monotonic()`` value). An unreachable API server costs a sweep seconds, not minutes."""

    api_retries = 2
    api_retry_wait_max = 2.0
    request_timeout: tuple[float, float] = (5.0, 15.0)

    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline = deadline

    def _send(self, call: Call) -> Any:
        if time.monotonic() >= self.deadline:
            raise SweepOverBudget(f"the sweep's time budget is spent before {call.method}")
        timed = dataclasses.replace(call, kwargs={**call.kwargs, "_request_timeout": self.request_timeout})
        return super()._send(timed)


def owns_place(hook: MPIJobRequests, deployment: str, key: TaskKey, name: str, namespace: str) -> bool:
    """True when ``namespace`` holds the job ``name`` of ``key`` in ``deployment``: where to sweep comes from an XCom
    a task writes, and could name any namespace, so a task can aim the sweep at its own job's namespace only."""
    job = hook.get_mpijob(name, namespace)
    return job is not None and task_key_of(job, deployment) == key


def sweep_namespace(
    hook: MPIJobRequests,
    namespace: str,
    deployment: str,
    ti_states: StateLookup,
    reported: dict[TaskKey, TryState] | None = None,
) -> list[str]:
    """Delete the orphans of ``deployment`` in ``namespace``; returns the names of the jobs deleted. ``reported``:
    the state a finish request saw, by task instance (jobspec/orphans.py: which jobs it may judge)."""
    reported = reported or {}
    listed = hook.list_mpijobs(namespace, label_selector=deployment_selector(deployment))
    jobs = [
        (job, key) for job in listed if is_live(job) and (key := task_key_of(job, deployment)) is not None
    ]
    states = ti_states(sorted({key for _, key in jobs})) if jobs else {}  # read after the listing
    found = {id(job) for job in orphans([job for job, _ in jobs], deployment, states, reported)}
    deleted = []
    for job, key in jobs:
        name, uid = job["metadata"]["name"], job["metadata"].get("uid")
        if id(job) not in found:
            if unsure(job, reported.get(key)):
                log.info(
                    "Not deleting MPIJob %s/%s on the finish request of %s: the job does not say which try made "
                    "it (an older release); the database's state (%s) decides",
                    namespace,
                    name,
                    key,
                    states.get(key),
                )
            continue
        if not uid:  # only the object judged may go: without its uid, a replacement could be deleted
            log.warning("Not deleting MPIJob %s/%s: it was listed without a uid", namespace, name)
            continue
        outcome = hook.delete_live_mpijob(name, namespace, uid=uid)
        log.warning(
            "Orphaned MPIJob %s/%s of %s, try %s (database: %s; finish request: %s): %s",
            namespace,
            name,
            key,
            job_try(job).try_number,
            states.get(key, "gone"),
            reported.get(key),
            outcome,
        )
        if outcome == DELETED:
            deleted.append(name)
    return deleted
