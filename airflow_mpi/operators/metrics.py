"""A try's metrics through Airflow's ``Stats`` (StatsD or OpenTelemetry, as Airflow's ``[metrics]`` says): how long
the job waited in a Kueue queue and for its controller, how long it ran, how many launcher attempts it made and why
it failed (docs/metrics.md).

Emitted once per try, where the try finishes (operators/mpijob.py ``_finish``): in the worker, from the wait's result,
which a deferred try gets in the trigger's event (wait/contract.py ``WaitResult``), so nothing is counted twice nor
lost across a deferral. Durations come from the job's own timestamps, not from the task's clock.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from airflow_mpi.hooks.answers import parse_api_time
from airflow_mpi.version_compat import Stats
from airflow_mpi.wait.contract import WaitResult

log = logging.getLogger(__name__)

PREFIX = "airflow_mpi"
QUEUED = f"{PREFIX}.job.queued"  # timer: seconds in a Kueue queue, every stretch (Kueue jobs only)
TIME_TO_CREATED = f"{PREFIX}.job.time_to_created"  # timer: from the submission to the Created condition
RUN_TIME = f"{PREFIX}.job.run_time"  # timer: the job's status.startTime to its completionTime
LAUNCHER_ATTEMPTS = f"{PREFIX}.job.launcher_attempts"  # counter: the launcher attempts the try saw
FINISHED = f"{PREFIX}.job.finished"  # counter: tries whose wait ended, tagged with the outcome
FAILURES = f"{PREFIX}.job.failures"  # counter: tries that did not succeed, tagged with the cause
# and, for StatsD without tags, FAILURES + "." + the cause (airflow_mpi.job.failures.oom)


def _between(start: str | None, end: str | None) -> timedelta | None:
    begun, ended = parse_api_time(start), parse_api_time(end)
    if begun is None or ended is None or ended < begun:
        return None
    return ended - begun


def emit_try_metrics(result: WaitResult, tags: dict[str, Any]) -> None:
    """The metrics of one finished try; ``tags``: the task's (dag_id, task_id, namespace, api_version). A metric
    that cannot be sent is logged, never raised: the try's clean-up and outcome come after."""
    try:
        _emit(result, tags)
    except Exception:  # noqa: BLE001 - a metrics backend's failure must not change the task's outcome
        log.warning(
            "could not send the metrics of MPIJob %s/%s", result.namespace, result.name, exc_info=True
        )


def _emit(result: WaitResult, tags: dict[str, Any]) -> None:
    timers = {
        QUEUED: timedelta(seconds=result.queued_seconds) if result.queued_seconds is not None else None,
        TIME_TO_CREATED: _between(result.creation_time, result.created_time),
        RUN_TIME: _between(result.start_time, result.completion_time),
    }
    for name, value in timers.items():
        if value is not None:
            Stats.timing(name, value, tags=tags)
    if result.launcher_attempts:
        Stats.incr(LAUNCHER_ATTEMPTS, result.launcher_attempts, tags=tags)
    Stats.incr(FINISHED, tags={**tags, "outcome": result.outcome.value})
    if result.cause is not None:
        Stats.incr(FAILURES, tags={**tags, "cause": result.cause.value})
        Stats.incr(f"{FAILURES}.{result.cause.value}", tags=tags)


def task_tags(task: Any, namespace: str | None) -> dict[str, Any]:
    """The tags every metric of ``task``'s try carries (few values each: no job name, no run id)."""
    return {
        "dag_id": task.dag_id,
        "task_id": task.task_id,
        "namespace": namespace or "",
        "api_version": task.api_version,
    }
