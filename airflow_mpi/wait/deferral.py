"""When deferring is safe, and how long a trigger must hold its event (pure: no I/O).

Airflow 3.x (up to at least 3.3.2) has a race between a deferring task's worker exit and a fast trigger: when the
trigger fires before the scheduler has processed the "success" executor event of the process that deferred, the
scheduler may process that stale event once the resumed try is already QUEUED/RUNNING and fail it ("executor
reported ... finished with state success, but the task instance's state attribute is running"): apache/airflow
issues #71580 and #72716 (open PRs #71579, #72767; the SCHEDULED case was fixed by #66431, the QUEUED case by #68741
after 3.3.2). Two rules keep the operator out of it:

* never defer on a job that is already finished (the trigger would fire at once): finish in the worker instead,
  as the KubernetesPodOperator does for a terminal pod;
* on the affected versions, the trigger holds its event until ``RESUME_RACE_WINDOW`` after the deferral. The hold
  is an absolute time (``not_before``) computed when the task defers, so a triggerer restart or a hand-over to
  another triggerer adds nothing to it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from packaging.version import Version

# Time from "Pausing task as DEFERRED" until the scheduler has drained that process's executor
# event. Measured on the e2e stack (LocalExecutor, 2 shared cores): 3-6 s; upstream reports 6.5 s.
RESUME_RACE_WINDOW = timedelta(seconds=12)
# First Airflow release whose scheduler ignores the stale defer-exit event for a RUNNING resumed try.
# None while no such release exists; set it when #71579/#72767 ship and the hold disappears there.
RACE_FIXED_IN: tuple[int, int, int] | None = None


def version_tuple(version: str) -> tuple[int, int, int]:
    """``"3.3.2"`` / ``"3.4.0rc1"`` / ``"3.3.2.dev0"`` -> ``(3, 3, 2)`` (pre-release suffixes ignored)."""
    release = Version(version).release
    return (*release, 0, 0, 0)[:3]  # type: ignore[return-value]


def resume_race_affected(airflow_version: str, fixed_in: tuple[int, int, int] | None = RACE_FIXED_IN) -> bool:
    """Does this Airflow version fail a resumed try on a stale defer-exit event? Not 2.x: Airflow 2 only compares
    QUEUED task instances and its executors track re-queued tasks (``has_task``)."""
    version = version_tuple(airflow_version)
    return version >= (3, 0, 0) and (fixed_in is None or version < fixed_in)


def event_not_before(
    deferred_at: datetime, airflow_version: str, window: timedelta = RESUME_RACE_WINDOW
) -> datetime | None:
    """The earliest time the trigger may fire its event, or None when no hold is needed."""
    return deferred_at + window if resume_race_affected(airflow_version) else None


def not_before_text(deferred_at: datetime, airflow_version: str) -> str | None:
    """``event_not_before`` as the ISO text a trigger carries (plain data), or None."""
    not_before = event_not_before(deferred_at, airflow_version)
    return not_before.isoformat() if not_before else None


def hold_seconds(not_before: datetime | None, now: datetime) -> float:
    """How long a trigger still has to hold a ready event (0 when none or already past)."""
    return max((not_before - now).total_seconds(), 0.0) if not_before is not None else 0.0
