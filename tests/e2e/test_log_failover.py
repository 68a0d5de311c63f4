"""Exactly-once launcher logs across a triggerer failover: the triggerer is SIGKILLed while it streams a
launcher's log, a new one takes the trigger over and every launcher line is in the task log once.

The launcher runs until the test ends it (``finish_launcher``); its lines are appended while the first triggerer
streams, while no triggerer runs and after the second took over (some batches share one timestamp, so the
second-precision ``sinceTime`` re-reads them). The new triggerer resumes from the positions the dead one's log
file holds (airflow_mpi/wait/log_ledger.py).
"""

from __future__ import annotations

import signal

import pytest

from airflowstack import wait_until
from airflowstack.job_behaviour import RUN, finish_launcher, launcher_conf, numbered_lines, stamped_lines

from .conftest import NAMESPACE, mpijobs

DAG = "e2e_mpi_quick"
TASK = "quick"
TIMEOUT = 180  # the new triggerer takes over a dead one's triggers once its heartbeat is 30 s old


@pytest.fixture(scope="module", autouse=True)
def dags_ready(client):
    client.wait_for_dags([DAG], timeout=180)


def _launcher_lines(client, run_id: str) -> list[str]:
    return [e for e in client.task_log_events(DAG, run_id, TASK) if " line " in e or " tie " in e]


def _streamed(client, run_id: str, expected: list[str]):
    def probe():
        return set(expected) <= set(_launcher_lines(client, run_id)) or None

    wait_until(probe, timeout=TIMEOUT, interval=0.5, what=f"{expected[-1]!r} in the task log", ignore=())


def test_every_launcher_line_is_logged_once_across_a_triggerer_sigkill(
    airflow_stack, client, cluster, custom_api
):
    if not cluster.simulated:
        pytest.skip("scripted launcher lines need the simulated cluster")
    messages = numbered_lines("first") + numbered_lines("second") + numbered_lines("third")
    cluster.local.set_launcher_logs(NAMESPACE, stamped_lines("first"))
    run_id = client.trigger(DAG, launcher_conf(RUN))["dag_run_id"]
    client.wait_task(DAG, run_id, TASK, {"deferred"}, timeout=TIMEOUT)

    _streamed(client, run_id, messages[:13])
    airflow_stack.stop_service("triggerer", signal.SIGKILL)
    try:
        cluster.local.append_launcher_logs(NAMESPACE, stamped_lines("second"))
    finally:
        airflow_stack.start_service("triggerer")
    _streamed(client, run_id, messages[:26])
    cluster.local.append_launcher_logs(NAMESPACE, stamped_lines("third"))
    _streamed(client, run_id, messages)

    (job,) = [
        j
        for j in mpijobs(custom_api, f"airflow-mpi.io/dag-id={DAG}")
        if j["metadata"]["annotations"]["airflow-mpi.io/run-id"] == run_id
    ]
    finish_launcher(cluster.api_client(), NAMESPACE, job["metadata"]["name"])
    ti = client.wait_task(DAG, run_id, TASK, {"success", "failed", "up_for_retry"}, timeout=TIMEOUT)
    log = client.task_log(DAG, run_id, TASK)
    assert ti["state"] == "success", log[-3000:]
    assert "trigger completed" in log or "Trigger fired event" in log
    assert _launcher_lines(client, run_id) == messages, log[-5000:]
    assert log.count("========== launcher attempt 1") == 1
