"""Deleting an MPIJob only while it is still live: the one deletion a kill or a sweep may do.

A kill (``on_kill`` of the operator or the trigger) or the orphan sweep deletes a job so that it stops holding GPUs.
A job that already finished holds nothing, and a Succeeded one is the result a retry or a clear reattaches to
instead of running the whole job again, so it is never deleted there: a spurious failure of a resumed try (Airflow's
deferral race, wait/deferral.py) then costs nothing. "Live" is checked atomically: the DELETE carries a
precondition on the resourceVersion judged, so a job that finishes in between answers 409 and is judged again.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from airflow_mpi.hooks.requests import CUSTOM_OBJECTS, Call, Steps, get_call, job_kind_at, kind_of
from airflow_mpi.jobspec.status import job_state

# outcomes of delete_live_mpijob
DELETED = "deleted"  # it was live: deletion requested
FINISHED = "finished"  # Succeeded or Failed: kept
GONE = "gone"  # did not exist
DELETING = "deleting"  # already being deleted
CHANGED = "changed"  # changed between read and DELETE (409): judge again
ROUNDS = 5  # read-judge-delete rounds before giving up on a job that keeps changing


def keep_reason(obj: dict | None, uid: str | None = None) -> str | None:
    """Why a live-only deletion leaves ``obj`` alone (None: it is live and may be deleted). ``uid``: only that
    incarnation may be deleted; another object of the same name (made again, by anyone) counts as gone."""
    if obj is None or (uid is not None and (obj.get("metadata") or {}).get("uid") != uid):
        return GONE
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return DELETING
    if job_state(obj).terminal:
        return FINISHED
    return None


def live_delete_call(where: dict[str, Any], obj: dict, hook_log: logging.Logger) -> Call:
    """DELETE ``obj`` only if it is still the version that was judged live (uid + resourceVersion)."""
    metadata = obj["metadata"]
    name = metadata["name"]
    body = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "propagationPolicy": job_kind_at(where).delete_propagation,
        "preconditions": {"uid": metadata.get("uid"), "resourceVersion": metadata.get("resourceVersion")},
    }

    def on_error(exc: BaseException) -> str:
        if (outcome := {404: GONE, 409: CHANGED}.get(cast(int, getattr(exc, "status", None)))) is None:
            raise exc
        return outcome

    def deleted(_: Any) -> str:
        hook_log.info("Deleted live %s %s/%s", kind_of(where), metadata["namespace"], name)
        return DELETED

    kwargs = {**where, "name": name, "body": body}
    return Call(CUSTOM_OBJECTS, "delete_namespaced_custom_object", kwargs, on_error, deleted)


def live_delete(where: dict[str, Any], name: str, uid: str | None, hook_log: logging.Logger) -> Steps:
    """Read, judge, delete if live; again while the job changed in between. Returns the outcome."""
    for _ in range(ROUNDS):
        obj = yield get_call(where, name)
        outcome = keep_reason(obj, uid) or (yield live_delete_call(where, obj, hook_log))
        if outcome != CHANGED:
            return outcome
    return CHANGED
