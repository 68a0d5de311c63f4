"""Reads from Airflow's metadata database for the orphan listener (server side only: API server, scheduler)."""

from __future__ import annotations

from typing import Any

from airflow_mpi.models.orphans import TaskKey
from airflow_mpi.operators._job_record import JOB_XCOM_KEY

LOCATION_KEYS = ("name", "namespace", "kubernetes_conn_id", "api_version")


def task_instance_states(keys: list[TaskKey]) -> dict[TaskKey, str | None]:
    """The state of every task instance among ``keys`` that exists (a deleted DAG run's are absent)."""
    from sqlalchemy import select, tuple_

    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session

    columns = (TI.dag_id, TI.task_id, TI.run_id, TI.map_index)
    with create_session() as session:
        rows = session.execute(select(*columns, TI.state).where(tuple_(*columns).in_([tuple(k) for k in keys])))
        return {TaskKey(*row[:4]): None if row[4] is None else str(getattr(row[4], "value", row[4])) for row in rows}


def run_job_locations(dag_id: str, run_id: str) -> list[dict]:
    """The job records (see :func:`job_location`) of every task instance of one DAG run, in one query."""
    from airflow.utils.session import create_session

    with create_session() as session:
        try:
            from airflow.models.xcom import XComModel  # Airflow 3
        except ImportError:  # Airflow 2
            from airflow.models.xcom import XCom

            values = [row.value for row in XCom.get_many(run_id=run_id, key=JOB_XCOM_KEY, dag_ids=dag_id,
                                                         session=session)]
        else:
            rows = session.scalars(XComModel.get_many(run_id=run_id, key=JOB_XCOM_KEY, dag_ids=dag_id)).all()
            values = [XComModel.deserialize_value(row) for row in rows]
    return [value for value in values if _is_location(value)]


def _is_location(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(value.get(k), str) for k in LOCATION_KEYS)


def job_location(task_instance: Any) -> dict | None:
    """The ``{"name", "namespace", "kubernetes_conn_id", "api_version"}`` the operator recorded as XCom."""
    from airflow.utils.session import create_session

    ti = task_instance
    with create_session() as session:
        try:
            from airflow.models.xcom import XComModel  # Airflow 3
        except ImportError:  # Airflow 2
            from airflow.models.xcom import XCom

            value = XCom.get_one(run_id=ti.run_id, key=JOB_XCOM_KEY, task_id=ti.task_id, dag_id=ti.dag_id,
                                 map_index=ti.map_index, session=session)
        else:
            query = XComModel.get_many(run_id=ti.run_id, key=JOB_XCOM_KEY, task_ids=ti.task_id, dag_ids=ti.dag_id,
                                       map_indexes=ti.map_index)
            row = session.scalars(query).first()
            value = XComModel.deserialize_value(row) if row is not None else None
    return value if _is_location(value) else None
