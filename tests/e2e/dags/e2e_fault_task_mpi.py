"""Fault suite only (tests/faults): a deferrable ``@task.mpi`` whose launcher behaviour comes from the run's conf,
like ``e2e_mpi_quick``. On the simulated nodes no rank runs: the suite scripts the launcher's log, rank 0's
marker lines included (made by running the call of the job's Secret through the ranks' program, as rank 0
would). The function is stdlib-only so that the suite can run it so.

Jobs are kept after they finish (``on_finish_action="keep"``) so the suite can count them.
"""

from __future__ import annotations

from airflow.sdk import DAG, Param, task

with DAG(
    dag_id="e2e_fault_task_mpi",
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params={
        "launcher": Param({}, type="object", description="ReplicaSpec overrides of the launcher"),
        "command": Param(["true"], type="array", description="unused: the function is the program"),
    },
    doc_md="faults: a deferrable @task.mpi whose rank 0's value must survive a triggerer failover.",
    tags=["e2e", "faults"],
):

    @task.mpi(
        image="mpioperator/mpi-pi:openmpi",
        launcher="{{ params.launcher }}",
        workers=1,
        deferrable=True,
        poll_interval=2,
        on_finish_action="keep",
    )
    def rank_value(
        run_id: str,
    ):  # no "-> dict": that would push the dict's keys as XComs too (multiple_outputs)
        """Every rank's value names its rank; only rank 0's may become the XCom."""
        import os

        rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
        print(f"rank {rank} computed its value")
        return {"rank": rank, "run_id": run_id, "text": "Grün\tüber alles"}

    rank_value(run_id="{{ run_id }}")
