"""e2e only: a deferrable MPIJob whose launcher never finishes on its own, to test what killing the task does.

On the local cluster the label below keeps the simulated launcher Running (localcluster/behaviour.py:
``sim.airflow-mpi.io/lifecycle=run``); on a real cluster ``sleep 3600`` does the same.
"""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_mpi.operators import MPIJobOperator

with DAG(
    dag_id="e2e_mpi_hold",
    schedule=None,
    catchup=False,
    doc_md="e2e: a deferred MPIJob that only ends when the task is marked failed or cleared.",
    tags=["e2e"],
):
    MPIJobOperator(
        task_id="hold",
        image="mpioperator/mpi-pi:openmpi",
        command=["sleep", "3600"],
        workers=1,
        deferrable=True,
        poll_interval=2,
        launcher={"labels": {"sim.airflow-mpi.io/lifecycle": "run"}},
    )
