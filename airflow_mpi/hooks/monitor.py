"""Waiting on one MPIJob while streaming its launcher's log: the one implementation behind the
synchronous operator (run with ``asyncio.run``), the trigger and the sensor.

Two cooperating tasks:

* the *watcher* follows the MPIJob with a Kubernetes watch resumed from its resourceVersion
  (re-listing after 410 Gone or a dropped connection, so an API server restart only delays it),
  and asks :func:`airflow_mpi.models.progress.assess` after every change whether the wait is over;
* the *log pump* follows the launcher's container log, attempt after attempt, through a
  :class:`~airflow_mpi.models.logs.LogCursor`, so no line is lost or printed twice across
  reconnects, restarts of the reader, or a deferral hand-over.

The monitor's position (cursor, attempt numbering) is plain data: it travels in trigger events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_mpi.hooks._common import is_transient
from airflow_mpi.hooks.errors import WatchExpired
from airflow_mpi.hooks.summaries import event_summary, pod_summary
from airflow_mpi.models.attempts import LogStream, attempt_header, launcher_streams
from airflow_mpi.models.log_ledger import header_mark, line_mark
from airflow_mpi.models.logs import LogCursor
from airflow_mpi.models.progress import Timeouts, Verdict, assess
from airflow_mpi.models.status import JobState, job_state, true_condition_types

log = logging.getLogger(__name__)

DRAIN_TIMEOUT = 60.0  # seconds the log pump gets to read the last lines once the job is over
RETRY_DELAY = 1.0
API_OUTAGE_LIMIT = 300.0  # seconds of API errors before the wait gives up (the task stays retryable)
FINAL_READ_RETRIES = 5
FOLLOW_GRACE = 2.0  # seconds a follow stream gets to end by itself once its container stopped  # reads of a finished launcher's log that may fail before giving up


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class LogState:
    """How far the task log has got: survives deferral hand-overs as plain data."""

    cursor: LogCursor
    streams: list[str]  # stream keys in attempt order (attempt number = index + 1)
    done: set[str]

    @classmethod
    def from_dict(cls, data: dict | None) -> LogState:
        data = data or {}
        return cls(LogCursor.from_dict(data.get("cursor")), list(data.get("streams", [])), set(data.get("done", [])))

    def to_dict(self) -> dict:
        return {"cursor": self.cursor.to_dict(), "streams": list(self.streams), "done": sorted(self.done)}


class JobMonitor:
    """Follow one MPIJob to a verdict; see the module docstring."""

    def __init__(
        self,
        hook: Any,
        name: str,
        namespace: str,
        *,
        emit: Callable[[str], None],
        submitted_at: datetime,
        timeouts: Timeouts = Timeouts(),
        poll_interval: float = 10.0,
        get_logs: bool = True,
        max_attempts: int | None = None,
        log_state: dict | None = None,
        deadline: datetime | None = None,
        target_condition: str | None = None,
        owns_job: bool = True,
        emit_marked: Callable[[str, str], None] | None = None,
    ) -> None:
        self.hook = hook
        # launcher lines and attempt headers with their log position (models/log_ledger.py): the trigger
        # logs the mark beside the text so a successor can read its position back from the task log
        self.emit_marked = emit_marked or (lambda message, _mark: emit(message))
        self.owns_job = owns_job
        self.name = name
        self.namespace = namespace
        self.emit = emit
        self.submitted_at = submitted_at
        self.timeouts = timeouts
        self.poll_interval = poll_interval
        self.get_logs = get_logs
        self.max_attempts = max_attempts
        self.logs = LogState.from_dict(log_state)
        self._ended: set[str] = set()  # streams whose follow the log server ended (not cut by this reader)
        self.deadline = deadline
        self.target_condition = target_condition
        self._changed = asyncio.Event()
        self.last_state: JobState | None = None
        self.launcher_pod_names: list[str] = []
        self.launcher_attempts = 0
        self.launcher_exit_codes: list[int] = []  # of the ended launcher containers, oldest attempt first

    # ---------------------------------------------------------------- public
    async def run(self) -> dict:
        """Wait for a verdict, stream logs meanwhile; returns the result payload."""
        finished = asyncio.Event()
        pump = asyncio.create_task(self._pump_logs(finished)) if self.get_logs else None
        try:
            verdict = await self._watch()
        finally:
            finished.set()
            self._changed.set()
        if verdict.outcome == "timeout" and self.owns_job:
            await self._delete_quietly()
        if pump is not None:
            try:
                await asyncio.wait_for(pump, DRAIN_TIMEOUT)
            except asyncio.TimeoutError:
                self.emit("(stopped waiting for the rest of the launcher log)")
        await self._count_attempts()
        return self.result(verdict)

    async def drain_logs(self) -> None:
        """Print whatever the launcher logged that was not printed yet (no following)."""
        finished = asyncio.Event()
        finished.set()
        await self._pump_logs(finished)

    def result(self, verdict: Verdict) -> dict:
        state = self.last_state
        return {
            "status": verdict.outcome,
            "message": verdict.message,
            "warnings": verdict.warnings,
            "name": self.name,
            "namespace": self.namespace,
            "condition": state.condition if state else None,
            "reason": state.reason if state else None,
            "job_message": state.message if state else None,
            "start_time": state.start_time if state else None,
            "completion_time": state.completion_time if state else None,
            "launcher_pods": self.launcher_pod_names,
            "launcher_attempts": self.launcher_attempts,
            "launcher_exit_codes": self.launcher_exit_codes,
            "log_state": self.logs.to_dict(),
        }

    async def _count_attempts(self) -> None:
        """Launcher attempts = started launcher containers (new pods and in-place restarts)."""
        try:
            pods = [pod_summary(p) for p in await self.hook.launcher_pods(self.name, self.namespace)]
        except Exception as err:
            log.warning("could not list the launcher pods of %s: %s", self.name, err)
            pods = []
        streams = self._note_streams(pods)
        self.launcher_attempts = max(len(streams), len(self.logs.streams))
        ended = sorted((p for p in pods if p.exit_code is not None), key=lambda p: (p.created is None, p.created))
        self.launcher_exit_codes = [p.exit_code for p in ended]

    def _note_streams(self, pods: list) -> list[LogStream]:
        streams = launcher_streams(pods)
        for stream in streams:
            if stream.pod not in self.launcher_pod_names:
                self.launcher_pod_names.append(stream.pod)
        return streams

    # ---------------------------------------------------------------- watcher
    async def _watch(self) -> Verdict:
        obj: dict | None = None
        resource_version: str | None = None
        outage_started: datetime | None = None
        expired = False
        while True:
            try:
                if obj is None:
                    obj = await self.hook.get_mpijob(self.name, self.namespace)
                    if obj is None:
                        return Verdict("deleted", "it does not exist (deleted by someone else?)")
                    # After a 410 the object's own resourceVersion may be older than the (restarted) API
                    # server's watch cache: start without one (the current state arrives as ADDED).
                    resource_version = None if expired else (obj.get("metadata") or {}).get("resourceVersion")
                verdict = await self._assess(obj)
                if verdict.done:
                    return verdict
                async for event_type, new_obj in self.hook.watch_mpijob(
                    self.name, self.namespace, resource_version=resource_version, timeout_seconds=self._watch_timeout()
                ):
                    if event_type == "DELETED":
                        return Verdict("deleted", "it was deleted while the task waited")
                    if event_type == "BOOKMARK":
                        resource_version = (new_obj.get("metadata") or {}).get("resourceVersion") or resource_version
                        continue
                    obj = new_obj
                    resource_version = (obj.get("metadata") or {}).get("resourceVersion")
                    # The object's version is a safe resume point only once it changed after the 410.
                    expired = expired and event_type != "MODIFIED"
                    self._changed.set()
                    verdict = await self._assess(obj)
                    if verdict.done:
                        return verdict
                # The watch ended on its own timeout: re-assess (timeouts advance without events).
            except WatchExpired:
                log.info("watch on MPIJob %s expired (410 Gone): re-reading it", self.name)
                obj, expired = None, True
            except asyncio.CancelledError:
                raise
            except Exception as err:  # API unreachable, restarting, 5xx: resume from a fresh read
                if not (is_transient(err) or _unsynced_after_outage(err, outage_started)):
                    raise
                outage_started = outage_started or utcnow()
                if (utcnow() - outage_started).total_seconds() > API_OUTAGE_LIMIT:
                    raise  # retryable for Airflow: the next try reattaches
                log.warning("watch on MPIJob %s interrupted (%s): resuming", self.name, err)
                obj = None
                await asyncio.sleep(RETRY_DELAY)
                continue
            outage_started = None
            if self.deadline is not None and utcnow() >= self.deadline:
                return Verdict("timeout", f"execution_timeout reached while waiting for MPIJob {self.name}")

    def _watch_timeout(self) -> int:
        timeout = self.poll_interval
        if self.deadline is not None:
            timeout = min(timeout, max((self.deadline - utcnow()).total_seconds(), 1))
        return max(int(timeout), 1)

    async def _assess(self, obj: dict) -> Verdict:
        state = job_state(obj)
        self.last_state = state
        conditions = true_condition_types(obj)
        if state.terminal or (self.target_condition and self.target_condition in conditions):
            pods, events = [], []
            if not state.succeeded and state.terminal:
                events = await self._events([])
        else:
            raw = await self.hook.launcher_pods(self.name, self.namespace) + await self.hook.worker_pods(
                self.name, self.namespace
            )
            pods = [pod_summary(p) for p in raw]
            needs_events = not state.created or any(p.phase == "Pending" for p in pods)
            events = await self._events([p.name for p in pods]) if needs_events else []
        return assess(
            state,
            pods,
            events,
            now=utcnow(),
            submitted_at=self.submitted_at,
            timeouts=self.timeouts,
            target_condition=self.target_condition,
            current_conditions=conditions,
        )

    async def _events(self, pod_names: list[str]) -> list:
        raw = list(await self.hook.job_events(self.name, self.namespace))
        if pod_names:
            raw += list(await self.hook.pod_events(pod_names, self.namespace))
        return [event_summary(e) for e in raw]

    async def _delete_quietly(self) -> None:
        try:
            await self.hook.delete_mpijob(self.name, self.namespace)
        except Exception:
            log.exception("could not delete MPIJob %s/%s", self.namespace, self.name)

    # ---------------------------------------------------------------- log pump
    async def _pump_logs(self, finished: asyncio.Event) -> None:
        failures = 0
        while True:
            try:
                pods = [pod_summary(p) for p in await self.hook.launcher_pods(self.name, self.namespace)]
                streams = self._note_streams(pods)
                pending = [s for s in streams if s.key not in self.logs.done]
                for stream in pending:
                    await self._read_stream(stream, finished, follow=not stream.finished and not finished.is_set())
                if finished.is_set() and (not pending or all(s.finished for s in pending)):
                    self._tell_unread(streams)
                    return
            except asyncio.CancelledError:
                raise
            except Exception as err:
                failures += 1
                if finished.is_set() and failures > FINAL_READ_RETRIES:
                    self.emit(f"(could not read the rest of the launcher log: {err})")
                    return
                log.warning("launcher log stream of %s interrupted (%s): resuming", self.name, err)
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=min(self.poll_interval, 2.0))
            except asyncio.TimeoutError:
                pass

    def _tell_unread(self, streams: list[LogStream]) -> None:
        """Say so in the task log when launcher output can no longer be read: its pod is gone (cleanPodPolicy,
        the launcher Job's TTL, a deletion) before this reader got to the end, so no line is silently missing."""
        present = {s.key for s in streams}
        for key in [k for k in self.logs.streams if k not in self.logs.done | self._ended | present]:
            self.emit(f"(launcher log {key} could not be read to its end: its pod is gone; lines it printed "
                      "after the last one above, if any, are not in this log)")
            self.logs.done.add(key)
        if not streams and not self.logs.streams and self.last_state is not None and self.last_state.succeeded:
            self.emit("(the launcher's log could not be read: its pod is gone, e.g. removed by cleanPodPolicy or "
                      "ttlSecondsAfterFinished before this try read it; its output is not in this log)")

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

    async def _consume(self, stream: LogStream, *, follow: bool) -> None:
        log_pass = self.logs.cursor.new_pass(stream.key)
        async for raw in self.hook.read_pod_log(
            stream.pod,
            self.namespace,
            container=stream.container,
            since_time=self.logs.cursor.since_time(stream.key),
            previous=stream.previous,
            follow=follow,
        ):
            message = log_pass.accept(raw)
            if message is None:
                continue
            position = self.logs.cursor.position(stream.key)
            if position is None:  # a line without a timestamp before any other: nothing to resume from
                self.emit(message)
            else:
                self.emit_marked(message, line_mark(stream.key, position))

    async def _follow(self, stream: LogStream, finished: asyncio.Event) -> None:
        """Follow a running container; stop once it is no longer running (or the wait is over).

        Not every log server ends a follow stream when the container exits, so the pod's state is
        checked alongside; the next pass reads the rest without following.
        """
        read = asyncio.create_task(self._consume(stream, follow=True))
        try:
            while not read.done():
                await asyncio.wait({read}, timeout=min(self.poll_interval, 2.0))
                if read.done():
                    break
                if finished.is_set() or not await self._still_running(stream):
                    await asyncio.wait({read}, timeout=FOLLOW_GRACE)
                    break
        finally:
            if not read.done():
                read.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await read
        if not read.cancelled() and read.exception() is not None:
            raise read.exception()
        if not read.cancelled():  # the log server ended the stream: a kubelet does so once the container exited
            self._ended.add(stream.key)

    async def _still_running(self, stream: LogStream) -> bool:
        for raw in await self.hook.launcher_pods(self.name, self.namespace):
            pod = pod_summary(raw)
            if pod.name == stream.pod:
                return pod.state == "running" and pod.restart_count == stream.restart
        return False


def _unsynced_after_outage(err: BaseException, outage_started: datetime | None) -> bool:
    """401/403 while an API server comes back: it refuses non-admin identities until its authentication and
    RBAC caches have synced (seen with a least-privilege service account), so during an outage they are transient."""
    return outage_started is not None and getattr(err, "status", None) in (401, 403)


async def monitor_with(sync_hook: Any, name: str, namespace: str, *, drain_only: bool = False, **kwargs: Any) -> dict | None:
    """Run a JobMonitor from a worker (operator, sensor) on the sync hook's connection.

    ``drain_only``: print the launcher log not printed yet and return None; otherwise wait for a verdict.
    """
    from airflow_mpi.hooks.async_mpijob import AsyncMPIJobHook

    kwargs.setdefault("submitted_at", utcnow())
    async with AsyncMPIJobHook.from_sync(sync_hook) as hook:
        monitor = JobMonitor(hook, name, namespace, **kwargs)
        if drain_only:
            await monitor.drain_logs()
            return None
        return await monitor.run()
