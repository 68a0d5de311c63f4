"""Rank 0's return value, read back from the launcher's log as it is read (no I/O): the launcher side of the
``@task.mpi`` / ``@task.horovod`` result, shared by the operator's wait (decorators/function_task.py) and the
trigger's (triggers/mpijob.py), so that neither imports the other's package.

Rank 0 prints marker lines (function_task/rank_runner.py, which defines their format: the ranks run that file alone):
``::airflow-mpi-result:: <mac> <kind> <words...>``. Only a line the MPI launcher tagged as rank 0's stdout
(``[1,0]<stdout>:`` Open MPI and horovodrun over mpirun, ``[0]<stdout>:`` horovodrun's Gloo mode, ``[0] `` Hydra's
``-prepend-rank``: the decorators always ask for tags) whose MAC verifies under this submission's nonce counts: the
launcher tags other ranks' lines with their own rank, before anything they print, and the MAC rules out the rest
(rank_runner.py). The nonce never appears in a log: the job carries only its SHA-256 (function_task/rank_result.py
``RESULT_NONCE_ANNOTATION``, which names the submission), the call Secret and the task that made it hold it.
Anything else that looks like a marker is ordinary output.

One :class:`ResultCollector` reads the lines for both waits, the operator's in the worker and the trigger's in the
triggerer; it keeps rank 0's marker lines out of the task log, holds at most ``MAX_ENCODED_CHARS`` of a value, and
ends as a :class:`RankResult`: the value or why there is none. That, never a marker line nor the nonce, is what a
trigger event carries (the triggerer logs every event it fires into the task's log). A damaged, oversized or
incomplete value is a clear error, never a parser exception.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
import zlib
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from airflow_mpi.function_task.rank_runner import (
    CHUNK,
    MARKER,
    MAX_ENCODED_CHARS,
    MAX_JSON_BYTES,
    STARTED,
    TOO_LARGE,
    UNRETURNABLE,
    VALUE,
    line_mac,
)

_RANK0_MARKER = re.compile(r"^\[(?:\d+,)?0\](?:<stdout>:)? ?" + re.escape(MARKER) + r" (\S+) (.*)$")
UNVERIFIED = (
    "(a line in the form of rank 0's result came back whose MAC does not verify under this submission's "
    "nonce: it is not this task's result, and is neither shown nor read)"
)


@dataclass(frozen=True)
class RankResult:
    """What rank 0 reported: whether it started, its value (JSON) or why it has none."""

    started: bool = False
    has_value: bool = False
    value: Any = None
    error: str | None = (
        None  # the value cannot be an XCom, or its lines came back damaged, too large or unverifiable
    )

    def to_dict(self) -> dict[str, Any]:
        """As a trigger event carries it (plain JSON)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankResult:
        return cls(
            bool(data.get("started")), bool(data.get("has_value")), data.get("value"), data.get("error")
        )


def _damaged(why: str) -> RankResult:
    return RankResult(error=f"rank 0's return value came back damaged from the launcher's log ({why})")


def _too_large(what: str) -> RankResult:
    return RankResult(
        error=f"rank 0's return value {what}: return it by reference (a path or URL the ranks write)"
    )


class ResultCollector:
    """Rank 0's marker lines of one submission, read as they come; see the module docstring.

    ``key``: the submission's nonce; None where this process does not hold it (a drain after the trigger fired, whose
    event carries the result): marker lines are then kept out of the log and not read. ``note``: where a line that
    looks like a marker but does not verify is said to be ignored (once, without echoing it)."""

    def __init__(self, key: str | None, note: Callable[[str], None] | None = None) -> None:
        self._key = key
        self._note = note
        self.started = False
        self.rejected = 0  # marker-like lines of rank 0 whose MAC did not verify
        self._outcome = RankResult()
        self._chunks: list[str] = []
        self._size = 0
        self._skipping = False  # the value being read is over the cap: its chunks are dropped

    def take(self, line: str) -> bool:
        """True when ``line`` is one of rank 0's marker lines (kept out of the task log), having read it."""
        match = _RANK0_MARKER.match(line.rstrip("\r\n"))
        if match is None:
            return False
        if self._key is None:
            return True
        words = match[2].split()
        if not hmac.compare_digest(line_mac(self._key, words), match[1]):
            self.rejected += 1
            if self.rejected == 1 and self._note is not None:
                self._note(UNVERIFIED)
            return True
        self._read(words[0] if words else "", words[1:])
        return True

    def result(self) -> RankResult:
        o = self._outcome
        return RankResult(started=self.started, has_value=o.has_value, value=o.value, error=o.error)

    @property
    def complete(self) -> bool:
        """A value or an error was read (a read-back of the whole log is then not needed)."""
        return self._outcome.has_value or self._outcome.error is not None

    def _read(self, kind: str, rest: list[str]) -> None:
        if kind == STARTED:
            self.started = True
        elif kind == UNRETURNABLE and len(rest) == 1:
            self._outcome = RankResult(
                error=f"rank 0 returned a value that cannot be an XCom (JSON): {_text(rest[0])}"
            )
        elif kind == TOO_LARGE and len(rest) == 2 and all(w.isdigit() for w in rest):
            self._outcome = _too_large(
                f"takes {rest[0]} characters encoded (zlib, base64) and {rest[1]} bytes as "
                f"JSON, over the caps of {MAX_ENCODED_CHARS} and {MAX_JSON_BYTES}"
            )
        elif kind == VALUE:
            self._chunk(rest)

    def _chunk(self, rest: list[str]) -> None:
        if len(rest) not in (3, 4) or not all(w.isdigit() for w in rest[:3]):
            self._outcome, self._chunks = _damaged(f"a malformed line: {' '.join(rest)[:80]!r}"), []
            return
        index, count, crc = (int(w) for w in rest[:3])
        if index == 0:
            self._chunks, self._size, self._skipping = [], 0, False
        if self._skipping or index != len(self._chunks):
            return  # over the cap, or a chunk without its predecessors (an attempt cut short): wait for a new value
        chunk = rest[3] if len(rest) == 4 else ""
        self._size += len(chunk)
        if self._size > MAX_ENCODED_CHARS:
            self._outcome = _too_large(
                f"is over the cap of {MAX_ENCODED_CHARS} characters encoded (zlib, base64): "
                f"{count} chunks of up to {CHUNK}, over {self._size} characters"
            )
            self._chunks, self._skipping = [], True
            return
        self._chunks.append(chunk)
        if len(self._chunks) == count:
            self._outcome, self._chunks = _value("".join(self._chunks), crc), []


def hide_result_lines(emit: Callable[..., None], collector: ResultCollector) -> Callable[..., None]:
    """``emit`` for every line but rank 0's marker lines, which go to ``collector`` (further arguments, such as a
    line's log position, are passed through)."""

    def collect_or_emit(line: str, *rest: Any) -> None:
        if not collector.take(line):
            emit(line, *rest)

    return collect_or_emit


def _value(data: str, crc: int) -> RankResult:
    if zlib.crc32(data.encode()) != crc:
        return _damaged("checksum mismatch")
    try:
        inflater = zlib.decompressobj()
        text = inflater.decompress(base64.b64decode(data, validate=True), MAX_JSON_BYTES + 1)
        if len(text) > MAX_JSON_BYTES or inflater.unconsumed_tail:
            return _too_large(f"is over {MAX_JSON_BYTES} bytes as JSON")
        return RankResult(has_value=True, value=json.loads(text))
    except (binascii.Error, zlib.error, ValueError) as err:
        return _damaged(f"{type(err).__name__}: {err}")


def _text(b64: str) -> str:
    try:
        return base64.b64decode(b64).decode()
    except ValueError:
        return b64


def parse_result(lines: Iterable[str], key: str | None) -> RankResult:
    """The result ``lines`` (a whole launcher log, in order) describe, read by a fresh collector."""
    collector = ResultCollector(key)
    for line in lines:
        collector.take(line)
    return collector.result()
