"""Exactly-once launcher logs across a triggerer failover: the log position is kept in the task log itself.

A trigger's log position (``LogState``) travels only at defer time, so a triggerer that dies mid-stream takes it along,
and a checkpoint beside the log (an annotation, a database row) cannot be exactly-once: a kill between "line written"
and "checkpoint written" repeats or loses the lines in between. So every launcher line the trigger emits carries, as a
structured field of its record, the cursor position *after* it (``<stream>@<seconds>.<nanoseconds>#<count>``), every
attempt header its stream key. Airflow 3's triggerer appends each trigger's records, one write each, as JSON lines
to ``<task log>.trigger.<triggerer job id>.log``: a kill loses only a suffix, so the greatest position in the try's
files is the position after the last line the log holds. On start the trigger reads them back (in a thread, a
position per stream in memory) and resumes from there or from the defer-time position, whichever is further.

Remote logging: a triggerer uploads a trigger's file only when the trigger ends (Airflow 3's triggerer, then e.g. the
S3 handler's ``upload``: append to the object of the same name, empty the local file), so a killed triggerer's file
stays on its disk, never uploaded, and once the task has ended the API server serves the remote objects alone.
Resuming past its lines would lose them from that log. So a previous triggerer's file that holds launcher lines is
handed over first: uploaded as its triggerer would have (:func:`hand_over`), and trusted only if that upload took it
(the local file is empty afterwards). Where that cannot be done (a handler that deletes the log folder on upload,
``delete_local_logs``, or that streams records as they come, or a failed upload) the file's positions are not
used: the trigger resumes from what else it knows and lines repeat, none is lost.

Where it cannot hold: the dead triggerer's file must be readable here (same machine, or a shared ``base_log_folder``);
on another machine or on Airflow 2 (plain-text trigger logs), the defer-time position is used: lines may repeat,
never get lost (with remote logging, a killed triggerer on another machine uploaded nothing, so the successor's
repeats are the only copy of those lines in the remote log).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

#: the structured field of a log record that carries a launcher line's position (or an attempt header's stream)
MARK_FIELD = "launcher_log"


def line_mark(stream: str, position: list[int]) -> str:
    """The mark of a launcher line: its stream and the cursor position after it (``LogCursor.position``)."""
    seconds, nanos, count = position
    return f"{stream}@{seconds}.{nanos:09d}#{count}"


def header_mark(stream: str) -> str:
    """The mark of an attempt header: the stream it opens."""
    return stream


def _parse_mark(mark: str) -> tuple[str, list[int] | None]:
    stream, at, rest = mark.rpartition("@")
    if not at:
        return mark, None
    stamp, _, count = rest.partition("#")
    seconds, _, nanos = stamp.partition(".")
    return stream, [int(seconds), int(nanos), int(count)]


def _newer(a: list[int], b: list[int]) -> bool:
    return (a[0], a[1], a[2]) > (b[0], b[1], b[2])


def ledger_from_records(records: Iterable[dict]) -> dict:
    """The log state (``LogState.to_dict`` form) that the marked records of a task log amount to."""
    cursor: dict[str, list[int]] = {}
    streams: list[str] = []
    for record in records:
        mark = record.get(MARK_FIELD)
        if not isinstance(mark, str):
            continue
        try:
            stream, position = _parse_mark(mark)
        except ValueError:
            continue  # not one of ours
        if stream not in streams:
            streams.append(stream)
        if position is not None and (stream not in cursor or _newer(position, cursor[stream])):
            cursor[stream] = position
    return {"cursor": cursor, "streams": streams, "done": []}


def records_from_lines(lines: Iterable[str | bytes]) -> Iterator[dict]:
    """The JSON records of a JSON lines log file, one at a time; anything else, such as a line cut short by a kill,
    is skipped: a record that is not whole was not written, so its line is read again."""
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record


def merge_log_states(*states: dict | None) -> dict:
    """One log state from several views of the same log (defer-time state, read-back ledger): per stream the
    furthest position, streams in the order first seen, done streams only where nothing is further along."""
    cursor: dict[str, list[int]] = {}
    streams: list[str] = []
    done: set[str] = set()
    for state in states:
        for stream in (state or {}).get("streams", []):
            if stream not in streams:
                streams.append(stream)
        for stream, position in ((state or {}).get("cursor") or {}).items():
            position = [int(v) for v in position]
            if stream not in cursor or _newer(position, cursor[stream]):
                cursor[stream] = position
    for state in states:
        for stream in (state or {}).get("done", []):
            if ((state or {}).get("cursor") or {}).get(stream) == cursor.get(stream):
                done.add(stream)
    return {"cursor": cursor, "streams": streams, "done": sorted(done)}


# ---------------------------------------------------------------------- the trigger's side: files and records
LAUNCHER_LOGGER = "airflow_mpi.launcher"


def trigger_log_files(ti: Any) -> list[Path]:
    """The trigger log files of ``ti``'s try on this machine (one per triggerer that ran its trigger)."""
    from airflow.configuration import conf
    from airflow.utils.helpers import log_filename_template_renderer

    task_log = Path(conf.get("logging", "base_log_folder")) / log_filename_template_renderer()(ti=ti)
    return sorted(task_log.parent.glob(f"{task_log.name}.trigger.*.log"))


def read_back(ti: Any, keep: Callable[[Path], bool] | None = None) -> dict:
    """The log state the trigger log files of ``ti``'s try hold (``LogState.to_dict`` form). Streams the files:
    its memory is the ledger's (a position per launcher stream and file), whatever the logs' length. ``keep``: asked,
    once a file holding launcher lines has been read, whether its positions count."""
    ledgers = []
    for path in trigger_log_files(ti):
        with path.open("rb") as lines:
            ledger = ledger_from_records(records_from_lines(lines))
        if not ledger["streams"] or keep is None or keep(path):
            ledgers.append(ledger)
    return merge_log_states(*ledgers)


class _Unknown:
    """Remote logging is on, but its handler could not be loaded here."""


def remote_log_io() -> Any | None:
    """The remote log handler (Airflow 3's ``RemoteLogIO``) when ``[logging] remote_logging`` is on, else None."""
    from airflow.configuration import conf

    if not conf.getboolean("logging", "remote_logging", fallback=False):
        return None
    try:
        from airflow.sdk.log import load_remote_log_handler

        return load_remote_log_handler() or _Unknown()
    except Exception:
        return _Unknown()


def hand_over(remote: Any, path: Path, ti: Any) -> bool:
    """Upload a previous triggerer's trigger log file of this try as that triggerer would have when its trigger ended
    (it was killed: nothing else uploads it). True when the handler took it: it uploads whole files, keeps the log
    folder (``delete_local_copy`` False: True would remove the folder, this triggerer's open file with it) and, having
    uploaded, emptied the local file (S3, GCS, WASB: ``upload`` appends to the remote object, then truncates). The
    handler's upload holds the file and its remote object in memory, as it does at every trigger's end; the read-back
    itself stays a stream."""
    streams_records = bool(getattr(remote, "processors", None))  # e.g. CloudWatch: records sent as they come
    removes_folder = getattr(remote, "delete_local_copy", True) is not False
    if isinstance(remote, _Unknown) or streams_records or removes_folder:
        return False
    from airflow.configuration import conf

    remote.upload(path.relative_to(Path(conf.get("logging", "base_log_folder"))).as_posix(), ti)
    return path.is_file() and path.stat().st_size == 0


def resume_state(
    ti: Any, deferred_state: dict | None, warn: Callable[..., None], handed_over: list[str] | None = None
) -> dict | None:
    """The position to resume the launcher log from: the defer-time state, moved on to what the task log
    holds. A task log that cannot be read leaves the defer-time state (lines may then repeat). With remote logging,
    a previous triggerer's file counts only once handed over to remote storage (:func:`hand_over`; its name is then
    appended to ``handed_over``), else its lines are logged again."""
    if ti is None:
        return deferred_state
    try:
        remote = remote_log_io()
    except Exception as err:
        remote = _Unknown()
        warn("Could not tell whether remote logging is on (%s): lines printed before may repeat", err)

    def keep(path: Path) -> bool:
        try:
            taken = hand_over(remote, path, ti)
        except Exception as err:
            warn(
                "Could not upload %s, the trigger log of a previous triggerer (%s): its lines are logged again",
                path.name,
                err,
            )
            return False
        if not taken:
            warn(
                "%s, the trigger log of a previous triggerer, is not in remote log storage and cannot be handed "
                "over: its lines are logged again",
                path.name,
            )
        elif handed_over is not None:
            handed_over.append(path.name)
        return taken

    try:
        return merge_log_states(deferred_state, read_back(ti, None if remote is None else keep))
    except Exception as err:  # the log folder is elsewhere or unreadable: at-least-once
        warn("Could not read the task's trigger logs back (%s): lines printed before may repeat", err)
        return deferred_state


async def resume_state_off_loop(
    ti: Any, deferred_state: dict | None, warn: Callable[..., None], handed_over: list[str] | None = None
) -> dict | None:
    """:func:`resume_state` in a thread, not holding up the triggerer's other triggers (they share its event loop);
    a hand-over's upload runs there too."""
    return await asyncio.to_thread(resume_state, ti, deferred_state, warn, handed_over)


def marked_emitter(field: str = MARK_FIELD, logger_name: str = LAUNCHER_LOGGER) -> Callable[[str, str], None]:
    """Log a message with its mark as a structured field (structlog: Airflow 3's triggerer keeps extra keys and
    routes the record by the trigger it runs in, as every other record of the trigger)."""
    import structlog

    logger = structlog.get_logger(logger_name)

    def emit(message: str, mark: str) -> None:
        logger.info(message, **{field: mark})

    return emit
