"""Rank 0's return value, read back from the launcher's log (no I/O).

Rank 0 prints marker lines (models/rank_runner.py); the operator's and the trigger's log sinks pass every
other line on to the task log and keep these apart (``hide_result_lines``), so the marker never shows. MPI
implementations may prefix a rank's lines with its rank (``[1,0]<stdout>:``, ``[0]``): the marker is looked
for anywhere in the line. When a launcher ran several attempts, the last complete value wins.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from airflow_mpi.models.rank_runner import MARKER, STARTED, UNRETURNABLE, VALUE


def hide_result_lines(emit: Callable[..., None], sink: list[str]) -> Callable[..., None]:
    """``emit`` for every line but rank 0's marker lines, which go to ``sink`` (further arguments, such as a
    line's log position, are passed through)."""

    def sink_or_emit(line: str, *rest: Any) -> None:
        if MARKER in line:
            sink.append(line[line.index(MARKER) :])
        else:
            emit(line, *rest)

    return sink_or_emit


@dataclass(frozen=True)
class RankResult:
    """What rank 0 reported: whether it started, its value (JSON) or why it has none."""

    started: bool = False
    has_value: bool = False
    value: Any = None
    error: str | None = None  # the value cannot be an XCom, or its lines came back damaged


def parse_result(lines: Iterable[str]) -> RankResult:
    """The result rank 0's marker lines (in log order) describe."""
    started, outcome = False, RankResult()
    chunks: list[str] = []
    for line in lines:
        if MARKER not in line:
            continue
        words = line[line.index(MARKER) + len(MARKER) :].split()
        kind = words[0] if words else ""
        if kind == STARTED:
            started = True
        elif kind == UNRETURNABLE and len(words) == 2:
            outcome = RankResult(error=f"rank 0 returned a value that cannot be an XCom (JSON): {_text(words[1])}")
        elif kind == VALUE and len(words) in (4, 5):
            index, count, crc = int(words[1]), int(words[2]), int(words[3])
            chunks = [] if index == 0 else chunks
            if index != len(chunks):
                continue  # a chunk without its predecessors (an attempt cut short): wait for a new value
            chunks.append(words[4] if len(words) == 5 else "")
            if len(chunks) == count:
                outcome = _value("".join(chunks), crc)
                chunks = []
    return RankResult(started=started, has_value=outcome.has_value, value=outcome.value, error=outcome.error)


def _value(data: str, crc: int) -> RankResult:
    if zlib.crc32(data.encode()) != crc:
        return RankResult(error="rank 0's return value came back damaged from the launcher's log (checksum mismatch)")
    return RankResult(has_value=True, value=json.loads(zlib.decompress(base64.b64decode(data))))


def _text(b64: str) -> str:
    try:
        return base64.b64decode(b64).decode()
    except ValueError:
        return b64
