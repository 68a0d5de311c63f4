"""Waiting on one MPIJob while streaming its launcher's log: the one implementation behind the synchronous
operator (in ``asyncio.run``), the trigger and the sensor. Two cooperating tasks on one subscription to the
watch hub (wait/watch_hub.py):

* the *watcher* asks :func:`airflow_mpi.wait.progress.assess` whether the wait is over after every change of
  the job or its pods, and every ``poll_interval`` (timeouts advance without events), reading the hub's cache;
* the *log pump* (wait/log_pump.py) follows the launcher's log, each line exactly once.

A "failed" verdict is followed by the failure's report (wait/failure_report.py), gathered on the same
subscription before the mpi-operator's clean-up deletes the workers. The result (wait/contract.py
``WaitResult``), the log position included, is bounded data: it travels in trigger events (``to_event``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import KW_ONLY, InitVar, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_mpi.hooks.protocols import WaitHook
from airflow_mpi.hooks.retries import through_outage
from airflow_mpi.jobspec.kinds import JobKind, kind_or_default
from airflow_mpi.jobspec.spec import KUEUE_QUEUE_LABEL
from airflow_mpi.jobspec.status import JobState, clean_pod_policy, job_state, true_condition_types
from airflow_mpi.wait import watch_hub
from airflow_mpi.wait.contract import DEFAULT_TAIL_LINES, Outcome, WaitOptions, WaitResult
from airflow_mpi.wait.failure_report import FailureReport
from airflow_mpi.wait.log_groups import escape
from airflow_mpi.wait.log_pump import ListedPods, LogPump, LogState
from airflow_mpi.wait.logs import LogStream, launcher_streams
from airflow_mpi.wait.progress import EXPLAINED, Timeouts, Verdict, assess, derived_state
from airflow_mpi.wait.queueing import QueueTracker
from airflow_mpi.wait.summaries import event_summary, pod_summary

if TYPE_CHECKING:
    from airflow_mpi.hooks.mpijob import MPIJobHook

log = logging.getLogger(__name__)

DRAIN_TIMEOUT = 60.0  # seconds the log pump gets to read the last lines once the job is over
UNCREATED_EVENTS_GAP = (10.0, 300.0)  # seconds between event listings of a job not yet Created: first, most


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(eq=False)
class JobMonitor:
    """Follow one MPIJob to a verdict; see the module docstring."""

    hook: WaitHook
    name: str
    namespace: str
    _: KW_ONLY
    emit: Callable[[str], None]
    # launcher lines and attempt headers with their log position (wait/log_ledger.py)
    emit_marked: Callable[[str, str], None] | None = None
    submitted_at: datetime
    deadline: datetime | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    poll_interval: float = 10.0
    target_condition: str | None = None
    owns_job: bool = True
    uid: str | None = None  # the incarnation this task created or reattached to: another one is not its job
    get_logs: bool = True
    log_state: InitVar[dict | None] = None
    max_attempts: int | None = None
    tail_lines: int = DEFAULT_TAIL_LINES  # of each failed pod's log in a failure's report (0: none)
    # what the wait has seen
    logs: LogState = field(init=False)
    last_state: JobState | None = field(default=None, init=False)
    clean_pod_policy: str | None = field(
        default=None, init=False
    )  # from the first GET (the hub caches no spec)
    failure: dict | None = field(default=None, init=False)
    launcher_pod_names: list[str] = field(default_factory=list, init=False)
    launcher_attempts: int = field(default=0, init=False)
    launcher_exit_codes: list[int] = field(
        default_factory=list, init=False
    )  # of ended launchers, oldest first
    job_kind: JobKind = field(init=False)  # the hook's (its messages name the job's kind)
    queue: QueueTracker = field(init=False)  # its time in a Kueue queue (wait/queueing.py)
    _log_pump: LogPump | None = field(default=None, init=False)
    _uncreated_events: list = field(default_factory=list, init=False)
    _uncreated_listed: datetime | None = field(default=None, init=False)
    _uncreated_gap: float = field(default=UNCREATED_EVENTS_GAP[0], init=False)

    def __post_init__(self, log_state: dict | None) -> None:
        self.logs = LogState.from_dict(log_state)
        self.job_kind = kind_or_default(getattr(self.hook, "api_version", None))
        self.queue = QueueTracker.of_kind(self.job_kind, self.name, self.timeouts.queue_timeout)
        if self.emit_marked is None:
            self.emit_marked = lambda message, _mark: self.emit(message)

    @classmethod
    def with_options(
        cls, hook: WaitHook, name: str, namespace: str, options: WaitOptions, **state: Any
    ) -> JobMonitor:
        """A monitor waiting as ``options`` say; ``state``: its other fields (emit, submitted_at, uid...)."""
        timeouts = Timeouts(options.startup_timeout, options.schedule_timeout, options.queue_timeout)
        return cls(
            hook,
            name,
            namespace,
            timeouts=timeouts,
            poll_interval=options.poll_interval,
            get_logs=options.get_logs,
            max_attempts=options.max_attempts,
            tail_lines=options.tail_lines,
            deadline=options.deadline,
            target_condition=options.target_condition,
            owns_job=options.owns_job,
            **state,
        )

    # ---------------------------------------------------------------- public
    async def run(self) -> WaitResult:
        """Wait for a verdict, stream logs meanwhile; returns the wait's result."""
        async with watch_hub.subscription(self.hook, self.namespace, self.name) as sub:
            sub.uid, sub.on_ignored = self.uid, self._ignored
            finished = asyncio.Event()
            self._log_pump = self._pump(sub) if self.get_logs else None
            pump = asyncio.create_task(self._log_pump.run(finished)) if self._log_pump else None
            try:
                verdict = await self._watch(sub)
                finished.set()  # the pump drains the launcher log meanwhile
                if verdict.outcome in EXPLAINED:
                    # a worker that failed before the launch: the job is not finished, nothing will delete workers
                    self.failure = await self._failure_report(sub, verdict.outcome is Outcome.FAILED)
            except BaseException:
                if pump is not None:
                    pump.cancel()
                raise
            finally:
                finished.set()
            if verdict.outcome is Outcome.TIMEOUT and self.owns_job:
                await self._delete_quietly()
            if pump is not None:
                try:
                    await asyncio.wait_for(pump, DRAIN_TIMEOUT)
                except TimeoutError:
                    self.emit("(stopped waiting for the rest of the launcher log)")
            self._count_attempts(await sub.launchers())
        return self.result(verdict)

    async def drain_logs(self) -> None:
        """Print whatever the launcher logged that was not printed yet (no following, no watch)."""
        finished = asyncio.Event()
        finished.set()
        await self._pump(ListedPods(self.hook, self.name, self.namespace)).run(finished)

    def _ignored(self, pod: str) -> None:
        """A pod with the job's labels that its controllers did not make (hooks/ownership.py): said once, by name."""
        self.emit(
            f"(ignoring pod {pod}: it carries {self.job_kind.kind} {self.name}'s labels, but the job's controllers "
            "did not make it: not followed, not counted)"
        )

    def _marked_sink(self) -> Callable[[str, str], None]:
        assert self.emit_marked is not None, "set by __post_init__"
        return self.emit_marked

    def _pump(self, pods: Any) -> LogPump:
        return LogPump(
            self.hook,
            self.namespace,
            self.logs,
            pods,
            emit=self.emit,
            emit_marked=self._marked_sink(),
            note_streams=self._note_streams,
            max_attempts=self.max_attempts,
            idle_wait=self.poll_interval,
            job_succeeded=lambda: self.last_state is not None and self.last_state.succeeded,
        )

    def result(self, verdict: Verdict) -> WaitResult:
        assert verdict.outcome is not None, "a wait's result needs its verdict"
        state = self.last_state  # None: the job was never read
        return WaitResult(
            verdict.outcome,
            self.name,
            self.namespace,
            verdict.message,
            verdict.warnings,
            uid=self.uid,
            condition=state.condition if state else None,
            reason=state.reason if state else None,
            start_time=state.start_time if state else None,
            completion_time=state.completion_time if state else None,
            job_message=state.message if state else None,
            launcher_pods=self.launcher_pod_names,
            launcher_attempts=self.launcher_attempts,
            launcher_exit_codes=self.launcher_exit_codes,
            log_state=self.logs.to_dict(),
            failure=self.failure,
            evictions=self.queue.evictions,
            creation_time=state.creation_time if state else None,
            created_time=state.created_time if state else None,
            queued_seconds=self.queue.seconds_queued(utcnow()),
        )

    async def _failure_report(self, sub: watch_hub.Subscription, finished: bool) -> dict | None:
        """Why the job failed (wait/failure_report.py); its own failure is logged, never raised. ``finished``:
        the job failed (its ``cleanPodPolicy`` applies now), not only the wait."""
        try:
            policy = self.clean_pod_policy if finished else "None"
            return await FailureReport(
                self.hook,
                self.namespace,
                sub,
                clean_pod_policy=policy,
                tail_lines=self.tail_lines,
                now=utcnow,
                deadline=self.deadline,
            ).gather()
        except Exception:
            log.warning(
                "could not tell why %s %s/%s failed",
                self.job_kind.kind,
                self.namespace,
                self.name,
                exc_info=True,
            )
            return None

    def _count_attempts(self, launchers: list) -> None:
        """Launcher attempts = started launcher containers (new pods and in-place restarts)."""
        pods = [pod_summary(p) for p in launchers]
        streams = self._note_streams(pods)
        self.launcher_attempts = max(len(streams), len(self.logs.streams))
        ended = sorted(
            (p for p in pods if p.exit_code is not None), key=lambda p: (p.created is None, p.created)
        )
        self.launcher_exit_codes = [p.exit_code for p in ended if p.exit_code is not None]

    def _note_streams(self, pods: list) -> list[LogStream]:
        streams = launcher_streams(pods)
        for stream in streams:
            if stream.pod not in self.launcher_pod_names:
                self.launcher_pod_names.append(stream.pod)
        return streams

    # ---------------------------------------------------------------- watcher
    async def _watch(self, sub: watch_hub.Subscription) -> Verdict:
        """Assess after every change of the job or its pods (the hub's cache) and every ``poll_interval``. One GET
        first: it tells this job's incarnation (uid) apart from an earlier one of the same name that the cache may
        still hold, and covers a job created after the hub's last event. Like the hub's watches, it rides out an API
        server restart (one began between a create and this GET in a CI run)."""
        obj = await through_outage(self.hook.get_mpijob, self.name, self.namespace)
        if obj is None:
            return Verdict(Outcome.DELETED, "it does not exist (deleted by someone else?)")
        job_uid = (obj.get("metadata") or {}).get("uid")
        sub.uid = sub.uid or job_uid  # its pods are the ones this incarnation's controllers made
        self.clean_pod_policy = clean_pod_policy(obj)
        if self.uid and job_uid != self.uid:
            return Verdict(
                Outcome.DELETED,
                f"it was replaced by another {self.job_kind.kind} of the same name (uid "
                f"{job_uid}; this task's was {self.uid}): not following it",
            )
        seen = sub.version
        while True:
            if (job_uid and job_uid in sub.deleted_uids) or (not job_uid and sub.deleted_uids):
                return Verdict(Outcome.DELETED, "it was deleted while the task waited")
            obj = sub.job(job_uid) or obj
            verdict = await self._queueing(obj, sub, job_uid) or await self._assess(obj, sub, job_uid)
            if verdict.done:
                return verdict
            if self.deadline is not None and utcnow() >= self.deadline:
                return Verdict(
                    Outcome.TIMEOUT,
                    f"execution_timeout reached while waiting for {self.job_kind.kind} {self.name}",
                )
            seen = await sub.wait_change(seen, self._wait_timeout())

    def _wait_timeout(self) -> float:
        timeout = self.poll_interval
        if self.deadline is not None:
            timeout = min(timeout, max((self.deadline - utcnow()).total_seconds(), 0.05))
        return timeout

    async def _queueing(self, obj: dict, sub: watch_hub.Subscription, uid: str | None) -> Verdict | None:
        """Say what Kueue does with the job (queued, admitted, evicted); a verdict once queue_timeout is over."""
        visible = False
        if KUEUE_QUEUE_LABEL in ((obj.get("metadata") or {}).get("labels") or {}):
            visible = await sub.watch_workloads()
        evictions = self.queue.evictions
        lines, verdict = self.queue.observe(
            obj, sub.workload(uid) if visible else None, utcnow(), visible=visible
        )
        for line in lines:
            self.emit(escape(line))  # Kueue's condition messages: no log group marker from outside
        if self._log_pump is not None and self._log_pump.max_attempts and self.queue.evictions > evictions:
            self._log_pump.max_attempts += self.queue.evictions - evictions  # a re-admission starts it over
        return verdict

    async def _assess(self, obj: dict, sub: watch_hub.Subscription, uid: str | None = None) -> Verdict:
        """Events are listed only when they can change the verdict: ValidationError before Created, the
        messages of a stuck pod (a namespace of Pending jobs would otherwise cost 2 LISTs per job and check)."""
        kind = kind_or_default(obj.get("apiVersion"))
        state = job_state(obj, kind)
        conditions = true_condition_types(obj, kind)
        pods = []
        if not (state.terminal or (self.target_condition and self.target_condition in conditions)):
            await sub.settle()
            pods = [pod_summary(p) for p in sub.launcher_pods() + sub.worker_pods()]
            state = derived_state(state, kind, pods)
            conditions |= {state.condition} if state.condition else set()
        self.last_state = state

        def verdict(events: list) -> Verdict:
            return assess(
                state,
                pods,
                events,
                now=utcnow(),
                submitted_at=self.submitted_at,
                timeouts=self.timeouts,
                target_condition=self.target_condition,
                current_conditions=conditions,
                kind=kind,
            )

        if not state.created and not state.terminal:
            watched = sub.validation_events(uid)
            if watched is None:  # the hub may not watch events
                return await self._before_created(verdict, [p.name for p in pods])
            result = verdict([event_summary(e) for e in watched])
            # a verdict on the job's fresh events (all its warnings, for the message): one listing per job
            return verdict(await self._events([p.name for p in pods])) if result.done else result
        first = verdict([])
        # the warnings explain these
        if first.outcome in (Outcome.FAILED, Outcome.UNSCHEDULABLE, Outcome.WORKER_FAILED):
            return verdict(await self._events([p.name for p in pods]))
        return first

    async def _before_created(self, verdict: Callable[[list], Verdict], pod_names: list[str]) -> Verdict:
        """Until Created, a ValidationError event is what can end the wait. The hub watches them; where it may
        not, they are listed at once, then with a gap that doubles (UNCREATED_EVENTS_GAP), not at every check:
        1,000 jobs submitted at once wait minutes for the mpi-operator (1-1.5 created a second), which cost a
        LIST per job and poll. A verdict (startup timeout) is given on fresh events only."""
        now = utcnow()
        listed = self._uncreated_listed
        fresh = listed is None or (now - listed).total_seconds() >= self._uncreated_gap
        if fresh:
            if listed is not None:
                self._uncreated_gap = min(self._uncreated_gap * 2, UNCREATED_EVENTS_GAP[1])
            self._uncreated_events, self._uncreated_listed = await self._events(pod_names), now
        result = verdict(self._uncreated_events)
        if result.done and not fresh:
            self._uncreated_events, self._uncreated_listed = await self._events(pod_names), now
            result = verdict(self._uncreated_events)
        return result

    async def _events(self, pod_names: list[str]) -> list:
        raw = list(await through_outage(self.hook.job_events, self.name, self.namespace))
        if pod_names:
            raw += list(await through_outage(self.hook.pod_events, pod_names, self.namespace))
        return [event_summary(e) for e in raw]

    async def _delete_quietly(self) -> None:
        try:
            await self.hook.delete_mpijob(self.name, self.namespace)
        except Exception:
            log.exception("could not delete %s %s/%s", self.job_kind.kind, self.namespace, self.name)


async def monitor_with(
    sync_hook: MPIJobHook,
    name: str,
    namespace: str,
    options: WaitOptions,
    *,
    drain_only: bool = False,
    **kwargs: Any,
) -> WaitResult | None:
    """Run a JobMonitor waiting as ``options`` say from a worker (operator, sensor), on the sync hook's
    connection; ``drain_only``: print the launcher log not printed yet and return None, else wait for a
    verdict."""
    from airflow_mpi.hooks.async_mpijob import AsyncMPIJobHook

    kwargs.setdefault("submitted_at", utcnow())
    async with AsyncMPIJobHook.from_sync(sync_hook) as hook:
        monitor = JobMonitor.with_options(hook, name, namespace, options, **kwargs)
        if drain_only:
            await monitor.drain_logs()
            return None
        return await monitor.run()
