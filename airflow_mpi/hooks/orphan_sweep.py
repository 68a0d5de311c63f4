"""The orphan sweep: delete the live MPIJobs of a namespace whose task instance no longer waits for them.

Which jobs are orphans is decided by ``models/orphans.py`` from the identity annotations and the
task instances' states; the states come from a lookup the caller provides (the metadata database
in the API server or the scheduler). Deletions go through ``delete_live_mpijob``, so a job that
finishes meanwhile is kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from airflow_mpi.hooks.live_delete import DELETED
from airflow_mpi.models.orphans import MANAGED_SELECTOR, TaskKey, is_live, orphans, task_key_of

log = logging.getLogger(__name__)

StateLookup = Callable[[list[TaskKey]], dict[TaskKey, "str | None"]]


def sweep_namespace(hook: Any, namespace: str, ti_states: StateLookup) -> list[str]:
    """Delete the orphans of ``namespace``; returns the names of the jobs deleted."""
    jobs = [j for j in hook.list_mpijobs(namespace, label_selector=MANAGED_SELECTOR) if is_live(j)]
    keys = sorted({key for key in map(task_key_of, jobs) if key is not None})
    states = ti_states(keys) if keys else {}
    deleted = []
    for job in orphans(jobs, states):
        name = job["metadata"]["name"]
        key = task_key_of(job)
        outcome = hook.delete_live_mpijob(name, namespace)
        log.warning(
            "Orphaned MPIJob %s/%s of %s (task instance %s): %s",
            namespace, name, key, states.get(key, "gone") if key in states else "gone", outcome,
        )
        if outcome == DELETED:
            deleted.append(name)
    return deleted
