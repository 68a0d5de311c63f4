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
RESULT_KEY_STORE_KEY = "airflow_mpi_result_key"
JOB_XCOM_KEY = "airflow_mpi_job"
JOB_RECORD_KEYS = (
    "name",
    "namespace",
    "kubernetes_conn_id",
    "api_version",
)  # the XCom's, as the listener reads it


def record_job(
    context: Any, name: str, namespace: str, *, conn_id: str, api_version: str, uid: str | None = None
) -> None:
    """Record the job of this try in the task state store (if any) and in the XCom ``JOB_XCOM_KEY``."""
    store = context.get("task_state_store") if hasattr(context, "get") else None
    if store is not None:
        store.set(STATE_STORE_KEY, {"name": name, "namespace": namespace, "uid": uid})
    ti = context["ti"]
    if hasattr(ti, "xcom_push"):
        ti.xcom_push(
            key=JOB_XCOM_KEY, value=dict(zip(JOB_RECORD_KEYS, (name, namespace, conn_id, api_version)))
        )


def recorded_job(context: Any) -> tuple[str, str, str | None] | None:
    """``(name, namespace, uid)`` of the job an earlier try remembered in the task state store (Airflow 3.3+)."""
    store = context.get("task_state_store") if hasattr(context, "get") else None
    stored = store.get(STATE_STORE_KEY) if store is not None else None
    if (
        isinstance(stored, dict)
        and isinstance(stored.get("name"), str)
        and isinstance(stored.get("namespace"), str)
    ):
        uid = stored.get("uid")
        return stored["name"], stored["namespace"], uid if isinstance(uid, str) else None
    return None


def _store(context: Any) -> Any:
    return context.get("task_state_store") if hasattr(context, "get") else None


def record_result_key(context: Any, uid: str | None, key: str) -> bool:
    """Keep the key ``@task.mpi``'s rank 0 signs its value with, for the job ``uid``, in the task state store
    (Airflow 3.3+; no log and no XCom shows it), so that a later try may follow that job. False: nowhere to keep it."""
    store = _store(context)
    if store is None or not uid:
        return False
    store.set(RESULT_KEY_STORE_KEY, {"uid": uid, "key": key})
    return True


def recorded_result_key(context: Any, uid: str | None) -> str | None:
    """The key an earlier try kept for the job ``uid`` (that object only), if any."""
    store = _store(context)
    stored = store.get(RESULT_KEY_STORE_KEY) if store is not None and uid else None
    if isinstance(stored, dict) and stored.get("uid") == uid and isinstance(stored.get("key"), str):
        return stored["key"]
    return None
