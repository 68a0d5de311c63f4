"""Where the task log really is: the log position read back from what the log holds (triggerer failover).

A trigger's log position (``LogState``) lives in memory and travels only at defer time, so a triggerer that
dies mid-stream takes it along. A checkpoint written next to the log (an annotation, a database row) cannot
make the next reader exactly-once: a crash between "line written" and "checkpoint written" repeats or loses
the lines in between. So the position is made part of the log itself: every launcher line the trigger emits
carries, as a structured field of its log record, the cursor position *after* that line
(``<stream>@<seconds>.<nanoseconds>#<count at that timestamp>``), and every attempt header its stream key.
The log file holds a prefix of what was emitted (records are appended in order, one write each; a kill
loses only a suffix, e.g. records still in the triggerer's pipe), so the greatest position found in the
task's log files is exactly the position after the last line the log holds: the next reader resumes there
and every line is in the log once. Pure: parsing and merging only; reading the files is the trigger's
(``airflow_mpi/wait/log_readback.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

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
    """Is position ``a`` further along its stream than ``b``? (positions grow along a stream)"""
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
    """The JSON records of a structured (JSON lines) log file, one at a time (a long log is never held whole);
    anything else, such as a line cut short by a kill, is skipped: a record that is not whole was not written, so
    its line is read again."""
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
