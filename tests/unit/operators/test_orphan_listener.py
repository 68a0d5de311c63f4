"""The orphan listener and sweep, with the metadata database and the cluster replaced by fakes."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from types import SimpleNamespace as NS

import pytest

from airflow_mpi.hooks.orphan_sweep import BudgetedMPIJobHook, SweepOverBudget, sweep_namespace
from airflow_mpi.jobspec.naming import identity_annotations, identity_labels
from airflow_mpi.jobspec.orphans import TaskKey, TryState
from airflow_mpi.plugins import metadata, orphan_listener
from airflow_mpi.plugins.sweep_worker import SweepWorker
from localcluster.processes import child_env
from tests.unit.fakes import FakeSyncHook

RUN = "manual__2026-11-23T10:00:00+00:00"
OURS, THEIRS = "tests-in-process", "other-deployment"
LOCATION = {
    "name": "j",
    "namespace": "ns",
    "kubernetes_conn_id": "k8s",
    "api_version": "kubeflow.org/v2beta1",
}


def add_job(hook, name, key, *conditions, deployment=OURS, namespace="ns", try_number=1, ti_id=None):
    """The job try ``try_number`` (id ``ti_id``) of task instance ``key`` made."""
    hook.jobs[(namespace, name)] = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "labels": identity_labels(*key, try_number, deployment),
            "annotations": identity_annotations(*key, try_number, ti_id),
        },
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }


def test_sweep_deletes_only_this_deployments_live_jobs_of_finished_or_vanished_task_instances():
    hook = FakeSyncHook()
    failed, running, vanished, done = (
        TaskKey("d", t, RUN, -1) for t in ("failed", "running", "vanished", "done")
    )
    add_job(hook, "a", failed, "Created", "Running")
    add_job(hook, "b", running, "Created", "Running")
    add_job(hook, "c", vanished, "Created")
    add_job(hook, "e", done, "Created", "Succeeded")
    add_job(
        hook, "theirs", failed, "Created", "Running", deployment=THEIRS
    )  # same dag/task/run, another deployment
    add_job(hook, "rendered", vanished, "Created", deployment=None)  # airflow-mpi-render applied by hand
    asked = []

    def states(keys):
        asked.append(keys)
        return {failed: TryState("failed", 1), running: TryState("running", 1), done: TryState("failed", 1)}

    assert sorted(sweep_namespace(hook, "ns", OURS, states)) == ["a", "c"]
    assert sorted(n for _, n in hook.jobs) == ["b", "e", "rendered", "theirs"]
    assert asked == [sorted([failed, running, vanished])]  # finished and foreign jobs are not even looked up


def test_a_job_replaced_under_the_same_name_is_not_deleted_by_the_uid_it_was_judged_by():
    hook = FakeSyncHook()
    key = TaskKey("d", "t", RUN, -1)
    add_job(hook, "a", key, "Created")
    judged = dict(hook.jobs[("ns", "a")])
    hook.jobs[("ns", "a")] = {**judged, "metadata": {**judged["metadata"], "uid": "someone-elses"}}
    assert hook.delete_live_mpijob("a", "ns", uid="uid-a") == "gone"
    assert ("ns", "a") in hook.jobs


class ServerTI:
    """Stands in for an ORM task instance (the listener acts only on the server side)."""

    __module__ = "airflow.models.taskinstance"

    def __init__(
        self,
        state,
        task_id="hold",
        operator="MPIJobOperator",
        custom_operator_name=None,
        try_number=1,
        id=None,
    ):
        self.dag_id, self.task_id, self.run_id, self.map_index, self.state = "d", task_id, RUN, -1, state
        self.operator, self.custom_operator_name = operator, custom_operator_name
        self.try_number, self.id = try_number, id


@pytest.fixture
def cluster(monkeypatch):
    """One fake cluster behind every hook the sweep makes; the database's locations and states faked."""
    hook = FakeSyncHook()
    made = []

    def make_hook(conn_id, api_version, deadline):
        made.append((conn_id, api_version))
        return hook

    import airflow_mpi.hooks.orphan_sweep as orphan_sweep

    monkeypatch.setattr(orphan_sweep, "BudgetedMPIJobHook", make_hook)
    hook.locations = {TaskKey("d", "hold", RUN, -1): LOCATION}
    monkeypatch.setattr(
        metadata,
        "job_locations",
        lambda dag_id, run_id, task_id=None: [
            (k, v) for k, v in hook.locations.items() if k.dag_id == dag_id and task_id in (None, k.task_id)
        ],
    )
    # the database still has the old state: the listener's own view of its task instance's try must win
    hook.db = {}
    monkeypatch.setattr(
        metadata,
        "task_instance_states",
        lambda keys: {k: hook.db.get(k, TryState("deferred", 1)) for k in keys},
    )
    hook.made = made
    return hook


def settle() -> None:
    assert orphan_listener.WORKER.drain(30), "the sweeper did not finish"


def test_marking_a_deferred_task_failed_deletes_its_live_job_in_the_background(cluster):
    add_job(cluster, "j", TaskKey("d", "hold", RUN, -1), "Created", "Running")
    assert orphan_listener.on_task_instance_failed(None, ServerTI("failed")) is None
    settle()
    assert cluster.jobs == {} and cluster.made == [("k8s", "kubeflow.org/v2beta1")]


@pytest.mark.parametrize("new_id", ["0193-try-2", None], ids=["airflow-3", "airflow-2"])
def test_a_request_still_queued_after_a_clear_spares_the_new_tries_job_and_its_own_tries_job_does_not(
    cluster, new_id
):
    """Issue 32, item 4: try 1 was marked failed; its request waits in the queue while the task instance is cleared
    and try 2 makes its job under the same name; the database says running."""
    key = TaskKey("d", "hold", RUN, -1)
    old_id = new_id and "0193-try-1"
    cluster.db[key] = TryState("running", 2, new_id)
    add_job(cluster, "j", key, "Created", "Running", try_number=2, ti_id=new_id)
    stale = orphan_listener.TaskFinished(key, TryState("failed", 1, old_id))
    assert orphan_listener.handle(stale) == [] and list(cluster.jobs) == [("ns", "j")]
    # try 2 not started yet: the job try 1 made is still there, and stops as the mark asked
    cluster.db[key] = TryState("scheduled", 2, new_id)
    add_job(cluster, "j", key, "Created", "Running", try_number=1, ti_id=old_id)
    assert orphan_listener.handle(stale) == ["j"] and cluster.jobs == {}


def test_the_request_carries_the_try_its_task_instance_was_at(cluster, monkeypatch):
    queued = []
    monkeypatch.setattr(orphan_listener.WORKER, "submit", queued.append)
    orphan_listener.on_task_instance_failed(None, ServerTI("failed", try_number=3, id="0193-uuid"))
    orphan_listener.on_task_instance_success(None, ServerTI("success", try_number=2))  # Airflow 2: no id
    key = TaskKey("d", "hold", RUN, -1)
    assert queued == [
        orphan_listener.TaskFinished(key, TryState("failed", 3, "0193-uuid")),
        orphan_listener.TaskFinished(key, TryState("success", 2, None)),
    ]


def test_a_job_listed_without_a_uid_is_not_deleted(cluster, caplog):
    key = TaskKey("d", "hold", RUN, -1)
    add_job(cluster, "j", key, "Created", "Running")
    del cluster.jobs[("ns", "j")]["metadata"]["uid"]
    cluster.db[key] = TryState("failed", 1)
    assert sweep_namespace(cluster, "ns", OURS, metadata.task_instance_states) == []
    assert list(cluster.jobs) == [("ns", "j")] and "without a uid" in caplog.text


def test_decorated_tasks_are_mpi_tasks_and_plain_ones_cost_nothing(cluster, monkeypatch):
    add_job(cluster, "j", TaskKey("d", "hold", RUN, -1), "Created", "Running")
    monkeypatch.setattr(
        metadata, "job_locations", lambda *a, **k: pytest.fail("a plain task read the database")
    )
    assert orphan_listener.submit_task(ServerTI("failed", operator="PythonOperator")) is False
    assert orphan_listener.is_mpi_task(
        ServerTI("failed", operator="_PythonDecoratedOperator", custom_operator_name="@task.mpi")
    )
    assert orphan_listener.is_mpi_task(ServerTI("failed", operator="HorovodJobOperator"))


@pytest.mark.parametrize(
    "ti",
    [
        ServerTI("up_for_retry"),
        NS(dag_id="d", task_id="hold", run_id=RUN, map_index=-1, state="failed", operator="MPIJobOperator"),
    ],
)
def test_retryable_or_worker_side_task_instances_are_left_alone(cluster, ti):
    add_job(cluster, "j", TaskKey("d", "hold", RUN, -1), "Created", "Running")
    assert orphan_listener.submit_task(ti) is False
    assert list(cluster.jobs) == [("ns", "j")]


def test_a_task_cannot_aim_the_sweep_at_a_namespace_its_job_is_not_in(cluster):
    """The XCom says where the job is; a namespace is swept only when that task's own job is really there."""
    victim = TaskKey("d", "victim", RUN, -1)
    add_job(cluster, "v", victim, "Created", "Running", namespace="team-b")
    cluster.locations[TaskKey("d", "hold", RUN, -1)] = {**LOCATION, "namespace": "team-b"}  # forged
    orphan_listener.on_task_instance_failed(None, ServerTI("failed"))
    settle()
    assert list(cluster.jobs) == [("team-b", "v")]


def test_a_finished_dag_run_deletes_the_live_job_of_a_task_failed_without_listener(cluster, monkeypatch):
    """A task process killed on its last try is failed through the execution API (no task instance listener):
    the run's end sweeps the namespaces its tasks used, once each; a still retryable task's job stays."""
    hold, retry = TaskKey("d", "hold", RUN, -1), TaskKey("d", "retry", RUN, -1)
    add_job(cluster, "j", hold, "Created", "Running")
    add_job(cluster, "k", retry, "Created", "Running")
    cluster.locations[retry] = {**LOCATION, "name": "k"}
    cluster.db.update({hold: TryState("failed", 1), retry: TryState("up_for_retry", 1)})
    orphan_listener.on_dag_run_failed(NS(dag_id="d", run_id=RUN), "failed")
    settle()
    assert list(cluster.jobs) == [("ns", "k")] and len(cluster.made) == 1


def test_listener_errors_never_reach_airflow_and_the_worker_goes_on(cluster, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("database away")

    monkeypatch.setattr(metadata, "job_locations", broken)
    assert orphan_listener.on_task_instance_failed(None, ServerTI("failed")) is None
    settle()
    assert "database away" in caplog.text
    monkeypatch.undo()


def test_the_listener_returns_at_once_while_the_sweep_is_stuck():
    """Airflow's thread (scheduler loop, a UI request) never waits for the sweep: a full queue drops."""
    handling, release = threading.Event(), threading.Event()
    worker = SweepWorker(lambda request: (handling.set(), release.wait(30)), size=2)
    assert worker.submit("first")
    assert handling.wait(10)  # the worker is stuck in the first request, the queue empty
    started = time.monotonic()
    assert [worker.submit(i) for i in range(3)] == [True, True, False]
    assert time.monotonic() - started < 1
    release.set()
    assert worker.drain(10)


def test_the_sweep_stops_calling_the_api_server_once_its_budget_is_spent():
    hook = BudgetedMPIJobHook(conn_id="kubernetes_default", deadline=time.monotonic() - 1)
    with pytest.raises(SweepOverBudget):
        hook.get_mpijob("j", "ns")


def test_on_starting_makes_the_identity_only_in_server_jobs_and_starts_no_thread(monkeypatch):
    from airflow_mpi import deployment_identity

    made = []
    monkeypatch.setattr(
        deployment_identity,
        "establish",
        lambda live: made.append(live) or deployment_identity.Identity("made", "here", "here"),
    )
    monkeypatch.setattr(
        orphan_listener.WORKER, "submit", lambda request: pytest.fail("a thread before a fork")
    )
    orphan_listener.on_starting(type("TaskRunnerMarker", (), {})())
    from airflow.jobs.job import Job

    orphan_listener.on_starting(Job.__new__(Job))
    assert made == [orphan_listener.live_claims]


def test_a_fork_waits_for_the_request_at_hand_and_the_child_starts_idle():
    """A fork in the middle of a request would leave the child locks nobody releases (an import half done)."""
    import os

    handling, release, forked = threading.Event(), threading.Event(), threading.Event()
    worker = SweepWorker(lambda request: (handling.set(), release.wait(30)))
    worker.submit("sweep")
    assert handling.wait(10)

    def fork() -> None:
        pid = os.fork()
        if pid == 0:  # the child: an idle worker of its own, usable at once
            os._exit(
                0 if worker._thread is None and worker._queue.empty() and worker._busy.acquire(False) else 1
            )
        forked.pid = pid
        forked.set()

    forker = threading.Thread(target=fork)
    forker.start()
    assert not forked.wait(0.5), "the fork went ahead in the middle of a request"
    release.set()
    assert forked.wait(10)
    forker.join()
    assert os.waitpid(forked.pid, 0)[1] == 0
    assert worker.drain(10)


EXITING = """
import pathlib, sys, threading, time
from airflow_mpi.plugins.sweep_worker import SweepWorker
out = pathlib.Path(sys.argv[1])
def handle(request):
    time.sleep(1) if request == "swept" else threading.Event().wait()
    out.write_text(request)
SweepWorker(handle, exit_wait=float(sys.argv[3])).submit(sys.argv[2])
"""  # submits one request, then the process ends at once (as `airflow dags test` after its run's end)


def test_a_process_that_ends_finishes_the_request_at_hand_first(tmp_path):
    """A daemon thread still in a request when the interpreter finalises is ended in the middle of its calls: after
    a green `airflow dags test` on Airflow 2.11 that once aborted the process ("FATAL: exception not rethrown")."""
    out = tmp_path / "request"
    proc = subprocess.run(
        [sys.executable, "-c", EXITING, str(out), "swept", "30"],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "swept"  # the request ran to its end before the process did


def test_a_request_that_does_not_end_holds_the_exit_only_exit_wait_seconds(tmp_path):
    out = tmp_path / "request"
    proc = subprocess.run(  # a process held for good would time out here
        [sys.executable, "-c", EXITING, str(out), "stuck", "0.5"],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert not out.exists()
    assert "the orphan sweeper had not finished after 0 s at exit" in proc.stderr  # the warning, rounded


def test_plugin_registers_the_listener_and_the_entry_point_names_it():
    import configparser
    from pathlib import Path

    assert orphan_listener in orphan_listener.MPIJobOrphanPlugin.listeners
    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).resolve().parents[3] / "setup.cfg")
    entry = cfg["options.entry_points"]["airflow.plugins"].strip()
    assert entry == "airflow_mpi_orphans = airflow_mpi.plugins.orphan_listener:MPIJobOrphanPlugin"
