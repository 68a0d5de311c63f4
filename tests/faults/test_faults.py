"""Faults injected while a deferrable MPIJob task waits (simulated nodes, real API server, mpi-operator and Airflow
services). Every run is measured the same way (record.py): MPIJobs per task instance, orphans, launcher lines lost
or doubled, the final task state and its message; each must be 1, 0, 0, 0 and the state the fault implies.

Not yet here (issue 10 part 4, see docs/NOTES.md): SIGKILL of a sync task's worker, kube-apiserver restart,
worker pod eviction and cleanPodPolicy All + TTL 0 racing the final read (real node).
"""

from __future__ import annotations

import signal

import pytest
from kubernetes import client as k8s

from airflowstack import wait_until
from airflowstack.job_behaviour import RUN, finish_launcher, launcher_conf, numbered_lines, stamped_lines
from tests.e2e.conftest import NAMESPACE
from tests.faults.conftest import REPEAT
from tests.faults.record import jobs_of, measure

DAG = "e2e_mpi_quick"
TASK = "quick"
TIMEOUT = 180  # a new triggerer takes over a dead one's triggers once its heartbeat is 30 s old
ENDED = {"success", "failed", "up_for_retry"}


@pytest.fixture(scope="module", autouse=True)
def simulated(cluster, client):
    if not cluster.simulated:
        pytest.skip("scripted launcher lines need the simulated cluster")
    client.wait_for_dags([DAG], timeout=180)


def _launcher_lines(client, run_id: str) -> list[str]:
    return [e for e in client.task_log_events(DAG, run_id, TASK) if " line " in e or " tie " in e]


def _streamed(client, run_id: str, expected: list[str]) -> None:
    wait_until(lambda: set(expected) <= set(_launcher_lines(client, run_id)) or None, timeout=TIMEOUT, interval=0.5,
               what=f"{expected[-1]!r} in the task log of {run_id}", ignore=())


def _message(client, run_id: str, state: str, job_name: str) -> str:
    """The task's outcome as a user reads it: the last error the log carries (job name as <job>), else the state."""
    if state == "success":
        return "launcher succeeded"
    errors = [e for e in client.task_log_events(DAG, run_id, TASK) if "Exception:" in e or "Error:" in e]
    return errors[-1].splitlines()[-1].replace(job_name, "<job>")[:200] if errors else "(no error in the log)"


def _waiting_job(client, cluster, custom_api) -> tuple[str, dict, list[str]]:
    """A deferred task whose launcher runs and has logged one batch into the task log."""
    cluster.local.set_launcher_logs(NAMESPACE, stamped_lines("before"))
    run_id = client.trigger(DAG, launcher_conf(RUN))["dag_run_id"]
    client.wait_task(DAG, run_id, TASK, {"deferred"}, timeout=TIMEOUT)
    _streamed(client, run_id, numbered_lines("before"))
    (job,) = jobs_of(custom_api, DAG, run_id)
    return run_id, job, numbered_lines("before")


def _record(results, scenario, client, custom_api, run_id, expected, job):
    ti = client.wait_task(DAG, run_id, TASK, ENDED, timeout=TIMEOUT)
    run = measure(scenario, custom_api, DAG, run_id, ti, _launcher_lines(client, run_id), expected,
                  _message(client, run_id, ti["state"], job["metadata"]["name"]), {job["metadata"]["uid"]})
    return results.add(run)


@pytest.mark.parametrize("repeat", range(REPEAT))
def test_triggerer_sigkill_and_restart_mid_wait(airflow_stack, client, cluster, custom_api, results, repeat):
    run_id, job, expected = _waiting_job(client, cluster, custom_api)
    airflow_stack.stop_service("triggerer", signal.SIGKILL)
    try:
        cluster.local.append_launcher_logs(NAMESPACE, stamped_lines("while-down"))
    finally:
        airflow_stack.start_service("triggerer")
    expected += numbered_lines("while-down")
    _streamed(client, run_id, expected)
    finish_launcher(cluster.api_client(), NAMESPACE, job["metadata"]["name"])
    run = _record(results, "triggerer SIGKILL + restart mid-wait", client, custom_api, run_id, expected, job)
    assert (run.state, run.jobs, run.orphans, run.lost, run.doubled) == ("success", 1, 0, 0, 0), run


@pytest.mark.parametrize("repeat", range(REPEAT))
def test_external_deletion_of_the_mpijob_mid_wait(client, cluster, custom_api, results, repeat):
    run_id, job, expected = _waiting_job(client, cluster, custom_api)
    custom_api.delete_namespaced_custom_object("kubeflow.org", "v2beta1", NAMESPACE, "mpijobs", job["metadata"]["name"],
                                               body=k8s.V1DeleteOptions(propagation_policy="Foreground"))
    run = _record(results, "external deletion of the MPIJob mid-wait", client, custom_api, run_id, expected, job)
    assert (run.state, run.jobs, run.orphans, run.lost, run.doubled) == ("failed", 1, 0, 0, 0), run
    assert "deleted" in run.message, run
