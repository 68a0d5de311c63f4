"""Rank 0's return value, read back from the launcher's log (no I/O).

Rank 0 prints marker lines (function_task/rank_runner.py): ``::airflow-mpi-result:: <nonce> <kind> <words...>``.
Only a line the MPI launcher tagged as rank 0's stdout (``[1,0]<stdout>:`` Open MPI and horovodrun over mpirun,
``[0]<stdout>:`` horovodrun's Gloo mode, ``[0] `` Hydra's ``-prepend-rank``: the decorators always ask for tags)
with this submission's nonce counts: the launcher tags other ranks' lines with their own rank, before anything they
print, and the nonce rules out the rest (rank_runner.py). The job carries only the nonce's SHA-256
(``RESULT_NONCE_ANNOTATION``), which a try that reattaches compares against. Anything else that looks like a marker is
ordinary output. The operator's and the trigger's log sinks keep these lines out of the task log
(``hide_result_lines``); a damaged, oversized or incomplete value is a clear error, never a parser exception.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from airflow_mpi.jobspec.naming import LABEL_PREFIX
from airflow_mpi.function_task.rank_runner import MARKER, STARTED, UNRETURNABLE, VALUE

RESULT_NONCE_ANNOTATION = LABEL_PREFIX + "result-nonce-sha256"
# Caps of a return value: as rank 0 printed it (base64 of zlib), and as JSON once decompressed. An XCom lives in
# Airflow's database; larger results belong in storage the ranks write to, returned by reference.
MAX_ENCODED_CHARS = 1024 * 1024
MAX_JSON_BYTES = 8 * 1024 * 1024
_RANK0_MARKER = re.compile(r"^\[(?:\d+,)?0\](?:<stdout>:)? ?" + re.escape(MARKER) + r" (\S+) (.*)$")


def nonce_digest(nonce: str) -> str:
    """What the job may show of a nonce: its SHA-256, hex."""
    return hashlib.sha256(nonce.encode()).hexdigest()


def result_digest_of(obj: dict) -> str | None:
    """The nonce digest an MPIJob (or its manifest) carries; None for a job of no ``@task.mpi`` submission."""
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(RESULT_NONCE_ANNOTATION)


def _rank0_marker(line: str, digest: str) -> list[str] | None:
    """The marker words (kind first) of ``line`` when it is rank 0's marker line of the nonce ``digest``."""
    match = _RANK0_MARKER.match(line.rstrip("\r\n"))
    if match is None or nonce_digest(match[1]) != digest:
        return None
    return match[2].split()


def hide_result_lines(emit: Callable[..., None], sink: list[str], digest: str) -> Callable[..., None]:
    """``emit`` for every line but rank 0's marker lines of this nonce, which go to ``sink`` (further arguments,
    such as a line's log position, are passed through)."""

    def sink_or_emit(line: str, *rest: Any) -> None:
        if _rank0_marker(line, digest) is not None:
            sink.append(line)
        else:
            emit(line, *rest)

    return sink_or_emit


@dataclass(frozen=True)
class RankResult:
    """What rank 0 reported: whether it started, its value (JSON) or why it has none."""

    started: bool = False
    has_value: bool = False
    value: Any = None
    error: str | None = None  # the value cannot be an XCom, or its lines came back damaged or too large


def _damaged(why: str) -> RankResult:
    return RankResult(error=f"rank 0's return value came back damaged from the launcher's log ({why})")


def parse_result(lines: Iterable[str], digest: str) -> RankResult:
    """The result rank 0's marker lines of the nonce ``digest`` (in log order) describe; the last complete value
    of a launcher that ran several attempts wins."""
    started, outcome = False, RankResult()
    chunks: list[str] = []
    size = 0
    for line in lines:
        words = _rank0_marker(line, digest)
        if words is None:
            continue
        kind, rest = words[0] if words else "", words[1:]
        if kind == STARTED:
            started = True
        elif kind == UNRETURNABLE and len(rest) == 1:
            outcome = RankResult(error=f"rank 0 returned a value that cannot be an XCom (JSON): {_text(rest[0])}")
        elif kind == VALUE:
            if len(rest) not in (3, 4) or not all(w.isdigit() for w in rest[:3]):
                outcome, chunks = _damaged(f"a malformed line: {' '.join(words)[:80]!r}"), []
                continue
            index, count, crc = (int(w) for w in rest[:3])
            chunks, size = ([], 0) if index == 0 else (chunks, size)
            if index != len(chunks):
                continue  # a chunk without its predecessors (an attempt cut short): wait for a new value
            chunk = rest[3] if len(rest) == 4 else ""
            size += len(chunk)
            if size > MAX_ENCODED_CHARS:
                outcome, chunks = RankResult(error=f"rank 0's return value is over {MAX_ENCODED_CHARS} characters "
                                                   "encoded (zlib, base64): return it by reference"), []
                continue
            chunks.append(chunk)
            if len(chunks) == count:
                outcome, chunks = _value("".join(chunks), crc), []
    return RankResult(started=started, has_value=outcome.has_value, value=outcome.value, error=outcome.error)


def _value(data: str, crc: int) -> RankResult:
    if zlib.crc32(data.encode()) != crc:
        return _damaged("checksum mismatch")
    try:
        inflater = zlib.decompressobj()
        text = inflater.decompress(base64.b64decode(data, validate=True), MAX_JSON_BYTES + 1)
        if len(text) > MAX_JSON_BYTES or inflater.unconsumed_tail:
            return RankResult(error=f"rank 0's return value is over {MAX_JSON_BYTES} bytes as JSON: return it by "
                                    "reference")
        return RankResult(has_value=True, value=json.loads(text))
    except (binascii.Error, zlib.error, ValueError) as err:
        return _damaged(f"{type(err).__name__}: {err}")


def _text(b64: str) -> str:
    try:
        return base64.b64decode(b64).decode()
    except ValueError:
        return b64
