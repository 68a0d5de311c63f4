"""Faults injected while a deferrable MPIJob task waits (simulated nodes, real API server, mpi-operator and Airflow
services). Every run is measured the same way (record.py): MPIJobs per task instance, orphans, launcher lines lost
or doubled, the final task state and its message; each must be 1, 0, 0, 0 and the state the fault implies.
"""

from __future__ import annotations

import base64
import json
import secrets
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

from kubernetes import client as k8s

from airflow_mpi.function_task.function_call import CALL_KEY, RUNNER_KEY, call_secret_name, decode_call
from airflow_mpi.function_task.rank_result import RESULT_NONCE_ANNOTATION, UNVERIFIED, nonce_digest
from airflow_mpi.function_task.rank_runner import MARKER
from airflow_mpi.operators.job_record import JOB_XCOM_KEY
from airflow_mpi.operators.links import LINKS_XCOM_KEY
from airflowstack.job_behaviour import finish_launcher, numbered_lines
from localcluster.processes import child_env
from tests.e2e.conftest import NAMESPACE
from tests.faults.scenario import (
    DEFERRED,
    TASK_MPI,
    lines_while_triggerer_down,
    more_lines,
    record,
    streamed,
    waiting_job,
)


def test_triggerer_sigkill_and_restart_mid_wait(airflow_stack, client, cluster, custom_api, results, repeat):
    run_id, job, expected = waiting_job(client, cluster, custom_api, DEFERRED)
    lines_while_triggerer_down(
        airflow_stack, cluster, lambda stack: stack.stop_service("triggerer", signal.SIGKILL), expected
    )
    streamed(client, DEFERRED, run_id, expected)
    finish_launcher(cluster.api_client(), NAMESPACE, job["metadata"]["name"])
    run = record(
        results, "triggerer SIGKILL + restart mid-wait", client, custom_api, DEFERRED, run_id, expected, job
    )
    assert (run.state, run.jobs, run.orphans, run.lost, run.doubled, run.spurious) == (
        "success",
        1,
        0,
        0,
        0,
        0,
    ), run


def test_external_deletion_of_the_mpijob_mid_wait(client, cluster, custom_api, results, repeat):
    run_id, job, expected = waiting_job(client, cluster, custom_api, DEFERRED)
    custom_api.delete_namespaced_custom_object(
        "kubeflow.org",
        "v2beta1",
        NAMESPACE,
        "mpijobs",
        job["metadata"]["name"],
        body=k8s.V1DeleteOptions(propagation_policy="Foreground"),
    )
    run = record(
        results,
        "external deletion of the MPIJob mid-wait",
        client,
        custom_api,
        DEFERRED,
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
    assert "deleted" in run.message, run


def test_triggerer_sigkill_right_after_rank_0_result_lines(
    airflow_stack, client, cluster, custom_api, results, repeat, tmp_path
):
    """``@task.mpi``: rank 0's marker lines pass the trigger (kept out of the task log, held in its memory only),
    then the triggerer is SIGKILLed once a later line is in the task log, the launcher still running. Its
    successor resumes past those lines; the value is read back from the launcher's whole log at the job's end and
    is the XCom, once. Marker lines of rank 3 (the right nonce), before and after the real ones, are ordinary
    output: in the task log, never the XCom; those of rank 0 under another nonce (their MAC does not verify) are no
    result either, kept out of the task log, which says so without echoing them."""
    run_id, job, expected = waiting_job(client, cluster, custom_api, TASK_MPI)
    call, runner = _call_secret(cluster, job)
    nonce = decode_call(call)["nonce"]
    assert nonce_digest(nonce) == job["metadata"]["annotations"][RESULT_NONCE_ANNOTATION]
    value = {
        "rank": 0,
        "run_id": run_id,
        "text": "Grün\tüber alles",
    }  # what the DAG's function returns on rank 0
    rank0 = _tagged(0, _run_rank_0(tmp_path, runner, call))
    rank3 = {
        when: _tagged(3, _report(nonce, {**value, "rank": 3, "forged": f"rank 3 {when}"}))
        for when in ("before", "after")
    }
    forged = {
        when: rank3[when]
        + _tagged(0, _report(secrets.token_urlsafe(24), {**value, "forged": f"another {when}"}))
        for when in ("before", "after")
    }
    cluster.local.append_launcher_logs(
        NAMESPACE, forged["before"] + rank0 + forged["after"] + numbered_lines("past-result")
    )
    expected += numbered_lines("past-result")
    streamed(client, TASK_MPI, run_id, expected)  # the trigger has read past rank 0's marker lines
    airflow_stack.stop_service("triggerer", signal.SIGKILL)
    airflow_stack.start_service("triggerer")
    more_lines(client, cluster, TASK_MPI, run_id, expected, "after-restart")
    finish_launcher(cluster.api_client(), NAMESPACE, job["metadata"]["name"])
    run = record(
        results,
        "triggerer SIGKILL right after rank 0's result lines (@task.mpi)",
        client,
        custom_api,
        TASK_MPI,
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
    assert client.xcom(TASK_MPI.dag, run_id, TASK_MPI.task) == value
    entries = client.get(
        f"/api/v2/dags/{TASK_MPI.dag}/dagRuns/{quote(run_id, safe='')}/taskInstances/"
        f"{TASK_MPI.task}/xcomEntries"
    )
    # one value, rank 0's; besides it only the job record and the extra links' URLs (ours, and the copies Airflow 3
    # keeps of what each link returned, ``_link_<class>``)
    others = {JOB_XCOM_KEY, LINKS_XCOM_KEY}
    keys = [
        e["key"]
        for e in entries["xcom_entries"]
        if e["key"] not in others and not e["key"].startswith("_link_")
    ]
    assert keys == ["return_value"], entries
    events = client.task_log_events(TASK_MPI.dag, run_id, TASK_MPI.task)
    assert [e for e in events if MARKER in e] == rank3["before"] + rank3["after"], events  # rank 0's: none
    assert UNVERIFIED in events and not any(nonce in e for e in events), events
    assert events.count("[1,0]<stdout>:rank 0 computed its value") == 1, events  # rank 0's own output: kept
    # the value came from the launcher's log read back at the end, not from the lines the killed trigger held
    assert any("reading the launcher log" in e for e in events), events


def _call_secret(cluster, job: dict) -> tuple[str, str]:
    """The encoded call and the ranks' program, from the Secret the operator created with ``job``."""
    digest = job["metadata"]["annotations"][RESULT_NONCE_ANNOTATION]
    secret = k8s.CoreV1Api(cluster.api_client()).read_namespaced_secret(
        call_secret_name(job["metadata"]["name"], digest), NAMESPACE
    )
    return tuple(base64.b64decode(secret.data[key]).decode() for key in (CALL_KEY, RUNNER_KEY))


def _run_rank_0(tmp_path: Path, runner: str, call: str) -> list[str]:
    """What rank 0 prints: the Secret's program run for real on the Secret's call."""
    (tmp_path / RUNNER_KEY).write_text(runner)
    (tmp_path / CALL_KEY).write_text(call)
    ran = subprocess.run(
        [sys.executable, str(tmp_path / RUNNER_KEY), str(tmp_path / CALL_KEY)],
        capture_output=True,
        text=True,
        env={"OMPI_COMM_WORLD_RANK": "0"},
    )
    assert ran.returncode == 0, f"rank 0 exited {ran.returncode}: {ran.stderr}\nrunner:\n{runner[:500]}"
    return ran.stdout.splitlines()


def _report(nonce: str, value: object) -> list[str]:
    """The marker lines of ``value`` under ``nonce``, as the ranks' program prints them."""
    script = (
        "import json, sys; from airflow_mpi.function_task.rank_runner import report; "
        "report(sys.argv[1], json.loads(sys.argv[2]))"
    )
    return subprocess.run(
        [sys.executable, "-c", script, nonce, json.dumps(value)],
        check=True,
        capture_output=True,
        text=True,
        env=child_env(),
    ).stdout.splitlines()


def _tagged(rank: int, lines: list[str]) -> list[str]:
    """``lines`` as mpirun --tag-output shows rank ``rank``'s stdout."""
    return [f"[1,{rank}]<stdout>:{line}" for line in lines]
