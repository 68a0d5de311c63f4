"""Fault suite only (tests/faults): MPIJob tasks whose launcher behaviour comes from the run's conf, like
``e2e_mpi_quick``, in the variants the faults need:

* ``e2e_fault_sync``: waits in the worker (non-deferrable), one Airflow retry 1 s after a lost try, so a killed
  task process is followed by a try that reattaches to the job it left; ``e2e_fault_sync_last_try``: no retry, the
  killed try is the last one and nothing of the task is left to delete its job;
* ``e2e_fault_cleanup_sync`` / ``_deferred``: ``cleanPodPolicy: All`` + ``ttlSecondsAfterFinished: 1`` (0 is
  refused: the program could run twice) (the job's pods go as soon as it finishes, racing the final log
  read), one retry like ``e2e_fault_sync``.

Jobs are kept after they finish (``on_finish_action="keep"``) so the suite can count them.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param

from airflow_mpi.operators import MPIJobOperator

PARAMS = {
    "launcher": Param({}, type="object", description="ReplicaSpec overrides of the launcher"),
    "command": Param(["true"], type="array", description="launcher command"),
}


def fault_dag(dag_id: str, doc: str, *, deferrable: bool, retries: int = 0, **job: object) -> DAG:
    with DAG(
        dag_id=dag_id,
        schedule=None,
        catchup=False,
        render_template_as_native_obj=True,
        params=PARAMS,
        doc_md=doc,
        tags=["e2e", "faults"],
    ) as dag:
        MPIJobOperator(
            task_id="job",
            image="mpioperator/mpi-pi:openmpi",
            command="{{ params.command }}",
            launcher="{{ params.launcher }}",
            workers=1,
            deferrable=deferrable,
            poll_interval=2,
            on_finish_action="keep",
            retries=retries,
            retry_delay=timedelta(seconds=1),
            **job,
        )
    return dag


fault_dag(
    "e2e_fault_sync", "faults: a non-deferrable MPIJob task with one retry.", deferrable=False, retries=1
)
fault_dag(
    "e2e_fault_sync_last_try", "faults: a non-deferrable MPIJob task without retries.", deferrable=False
)
for _deferrable in (False, True):
    fault_dag(
        f"e2e_fault_cleanup_{'deferred' if _deferrable else 'sync'}",
        "faults: cleanPodPolicy All + ttlSecondsAfterFinished 1 racing the final log read.",
        deferrable=_deferrable,
        retries=1,
        clean_pod_policy="All",
        ttl_seconds_after_finished=1,
    )
