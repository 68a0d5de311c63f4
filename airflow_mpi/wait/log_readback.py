"""The trigger's side of exactly-once logs across triggerer failover (the model: ``wait/log_ledger.py``).

* ``marked_emitter()``: logs a launcher line with its position as a structured field. Airflow 3's triggerer
  writes each trigger's records as JSON lines to ``<task log>.trigger.<triggerer job id>.log``, extra fields
  included.
* ``resume_state()``: on start (in a thread, off the triggerer's event loop), streams every trigger log file of the
  task's try and resumes from the greatest position found there (or the defer-time position, whichever is
  further along); its memory is a position per stream, whatever the log's length.

Where it cannot hold: the dead triggerer's file must be readable here (same machine, or a ``base_log_folder``
shared by the triggerers); with remote logging alone (files uploaded when a trigger ends, never by a killed
triggerer) or on Airflow 2 (plain-text trigger logs), the defer-time position is used and lines the dead
triggerer printed are printed again (never lost).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from airflow_mpi.wait.log_ledger import MARK_FIELD, ledger_from_records, merge_log_states, records_from_lines

log = logging.getLogger(__name__)

LAUNCHER_LOGGER = "airflow_mpi.launcher"


def trigger_log_files(ti: Any) -> list[Path]:
    """The trigger log files of ``ti``'s try on this machine (one per triggerer that ran its trigger)."""
    from airflow.configuration import conf
    from airflow.utils.helpers import log_filename_template_renderer

    task_log = Path(conf.get("logging", "base_log_folder")) / log_filename_template_renderer()(ti=ti)
    return sorted(task_log.parent.glob(f"{task_log.name}.trigger.*.log"))


def _records(paths: list[Path]) -> Iterator[dict]:
    for path in paths:
        with path.open("rb") as lines:
            yield from records_from_lines(lines)


def read_back(ti: Any) -> dict:
    """The log state the trigger log files of ``ti``'s try hold (``LogState.to_dict`` form). Streams the files:
    its memory is the ledger's (a position per launcher stream), whatever the logs' length. Blocking file I/O:
    the trigger runs it in a thread (``resume_state_off_loop``)."""
    return ledger_from_records(_records(trigger_log_files(ti)))


def resume_state(ti: Any, deferred_state: dict | None, warn: Callable[..., None]) -> dict | None:
    """The position to resume the launcher log from: the defer-time state, moved on to what the task log
    holds. A task log that cannot be read leaves the defer-time state (lines may then repeat)."""
    if ti is None:
        return deferred_state
    try:
        return merge_log_states(deferred_state, read_back(ti))
    except Exception as err:  # the log folder is elsewhere or unreadable: at-least-once
        warn("Could not read the task's trigger logs back (%s): lines printed before may repeat", err)
        return deferred_state


async def resume_state_off_loop(ti: Any, deferred_state: dict | None, warn: Callable[..., None]) -> dict | None:
    """:func:`resume_state` in a worker thread: a long task log is read without holding up the triggerer's other
    triggers (they share its event loop)."""
    return await asyncio.to_thread(resume_state, ti, deferred_state, warn)


def marked_emitter() -> Callable[[str, str], None]:
    """Log a message with its mark as a structured field (structlog: Airflow 3's triggerer keeps extra keys)."""
    import structlog

    logger = structlog.get_logger(LAUNCHER_LOGGER)

    def emit(message: str, mark: str) -> None:
        logger.info(message, **{MARK_FIELD: mark})

    return emit
