"""The launcher's log in the task log, attempt after attempt, each line exactly once.

A follow stream is open only while the launcher container runs and one of the event loop's ``MAX_FOLLOW_STREAMS`` slots
is free (hundreds of waits in one triggerer would otherwise hold hundreds of streams, and the kubelet runs out of
watchers). Some log servers (kwok) keep a follow stream open after the container ended: once the hub shows the pod not
running, the stream gets ``FOLLOW_GRACE`` to end, then the rest is read without following (the cursor drops what the two
reads share). A kubelet, the other way round, ends the stream before the pod's status says the container stopped: the
status gets ``EOF_SETTLE`` to arrive before the container is followed again. An answer line without a timestamp
(``timestamps=true`` prefixes every line the container wrote) is the log server's error text: reported once, retried
with backoff, never printed as launcher output.

A kubelet's follow moves to the new file when it rotates the log (``containerLogMaxSize``), and containerd can still
write a line it had read from the program into the renamed file after that: no API serves it again. A follow that
ends is therefore checked against the first line of the container's current file (one small read): when that line is
newer than the first the follow was served, the log rotated under it, and the task log says so, with where the node
keeps the rotated files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Protocol, cast

from airflow_mpi.hooks.answers import split_timestamp
from airflow_mpi.hooks.errors import PodLogUnavailable
from airflow_mpi.hooks.protocols import JobReads, PodLogReader
from airflow_mpi.wait.log_groups import escape
from airflow_mpi.wait.log_ledger import header_mark, line_mark
from airflow_mpi.wait.logs import LogCursor, LogPass, LogStream, attempt_header, format_stamp
from airflow_mpi.wait.summaries import pod_summary

log = logging.getLogger(__name__)

MAX_FOLLOW_STREAMS = (
    64  # follow streams open at once per event loop (a triggerer); others read when a slot frees
)
FOLLOW_GRACE = 0.3  # seconds a follow stream gets to end by itself once its container stopped
# seconds the pod's status gets to say the container ended after the log server ended its follow stream: a kubelet
# ends it about 1 s after the container's last output, sometimes before its status report (measured on the real node:
# docs/benchmarks.md); a container that still runs is followed again after this
EOF_SETTLE = 2.0
FINAL_READ_RETRIES = 5  # reads of a finished launcher's log that may fail before giving up
RETRY_DELAY = 1.0  # first delay after a failed read, doubled up to MAX_RETRY_DELAY
DRAIN_PASS_GAP = (
    1.0  # seconds between the last reads of a launcher still running after the wait ended (or a change)
)
MAX_RETRY_DELAY = 30.0
ROTATION_PROBE_BYTES = 64  # enough of the current file for its first line's timestamp (36 bytes at most)
ROTATION_PROBE_TIMEOUT = 15.0  # seconds that read may take (a kubelet that does not answer: nothing is said)

_SLOTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _follow_slots() -> asyncio.Semaphore:
    return _SLOTS.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(MAX_FOLLOW_STREAMS))


class LogEndpointError(RuntimeError):
    """The log endpoint answered with something that is not the container's log."""


@dataclass
class LogState:
    """How far the task log has got: survives deferral hand-overs as plain data."""

    cursor: LogCursor
    streams: list[str]  # stream keys in attempt order (attempt number = index + 1)
    done: set[str]

    @classmethod
    def from_dict(cls, data: dict | None) -> LogState:
        data = data or {}
        return cls(
            LogCursor.from_dict(data.get("cursor")), list(data.get("streams", [])), set(data.get("done", []))
        )

    def to_dict(self) -> dict:
        return {"cursor": self.cursor.to_dict(), "streams": list(self.streams), "done": sorted(self.done)}


class PodSource(Protocol):
    """Where the pump learns about launcher pods: the watch hub's cache, or one listing per pass (drain)."""

    version: int

    async def launchers(self) -> list[Any]: ...

    async def wait_change(self, seen: int, timeout: float) -> int: ...


@dataclass(eq=False)
class LogPump:
    """Follow one MPIJob's launcher log into ``emit``/``emit_marked``; see the module docstring."""

    hook: PodLogReader
    namespace: str
    logs: LogState
    pods: PodSource
    _: KW_ONLY
    emit: Callable[[str], None]
    emit_marked: Callable[[str, str], None]
    note_streams: Callable[[list], list[LogStream]]
    max_attempts: int | None
    idle_wait: float
    job_succeeded: Callable[[], bool] = lambda: False
    _reported: set[str] = field(default_factory=set, init=False)
    _ended: set[str] = field(
        default_factory=set, init=False
    )  # streams whose follow the log server ended itself
    _rotation_said: set[str] = field(
        default_factory=set, init=False
    )  # streams whose rotation the task log told

    async def run(self, finished: asyncio.Event) -> None:
        failures = 0
        while True:
            seen = self.pods.version
            try:
                streams = self.note_streams([pod_summary(p) for p in await self.pods.launchers()])
                pending = [s for s in streams if s.key not in self.logs.done]
                for stream in pending:
                    await self._read_stream(
                        stream, finished, follow=not stream.finished and not finished.is_set()
                    )
                if finished.is_set() and all(s.finished for s in pending):
                    self._tell_unread(streams)
                    return
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as err:
                failures += 1
                gone = isinstance(err, PodLogUnavailable)  # the pod is gone or its container never started
                if finished.is_set() and (gone or failures > FINAL_READ_RETRIES):
                    self.emit(f"(could not read the rest of the launcher log: {err})")
                    return
                self._report(err)
                if finished.is_set():  # the last reads: a steady pace
                    await asyncio.sleep(RETRY_DELAY)
                else:  # backoff, cut short when the wait ends
                    await self._wait(
                        asyncio.sleep(min(RETRY_DELAY * 2 ** (failures - 1), MAX_RETRY_DELAY)), finished
                    )
                continue
            if not finished.is_set():
                await self._wait(self.pods.wait_change(seen, self.idle_wait), finished)
            else:  # draining a launcher that still runs: read again once it changed, or a little later
                await self.pods.wait_change(seen, DRAIN_PASS_GAP)

    def _tell_unread(self, streams: list[LogStream]) -> None:
        """Say so in the task log when launcher output can no longer be read: its pod is gone (cleanPodPolicy,
        the launcher Job's TTL, a deletion) before this reader got to the end, so no line is silently missing."""
        present = {s.key for s in streams}
        for key in [k for k in self.logs.streams if k not in self.logs.done | self._ended | present]:
            self.emit(
                f"(launcher log {key} could not be read to its end: its pod is gone; lines it printed "
                "after the last one above, if any, are not in this log)"
            )
            self.logs.done.add(key)
        if not streams and not self.logs.streams and self.job_succeeded():
            self.emit(
                "(the launcher's log could not be read: its pod is gone, e.g. removed by cleanPodPolicy or "
                "ttlSecondsAfterFinished before this try read it; its output is not in this log)"
            )

    def _report(self, err: BaseException) -> None:
        """Each distinct failure once as a warning, not at every retry of a failing endpoint."""
        text = f"{type(err).__name__}: {err}"
        if text in self._reported:
            log.debug("launcher log read failed again: %s", text)
            return
        self._reported.add(text)
        log.warning("launcher log read failed (%s): retrying with backoff", text)

    async def _read_stream(self, stream: LogStream, finished: asyncio.Event, *, follow: bool) -> None:
        if stream.key not in self.logs.streams:
            self.logs.streams.append(stream.key)
            number = self.logs.streams.index(stream.key) + 1
            self.emit_marked(attempt_header(number, self.max_attempts, stream), header_mark(stream.key))
        if not stream.retrievable:
            self.logs.done.add(stream.key)
            return
        if follow:
            await self._follow(stream, finished)
        else:
            await self._consume(stream, follow=False)
            if stream.finished:
                self.logs.done.add(stream.key)

    async def _consume(self, stream: LogStream, *, follow: bool, log_pass: LogPass | None = None) -> None:
        log_pass = log_pass or self.logs.cursor.new_pass(stream.key)
        gap_said = False
        since_time = self.logs.cursor.since_time(stream.key)
        async for raw in self.hook.read_pod_log(
            stream.pod,
            self.namespace,
            container=stream.container,
            since_time=since_time,
            previous=stream.previous,
            follow=follow,
        ):
            if split_timestamp(raw)[0] is None:
                raise LogEndpointError(f"the log of {stream.pod} answered {raw.strip()[:300]!r}")
            message = log_pass.accept(raw)
            if message is None:
                continue
            if log_pass.gap and not gap_said:
                since, until = (format_stamp(stamp) for stamp in log_pass.gap)
                gap_said = True
                self.emit(
                    f"(launcher log {stream.key}: the log server no longer serves the lines after {since} up to "
                    f"{until}, e.g. the kubelet rotated them away (containerLogMaxSize) while this reader was "
                    "not following; lines printed in between, if any, are not in this log)"
                )
            position = cast(list[int], self.logs.cursor.position(stream.key))  # set: a line was just printed
            self.emit_marked(
                escape(message), line_mark(stream.key, position)
            )  # no launcher line folds the log

    async def _container_state(self, stream: LogStream) -> str | None:
        """The state of ``stream``'s container as the pods last showed it; None once the pod is gone or the
        container restarted (a new instance is another stream)."""
        for pod in (pod_summary(p) for p in await self.pods.launchers()):
            if pod.name == stream.pod:
                return pod.state if pod.restart_count == stream.restart else None
        return None

    async def _running(self, stream: LogStream) -> bool:
        return await self._container_state(stream) == "running"

    async def _wait(self, awaitable: Awaitable, finished: asyncio.Event, *others: asyncio.Task) -> None:
        """Until ``awaitable`` completes, ``finished`` is set or one of ``others`` is done."""
        waiter = asyncio.ensure_future(awaitable)
        done_waiter = asyncio.ensure_future(finished.wait())
        try:
            await asyncio.wait({waiter, done_waiter, *others}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiter, done_waiter):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await waiter
        if waiter.done() and not waiter.cancelled() and waiter.exception() is not None:
            raise cast(BaseException, waiter.exception())

    async def _slot(self, stream: LogStream, finished: asyncio.Event) -> bool:
        """Take a follow slot; False (no slot held) once the container stopped or the wait ended first."""
        slots = _follow_slots()
        while True:
            seen = self.pods.version
            acquire = asyncio.ensure_future(slots.acquire())
            await self._wait(self.pods.wait_change(seen, self.idle_wait), finished, acquire)
            if not acquire.done():
                acquire.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await acquire
            taken = not acquire.cancelled()  # done either way: taken, or cancelled before it was
            if finished.is_set() or not await self._running(stream):
                if taken:
                    slots.release()
                return False
            if taken:
                return True

    async def _follow(self, stream: LogStream, finished: asyncio.Event) -> None:
        """Follow a running container until it stops (or the wait is over); the next pass reads the rest."""
        if not await self._slot(stream, finished):
            return
        log_pass = self.logs.cursor.new_pass(stream.key)
        read = asyncio.create_task(self._consume(stream, follow=True, log_pass=log_pass))
        try:
            while not read.done():
                seen = self.pods.version
                if finished.is_set() or not await self._running(stream):
                    await asyncio.wait({read}, timeout=FOLLOW_GRACE)
                    break
                await self._wait(self.pods.wait_change(seen, self.idle_wait), finished, read)
        finally:
            _follow_slots().release()
            if not read.done():
                read.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await read
        failed = None if read.cancelled() else read.exception()
        await self._tell_rotation(stream, log_pass.first)
        if failed is not None:
            raise failed
        if (
            not read.cancelled()
        ):  # the log server ended the stream: a kubelet does so once the container exited
            self._ended.add(stream.key)
            await self._settle(stream, finished)

    async def _settle(self, stream: LogStream, finished: asyncio.Event) -> None:
        """After the log server ended a follow: until the pod's status says the container stopped, for at most
        ``EOF_SETTLE``. No line is lost if it still runs: the next follow starts from the cursor."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + EOF_SETTLE
        while not finished.is_set() and await self._running(stream) and (left := deadline - loop.time()) > 0:
            await self._wait(self.pods.wait_change(self.pods.version, left), finished)

    async def _tell_rotation(self, stream: LogStream, first: tuple[int, int] | None) -> None:
        """After a follow: say so once per stream when the log's current file starts after the first line the
        follow was served, i.e. the kubelet rotated the file that line was in (see the module docstring). A failed
        read says nothing (the pod may be gone): this only adds a warning, it never holds the wait up."""
        if first is None or stream.key in self._rotation_said:
            return
        try:
            start = await asyncio.wait_for(self._current_file_start(stream), ROTATION_PROBE_TIMEOUT)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.debug("could not read the start of %s's current log file: %s", stream.pod, err)
            return
        if (
            start
        ):  # an empty file after served lines: rotated after the last line (the container's last output)
            current = split_timestamp(start)[0]
            if current is None or current <= first:  # the log server's error text, or not rotated
                return
        # a restarted container (restartPolicy OnFailure) has a newer file of its own: no rotation
        if await self._container_state(stream) is None:
            return
        self._rotation_said.add(stream.key)
        where = f"starts at {format_stamp(cast(tuple[int, int], current))}" if start else "is empty"
        self.emit(
            f"(launcher log {stream.key}: the kubelet rotated this log while it was followed "
            f"(containerLogMaxSize; its current file {where}). At a rotation the last line or two containerd "
            "writes to the old file can miss the follow, and the API serves only the current file: a line "
            "that seems missing is in the node's rotated files, "
            f"/var/log/pods/{self.namespace}_{stream.pod}_<pod uid>/{stream.container}/0.log.<time>)"
        )

    async def _current_file_start(self, stream: LogStream) -> str:
        """The first bytes of the container's current log file, up to its first line's end ('' when empty)."""
        lines = self.hook.read_pod_log(
            stream.pod, self.namespace, container=stream.container, limit_bytes=ROTATION_PROBE_BYTES
        )
        async with contextlib.aclosing(lines):
            async for raw in lines:
                return raw
        return ""


class ListedPods:
    """Drain only (nothing is followed): one listing per pass, no watch. A drain runs with its finish flag set, so
    the pump never awaits :meth:`wait_change`: it is there for wait/log_pump.py ``PodSource``."""

    version = 0

    def __init__(self, hook: JobReads, name: str, namespace: str) -> None:
        self.hook, self.name, self.namespace = hook, name, namespace

    async def launchers(self) -> list[Any]:
        return await self.hook.launcher_pods(self.name, self.namespace)

    async def wait_change(self, seen: int, timeout: float) -> int:
        await asyncio.sleep(timeout)
        return 0
