"""Exactly-once launcher logs across a triggerer failover: the triggerer is SIGKILLed while it streams a
launcher's log, a new one takes the trigger over and every launcher line is in the task log once. The new one lags
behind its log socket (a loaded machine), and the job ends in a burst: its last lines reach the task log too.

The launcher runs until the test ends it (``finish_launcher``); its lines are appended while the first triggerer
streams, while no triggerer runs and after the second took over (some batches share one timestamp, so the
second-precision ``sinceTime`` re-reads them). The new triggerer resumes from the positions the dead one's log
file holds (airflow_mpi/wait/log_ledger.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
from datetime import UTC, datetime
from pathlib import Path

import airflow
import pytest

from airflow_mpi.wait.deferral import resume_race_affected
from airflowstack import wait_until
from airflowstack.client import log_records
from airflowstack.job_behaviour import RUN, finish_launcher, launcher_conf, numbered_lines, stamped_lines
from localcluster.pod_logs import cri_lines

from .conftest import ARTIFACTS, NAMESPACE, mpijobs

DAG = "e2e_mpi_quick"
TASK = "quick"
TIMEOUT = 180  # the new triggerer takes over a dead one's triggers once its heartbeat is 30 s old
LAGGING = "lagging-triggerer"
REPEAT = int(os.environ.get("AIRFLOW_MPI_FAULT_REPEAT", "1"))  # a measurement's runs (docs/faults.md)
BURST = 100  # launcher lines at the job's end: 5 s of records for the successor, 50 ms a record behind


@pytest.fixture(scope="module", autouse=True)
def dags_ready(client):
    client.wait_for_dags([DAG], timeout=180)


def _launcher_lines(client, run_id: str) -> list[str]:
    return [e for e in client.task_log_events(DAG, run_id, TASK) if " line " in e or " tie " in e]


def _streamed(client, run_id: str, expected: list[str]):
    def probe():
        return set(expected) <= set(_launcher_lines(client, run_id)) or None

    wait_until(probe, timeout=TIMEOUT, interval=0.5, what=f"{expected[-1]!r} in the task log", ignore=())


def _job_name(custom_api, run_id: str) -> str:
    (job,) = [
        j
        for j in mpijobs(custom_api, f"airflow-mpi.io/dag-id={DAG}")
        if j["metadata"]["annotations"]["airflow-mpi.io/run-id"] == run_id
    ]
    return job["metadata"]["name"]


def _start_lagging_triggerer(stack):
    """Airflow's triggerer whose supervisor lags 50 ms a record behind its runner's log socket
    (tests/e2e/lagging_triggerer.py), as a service of the stack."""
    python = str(Path(stack.airflow_bin).with_name("python"))
    script = str(Path(__file__).with_name("lagging_triggerer.py"))
    stack.add_service(LAGGING, like="triggerer", argv=[python, script, "triggerer"])
    return stack.services[LAGGING]


def _restore_triggerer(stack) -> None:
    """The stack's own triggerer again, the lagging one stopped gracefully (no trigger waits out its heartbeat)."""
    if LAGGING in stack.services:
        stack.stop_service(LAGGING)
        stack.remove_service(LAGGING)
    stack.start_service("triggerer")


def _past_the_hold(client, run_id: str) -> None:
    """Wait until the time the operator logged as its trigger's hold has passed: the event then leaves as soon as
    the job ends (Airflow versions without the deferral race have no hold)."""
    if not resume_race_affected(airflow.__version__):
        return

    def hold():
        for event in client.task_log_events(DAG, run_id, TASK):
            if found := re.search(r"holds its event until (\S+),", event):
                return datetime.fromisoformat(found.group(1))
        return None

    not_before = wait_until(hold, timeout=TIMEOUT, interval=0.5, what="the trigger's hold in the task log")
    wait_until(
        lambda: datetime.now(UTC) >= not_before or None, timeout=TIMEOUT, interval=0.2, what="the hold"
    )


@pytest.mark.parametrize("run", range(REPEAT))
def test_every_launcher_line_is_logged_once_across_a_triggerer_sigkill_and_a_successor_behind_on_its_log(
    airflow_stack, client, cluster, custom_api, run
):
    """The successor of the killed triggerer lags behind its log socket, and the job ends in a burst of lines past
    the trigger's hold: Airflow 3's triggerer closes a trigger's log file when it handles the trigger's end, and
    records it reads after that go to its own output, so the trigger's end reaches it while most of the burst still
    waits in the socket. Every line must be in the task log once, none in the triggerer's own output."""
    if not cluster.simulated:
        pytest.skip("scripted launcher lines need the simulated cluster")
    messages = numbered_lines("first") + numbered_lines("second") + numbered_lines("third")
    burst = [f"burst line {i}" for i in range(BURST)]
    cluster.local.set_launcher_logs(NAMESPACE, stamped_lines("first"))
    run_id = client.trigger(DAG, launcher_conf(RUN))["dag_run_id"]
    client.wait_task(DAG, run_id, TASK, {"deferred"}, timeout=TIMEOUT)

    _streamed(client, run_id, messages[:13])
    airflow_stack.stop_service("triggerer", signal.SIGKILL)
    try:
        cluster.local.append_launcher_logs(NAMESPACE, stamped_lines("second"))
        successor = _start_lagging_triggerer(airflow_stack)
        _streamed(client, run_id, messages[:26])
        cluster.local.append_launcher_logs(NAMESPACE, stamped_lines("third"))
        _streamed(client, run_id, messages)
        _past_the_hold(client, run_id)
        cluster.local.append_launcher_logs(NAMESPACE, cri_lines(burst))
        job_name = _job_name(custom_api, run_id)
        finish_launcher(cluster.api_client(), NAMESPACE, job_name)
        ti = client.wait_task(DAG, run_id, TASK, {"success", "failed", "up_for_retry"}, timeout=TIMEOUT)
    finally:
        _restore_triggerer(airflow_stack)
    log = client.task_log(DAG, run_id, TASK)
    assert ti["state"] == "success", log[-3000:]
    assert _launcher_lines(client, run_id) == messages + burst, log[-5000:]
    assert log.count("========== launcher attempt 1") == 1
    assert "the wait ended (success); the task resumes" in log
    # nothing of the job in the successor's own output, where a record read after the file closed goes
    assert "burst line" not in Path(successor.log_path).read_text()
    _measure_the_wait(client, run_id, job_name)


def _measure_the_wait(client, run_id: str, job_name: str) -> None:
    """How long the trigger held its event for its closing record (its record to Airflow's "Trigger fired event"),
    appended to .artifacts/e2e/log-flush.jsonl: a measurement, not an assertion."""
    items = client.task_log_items(DAG, run_id, TASK)
    closed = log_records(items, f"MPIJob {NAMESPACE}/{job_name}: the wait ended")
    fired = log_records(items, "Trigger fired event")
    held = None
    if closed and fired:
        held = round(
            (datetime.fromisoformat(fired[0][0]) - datetime.fromisoformat(closed[0][0])).total_seconds(), 3
        )
    with (ARTIFACTS / "log-flush.jsonl").open("a") as out:
        out.write(json.dumps({"run_id": run_id, "burst": BURST, "held_s": held}) + "\n")
