"""Faults of Airflow's own components under waiting MPIJob tasks (issue 23 item 2): the scheduler SIGKILLed, the
triggerer that holds a trigger SIGKILLed while a second one runs (HA), the API server SIGKILLed while it marks a task
failed. Measured like every fault (record.py): MPIJobs per task instance, orphans, launcher lines lost or doubled,
spurious failures and the final state the fault implies. Simulated nodes; real kube-apiserver, mpi-operator and
Airflow 3 services (LocalExecutor), whose configuration these scenarios leave as it is: Airflow's own thresholds
decide when a dead component is deemed gone, and the scenarios wait for exactly that.

Paths below are under the installed ``airflow`` package (apache-airflow-core / task-sdk 3.3.2).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path
from uuid import uuid4

import httpx
import pytest
import sqlalchemy
from sqlalchemy.pool import NullPool

from airflow_mpi.jobspec.naming import DEPLOYMENT_LABEL
from airflow_mpi.jobspec.status import job_state
from airflowstack import AirflowStack, StackError, wait_until
from airflowstack._proc import parent_pid
from airflowstack.job_behaviour import RUN, finish_launcher, launcher_conf, numbered_lines, stamped_lines
from tests.e2e.conftest import NAMESPACE
from tests.faults.record import Run, live_jobs
from tests.faults.scenario import (
    DEFERRED,
    SYNC,
    SYNC_LAST_TRY,
    FaultTask,
    deemed_dead,
    more_lines,
    record,
    streamed,
    try_running,
    waiting_job,
    waiting_jobs,
)

# Airflow's defaults (config.yml), which the package's stack keeps: a scheduler is deemed dead once its heartbeat is
# [scheduler] scheduler_health_check_threshold old, a triggerer once its own is [triggerer]
# triggerer_health_check_threshold old
SCHEDULER_HEALTH_CHECK_THRESHOLD = 30.0
ORPHAN_EXIT_TIMEOUT = (
    15  # the orphaned task process looks at its parent every second (operators/supervision.py)
)
SECOND_TRIGGERER = "triggerer-2"
FOREIGN_DEPLOYMENT = "another-deployment"
DAG_ID = "airflow-mpi.io/dag-id"  # label and annotation of a job's task instance
GROUP, VERSION, PLURAL = "kubeflow.org", "v2beta1", "mpijobs"


def _clean(run: Run, state: str) -> bool:
    return (run.state, run.jobs, run.orphans, run.lost, run.doubled, run.spurious) == (state, 1, 0, 0, 0, 0)


# ------------------------------------------------------------------------------------------- scheduler SIGKILL
class TaskProcess:
    """A try's task process, found under the scheduler while its supervisor lives; killable later only while its pid
    still names that task (a pid is reused once the process is gone)."""

    def __init__(self, stack: AirflowStack, ti_id: str):
        self.title = f"airflow worker -- {ti_id}"
        self.pid = stack.task_process(ti_id)
        self.supervisor = stack.task_supervisor(ti_id)

    def alive(self) -> bool:
        try:
            cmdline = (
                Path(f"/proc/{self.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            )
        except OSError:
            return False
        return cmdline.startswith(self.title)

    def kill(self) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


def test_scheduler_sigkill_mid_wait(airflow_stack, client, cluster, custom_api, results, repeat):
    """The scheduler is SIGKILLed (its process group, as ``stop_service`` does) while a sync and a deferrable task wait
    for their running launchers; a batch of lines comes while it is down; it starts again.

    What happens (Airflow 3.3.2): the LocalExecutor's workers are the scheduler's forked children, in its process
    group (``executors/local_executor.py``, ``_spawn_worker``), and each is the supervisor of the task it runs
    (``BaseExecutor.run_workload`` -> ``sdk/execution_time/supervisor.py`` ``supervise_task``); the task process is
    forked into a process group of its own (``WatchedSubprocess.start``, ``new_process_group``). So the kill takes
    the supervisor and leaves the sync task's process running, re-parented to init, with nobody to write its log,
    heartbeat for it or report its end. Such a process can do nothing useful any more: the provider's wait sees its
    parent change and exits at once without touching the job (operators/supervision.py; before, it followed the job
    until the job ended, minutes later, and a SIGTERM reaching it there, as systemd sends what is left of a service,
    ran on_kill: the job was deleted and the next try made a second one). The try stays ``running`` in the database: the
    restarted scheduler's ``adopt_or_reset_orphaned_tasks`` (``jobs/scheduler_job_runner.py``, at its start, then
    every ``orphaned_tasks_check_interval``, 300 s) marks the old SchedulerJob failed once its heartbeat is
    ``scheduler_health_check_threshold`` (30 s) old and resets the task instances it had queued (state None, next
    try); its heartbeat timeout check only looks at task instances of its own job. So the test keeps the scheduler
    down until Airflow deems it dead (restarted earlier, it resets the try at its next check, 300 s later). Try 2
    reattaches to the running MPIJob, prints the whole launcher log once in its own log and succeeds. The deferrable
    task's trigger runs in the triggerer and never noticed: once its job ends, the new scheduler resumes it."""
    tasks = [SYNC, DEFERRED]
    waiting = waiting_jobs(client, cluster, custom_api, tasks)
    (sync_run, sync_job, _), _ = waiting
    orphan = TaskProcess(airflow_stack, client.task_instance(SYNC.dag, sync_run, SYNC.task)["id"])
    (scheduler, *_) = client.jobs("SchedulerJob")  # newest first: the running scheduler's
    try:
        airflow_stack.stop_service("scheduler", signal.SIGKILL)
        assert parent_pid(orphan.pid) != orphan.supervisor, "the task process did not outlive its supervisor"
        wait_until(
            lambda: not orphan.alive(),
            timeout=ORPHAN_EXIT_TIMEOUT,
            interval=0.2,
            what=f"the orphaned task process {orphan.pid} to exit",
        )
        assert [j["metadata"]["uid"] for j in live_jobs(custom_api, SYNC.dag, sync_run)] == [
            sync_job["metadata"]["uid"]
        ], "the orphan touched its job"
        cluster.local.append_launcher_logs(NAMESPACE, stamped_lines("while-down"))
        deemed_dead(client, "SchedulerJob", scheduler["id"], SCHEDULER_HEALTH_CHECK_THRESHOLD)
    finally:
        orphan.kill()  # only if the guard failed (asserted above)
        airflow_stack.start_service("scheduler")
    try_running(client, SYNC, sync_run, 2)  # reset by the new scheduler's first adoption check
    for t, (run_id, job, expected) in zip(tasks, waiting):
        expected += numbered_lines("while-down")
        streamed(client, t, run_id, expected, try_number=2 if t is SYNC else 1)
        finish_launcher(cluster.api_client(), NAMESPACE, job["metadata"]["name"])
    runs = [
        record(
            results,
            f"scheduler SIGKILL mid-wait ({'sync, try reset' if t is SYNC else 'deferrable'})",
            client,
            custom_api,
            t,
            run_id,
            expected,
            job,
            ("success", 2 if t is SYNC else 1),
        )
        for t, (run_id, job, expected) in zip(tasks, waiting)
    ]
    assert all(_clean(run, "success") for run in runs), runs


# ------------------------------------------------------------------------------- triggerer SIGKILL, HA pair
@pytest.fixture(scope="module")
def two_triggerers(airflow_stack):
    """The stack's triggerer and a second one (``SECOND_TRIGGERER``): the same metadata database and log folder, the
    same host. Afterwards the stack has its one triggerer again."""
    airflow_stack.add_service(SECOND_TRIGGERER, like="triggerer")
    try:
        yield airflow_stack
    finally:
        airflow_stack.remove_service(SECOND_TRIGGERER)
        if not airflow_stack.services["triggerer"].alive():
            airflow_stack.start_service("triggerer")


def _owner(client, stack: AirflowStack, run_id: str) -> tuple[int, str | None]:
    """The triggerer job that holds the trigger of ``run_id``'s deferred task, and the service running it: the one
    that has the trigger's log file, ``<task log>.trigger.<its job id>.log``, open."""
    trigger = client.task_instance(DEFERRED.dag, run_id, DEFERRED.task)["trigger"]
    return trigger["triggerer_id"], stack.service_holding(f".trigger.{trigger['triggerer_id']}.log")


def test_triggerer_sigkill_with_a_second_triggerer_running(
    two_triggerers, client, cluster, custom_api, results, repeat
):
    """Two triggerers run (HA); the one holding a deferred task's trigger is SIGKILLed and stays dead, a batch of
    lines comes while the trigger has no live owner, the other triggerer takes it over, a last batch follows.

    What happens: a triggerer takes the triggers whose triggerer's heartbeat is older than its
    ``triggerer_health_check_threshold`` (30 s, Airflow's default: ``models/trigger.py`` ``assign_unassigned``, called
    by ``jobs/triggerer_job_runner.py`` ``load_triggers`` in every loop). The survivor's trigger reads the dead one's
    trigger log file back (same folder: wait/log_ledger.py) and resumes after its last line: every launcher line is
    in the task log exactly once. (While the task is deferred the API server also asks the triggerer log server at
    the configured port for the survivor's file; two triggerers on one host cannot share that port, so that request
    fails when the dead one had it, and the UI adds an error line; the file itself is read from the shared folder.)"""
    stack = two_triggerers
    run_id, job, expected = waiting_job(client, cluster, custom_api, DEFERRED)
    dead_id, owner = _owner(client, stack, run_id)
    assert owner in ("triggerer", SECOND_TRIGGERER), (dead_id, owner)
    stack.stop_service(owner, signal.SIGKILL)
    cluster.local.append_launcher_logs(NAMESPACE, stamped_lines("ownerless"))
    expected += numbered_lines("ownerless")
    assert _owner(client, stack, run_id)[0] == dead_id, "taken over before the lines came"
    streamed(client, DEFERRED, run_id, expected)
    survivor_id, survivor = _owner(client, stack, run_id)
    assert survivor_id != dead_id and survivor not in (None, owner), (dead_id, owner, survivor_id, survivor)
    more_lines(client, cluster, DEFERRED, run_id, expected, "after-takeover")
    finish_launcher(cluster.api_client(), NAMESPACE, job["metadata"]["name"])
    run = record(
        results,
        "triggerer SIGKILL with a second triggerer running (HA, no restart)",
        client,
        custom_api,
        DEFERRED,
        run_id,
        expected,
        job,
    )
    stack.start_service(owner)  # the pair again, for the next run (the scenario is over)
    assert _clean(run, "success"), run


# ------------------------------------------------------------------------- API server SIGKILL, mark failed
@pytest.fixture(scope="module")
def foreign_job(custom_api) -> dict:
    """A live MPIJob of another Airflow deployment in the same namespace, of the same DAG and task: the sweeps of
    this deployment must never touch it (they list only jobs labelled with this deployment's identity)."""
    from airflow_mpi.operators import MPIJobOperator

    operator = MPIJobOperator(
        task_id=SYNC_LAST_TRY.task,
        image="mpioperator/mpi-pi:openmpi",
        workers=1,
        namespace=NAMESPACE,
        name="foreign",
        **launcher_conf(RUN),
    )
    manifest = operator.build_manifest({"run_id": f"foreign__{uuid4().hex[:8]}"})
    manifest["metadata"]["labels"].update({DEPLOYMENT_LABEL: FOREIGN_DEPLOYMENT, DAG_ID: SYNC_LAST_TRY.dag})
    manifest["metadata"]["annotations"][DAG_ID] = SYNC_LAST_TRY.dag
    job = custom_api.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, manifest)
    yield job
    custom_api.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, job["metadata"]["name"])


def _untouched(custom_api, job: dict) -> bool:
    now = custom_api.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, job["metadata"]["name"])
    return (
        now["metadata"]["uid"] == job["metadata"]["uid"]
        and not now["metadata"].get("deletionTimestamp")
        and not job_state(now).terminal
    )


def _mark_failed_and_kill_api_server(stack: AirflowStack, t: FaultTask, run_id: str, ti_id: str) -> str:
    """PATCH the task instance to failed (the UI's "mark failed") and SIGKILL the API server the moment the new state
    is committed (seen in the metadata database), while it emits the listeners and answers. Waiting for the commit
    makes the test deterministic about what it checks: a kill before it would only lose the request (nothing
    changed; the UI shows an error and the user tries again). Returns what the request got."""
    marker = stack.client()
    answer: list[str] = []

    def mark() -> None:
        try:
            marker.set_task_state(t.dag, run_id, t.task, "failed")
            answer.append("answered")
        except (httpx.HTTPError, StackError) as exc:
            answer.append(f"cut off ({type(exc).__name__})")

    engine = sqlalchemy.create_engine(stack.database_url, poolclass=NullPool)
    query = sqlalchemy.text("SELECT state FROM task_instance WHERE id = :id")
    try:
        with engine.connect() as db:  # READ COMMITTED: each query sees what is committed by then
            request = threading.Thread(target=mark, name="mark-failed")
            request.start()
            wait_until(
                lambda: db.execute(query, {"id": ti_id}).scalar() == "failed",
                timeout=30,
                interval=0.002,
                what="the task instance's failed state to be committed",
                ignore=(),
            )
            stack.stop_service("api-server", signal.SIGKILL)
    finally:
        engine.dispose()
    request.join(timeout=30)
    return answer[0] if answer else "no answer"


def _deleted_by(stack: AirflowStack, client, t: FaultTask, run_id: str, name: str) -> list[str]:
    """What deleted the live MPIJob ``name``, from the logs of those that may: the API server's listener and the
    scheduler's (a DAG run's end) log ``Orphaned MPIJob <ns>/<name> ...: deleted`` (hooks/orphan_sweep.py); the task's
    ``on_kill`` logs ``Task killed: MPIJob <ns>/<name> deleted`` in the task log."""
    swept = f"Orphaned MPIJob {NAMESPACE}/{name} "
    deleters = [
        who
        for service, who in (
            ("api-server", "the API server's listener sweep"),
            ("scheduler", "the scheduler's sweep at the DAG run's end"),
        )
        if any(
            swept in line and "): deleted" in line
            for line in (stack.log_dir / f"{service}.log").read_text(errors="replace").splitlines()
        )
    ]
    if f"Task killed: MPIJob {NAMESPACE}/{name} deleted" in client.task_log_events(t.dag, run_id, t.task):
        deleters.append("the task's on_kill")
    return deleters


def test_api_server_sigkill_while_marking_a_task_failed(
    airflow_stack, client, cluster, custom_api, results, repeat, foreign_job
):
    """A sync task waits (no retries); a user marks it failed (REST PATCH) and the API server is SIGKILLed as it
    commits, then restarted. The task ends failed, its MPIJob is deleted, nothing is left running, and another
    deployment's live job in the namespace is untouched.

    What happens: ``PATCH .../taskInstances/{task_id}`` commits the new state, then calls the task instance
    listeners (``api_fastapi/core_api/services/public/task_instances.py`` ``_patch_task_instance_state``); the
    provider's listener only queues a sweep for its background thread (plugins/orphan_listener.py), which dies with
    the process before it reaches Kubernetes. The job is deleted by the **scheduler's sweep at the DAG run's end**:
    the scheduler sees the failed task instance, fails the run and calls ``on_dag_run_failed``, whose sweep deletes
    the live job of the finished task instance (within about a second, while the API server is still down). The
    waiting task process then sees its job deleted and fails. Had it still waited when the API server came back, its
    supervisor's next heartbeat would have been refused (409: the task is no longer running,
    ``api_fastapi/execution_api/routes/task_instances.py`` ``ti_heartbeat``) and it would have been SIGTERMed, its
    ``on_kill`` deleting the job; the API server's own sweep wins only if it finishes before the kill. Which one
    deleted the job is read from their logs and shown in the row."""
    t = SYNC_LAST_TRY
    run_id, job, expected = waiting_job(client, cluster, custom_api, t)
    ti = client.task_instance(t.dag, run_id, t.task)
    answer = _mark_failed_and_kill_api_server(airflow_stack, t, run_id, ti["id"])
    airflow_stack.start_service("api-server")
    assert client.task_instance(t.dag, run_id, t.task)["state"] == "failed"  # what the server committed
    name, deleters = job["metadata"]["name"], []

    def note() -> str:  # once the run is over and its sweep is done
        deleters.extend(_deleted_by(airflow_stack, client, t, run_id, name))
        return f"request {answer}; job deleted by {' and '.join(deleters) or 'nobody'}"

    run = record(
        results,
        "API server SIGKILL while a task is marked failed (sync)",
        client,
        custom_api,
        t,
        run_id,
        expected,
        job,
        ("failed", 1),
        note=note,
    )
    assert _clean(run, "failed"), run
    still = [j for j in live_jobs(custom_api, t.dag, run_id) if j["metadata"]["name"] == name]
    assert not still and len(deleters) == 1, (deleters, still)
    assert _untouched(custom_api, foreign_job), "another deployment's job was touched"
