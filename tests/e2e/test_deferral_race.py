"""Airflow 3's deferral race (apache/airflow#71580, #72716) cannot fail these tasks: short jobs, jobs failing
at once and reattaches to a Succeeded job, deferrable, through the real scheduler, triggerer and workers.

Each scenario runs ``REPEAT`` task instances side by side (``AIRFLOW_MPI_E2E_REPEAT``, default 6). A spurious
failure shows as a "state mismatch" audit log entry and a task instance that failed (or retried) although its
MPIJob succeeded; every run must end exactly as its job did, with one MPIJob per task instance.
"""

from __future__ import annotations

import os

import pytest

from airflowstack import wait_until
from airflowstack.job_behaviour import FAIL, SUCCEED, launcher_conf

from .conftest import NAMESPACE, mpijobs

DAG = "e2e_mpi_quick"
TASK = "quick"
REPEAT = int(os.environ.get("AIRFLOW_MPI_E2E_REPEAT", "6"))
RUN_TIMEOUT = 300
LAUNCHER_LINES = ["quick job: step 1", "quick job: done"]


@pytest.fixture(scope="module", autouse=True)
def dags_ready(client):
    client.wait_for_dags([DAG], timeout=180)


def _jobs_of(custom_api, run_id: str) -> list[dict]:
    return [
        j
        for j in mpijobs(custom_api, f"airflow-mpi.io/dag-id={DAG}")
        if (j["metadata"].get("annotations") or {}).get("airflow-mpi.io/run-id") == run_id
    ]


@pytest.fixture(scope="module", autouse=True)
def launcher_output(cluster):
    cluster.serve_launcher_logs(NAMESPACE, LAUNCHER_LINES)


def _run_all(client, confs: list[dict]) -> list[tuple[str, dict]]:
    """Trigger every conf at once (they overlap in the scheduler and triggerer), then wait for each task."""
    run_ids = [client.trigger(DAG, conf)["dag_run_id"] for conf in confs]
    return [
        (
            run_id,
            client.wait_task(DAG, run_id, TASK, {"success", "failed", "up_for_retry"}, timeout=RUN_TIMEOUT),
        )
        for run_id in run_ids
    ]


def _wait_try_finished(client, run_id: str, try_number: int) -> dict:
    def probe():
        ti = client.task_instance(DAG, run_id, TASK)
        return (
            ti
            if ti["try_number"] >= try_number and ti["state"] in ("success", "failed", "up_for_retry")
            else None
        )

    return wait_until(
        probe, timeout=RUN_TIMEOUT, interval=0.5, what=f"try {try_number} of {DAG}/{run_id}", ignore=()
    )


def _assert_no_spurious_failure(client) -> None:
    mismatches = client.event_logs(DAG, "state mismatch")
    assert mismatches == [], [m.get("extra") for m in mismatches]


@pytest.mark.parametrize("outcome", [SUCCEED, FAIL])
def test_short_and_instantly_failing_deferred_jobs_end_as_their_job_did(client, cluster, custom_api, outcome):
    confs = [launcher_conf(outcome, seconds=i % 3) for i in range(REPEAT)]  # 0, 1 and 2 s jobs
    expected = "success" if outcome == SUCCEED else "failed"
    for run_id, ti in _run_all(client, confs):
        log = client.task_log(DAG, run_id, TASK)
        assert (ti["state"], ti["try_number"]) == (expected, 1), log[-3000:]
        assert "Pausing task as DEFERRED" in log  # the deferrable path ran, through the triggerer
        if outcome == FAIL:  # the job's own failure, not the scheduler's
            # the program's failure, final (an AirflowFailException: airflow_mpi/exceptions.py)
            assert "MPIJobProgramErrorNoRetry: MPIJob" in log and "BackoffLimitExceeded" in log, log[-3000:]
        elif cluster.simulated:
            assert all(log.count(line) == 1 for line in LAUNCHER_LINES), log[-3000:]
        assert len(_jobs_of(custom_api, run_id)) == 1
    _assert_no_spurious_failure(client)


def test_reattach_to_a_succeeded_job_finishes_without_deferring(client, custom_api):
    first = _run_all(client, [launcher_conf(SUCCEED, seconds=0) for _ in range(REPEAT)])
    uids = {}
    for run_id, ti in first:
        assert ti["state"] == "success", client.task_log(DAG, run_id, TASK)[-3000:]
        (job,) = _jobs_of(custom_api, run_id)
        uids[run_id] = job["metadata"]["uid"]
        # Clear a finished run, as a user does: cleared while the scheduler is marking the run successful, Airflow
        # 3.3.2 can keep the run's "success" over the clear's reset and never schedule try 2 (seen once in CI)
        assert client.wait_run(DAG, run_id)["state"] == "success"
        client.clear_task(DAG, run_id, [TASK])
    for run_id in uids:
        ti = _wait_try_finished(client, run_id, try_number=2)
        log = client.task_log(DAG, run_id, TASK, try_number=2)
        assert ti["state"] == "success", log[-3000:]
        assert "already Succeeded: not running it again" in log and "already finished: not deferring" in log
        assert "Pausing task as DEFERRED" not in log
        assert [j["metadata"]["uid"] for j in _jobs_of(custom_api, run_id)] == [uids[run_id]]
    _assert_no_spurious_failure(client)
