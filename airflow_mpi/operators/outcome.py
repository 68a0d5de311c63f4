"""Turning a wait's result into the task's outcome: XCom, cleanup, or the right exception.

Shared by the operator (sync and deferrable) and the sensor so every path cleans up alike. A failed job's
exception names why it failed, from the report the wait gathered before the clean-up deleted the workers
(``WaitResult.failure``, wait/failure_causes.py): the failed pods with their causes and their logs' last
lines, which the task log also gets as warnings, whole.
"""

from __future__ import annotations

from typing import Any

from airflow_mpi.exceptions import error_of
from airflow_mpi.jobspec.kinds.registry import kind_or_default
from airflow_mpi.jobspec.vocabulary import WORKER
from airflow_mpi.operators.finish_action import OnFinishAction
from airflow_mpi.wait.contract import Outcome, WaitResult
from airflow_mpi.wait.failure_causes import explain
from airflow_mpi.wait.log_groups import escape
from airflow_mpi.wait.progress import EXPLAINED

# Outcomes after which nothing useful is left running: delete what was created, whatever the action.
ABANDONED = frozenset(
    {
        Outcome.INVALID,
        Outcome.UNSCHEDULABLE,
        Outcome.STARTUP_TIMEOUT,
        Outcome.TIMEOUT,
        Outcome.QUEUE_TIMEOUT,
        Outcome.WORKER_FAILED,
    }
)
# Outcomes no Airflow retry can fix.
PERMANENT = frozenset({Outcome.INVALID})
VERDICT_FRAME = "=========="  # around the try's verdict line, as around the launcher attempt headers


def _xcom_result(result: WaitResult, api_version: str) -> dict[str, Any]:
    """The operator's return value (plain JSON)."""
    return {
        "name": result.name,
        "namespace": result.namespace,
        "api_version": api_version,
        "condition": result.condition,
        "reason": result.reason,
        "message": result.job_message,
        "start_time": result.start_time,
        "completion_time": result.completion_time,
        "launcher_attempts": result.launcher_attempts,
        "launcher_exit_codes": list(result.launcher_exit_codes),
        "launcher_pods": list(result.launcher_pods),
    }


def _should_delete(outcome: Outcome, action: str) -> bool:
    return (
        outcome in ABANDONED
        or action == OnFinishAction.DELETE
        or (action == OnFinishAction.DELETE_SUCCEEDED and outcome.succeeded)
    )


def _failure_text(outcome: Outcome, job: str, detail: Any) -> str:
    """``"<job> <outcome>: <detail>"``, saying the outcome once when the detail already says it
    ("MPIJob ns/x: it was deleted while the task waited", not "MPIJob ns/x deleted: it was deleted ...")."""
    detail = str(detail) if detail else ""
    if detail and outcome in detail:
        return detail if detail.startswith(job) else f"{job}: {detail}"
    return f"{job} {outcome}: {detail or '(no detail)'}"


def _log_tails(task: Any, result: WaitResult, tail_lines: int) -> None:
    """The failed workers' last log lines as warnings (the launcher's log is the task log's already)."""
    if not result.failure_gathered:  # the event of a trigger from before failure reports: read what is left
        read = task.hook.worker_log_tails(result.name, result.namespace, tail_lines) if tail_lines else {}
        tails = [{"pod": pod, "role": WORKER, "lines": lines} for pod, lines in read.items()]
    else:
        tails = [t for t in (result.failure or {}).get("tails") or [] if t.get("role") == WORKER]
    for tail in tails:
        if tail.get("lines"):
            task.log.warning("---- last %s lines of worker %s ----", len(tail["lines"]), tail["pod"])
            for line in tail["lines"]:
                task.log.warning("%s", escape(line))


def _say_verdict(task: Any, succeeded: bool, text: str) -> None:
    """The try's verdict as a line of its own, framed as the launcher attempt headers are (wait/logs.py), so the
    eye finds where the run ended among the ranks' output: INFO on success, ERROR (the UIs colour it) on failure,
    just before the exception's details (causes, log tails). Never inside a log group (wait/log_groups.py)."""
    line = f"{VERDICT_FRAME} {escape(text)} {VERDICT_FRAME}"
    (task.log.info if succeeded else task.log.error)("%s", line)


def finish(
    task: Any,
    result: WaitResult,
    *,
    api_version: str,
    on_finish_action: str,
    fail_permanently: bool,
    worker_log_tail_lines: int = 0,
    owns_job: bool = True,
) -> dict[str, Any]:
    """Report, clean up and return the XCom value, or raise.

    ``owns_job``: False for a task that only watches a job someone else made (the sensor): it never deletes it,
    whatever the outcome. ``fail_permanently``: a Failed MPIJob raises an AirflowFailException (its retries were spent
    inside the MPIJob); otherwise an AirflowException, so Airflow's own retries apply: airflow_mpi/exceptions.py's
    class of the failure's cause either way.
    """
    outcome, name, namespace = result.outcome, result.name, result.namespace
    job = (
        f"{kind_or_default(api_version).kind} {namespace}/{name}"  # the kind the task made: MPIJob, TrainJob
    )
    if not outcome.succeeded:
        for line in result.warnings:
            task.log.warning("Kubernetes event: %s", escape(line))
        if outcome in EXPLAINED:
            _log_tails(task, result, worker_log_tail_lines)
    if name and owns_job and _should_delete(outcome, on_finish_action):
        task.log.info("Deleting %s (%s)", job, outcome)
        task.hook.delete_mpijob(name, namespace, uid=result.uid)
    if outcome.succeeded:
        _say_verdict(task, True, f"{job}: {result.message}")
        return _xcom_result(result, api_version)
    message = _failure_text(outcome, job, result.message)
    if result.launcher_exit_codes:  # what the MPI program itself said, attempt by attempt
        message += f"; launcher exit codes: {', '.join(map(str, result.launcher_exit_codes))}"
    _say_verdict(task, False, message)
    if outcome in EXPLAINED:
        message = "\n".join([message, *explain(result.failure)])
    raise error_of(
        result, message, final=outcome in PERMANENT or (outcome is Outcome.FAILED and fail_permanently)
    )
