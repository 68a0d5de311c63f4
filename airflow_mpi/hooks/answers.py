"""How the hooks' answers are read: streamed bytes as lines, a watch's lines as events, the timestamp of a log
line, listed pods and events in order. Free of I/O, like hooks/requests.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_mpi.hooks.errors import (
    MPIJobAPIUnavailable,
    WatchExpired,
    error_message,
    is_missing_resource_type,
)
from airflow_mpi.jobspec.kinds import DEFAULT_KIND
from airflow_mpi.jobspec.vocabulary import REPLICA_INDEX_LABEL, TERMINAL_PHASES

# the kubelet's RFC 3339 timestamp (nanoseconds, offset) in front of a ``timestamps=true`` log line
_TIMESTAMP_RE = re.compile(
    r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2}) ?(.*)$", re.S
)


# --------------------------------------------------------------------------------------- lines
#: Bytes of one log line's message a reader holds at most. A program that writes no newline for megabytes (tqdm's
#: ``\r`` progress bars, binary output) would otherwise be held whole, in the triggerer too, and logged as one record.
#: A longer line is passed on in pieces of at most this size (cut at a UTF-8 character boundary), each carrying the
#: line's timestamp, the first ones ending in ``CUT_MARK``, the later ones starting with ``CONTINUED_MARK``. The
#: pieces of a line are the same in every read of it (offsets from the line's start, whatever the chunks), so the
#: log cursor counts them as lines (wait/logs.py) and a resumed read neither loses nor repeats a byte. Changing the
#: value between a deferral and its resume miscounts the pieces of the line being read then.
MAX_LOG_LINE_BYTES = 64 * 1024
CUT_MARK = " [line cut at {} bytes]"  # a piece that the next continues; {}: the line's bytes up to its end
CONTINUED_MARK = "[line continued from byte {}] "  # a piece that continues the previous one
_STAMP_PREFIX = re.compile(rb"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2}) ")


class LineSplitter:
    """Bytes chunks in, complete decoded lines out. Decoding is per complete line (a newline byte never occurs
    inside a UTF-8 multi-byte sequence), invalid UTF-8 becomes U+FFFD; ``flush()`` returns an unterminated line.
    ``max_line``: a line's message longer than that comes out in marked pieces (``MAX_LOG_LINE_BYTES``)."""

    def __init__(self, max_line: int | None = None) -> None:
        self._buffer = bytearray()
        self._max = max_line
        self._stamp = b""  # the timestamp of the line being cut, put in front of each of its pieces
        self._offset = 0  # bytes of that line's message passed on already

    def feed(self, chunk: bytes | str) -> list[str]:
        if isinstance(chunk, str):
            chunk = chunk.encode("utf-8")
        self._buffer.extend(chunk)
        lines: list[str] = []
        start = 0
        while True:
            end = self._buffer.find(b"\n", start)
            start = self._cut(lines, start, len(self._buffer) if end == -1 else end)
            if end == -1:
                break
            lines.append(self._piece(self._buffer[start:end], last=True))
            start = end + 1
        if start:
            del self._buffer[:start]
        return lines

    def flush(self) -> list[str]:
        rest, self._buffer = self._buffer, bytearray()
        return [self._piece(rest, last=True)] if rest else []

    def _cut(self, lines: list[str], start: int, stop: int) -> int:
        """Append the pieces of the line at ``start`` (its bytes known up to ``stop``) that are sure to be followed
        by more of it; returns where its rest starts."""
        if self._max is None or stop - start <= self._max:
            return start
        if not self._offset and not self._stamp and (stamp := _STAMP_PREFIX.match(self._buffer, start, stop)):
            self._stamp, start = bytes(stamp.group()), stamp.end()
        while stop - start > self._max:
            end = start + self._max
            for _ in range(3):  # never start the next piece inside a UTF-8 character
                if 0x80 <= self._buffer[end] < 0xC0:
                    end -= 1
            lines.append(self._piece(self._buffer[start:end], last=False))
            start = end
        return start

    def _piece(self, raw: bytes | bytearray, *, last: bool) -> str:
        """A line, or a piece of one: its timestamp and marks around it once the line was cut."""
        text = _decode(raw) if last else bytes(raw).decode("utf-8", errors="replace")
        if self._offset:
            text = CONTINUED_MARK.format(self._offset) + text
        stamp = self._stamp.decode()
        if last:
            self._stamp, self._offset = b"", 0
        else:
            self._offset += len(raw)
            text += CUT_MARK.format(self._offset)
        return stamp + text


def _decode(raw: bytes | bytearray) -> str:
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    return bytes(raw).decode("utf-8", errors="replace")


def iter_lines(chunks: Iterable[bytes | str], max_line: int | None = None) -> Iterator[str]:
    """Lines of a byte stream; the last line is yielded even without a trailing newline (clean EOF only)."""
    splitter = LineSplitter(max_line)
    for chunk in chunks:
        yield from splitter.feed(chunk)
    yield from splitter.flush()


async def aiter_lines(chunks: AsyncIterable[bytes | str], max_line: int | None = None) -> AsyncIterator[str]:
    splitter = LineSplitter(max_line)
    async for chunk in chunks:
        for line in splitter.feed(chunk):
            yield line
    for line in splitter.flush():
        yield line


def split_timestamp(raw_line: str) -> tuple[tuple[int, int] | None, str]:
    """``(epoch seconds, nanoseconds)`` and the message of a ``timestamps=true`` log line."""
    match = _TIMESTAMP_RE.match(raw_line)
    if not match:
        return None, raw_line
    base, fraction, zone, message = match.groups()
    stamp = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone))
    nanos = int((fraction or "0").ljust(9, "0"))
    return (int(stamp.timestamp()), nanos), message


def log_messages(lines: Iterable[str]) -> list[str]:
    return [split_timestamp(line)[1] for line in lines]


# --------------------------------------------------------------------------------------- watch
@dataclass
class WatchDecoder:
    """Reads the lines of a watch; remembers the last resourceVersion seen."""

    name: str
    namespace: str
    last_rv: str | None
    allow_bookmarks: bool
    api_exception: Callable[..., Exception]  # the client library's ApiException class (sync or async)
    api_version: str = DEFAULT_KIND.api_version

    def raise_open_error(self, exc: BaseException) -> Any:
        """The watch request failed: 410 Gone -> WatchExpired, CRD not served -> MPIJobAPIUnavailable."""
        status = getattr(exc, "status", None)
        if status == 410:
            raise WatchExpired(self.name, self.namespace, self.last_rv, error_message(exc)) from exc
        if status == 404 and is_missing_resource_type(exc):
            raise MPIJobAPIUnavailable(self.api_version, self.namespace, error_message(exc)) from exc
        raise exc

    def decode(self, line: str) -> tuple[str, dict] | None:
        """``(event_type, object)`` to yield, or None (blank line, unrequested bookmark)."""
        if not line.strip():
            return None
        event = json.loads(line)
        event_type = event.get("type")
        obj = event.get("object") or {}
        if event_type == "ERROR":
            if obj.get("code") == 410:
                raise WatchExpired(self.name, self.namespace, self.last_rv, obj.get("message", ""))
            raise self.api_exception(
                status=obj.get("code"), reason=f"{obj.get('reason')}: {obj.get('message')}"
            )
        self.last_rv = (obj.get("metadata") or {}).get("resourceVersion") or self.last_rv
        if event_type == "BOOKMARK" and not self.allow_bookmarks:
            return None
        return event_type, obj


# --------------------------------------------------------------------------------------- order
_EPOCH = datetime.min.replace(tzinfo=UTC)


def parse_api_time(text: Any) -> datetime | None:
    """An RFC 3339 timestamp as the API writes it (``...Z``), or None (not given, or not a timestamp)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _as_utc(value: Any) -> datetime:
    if isinstance(value, str):
        value = parse_api_time(value)
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return _EPOCH


def sort_newest_first(pods: Iterable[Any]) -> list[Any]:
    """Pods by creationTimestamp, newest first; ties (second precision): active before finished, then name desc."""

    def key(pod):
        phase = getattr(pod.status, "phase", None) if pod.status is not None else None
        return _as_utc(pod.metadata.creation_timestamp), phase not in TERMINAL_PHASES, pod.metadata.name or ""

    return sorted(pods, key=key, reverse=True)


def sort_workers(pods: Iterable[Any], index_label: str = REPLICA_INDEX_LABEL) -> list[Any]:
    """Workers by the index their kind's label tells (``PodLabels.index``), then by name."""

    def key(pod):
        try:
            index = int((pod.metadata.labels or {}).get(index_label, ""))
        except ValueError:
            index = 1 << 30
        return index, pod.metadata.name or ""

    return sorted(pods, key=key)


def event_time(event: dict) -> datetime:
    """When an event last happened: the first of its times that is set (series, last, event, first, created)."""
    series, meta = event.get("series") or {}, event.get("metadata") or {}
    times = (
        series.get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        meta.get("creationTimestamp"),
    )
    return _as_utc(next((value for value in times if value), None))


def sort_events(events: Iterable[dict]) -> list[dict]:
    return sorted(events, key=lambda e: (event_time(e), (e.get("metadata") or {}).get("name", "")))


def merge_pod_events(events_by_pod: Iterable[tuple[str, list[dict]]]) -> list[dict]:
    """Events of several pods, each once (by uid), oldest first."""
    events: dict[str, dict] = {}
    for pod_name, pod_events in events_by_pod:
        for event in pod_events:
            meta = event.get("metadata") or {}
            events[meta.get("uid") or f"{pod_name}/{meta.get('name')}"] = event
    return sort_events(events.values())
