"""The orphan listener and sweep, with the metadata database and the cluster replaced by fakes."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from airflow_mpi.hooks.orphan_sweep import sweep_namespace
from airflow_mpi.models.naming import identity_annotations, identity_labels
from airflow_mpi.models.orphans import TaskKey
from airflow_mpi.plugins import metadata, orphan_listener
from tests.unit.fakes import FakeSyncHook

RUN = "manual__2026-11-23T10:00:00+00:00"


def add_job(hook, name, key, *conditions):
    hook.jobs[("ns", name)] = {
        "metadata": {"name": name, "namespace": "ns", "labels": identity_labels(*key, 1),
                     "annotations": identity_annotations(*key, 1)},
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }


def test_sweep_deletes_only_live_jobs_of_finished_or_vanished_task_instances():
    hook = FakeSyncHook()
    failed, running, vanished, done = (TaskKey("d", t, RUN, -1) for t in ("failed", "running", "vanished", "done"))
    add_job(hook, "a", failed, "Created", "Running")
    add_job(hook, "b", running, "Created", "Running")
    add_job(hook, "c", vanished, "Created")
    add_job(hook, "e", done, "Created", "Succeeded")
    asked = []

    def states(keys):
        asked.append(keys)
        return {failed: "failed", running: "running", done: "failed"}

    assert sorted(sweep_namespace(hook, "ns", states)) == ["a", "c"]
    assert sorted(n for _, n in hook.jobs) == ["b", "e"]
    assert asked == [sorted([failed, running, vanished])]  # finished jobs are not even looked up


class ServerTI:
    """Stands in for an ORM task instance (the listener acts only on the server side)."""

    __module__ = "airflow.models.taskinstance"

    def __init__(self, state, task_id="hold"):
        self.dag_id, self.task_id, self.run_id, self.map_index, self.state = "d", task_id, RUN, -1, state


@pytest.fixture
def cluster(monkeypatch):
    hook = FakeSyncHook()
    made = []

    def make_hook(conn_id, api_version):
        made.append((conn_id, api_version))
        return hook

    import airflow_mpi.hooks as hooks

    monkeypatch.setattr(hooks, "MPIJobHook", make_hook)
    location = {"name": "j", "namespace": "ns", "kubernetes_conn_id": "k8s", "api_version": "kubeflow.org/v2beta1"}
    monkeypatch.setattr(metadata, "job_location", lambda ti: location)
    # the database still has the old state: the listener's own view of its task instance must win
    monkeypatch.setattr(metadata, "task_instance_states", lambda keys: {k: "deferred" for k in keys})
    hook.made = made
    return hook


def test_marking_a_deferred_task_failed_deletes_its_live_job(cluster):
    add_job(cluster, "j", TaskKey("d", "hold", RUN, -1), "Created", "Running")
    assert orphan_listener.on_task_instance_failed(None, ServerTI("failed")) is None
    assert cluster.jobs == {} and cluster.made == [("k8s", "kubeflow.org/v2beta1")]


@pytest.mark.parametrize("ti", [ServerTI("up_for_retry"), NS(dag_id="d", task_id="hold", run_id=RUN, map_index=-1,
                                                              state="failed")])
def test_retryable_or_worker_side_task_instances_are_left_alone(cluster, ti):
    add_job(cluster, "j", TaskKey("d", "hold", RUN, -1), "Created", "Running")
    assert orphan_listener.reap_after(ti) == []
    assert list(cluster.jobs) == [("ns", "j")]


def test_a_finished_dag_run_deletes_the_live_job_of_a_task_failed_without_listener(cluster, monkeypatch):
    """A task process killed on its last try is failed through the execution API (no task instance listener):
    the run's end sweeps the namespaces its tasks used, once each; a still retryable task's job stays."""
    hold, retry = TaskKey("d", "hold", RUN, -1), TaskKey("d", "retry", RUN, -1)
    add_job(cluster, "j", hold, "Created", "Running")
    add_job(cluster, "k", retry, "Created", "Running")
    location = {"name": "j", "namespace": "ns", "kubernetes_conn_id": "k8s", "api_version": "kubeflow.org/v2beta1"}
    asked = []
    monkeypatch.setattr(metadata, "run_job_locations", lambda dag_id, run_id: asked.append((dag_id, run_id)) or
                        [location, {**location, "name": "k"}])
    monkeypatch.setattr(metadata, "task_instance_states", lambda keys: {hold: "failed", retry: "up_for_retry"})
    sweep = orphan_listener.reap_run(NS(dag_id="d", run_id=RUN))
    sweep.join(10)
    assert list(cluster.jobs) == [("ns", "k")] and asked == [("d", RUN)] and len(cluster.made) == 1


def test_listener_errors_never_reach_airflow(cluster, monkeypatch):
    def broken(ti):
        raise RuntimeError("database away")

    monkeypatch.setattr(metadata, "job_location", broken)
    assert orphan_listener.reap_after(ServerTI("failed")) == []
    monkeypatch.setattr(metadata, "run_job_locations", lambda dag_id, run_id: broken(None))
    assert orphan_listener._reap_run("d", RUN) == []


def test_a_finished_dag_run_is_swept_through_the_listener_hooks(monkeypatch):
    seen = []
    monkeypatch.setattr(orphan_listener, "reap_run", seen.append)
    run = NS(dag_id="d", run_id=RUN)
    orphan_listener.on_dag_run_failed(run, "failed")
    orphan_listener.on_dag_run_success(run, "success")
    assert seen == [run, run]


def test_plugin_registers_the_listener_and_the_entry_point_names_it():
    import configparser
    from pathlib import Path

    assert orphan_listener in orphan_listener.MPIJobOrphanPlugin.listeners
    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).resolve().parents[3] / "setup.cfg")
    entry = cfg["options.entry_points"]["airflow.plugins"].strip()
    assert entry == "airflow_mpi_orphans = airflow_mpi.plugins.orphan_listener:MPIJobOrphanPlugin"
