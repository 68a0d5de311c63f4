"""Listener that deletes MPIJobs nobody is left to delete: the provider's "no orphan ever" guarantee.

Airflow calls it in the API server when a task instance is marked failed/success by hand, and in
the scheduler when it fails a task instance whose worker is gone (heartbeat lost, killed
externally). In those cases no ``on_kill`` may run: a task marked failed before a triggerer picked
up its trigger has no trigger to kill. A task process killed on its last try is failed by its
surviving supervisor through the execution API, which calls no listener: the sweep when its DAG run
finishes catches that job. The listener reads where the task's job lives from the XCom the operator
wrote (``operators/_job_record.py``) and sweeps that namespace (``hooks/orphan_sweep.py``): every
live MPIJob of this provider whose task instance is finished or gone (also a deleted DAG run's) is
deleted. A finished MPIJob is never touched.

It acts only on the server side (ORM task instances): in a worker the operator cleans up itself.
Errors are logged, never raised into Airflow.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin

from airflow_mpi.models.orphans import FINISHED_TI_STATES, TaskKey

log = logging.getLogger(__name__)


def _state(value: Any) -> str | None:
    return None if value is None else str(getattr(value, "value", value))


def _server_side(task_instance: Any) -> bool:
    return type(task_instance).__module__.startswith("airflow.models")


@hookimpl
def on_task_instance_failed(previous_state: Any, task_instance: Any, error: Any = None) -> None:
    reap_after(task_instance)


@hookimpl
def on_task_instance_success(previous_state: Any, task_instance: Any) -> None:
    reap_after(task_instance)


@hookimpl
def on_task_instance_skipped(previous_state: Any, task_instance: Any) -> None:
    reap_after(task_instance)


@hookimpl
def on_dag_run_failed(dag_run: Any, msg: str) -> None:
    reap_run(dag_run)


@hookimpl
def on_dag_run_success(dag_run: Any, msg: str) -> None:
    reap_run(dag_run)


def reap_run(dag_run: Any) -> threading.Thread:
    """Sweep, in a thread of its own, the namespaces where a finished DAG run's tasks put jobs (scheduler side).

    The scheduler calls this inside its locked transaction: its session (the thread's scoped session) must be
    neither used nor committed, and its loop not held up by Kubernetes calls. Only the run's ids are read here.
    """
    sweep = threading.Thread(target=_reap_run, args=(dag_run.dag_id, dag_run.run_id), daemon=True,
                             name="airflow-mpi-orphan-sweep")
    sweep.start()
    return sweep


def _reap_run(dag_id: str, run_id: str) -> list[str]:
    try:
        from airflow_mpi.hooks import MPIJobHook
        from airflow_mpi.hooks.orphan_sweep import sweep_namespace
        from airflow_mpi.plugins.metadata import run_job_locations, task_instance_states

        records = run_job_locations(dag_id, run_id)
        places = {(r["namespace"], r["kubernetes_conn_id"], r["api_version"]) for r in records}
        return [name for namespace, conn_id, api_version in sorted(places)
                for name in sweep_namespace(MPIJobHook(conn_id=conn_id, api_version=api_version), namespace,
                                            task_instance_states)]
    except Exception:
        log.exception("airflow-mpi: could not sweep for orphaned MPIJobs after DAG run %s/%s finished", dag_id, run_id)
        return []


def reap_after(task_instance: Any) -> list[str]:
    """Sweep the namespace of this task instance's job once it has finished; the names deleted."""
    state = _state(getattr(task_instance, "state", None))
    if not _server_side(task_instance) or state not in FINISHED_TI_STATES:
        return []
    try:
        from airflow_mpi.hooks import MPIJobHook
        from airflow_mpi.hooks.orphan_sweep import sweep_namespace
        from airflow_mpi.plugins.metadata import job_location, task_instance_states

        location = job_location(task_instance)
        own = TaskKey(task_instance.dag_id, task_instance.task_id, task_instance.run_id, task_instance.map_index)
        if location is None:
            return []

        def states(keys: list[TaskKey]) -> dict[TaskKey, str | None]:
            # this task instance's new state may not be committed yet: the listener's view wins
            return {**task_instance_states(keys), own: state}

        hook = MPIJobHook(conn_id=location["kubernetes_conn_id"], api_version=location["api_version"])
        return sweep_namespace(hook, location["namespace"], states)
    except Exception:
        log.exception("airflow-mpi: could not sweep for orphaned MPIJobs after %s", task_instance)
        return []


class MPIJobOrphanPlugin(AirflowPlugin):
    """Registers the listener above."""

    name = "airflow_mpi_orphans"
    listeners = [sys.modules[__name__]]
