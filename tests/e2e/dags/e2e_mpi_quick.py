"""e2e only: a deferrable MPIJob whose launcher behaviour (lifetime, exit code) comes from the run's conf.

Tests build the conf with ``airflowstack.job_behaviour.launcher_conf()`` (kwok labels/annotations on the local
cluster, the container's command on a real node). Jobs are kept after they finish so tests can count them and
reattach to them.
"""

from __future__ import annotations

from airflow.sdk import DAG, Param

from airflow_mpi.operators import MPIJobOperator

with DAG(
    dag_id="e2e_mpi_quick",
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params={
        "launcher": Param({}, type="object", description="ReplicaSpec overrides of the launcher"),
        "command": Param(["true"], type="array", description="launcher command"),
    },
    doc_md="e2e: short, failing or reattached deferrable MPIJobs (Airflow's deferral race).",
    tags=["e2e"],
):
    MPIJobOperator(
        task_id="quick",
        image="mpioperator/mpi-pi:openmpi",
        command="{{ params.command }}",
        launcher="{{ params.launcher }}",
        workers=1,
        deferrable=True,
        poll_interval=2,
        on_finish_action="keep",
    )
