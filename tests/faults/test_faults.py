"""Faults injected while a deferrable MPIJob task waits (simulated nodes, real API server, mpi-operator and Airflow
services). Every run is measured the same way (record.py): MPIJobs per task instance, orphans, launcher lines lost
or doubled, the final task state and its message; each must be 1, 0, 0, 0 and the state the fault implies.
"""

from __future__ import annotations

import signal

from kubernetes import client as k8s

from airflowstack.job_behaviour import finish_launcher, numbered_lines, stamped_lines
from tests.e2e.conftest import NAMESPACE
from tests.faults.scenario import DEFERRED, record, streamed, waiting_job


def test_triggerer_sigkill_and_restart_mid_wait(airflow_stack, client, cluster, custom_api, results, repeat):
    run_id, job, expected = waiting_job(client, cluster, custom_api, DEFERRED)
    airflow_stack.stop_service("triggerer", signal.SIGKILL)
    try:
        cluster.local.append_launcher_logs(NAMESPACE, stamped_lines("while-down"))
    finally:
        airflow_stack.start_service("triggerer")
    expected += numbered_lines("while-down")
    streamed(client, DEFERRED, run_id, expected)
    finish_launcher(cluster.api_client(), NAMESPACE, job["metadata"]["name"])
    run = record(results, "triggerer SIGKILL + restart mid-wait", client, custom_api, DEFERRED, run_id, expected,
                 job)
    assert (run.state, run.jobs, run.orphans, run.lost, run.doubled, run.spurious) == ("success", 1, 0, 0, 0, 0), run


def test_external_deletion_of_the_mpijob_mid_wait(client, cluster, custom_api, results, repeat):
    run_id, job, expected = waiting_job(client, cluster, custom_api, DEFERRED)
    custom_api.delete_namespaced_custom_object("kubeflow.org", "v2beta1", NAMESPACE, "mpijobs", job["metadata"]["name"],
                                               body=k8s.V1DeleteOptions(propagation_policy="Foreground"))
    run = record(results, "external deletion of the MPIJob mid-wait", client, custom_api, DEFERRED, run_id, expected,
                 job, ("failed", 1))
    assert (run.state, run.jobs, run.orphans, run.lost, run.doubled, run.spurious) == ("failed", 1, 0, 0, 0, 0), run
    assert "deleted" in run.message, run
