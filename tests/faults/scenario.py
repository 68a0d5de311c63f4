"""The steps every fault scenario shares: start a job whose launcher keeps running, see its lines reach the task
log, wait for the task's end and measure it (record.py). ``FaultTask`` names the DAG and task a scenario drives."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from airflowstack import StackError, heartbeat_age, wait_until
from airflowstack.job_behaviour import RUN, launcher_conf, numbered_lines, stamped_lines
from tests.e2e.conftest import NAMESPACE
from tests.faults.record import Run, jobs_of, live_jobs, measure

SWEEP_TIMEOUT = 30  # the orphan sweep at a DAG run's end runs beside the scheduler's loop
TIMEOUT = 180  # a new triggerer takes over a dead one's triggers once its heartbeat is 30 s old
ENDED = {"success", "failed", "up_for_retry"}


@dataclass(frozen=True)
class FaultTask:
    dag: str
    task: str
    waiting: str  # the task's state while it waits for its job: "deferred" or "running"


DEFERRED = FaultTask("e2e_mpi_quick", "quick", "deferred")
SYNC = FaultTask("e2e_fault_sync", "job", "running")
SYNC_LAST_TRY = FaultTask("e2e_fault_sync_last_try", "job", "running")
CLEANUP_SYNC = FaultTask("e2e_fault_cleanup_sync", "job", "running")
CLEANUP_DEFERRED = FaultTask("e2e_fault_cleanup_deferred", "job", "deferred")
TASK_MPI = FaultTask("e2e_fault_task_mpi", "rank_value", "deferred")


def _is_launcher_line(event: str) -> bool:
    return " line " in event or " tie " in event


def launcher_lines(client, t: FaultTask, run_id: str, try_number: int = 1) -> list[str]:
    return [e for e in client.task_log_events(t.dag, run_id, t.task, try_number) if _is_launcher_line(e)]


def streamed(client, t: FaultTask, run_id: str, expected: list[str], try_number: int = 1) -> None:
    try:
        wait_until(
            lambda: set(expected) <= set(launcher_lines(client, t, run_id, try_number)) or None,
            timeout=TIMEOUT,
            interval=0.5,
            what=f"{expected[-1]!r} in the task log of {run_id} (try {try_number})",
            ignore=(),
        )
    except StackError as exc:
        raise StackError(f"{exc}\n{_log_state(client, t, run_id, expected, try_number)}") from None


def _log_state(client, t: FaultTask, run_id: str, expected: list[str], try_number: int) -> str:
    """What a timed-out ``streamed`` saw last: the lines missing, the task's state and trigger, the log's tail (its
    source lines and errors too): a failure on a loaded machine is read from the test's output alone."""
    try:
        events = client.task_log_events(t.dag, run_id, t.task, try_number)
        ti = client.task_instance(t.dag, run_id, t.task)
    except Exception as exc:  # noqa: BLE001 - only enriches the error
        return f"(the log could not be read again: {exc!r})"
    present = set(filter(_is_launcher_line, events))
    missing = [line for line in expected if line not in present]
    tail = "\n".join(f"  | {e[:300]}" for e in events[-25:])
    return (
        f"missing {len(missing)} of {len(expected)} lines: {missing}; task {ti.get('state')}, "
        f"trigger {ti.get('trigger')}, {len(events)} log events, the last:\n{tail}"
    )


def try_running(client, t: FaultTask, run_id: str, try_number: int) -> None:
    """Wait until try ``try_number`` of the task runs (its log exists from then on: asked earlier, it is a 404)."""
    wait_until(
        lambda: (lambda ti: ti["try_number"] == try_number and ti["state"] == "running")(
            client.task_instance(t.dag, run_id, t.task)
        ),
        timeout=TIMEOUT,
        what=f"try {try_number} of {run_id} running",
    )


def message(client, t: FaultTask, run_id: str, ti: dict, job_name: str) -> str:
    """The task's outcome as a user reads it: the last error its log carries (job name as <job>), else the state."""
    events = client.task_log_events(t.dag, run_id, t.task, ti["try_number"])
    if ti["state"] == "success":  # and what the log says it could not read
        text = "; ".join(["launcher succeeded", *(e for e in events if "could not be read" in e)])
    else:
        errors = [e for e in events if "Exception:" in e or "Error:" in e]
        text = errors[-1].splitlines()[-1][:200] if errors else "(no error in the log)"
    return re.sub(r"-launcher-[a-z0-9]{5}\b", "-launcher-<pod>", text.replace(job_name, "<job>"))


def waiting_job(client, cluster, custom_api, t: FaultTask) -> tuple[str, dict, list[str]]:
    """A task waiting for its running launcher, one batch of whose lines is in the task log."""
    return waiting_jobs(client, cluster, custom_api, [t])[0]


def waiting_jobs(client, cluster, custom_api, tasks: list[FaultTask]) -> list[tuple[str, dict, list[str]]]:
    """``waiting_job`` for several tasks at once (one fault hits them all): (run id, MPIJob, lines) of each."""
    cluster.local.set_launcher_logs(NAMESPACE, stamped_lines("before"))
    run_ids = [client.trigger(t.dag, launcher_conf(RUN))["dag_run_id"] for t in tasks]
    waiting = []
    for t, run_id in zip(tasks, run_ids):
        client.wait_task(t.dag, run_id, t.task, {t.waiting}, timeout=TIMEOUT)
        streamed(client, t, run_id, numbered_lines("before"))
        (job,) = jobs_of(custom_api, t.dag, run_id)
        waiting.append((run_id, job, numbered_lines("before")))
    return waiting


def record(
    results,
    scenario: str,
    client,
    custom_api,
    t: FaultTask,
    run_id: str,
    expected: list[str],
    job: dict,
    outcome: tuple[str, int] = ("success", 1),
    every_try: bool = False,
    note: Callable[[], str] | None = None,
) -> Run:
    """Wait for the task's end and measure it: launcher lines in the log of its last try (``every_try``: in the
    logs of all its tries); ``job``: its first MPIJob, ``outcome``: the final state and try number the fault
    implies; ``note()``, asked once the run is over (e.g. what deleted the job), follows the message in brackets."""
    ti = wait_until(
        lambda: (lambda ti: ti if ti["state"] in ENDED and ti["try_number"] >= outcome[1] else None)(
            client.task_instance(t.dag, run_id, t.task)
        ),
        timeout=TIMEOUT,
        what=f"try {outcome[1]} of {run_id} to end",
    )
    if ti["state"] != "up_for_retry":  # orphans are counted once the run is over and its end's sweep is done
        client.wait_run(t.dag, run_id, timeout=TIMEOUT)
        with contextlib.suppress(StackError):  # still live then: measured below as an orphan
            wait_until(
                lambda: not live_jobs(custom_api, t.dag, run_id),
                timeout=SWEEP_TIMEOUT,
                ignore=(),
                what=f"the jobs of {run_id} to be finished or deleted",
            )
    tries = range(1, ti["try_number"] + 1) if every_try else [ti["try_number"]]
    lines = [line for n in tries for line in launcher_lines(client, t, run_id, n)]
    text = message(client, t, run_id, ti, job["metadata"]["name"]) + (f" [{note()}]" if note else "")
    return results.add(
        measure(
            scenario, custom_api, t.dag, run_id, ti, lines, expected, text, {job["metadata"]["uid"]}, outcome
        )
    )


def more_lines(
    client, cluster, t: FaultTask, run_id: str, expected: list[str], label: str, try_number: int = 1
) -> None:
    """A batch of launcher lines ``label``: printed, added to ``expected``, awaited in the task log of
    ``try_number``."""
    cluster.local.append_launcher_logs(NAMESPACE, stamped_lines(label))
    expected += numbered_lines(label)
    streamed(client, t, run_id, expected, try_number)


def lines_while_triggerer_down(stack, cluster, stop, expected: list[str]) -> None:
    """``stop(stack)`` stops the triggerer, a batch of launcher lines comes while it is down, it starts again (and
    takes its triggers over); the batch joins ``expected``."""
    stop(stack)
    try:
        cluster.local.append_launcher_logs(NAMESPACE, stamped_lines("while-down"))
    finally:
        stack.start_service("triggerer")
    expected += numbered_lines("while-down")


def deemed_dead(client, job_type: str, job_id: int, threshold: float) -> None:
    """Wait until the job ``job_id`` of a killed component (``SchedulerJob``, ``TriggererJob``) has not heartbeaten for
    ``threshold`` seconds: from then on Airflow deems that process gone (a scheduler resets the task instances it had
    queued, a triggerer takes its triggers). An event on the clock, not a guess: the heartbeat is in the database."""

    def age() -> float:
        (job,) = [j for j in client.jobs(job_type, state=None) if j["id"] == job_id]
        return heartbeat_age(job)

    wait_until(
        lambda: age() > threshold,
        timeout=threshold + TIMEOUT,
        interval=0.5,
        what=f"{job_type} {job_id}'s last heartbeat to be {threshold:.0f} s old",
    )
