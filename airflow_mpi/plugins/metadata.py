"""Reads from Airflow's metadata database for the orphan sweep (server side only: API server, scheduler).

Every read runs in a session of its own (``non_scoped_session``): the sweep runs in its own thread, and must
never use or commit a session Airflow's code holds.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from airflow_mpi.jobspec.orphans import TaskKey, TryState, state_text
from airflow_mpi.operators.job_record import JOB_RECORD_KEYS, JOB_XCOM_KEY
from airflow_mpi.version_compat import non_scoped_session


def task_instance_states(keys: list[TaskKey]) -> dict[TaskKey, TryState]:
    """The state, try and (Airflow 3) id of every task instance among ``keys`` that exists (a deleted DAG run's are
    absent): which try the state is about decides which jobs it may judge (jobspec/orphans.py)."""
    from airflow.models.taskinstance import TaskInstance as TI
    from sqlalchemy import select, tuple_

    columns = (TI.dag_id, TI.task_id, TI.run_id, TI.map_index)
    ti_id = getattr(TI, "id", None)  # Airflow 3 only: a new UUID with each try
    extra = (TI.state, TI.try_number) + ((ti_id,) if ti_id is not None else ())
    with non_scoped_session() as session:
        rows = session.execute(select(*columns, *extra).where(tuple_(*columns).in_([tuple(k) for k in keys])))
        return {
            TaskKey(*row[:4]): TryState(state_text(row[4]), row[5], str(row[6]) if len(row) > 6 else None)
            for row in rows
        }


def job_locations(dag_id: str, run_id: str, task_id: str | None = None) -> list[tuple[TaskKey, dict]]:
    """``(task instance, job record)`` of every task instance of one DAG run (or one task) that recorded its job."""
    with non_scoped_session() as session:
        try:
            from airflow.models.xcom import XComModel  # Airflow 3
        except ImportError:  # Airflow 2
            from airflow.models.xcom import XCom

            rows = XCom.get_many(
                run_id=run_id, key=JOB_XCOM_KEY, dag_ids=dag_id, task_ids=task_id, session=session
            )
            found = [(row, row.value) for row in rows]
        else:
            query = XComModel.get_many(run_id=run_id, key=JOB_XCOM_KEY, dag_ids=dag_id, task_ids=task_id)
            found = [(row, XComModel.deserialize_value(row)) for row in session.scalars(query).all()]
    return [
        (TaskKey(row.dag_id, row.task_id, row.run_id, row.map_index), value)
        for row, value in found
        if _is_location(value)
    ]


def _is_location(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(value.get(k), str) for k in JOB_RECORD_KEYS)


def recorded_places(limit: int = 5000) -> set[tuple[str, str, str]]:
    """``(namespace, connection id, api version)`` the newest ``limit`` job records name: where this deployment's
    jobs may still run (a scheduler about to make a new id looks there for jobs of an earlier one)."""
    from sqlalchemy import select

    value_of: Callable[[Any], Any]
    try:
        from airflow.models.xcom import XComModel as model  # Airflow 3

        value_of = model.deserialize_value
    except ImportError:  # Airflow 2: a row's value is deserialized as it is loaded
        from airflow.models.xcom import BaseXCom as model  # type: ignore[no-redef]

        value_of = operator.attrgetter("value")

    with non_scoped_session() as session:
        query = select(model).where(model.key == JOB_XCOM_KEY).order_by(model.timestamp.desc()).limit(limit)
        values = [value_of(row) for row in session.scalars(query).all()]
    return {(v["namespace"], v["kubernetes_conn_id"], v["api_version"]) for v in values if _is_location(v)}
