"""Faults of the task's own process and of the cluster under a waiting task: SIGKILL of a non-deferrable task's
process, a kube-apiserver restart, the eviction of a worker pod, and cleanPodPolicy All + ttlSecondsAfterFinished 0
racing the final log read. Measured like every fault (record.py); simulated nodes, real API server, mpi-operator
and Airflow services.
"""

from __future__ import annotations

import os
import signal

import pytest
from kubernetes import client as k8s

from airflowstack import wait_until
from airflowstack.job_behaviour import SUCCEED, finish_launcher, launcher_conf, numbered_lines, stamped_lines
from airflow_mpi.models.status import job_state
from tests.e2e.conftest import NAMESPACE
from tests.faults.record import jobs_of
from tests.faults.scenario import DEFERRED, SYNC, TIMEOUT, FaultTask, record, streamed, waiting_job

MODES = pytest.mark.parametrize("t", [SYNC, DEFERRED], ids=["sync", "deferrable"])


def _mode(t: FaultTask) -> str:
    return "deferrable" if t.waiting == "deferred" else "sync"


def _core(cluster) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(cluster.api_client())


def test_sigkill_of_a_sync_task_process_mid_wait(airflow_stack, client, cluster, custom_api, results, repeat):
    """The killed try runs no on_kill: the job lives on, and the retry (retries=1) reattaches to it, streams the
    whole launcher log into its own log and succeeds. No second MPIJob, nothing left running."""
    run_id, job, expected = waiting_job(client, cluster, custom_api, SYNC)
    ti = client.task_instance(SYNC.dag, run_id, SYNC.task)
    os.kill(airflow_stack.task_process(ti["id"]), signal.SIGKILL)
    wait_until(lambda: (lambda t: t["try_number"] == 2 and t["state"] == "running")(
        client.task_instance(SYNC.dag, run_id, SYNC.task)), timeout=TIMEOUT, what=f"try 2 of {run_id} running")
    cluster.local.append_launcher_logs(NAMESPACE, stamped_lines("after-kill"))
    expected += numbered_lines("after-kill")
    streamed(client, SYNC, run_id, expected, try_number=2)
    finish_launcher(cluster.api_client(), NAMESPACE, job["metadata"]["name"])
    run = record(results, "SIGKILL of a sync task's process mid-wait (retries=1)", client, custom_api, SYNC, run_id,
                 expected, job, ("success", 2))
    assert (run.state, run.jobs, run.orphans, run.lost, run.doubled, run.spurious) == ("success", 1, 0, 0, 0, 0), run


@MODES
def test_apiserver_restart_mid_wait(client, cluster, custom_api, results, repeat, t):
    run_id, job, expected = waiting_job(client, cluster, custom_api, t)
    cluster.local.restart_apiserver(
        down_hook=lambda: cluster.local.append_launcher_logs(NAMESPACE, stamped_lines("while-down")))
    expected += numbered_lines("while-down")
    streamed(client, t, run_id, expected)
    finish_launcher(cluster.api_client(), NAMESPACE, job["metadata"]["name"])
    run = record(results, f"kube-apiserver restart mid-wait ({_mode(t)})", client, custom_api, t, run_id, expected,
                 job)
    assert (run.state, run.jobs, run.orphans, run.lost, run.doubled, run.spurious) == ("success", 1, 0, 0, 0, 0), run


def test_worker_pod_eviction_mid_run(client, cluster, custom_api, results, repeat):
    """Whatever the mpi-operator makes of it (a new worker, or a failed job), the task ends as its MPIJob does."""
    run_id, job, expected = waiting_job(client, cluster, custom_api, DEFERRED)
    name, core = job["metadata"]["name"], _core(cluster)
    worker = core.read_namespaced_pod(f"{name}-worker-0", NAMESPACE)
    core.create_namespaced_pod_eviction(worker.metadata.name, NAMESPACE, k8s.V1Eviction(
        metadata=k8s.V1ObjectMeta(name=worker.metadata.name, namespace=NAMESPACE)))

    def settled() -> dict | None:
        (current,) = jobs_of(custom_api, DEFERRED.dag, run_id)
        if job_state(current).terminal:
            return current
        pods = core.list_namespaced_pod(NAMESPACE, field_selector=f"metadata.name={name}-worker-0").items
        replaced = [p for p in pods if p.metadata.uid != worker.metadata.uid and p.status.phase == "Running"]
        return current if replaced else None

    if not job_state(wait_until(settled, timeout=TIMEOUT, what=f"{name} to fail or get a new worker")).terminal:
        finish_launcher(cluster.api_client(), NAMESPACE, name)
    run = record(results, "eviction of a worker pod mid-run", client, custom_api, DEFERRED, run_id, expected, job)
    final_state = job_state(jobs_of(custom_api, DEFERRED.dag, run_id)[0])
    assert (run.jobs, run.orphans, run.lost, run.doubled) == (1, 0, 0, 0), run
    assert run.state == ("success" if final_state.succeeded else "failed"), (run, final_state.describe())
    if not final_state.succeeded:  # the task says why the job failed
        assert final_state.message and final_state.message.replace(name, "<job>") in run.message, (run, final_state)


@MODES
def test_clean_pod_policy_all_ttl_0_racing_the_final_read(client, cluster, custom_api, results, repeat, t):
    """The launcher's pod (and the job) may be gone as soon as it finishes: every line still reaches the log once."""
    dag = FaultTask(f"e2e_fault_cleanup_{_mode(t).replace('deferrable', 'deferred')}", "job", t.waiting)
    cluster.local.set_launcher_logs(NAMESPACE, stamped_lines("final"))
    run_id = client.trigger(dag.dag, launcher_conf(SUCCEED, seconds=3))["dag_run_id"]
    (job,) = wait_until(lambda: jobs_of(custom_api, dag.dag, run_id), timeout=TIMEOUT, what=f"the MPIJob of {run_id}")
    run = record(results, f"cleanPodPolicy All + ttlSecondsAfterFinished 0 ({_mode(t)})", client, custom_api, dag,
                 run_id, numbered_lines("final"), job)
    assert (run.state, run.jobs, run.orphans, run.lost, run.doubled, run.spurious) == ("success", 1, 0, 0, 0, 0), run
