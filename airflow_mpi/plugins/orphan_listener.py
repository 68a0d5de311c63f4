"""Listener that deletes MPIJobs nobody is left to delete: the provider's "no orphan ever" guarantee.

Airflow calls it in the API server when a task instance is marked failed/success by hand, and in the scheduler
when it fails a task instance whose worker is gone (heartbeat lost, killed externally) or when a DAG run finishes:
cases where no ``on_kill`` may run (a task marked failed before a triggerer picked up its trigger has no trigger to
kill). It deletes only orphans (jobspec/orphans.py), and looks only in the namespaces the finished task instances
recorded their jobs in (operators/job_record.py), each checked first (``hooks/orphan_sweep.owns_place``).

The hooks below only hand ids to the background worker (plugins/sweep_worker.py); a task instance that is not an
MPI task costs nothing (its operator name is on the task instance already). Errors are logged, never raised.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from typing import Any

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin

from airflow_mpi.jobspec.kinds import DEFAULT_KIND
from airflow_mpi.jobspec.orphans import FINISHED_TI_STATES, TaskKey, TryState, state_text
from airflow_mpi.plugins.sweep_worker import SweepWorker

log = logging.getLogger(__name__)

SWEEP_BUDGET = 60.0  # seconds of Kubernetes calls one request may spend
CLAIM_CHECK_BUDGET = 20.0  # seconds a starting component may spend looking for jobs of an earlier id
DECORATOR_NAMES = frozenset({"@task.mpi", "@task.horovod"})


@dataclass(frozen=True)
class TaskFinished:
    """A try of a task instance reached a finished state: ``seen`` is the state as the listener saw it (maybe not
    committed yet) with the try it is about. The worker may get to it after a clear and a new try: it then judges
    the jobs of its own try only (jobspec/orphans.py), never the new try's job of the same name."""

    key: TaskKey
    seen: TryState


@dataclass(frozen=True)
class RunFinished:
    dag_id: str
    run_id: str


def _mpi_operator_names() -> frozenset[str]:
    """Class names of MPIJobOperator and every subclass imported in this process (the task instance's
    ``operator`` column holds its task's class name)."""
    import airflow_mpi.decorators  # noqa: F401  the decorated operators are subclasses too
    from airflow_mpi.operators import MPIJobOperator

    names, todo = set(), [MPIJobOperator]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return frozenset(names)


def is_mpi_task(task_instance: Any) -> bool:
    """From the task instance's own columns, no I/O. A subclass defined in a DAG file only (not importable
    here) is not recognised: the sweep when its DAG run finishes catches its job."""
    return (
        getattr(task_instance, "custom_operator_name", None) in DECORATOR_NAMES
        or getattr(task_instance, "operator", None) in _mpi_operator_names()
    )


def handle(request: Any) -> list[str]:
    """Run one request in the worker thread; the names of the jobs deleted."""
    from airflow_mpi import deployment_identity
    from airflow_mpi.plugins import metadata

    identity = deployment_identity.in_database()
    if (
        identity.conflict
    ):  # a copied database this component's scheduler has not recorded its installation in yet
        log.error("%s Not sweeping.", identity.conflict)
        return []
    reported: dict[TaskKey, TryState] = {}
    if isinstance(request, TaskFinished):
        key = request.key
        records = [(k, r) for k, r in metadata.job_locations(key.dag_id, key.run_id, key.task_id) if k == key]
        reported[key] = request.seen
    else:
        records = metadata.job_locations(request.dag_id, request.run_id)
    return sweep_places(
        records,
        identity.deployment,
        metadata.task_instance_states,
        reported,
        installation=identity.installation,
    )


def sweep_places(
    records: list[tuple[TaskKey, dict]],
    deployment: str,
    states: Any,
    reported: dict[TaskKey, TryState] | None = None,
    *,
    installation: str,
) -> list[str]:
    """Sweep each place a record names once it is proven to hold that task instance's job, and its claim of
    ``deployment`` names ``installation`` (hooks/identity_claims.py: a copy of the database holding the same id
    sweeps nothing of the original's). ``states``: the database's lookup; ``reported``: the state a finish request
    saw (hooks/orphan_sweep.sweep_namespace)."""
    from airflow_mpi.hooks.identity_claims import sweep_refusal
    from airflow_mpi.hooks.orphan_sweep import BudgetedMPIJobHook, owns_place, sweep_namespace

    deadline = time.monotonic() + SWEEP_BUDGET
    swept: set[tuple[str, str, str]] = set()
    deleted: list[str] = []
    for key, record in records:
        place = (record["namespace"], record["kubernetes_conn_id"], record["api_version"])
        if place in swept:
            continue
        hook = BudgetedMPIJobHook(conn_id=place[1], api_version=place[2], deadline=deadline)
        if not owns_place(hook, deployment, key, record["name"], place[0]):
            log.info(
                "airflow-mpi: not sweeping %s: MPIJob %s there is not the job of %s in this deployment (%s)",
                place[0],
                record["name"],
                key,
                deployment,
            )
            continue
        swept.add(place)
        if refusal := sweep_refusal(hook, place[0], deployment, installation):
            log.error("%s Not sweeping it.", refusal)
            continue
        deleted += sweep_namespace(hook, place[0], deployment, states, reported)
    return deleted


WORKER = SweepWorker(handle, exit_wait=SWEEP_BUDGET)  # a process's last requests (its run's end) get done


def submit_task(task_instance: Any) -> bool:
    """Hand a finished MPI task instance of the server side (an ORM one) to the worker, with the try it is about
    (its number, and its id on Airflow 3: a job's labels and annotations say the same of the try that made it);
    True when queued."""
    ti, state = task_instance, state_text(getattr(task_instance, "state", None))
    if (
        not type(ti).__module__.startswith("airflow.models")
        or state not in FINISHED_TI_STATES
        or not is_mpi_task(ti)
    ):
        return False
    ti_id, try_number = getattr(ti, "id", None), getattr(ti, "try_number", None)
    seen = TryState(state, try_number if isinstance(try_number, int) else None, str(ti_id) if ti_id else None)
    return WORKER.submit(TaskFinished(TaskKey(ti.dag_id, ti.task_id, ti.run_id, ti.map_index), seen))


@hookimpl
def on_starting(component: Any) -> None:
    """Make this deployment's identity and record its installation when a server component starts (scheduler,
    triggerer, dag processor: not a task runner), before any task needs them: in its main thread, before its loop
    and before it forks anything (no thread here, see plugins/sweep_worker.py), in sessions of its own
    (deployment_identity.establish). Errors are logged by Airflow."""
    if type(component).__module__ == "airflow.jobs.job":
        from airflow_mpi import deployment_identity

        identity = deployment_identity.establish(live_claims)
        log.info(
            "airflow-mpi: this deployment's identity is %s (installation %s)",
            identity.deployment,
            identity.installation,
        )


def live_claims(installation: str) -> dict[str, dict[str, list[str]]]:
    """``installation``'s claims of ids whose jobs still run, by namespace, where this deployment is known to run
    jobs: the ``kubernetes_default`` connection's namespace and those its tasks recorded (a new id is made only
    where there are none). A place that cannot be read is skipped with a warning: tasks check the same."""
    from airflow_mpi.hooks.identity_claims import live_claims as live_in
    from airflow_mpi.hooks.orphan_sweep import BudgetedMPIJobHook
    from airflow_mpi.plugins import metadata

    deadline = time.monotonic() + CLAIM_CHECK_BUDGET
    places = set(metadata.recorded_places())
    try:
        places.add(
            (
                BudgetedMPIJobHook(deadline=deadline).resolve_namespace(),
                "kubernetes_default",
                DEFAULT_KIND.api_version,
            )
        )
    except Exception as err:  # no such connection: nothing of it to look at
        log.info("airflow-mpi: no namespace of kubernetes_default to look for earlier ids in (%s)", err)
    found: dict[str, dict[str, list[str]]] = {}
    for namespace, conn_id, api_version in sorted(places):
        try:
            hook = BudgetedMPIJobHook(conn_id=conn_id, api_version=api_version, deadline=deadline)
            if live := live_in(hook, namespace, installation):
                found.setdefault(namespace, {}).update(live)
        except Exception as err:
            log.warning(
                "airflow-mpi: could not look for jobs of earlier ids in %s (%s): %s", namespace, conn_id, err
            )
    return found


@hookimpl
def on_task_instance_failed(previous_state: Any, task_instance: Any, error: Any = None) -> None:
    submit_task(task_instance)


on_task_instance_success = on_task_instance_skipped = (
    on_task_instance_failed  # the same for every finished state
)


@hookimpl
def on_dag_run_failed(dag_run: Any, msg: str) -> None:
    WORKER.submit(RunFinished(dag_run.dag_id, dag_run.run_id))


on_dag_run_success = on_dag_run_failed


class MPIJobOrphanPlugin(AirflowPlugin):
    """Registers the listener above."""

    name = "airflow_mpi_orphans"
    listeners = [sys.modules[__name__]]  # noqa: RUF012 - AirflowPlugin's attribute, declared as Airflow does
