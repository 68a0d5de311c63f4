"""Turning a wait's result into the task's outcome: XCom, cleanup, or the right exception.

Shared by the operator (sync and deferrable) and the sensor so every path cleans up alike. A failed job's
exception names why it failed, from the report the wait gathered before the clean-up deleted the workers
(``payload["failure"]``, wait/failure_causes.py): the failed pods with their causes and their logs' last
lines, which the task log also gets as warnings, whole.
"""

from __future__ import annotations

from typing import Any

from airflow_mpi.jobspec.vocabulary import WORKER
from airflow_mpi.operators.finish_action import OnFinishAction
from airflow_mpi.wait.failure_causes import explain
from airflow_mpi.wait.progress import EXPLAINED, WORKER_FAILED
from airflow_mpi.wait.queueing import QUEUE_TIMEOUT
from airflow_mpi.version_compat import AirflowException, AirflowFailException

# Outcomes after which nothing useful is left running: delete what was created, whatever the action.
ABANDONED = ("invalid", "unschedulable", "startup_timeout", "timeout", QUEUE_TIMEOUT, WORKER_FAILED)
# Outcomes no Airflow retry can fix.
PERMANENT = ("invalid",)


def _xcom_result(payload: dict[str, Any], api_version: str) -> dict[str, Any]:
    """The operator's return value (plain JSON)."""
    return {
        "name": payload.get("name"), "namespace": payload.get("namespace"), "api_version": api_version,
        "condition": payload.get("condition"), "reason": payload.get("reason"), "message": payload.get("job_message"),
        "start_time": payload.get("start_time"), "completion_time": payload.get("completion_time"),
        "launcher_attempts": payload.get("launcher_attempts", 0),
        "launcher_exit_codes": list(payload.get("launcher_exit_codes") or []),
        "launcher_pods": list(payload.get("launcher_pods") or []),
    }  # fmt: skip


def _should_delete(outcome: str, action: str) -> bool:
    succeeded = outcome in ("success", "target")
    return outcome in ABANDONED or action == OnFinishAction.DELETE or (
        action == OnFinishAction.DELETE_SUCCEEDED and succeeded)


def _failure_text(outcome: str, job: str, detail: Any) -> str:
    """``"<job> <outcome>: <detail>"``, saying the outcome once when the detail already says it
    ("MPIJob ns/x: it was deleted while the task waited", not "MPIJob ns/x deleted: it was deleted ...")."""
    detail = str(detail) if detail else ""
    if detail and outcome in detail:
        return detail if detail.startswith(job) else f"{job}: {detail}"
    return f"{job} {outcome}: {detail or '(no detail)'}"


def _log_tails(task: Any, payload: dict[str, Any], name: Any, namespace: Any, tail_lines: int) -> None:
    """The failed workers' last log lines as warnings (the launcher's log is the task log's already)."""
    if "failure" not in payload:  # the event of a trigger from before the failure reports: read what is left
        tails = task.hook.worker_log_tails(name, namespace, tail_lines).items() if tail_lines else []
        tails = [{"pod": pod, "role": WORKER, "lines": lines} for pod, lines in tails]
    else:
        tails = [t for t in (payload.get("failure") or {}).get("tails") or [] if t.get("role") == WORKER]
    for tail in tails:
        if tail.get("lines"):
            task.log.warning("---- last %s lines of worker %s ----", len(tail["lines"]), tail["pod"])
            for line in tail["lines"]:
                task.log.warning("%s", line)


def finish(
    task: Any, payload: dict[str, Any], *, api_version: str, on_finish_action: str, fail_permanently: bool,
    worker_log_tail_lines: int = 0, owns_job: bool = True,
) -> dict[str, Any]:
    """Report, clean up and return the XCom value, or raise.

    ``owns_job``: False for a task that only watches a job someone else made (the sensor): it never deletes it,
    whatever the outcome. ``fail_permanently``: a Failed MPIJob raises AirflowFailException (its retries were spent
    inside the MPIJob); otherwise AirflowException, so Airflow's own retries apply.
    """
    outcome = payload.get("status") or "error"
    name, namespace = payload.get("name"), payload.get("namespace")
    if outcome not in ("success", "target"):
        for line in payload.get("warnings") or []:
            task.log.warning("Kubernetes event: %s", line)
        if outcome in EXPLAINED:
            _log_tails(task, payload, name, namespace, worker_log_tail_lines)
    if name and owns_job and _should_delete(outcome, on_finish_action):
        task.log.info("Deleting MPIJob %s/%s (%s)", namespace, name, outcome)
        task.hook.delete_mpijob(name, namespace, uid=payload.get("uid"))
    if outcome in ("success", "target"):
        task.log.info("MPIJob %s/%s: %s", namespace, name, payload.get("message"))
        return _xcom_result(payload, api_version)
    message = _failure_text(outcome, f"MPIJob {namespace}/{name}", payload.get("message"))
    if payload.get("launcher_exit_codes"):  # what the MPI program itself said, attempt by attempt
        message += f"; launcher exit codes: {', '.join(map(str, payload['launcher_exit_codes']))}"
    if outcome in EXPLAINED:
        message = "\n".join([message, *explain(payload.get("failure"))])
    if outcome in PERMANENT or (outcome == "failed" and fail_permanently):
        raise AirflowFailException(message)
    raise AirflowException(message)
