"""The orphan sweep: delete the live MPIJobs of this deployment whose task instance no longer waits for them.

Which jobs are orphans is decided by ``jobspec/orphans.py``; the task instances' states come from a lookup the
caller provides (the metadata database). Only this deployment's jobs are listed (a label selector), and each
deletion goes through ``delete_live_mpijob`` pinned to the uid that was judged, so a job that finishes meanwhile,
or is replaced by another object of the same name, is kept. It runs in the listener's background worker
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
from airflow_mpi.hooks.requests import Call
from airflow_mpi.jobspec.orphans import TaskKey, deployment_selector, is_live, orphans, task_key_of

log = logging.getLogger(__name__)

StateLookup = Callable[[list[TaskKey]], dict[TaskKey, "str | None"]]


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


def owns_place(hook: Any, deployment: str, key: TaskKey, name: str, namespace: str) -> bool:
    """True when ``namespace`` holds the job ``name`` of ``key`` in ``deployment``: where to sweep comes from an XCom
    a task writes, and could name any namespace, so a task can aim the sweep at its own job's namespace only."""
    job = hook.get_mpijob(name, namespace)
    return job is not None and task_key_of(job, deployment) == key


def sweep_namespace(hook: Any, namespace: str, deployment: str, ti_states: StateLookup) -> list[str]:
    """Delete the orphans of ``deployment`` in ``namespace``; returns the names of the jobs deleted."""
    listed = hook.list_mpijobs(namespace, label_selector=deployment_selector(deployment))
    jobs = [j for j in listed if is_live(j)]
    keys = sorted({key for job in jobs if (key := task_key_of(job, deployment)) is not None})
    states = ti_states(keys) if keys else {}
    deleted = []
    for job in orphans(jobs, deployment, states):
        name, uid = job["metadata"]["name"], job["metadata"].get("uid")
        key = task_key_of(job, deployment)
        outcome = hook.delete_live_mpijob(name, namespace, uid=uid)
        log.warning("Orphaned MPIJob %s/%s of %s (task instance %s): %s", namespace, name, key,
                    states.get(key, "gone"), outcome)
        if outcome == DELETED:
            deleted.append(name)
    return deleted
