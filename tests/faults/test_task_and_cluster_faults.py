"""Faults of the task's own process and of the cluster under a waiting task: SIGKILL of a non-deferrable task's
process, a kube-apiserver restart, the eviction of a worker pod, and cleanPodPolicy All + ttlSecondsAfterFinished 1
racing the final log read. Measured like every fault (record.py); simulated nodes, real API server, mpi-operator
and Airflow services.
"""

from __future__ import annotations

import os
import signal

import pytest
from kubernetes import client as k8s

from airflow_mpi.jobspec.status import job_state
from airflowstack import StackError, wait_until
from airflowstack.job_behaviour import finish_launcher, numbered_lines, stamped_lines
from tests.e2e.conftest import NAMESPACE
from tests.faults.record import jobs_of
from tests.faults.scenario import (
    CLEANUP_DEFERRED,
    CLEANUP_SYNC,
    DEFERRED,
    SYNC,
    SYNC_LAST_TRY,
    TIMEOUT,
    FaultTask,
    more_lines,
    record,
    streamed,
    try_running,
    waiting_job,
    waiting_jobs,
)


def _mode(t: FaultTask) -> str:
    return "deferrable" if t.waiting == "deferred" else "sync"


def _core(cluster) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(cluster.api_client())


def _kill_task_process(airflow_stack, client, t: FaultTask, run_id: str) -> None:
    ti = client.task_instance(t.dag, run_id, t.task)
    os.kill(airflow_stack.task_process(ti["id"]), signal.SIGKILL)


def test_sigkill_of_a_sync_task_process_mid_wait(airflow_stack, client, cluster, custom_api, results, repeat):
    """The killed try runs no on_kill: the job lives on, and the retry (retries=1) reattaches to it, streams the
    whole launcher log into its own log and succeeds. No second MPIJob, nothing left running."""
    run_id, job, expected = waiting_job(client, cluster, custom_api, SYNC)
    _kill_task_process(airflow_stack, client, SYNC, run_id)
    try_running(client, SYNC, run_id, 2)
    more_lines(client, cluster, SYNC, run_id, expected, "after-kill", 2)
    finish_launcher(cluster.api_client(), NAMESPACE, job["metadata"]["name"])
    run = record(
        results,
        "SIGKILL of a sync task's process mid-wait (retries=1)",
        client,
        custom_api,
        SYNC,
        run_id,
        expected,
        job,
        ("success", 2),
    )
    assert (run.state, run.jobs, run.orphans, run.lost, run.doubled, run.spurious) == (
        "success",
        1,
        0,
        0,
        0,
        0,
    ), run


def test_sigkill_of_a_sync_task_process_on_its_last_try(
    airflow_stack, client, cluster, custom_api, results, repeat
):
    """No retry left: the task fails, and its running MPIJob (no on_kill ran) is deleted by the provider's
    orphan listener, not left running."""
    run_id, job, expected = waiting_job(client, cluster, custom_api, SYNC_LAST_TRY)
    _kill_task_process(airflow_stack, client, SYNC_LAST_TRY, run_id)
    run = record(
        results,
        "SIGKILL of a sync task's process mid-wait (last try)",
        client,
        custom_api,
        SYNC_LAST_TRY,
        run_id,
        expected,
        job,
        ("failed", 1),
    )
    assert (run.state, run.jobs, run.orphans, run.lost, run.doubled, run.spurious) == (
        "failed",
        1,
        0,
        0,
        0,
        0,
    ), run


def test_apiserver_restart_mid_wait(client, cluster, custom_api, results, repeat):
    """One restart under a sync and a deferrable task at once (each restart costs the mpi-operator's lease)."""
    tasks = [SYNC, DEFERRED]
    waiting = waiting_jobs(client, cluster, custom_api, tasks)
    cluster.local.restart_apiserver(
        down_hook=lambda: cluster.local.append_launcher_logs(NAMESPACE, stamped_lines("while-down"))
    )
    runs = []
    for t, (run_id, job, expected) in zip(tasks, waiting):
        expected += numbered_lines("while-down")
        streamed(client, t, run_id, expected)
        finish_launcher(cluster.api_client(), NAMESPACE, job["metadata"]["name"])
    for t, (run_id, job, expected) in zip(tasks, waiting):
        runs.append(
            record(
                results,
                f"kube-apiserver restart mid-wait ({_mode(t)})",
                client,
                custom_api,
                t,
                run_id,
                expected,
                job,
            )
        )
    for run in runs:
        assert (run.state, run.jobs, run.orphans, run.lost, run.doubled, run.spurious) == (
            "success",
            1,
            0,
            0,
            0,
            0,
        ), run


def test_worker_pod_eviction_mid_run(client, cluster, custom_api, results, repeat):
    """Whatever the mpi-operator makes of it (a new worker, or a failed job), the task ends as its MPIJob does."""
    run_id, job, expected = waiting_job(client, cluster, custom_api, DEFERRED)
    name, core = job["metadata"]["name"], _core(cluster)
    worker = core.read_namespaced_pod(f"{name}-worker-0", NAMESPACE)
    core.create_namespaced_pod_eviction(
        worker.metadata.name,
        NAMESPACE,
        k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=worker.metadata.name, namespace=NAMESPACE)),
    )

    def worker_0() -> list[k8s.V1Pod]:
        return core.list_namespaced_pod(NAMESPACE, field_selector=f"metadata.name={name}-worker-0").items

    def settled() -> dict | None:
        (current,) = jobs_of(custom_api, DEFERRED.dag, run_id)
        if job_state(current).terminal:
            return current
        replaced = [
            p for p in worker_0() if p.metadata.uid != worker.metadata.uid and p.status.phase == "Running"
        ]
        return current if replaced else None

    try:
        current = wait_until(settled, timeout=TIMEOUT, what=f"{name} to fail or get a new worker")
    except StackError as exc:  # what the mpi-operator and kwok left: the cause, in CI's tail
        now = [
            (p.metadata.uid, p.status.phase, p.metadata.deletion_timestamp, p.status.reason)
            for p in worker_0()
        ]
        raise AssertionError(f"{exc}; evicted {worker.metadata.uid}, worker-0 now {now}") from exc
    if not job_state(current).terminal:
        finish_launcher(cluster.api_client(), NAMESPACE, name)
    run = record(
        results, "eviction of a worker pod mid-run", client, custom_api, DEFERRED, run_id, expected, job
    )
    final_state = job_state(jobs_of(custom_api, DEFERRED.dag, run_id)[0])
    assert (run.jobs, run.orphans, run.lost, run.doubled) == (1, 0, 0, 0), run
    assert run.state == ("success" if final_state.succeeded else "failed"), (run, final_state.describe())
    if not final_state.succeeded:  # the task says why the job failed
        assert final_state.message and final_state.message.replace(name, "<job>") in run.message, (
            run,
            final_state,
        )


@pytest.mark.parametrize("t", [CLEANUP_SYNC, CLEANUP_DEFERRED], ids=["sync", "deferrable"])
def test_clean_pod_policy_all_ttl_0_racing_the_final_read(client, cluster, custom_api, results, repeat, t):
    """The launcher prints its last lines as it exits; its pod (cleanPodPolicy All) and the job (TTL 1 s) go as soon
    as it finishes, racing the final read of the log: every line still reaches the task log, once."""
    run_id, job, expected = waiting_job(client, cluster, custom_api, t)
    cluster.local.append_launcher_logs(NAMESPACE, stamped_lines("last"))
    finish_launcher(cluster.api_client(), NAMESPACE, job["metadata"]["name"])
    expected += numbered_lines("last")
    run = record(
        results,
        f"cleanPodPolicy All + ttlSecondsAfterFinished 1 ({_mode(t)})",
        client,
        custom_api,
        t,
        run_id,
        expected,
        job,
    )
    assert (run.state, run.jobs, run.orphans, run.lost, run.doubled, run.spurious) == (
        "success",
        1,
        0,
        0,
        0,
        0,
    ), run


def test_clean_pod_policy_all_ttl_0_job_ends_between_tries(
    airflow_stack, client, cluster, custom_api, results, repeat
):
    """The launcher prints its last lines and its pod is deleted while no try reads them (the reading try was
    killed, the scheduler is frozen until the pod is gone): those lines went with the pod. The next try finds the
    job Succeeded and succeeds, saying that the launcher's log could not be read (no lines are claimed)."""
    run_id, job, expected = waiting_job(client, cluster, custom_api, CLEANUP_SYNC)
    name = job["metadata"]["name"]
    with airflow_stack.frozen("scheduler"):
        _kill_task_process(airflow_stack, client, CLEANUP_SYNC, run_id)
        cluster.local.append_launcher_logs(NAMESPACE, stamped_lines("last"))
        finish_launcher(cluster.api_client(), NAMESPACE, name)
        wait_until(
            lambda: not _launcher_pods(cluster, name),
            timeout=TIMEOUT,
            what=f"the launcher pod of {name} gone",
        )
    run = record(
        results,
        "cleanPodPolicy All + TTL 1: job ends between tries (sync)",
        client,
        custom_api,
        CLEANUP_SYNC,
        run_id,
        expected + numbered_lines("last"),
        job,
        ("success", 2),
        every_try=True,
    )
    assert (run.state, run.jobs, run.orphans, run.doubled, run.spurious) == ("success", 1, 0, 0, 0), run
    assert run.lost == len(numbered_lines("last")), run  # what the launcher printed after the kill, no more
    told = [
        e for e in client.task_log_events(CLEANUP_SYNC.dag, run_id, CLEANUP_SYNC.task, 2) if "launcher" in e
    ]
    assert any("could not be read" in e for e in told), told


def _launcher_pods(cluster, job_name: str) -> list:
    pods = _core(cluster).list_namespaced_pod(
        NAMESPACE, label_selector="training.kubeflow.org/job-role=launcher"
    )
    return [p for p in pods.items if p.metadata.name.startswith(f"{job_name}-launcher")]
