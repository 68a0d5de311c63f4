"""The launcher's log streams: which exist, in attempt order, and how far each was printed, exactly once.

Every launcher attempt is either a new pod (restartPolicy Never: the Job controller creates one per attempt and keeps
the failed ones) or a restarted container in the same pod (OnFailure: only the immediately previous container's log is
still retrievable, with ``previous=True``).

Logs are always read with ``timestamps=True``. A follow stream can break at any time (API server restart, triggerer
hand-over, a deferrable task resuming in a new process); the reader then asks again with ``sinceTime`` = the last
timestamp it printed. ``sinceTime`` has one-second precision on the wire, so the answer repeats lines already printed:
the cursor remembers, per stream, the last timestamp printed and how many lines carried exactly that timestamp, and
drops the repeats. The cursor is plain data so it can travel in a trigger event.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

from airflow_mpi.hooks.answers import split_timestamp
from airflow_mpi.hooks.requests import format_since_time
from airflow_mpi.jobspec.kinds import DEFAULT_KIND
from airflow_mpi.jobspec.vocabulary import LAUNCHER_REPLICA

if TYPE_CHECKING:
    from airflow_mpi.wait.progress import PodSummary


def stream_key(pod: str, container: str, restart_count: int = 0) -> str:
    """One container incarnation: a new pod per attempt, or a restart of the same container."""
    return f"{pod}/{container}/{restart_count}"


@dataclass(frozen=True)
class LogStream:
    key: str
    pod: str
    container: str
    restart: int
    previous: bool  # read with previous=True (an earlier container of a restarted pod)
    finished: bool  # the container has terminated: one read gets everything
    retrievable: bool = True  # Kubernetes keeps only the last terminated container's log


def launcher_streams(pods: list[PodSummary]) -> list[LogStream]:
    """Readable (or started) launcher streams, oldest attempt first."""
    streams: list[LogStream] = []
    for pod in sorted(pods, key=lambda p: (p.created is None, p.created or 0, p.name)):
        container = pod.container or DEFAULT_KIND.container_names[LAUNCHER_REPLICA]
        for restart in range(pod.restart_count):
            streams.append(
                LogStream(
                    stream_key(pod.name, container, restart),
                    pod.name,
                    container,
                    restart,
                    previous=True,
                    finished=True,
                    retrievable=restart == pod.restart_count - 1,
                )
            )
        if pod.state in ("running", "terminated"):
            streams.append(
                LogStream(
                    stream_key(pod.name, container, pod.restart_count),
                    pod.name,
                    container,
                    pod.restart_count,
                    previous=False,
                    finished=pod.state == "terminated",
                )
            )
    return streams


def attempt_header(number: int, max_attempts: int | None, stream: LogStream) -> str:
    of = f" of {max_attempts}" if max_attempts else ""
    restart = f", container restart {stream.restart}" if stream.restart else ""
    lost = (
        ""
        if stream.retrievable
        else " (log no longer retrievable: Kubernetes keeps only the previous container's log)"
    )
    return f"========== launcher attempt {number}{of}, pod {stream.pod}{restart}{lost} =========="


def _since(seconds: int) -> str:
    return format_since_time(datetime.fromtimestamp(seconds, tz=UTC))


def format_stamp(stamp: tuple[int, int]) -> str:
    """A log timestamp as the kubelet writes it (RFC 3339, nanoseconds)."""
    return f"{_since(stamp[0])[:-1]}.{stamp[1]:09d}Z"


@dataclass
class _Position:
    stamp: tuple[int, int]
    count_at_stamp: int


class LogPass:
    """One read of one stream; drops the lines an earlier read of the same stream printed, and sees when the
    server no longer has the last of them. A resumed read from ``sinceTime`` must answer the last line printed again
    before any newer one. A kubelet serves only the container's current log file, so once it rotated that line away
    (``containerLogMaxSize``) the answer starts later: lines between the two may be gone, and :attr:`gap` says from
    when to when (a follow stream, by contrast, carries on across a rotation)."""

    def __init__(self, position: _Position | None, on_emit) -> None:
        self._previous = position
        self._seen_at_previous = 0
        self._on_emit = on_emit
        self._checked = position is None
        #: ``(last stamp printed before, first stamp served now)`` when the answer skipped past the last line printed
        self.gap: tuple[tuple[int, int], tuple[int, int]] | None = None
        #: the stamp of the first line this read was served (printed or dropped as a repeat): the log file it came
        #: from was the current one when the read began
        self.first: tuple[int, int] | None = None

    def accept(self, raw_line: str) -> str | None:
        """The message to print, or None when it was printed before."""
        stamp, message = split_timestamp(raw_line.rstrip("\n"))
        if stamp is None:
            return message  # nothing to de-duplicate on; never drop a line
        if self.first is None:
            self.first = stamp
        if self._previous is not None:
            if stamp < self._previous.stamp:
                return None
            if stamp == self._previous.stamp:
                self._seen_at_previous += 1
                if self._seen_at_previous <= self._previous.count_at_stamp:
                    return None
            if not self._checked:
                self._checked = True
                if self._seen_at_previous < self._previous.count_at_stamp:
                    self.gap = (self._previous.stamp, stamp)
        self._on_emit(stamp)
        return message


class LogCursor:
    """Per-stream positions of what has been printed so far."""

    def __init__(self, positions: dict[str, _Position] | None = None) -> None:
        self._positions: dict[str, _Position] = positions or {}

    def since_time(self, key: str) -> str | None:
        """The ``sinceTime`` to resume ``key`` with (None: read from the start)."""
        position = self._positions.get(key)
        return _since(position.stamp[0]) if position else None

    def position(self, key: str) -> list[int] | None:
        """``[seconds, nanoseconds, lines at that timestamp]`` after the last line printed of ``key``."""
        p = self._positions.get(key)
        return [p.stamp[0], p.stamp[1], p.count_at_stamp] if p else None

    def new_pass(self, key: str) -> LogPass:
        """Start reading ``key`` (again); feed every raw line of the answer to ``accept``."""
        start = self._positions.get(key)
        previous = _Position(start.stamp, start.count_at_stamp) if start else None

        def on_emit(stamp: tuple[int, int]) -> None:
            current = self._positions.get(key)
            if current is not None and current.stamp == stamp:
                current.count_at_stamp += 1
            else:
                self._positions[key] = _Position(stamp, 1)

        return LogPass(previous, on_emit)

    def to_dict(self) -> dict[str, list[int]]:
        return {k: cast(list[int], self.position(k)) for k in self._positions}  # each key has a position

    @classmethod
    def from_dict(cls, data: dict[str, list[int]] | None) -> LogCursor:
        return cls({k: _Position((int(v[0]), int(v[1])), int(v[2])) for k, v in (data or {}).items()})
