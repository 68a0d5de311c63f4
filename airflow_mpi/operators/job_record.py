"""Where a task instance's MPIJob lives, recorded where others can find it after the worker is gone.

* Airflow 3.3+ ``task_state_store``: the next try of the same task instance reattaches from it, to that object only
  (its uid: an object someone made again under the same name is not this task's job).
* the XCom ``JOB_XCOM_KEY`` (``{"name", "namespace", "kubernetes_conn_id", "api_version"}``): the orphan listener
  (airflow_mpi/plugins/orphan_listener.py) runs in the API server or the scheduler when the task instance is marked
  failed/success or fails without its worker, and reads it there to delete a job no trigger or worker is left to
  delete. XComs survive deferral; a new try clears them.
"""

from __future__ import annotations

from typing import Any

STATE_STORE_KEY = "airflow_mpi_job"
JOB_XCOM_KEY = "airflow_mpi_job"
JOB_RECORD_KEYS = ("name", "namespace", "kubernetes_conn_id", "api_version")  # the XCom's, as the listener reads it


def record_job(
    context: Any, name: str, namespace: str, *, conn_id: str, api_version: str, uid: str | None = None
) -> None:
    """Record the job of this try in the task state store (if any) and in the XCom ``JOB_XCOM_KEY``."""
    store = context.get("task_state_store") if hasattr(context, "get") else None
    if store is not None:
        store.set(STATE_STORE_KEY, {"name": name, "namespace": namespace, "uid": uid})
    ti = context["ti"]
    if hasattr(ti, "xcom_push"):
        ti.xcom_push(key=JOB_XCOM_KEY, value=dict(zip(JOB_RECORD_KEYS, (name, namespace, conn_id, api_version))))


def recorded_job(context: Any) -> tuple[str, str, str | None] | None:
    """``(name, namespace, uid)`` of the job an earlier try remembered in the task state store (Airflow 3.3+)."""
    store = context.get("task_state_store") if hasattr(context, "get") else None
    stored = store.get(STATE_STORE_KEY) if store is not None else None
    if isinstance(stored, dict) and isinstance(stored.get("name"), str) and isinstance(stored.get("namespace"), str):
        uid = stored.get("uid")
        return stored["name"], stored["namespace"], uid if isinstance(uid, str) else None
    return None
