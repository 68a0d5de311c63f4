"""MPIJobTrigger: the deferrable wait, run by the triggerer (perhaps on another machine: plain data only).

How it waits is one argument, ``options`` (wait/contract.py ``WaitOptions``; a trigger stored by an
earlier release carries them as arguments of their own, and still loads). Its deadline enforces
``execution_timeout`` while deferred (on expiry it deletes the MPIJob itself; the peers leave it running).
It emits exactly one terminal event, the wait's ``WaitResult``, never before ``not_before`` (the hold
against Airflow's deferral race: wait/deferral.py); a failed job's carries why (``failure``, bounded).
A decorated task's carries rank 0's result as read here (``result``: the value or why there is none), never its marker
lines nor the key they are signed with: the triggerer logs every event it fires into the task's log.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import InitVar, dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_mpi.hooks.answers import split_timestamp
from airflow_mpi.hooks.protocols import JobReads
from airflow_mpi.jobspec.kinds import DEFAULT_KIND
from airflow_mpi.triggers.cancellation import outlive_cancellation
from airflow_mpi.version_compat import AIRFLOW_V_3_0_PLUS, AIRFLOW_V_3_3_PLUS, BaseTrigger, TriggerEvent
from airflow_mpi.wait.contract import Outcome, WaitOptions, WaitResult
from airflow_mpi.wait.deferral import hold_seconds
from airflow_mpi.wait.rank_result_capture import ResultCollector, hide_result_lines

if TYPE_CHECKING:
    from airflow_mpi.hooks.async_mpijob import AsyncMPIJobHook

# The arguments a trigger of an earlier release carried its wait options in (the InitVars below, in order).
LEGACY_OPTIONS = (
    "deadline",
    "poll_interval",
    "startup_timeout",
    "schedule_timeout",
    "queue_timeout",
    "get_logs",
    "max_attempts",
    "tail_lines",
    "target_condition",
    "owns_job",
)
_NOT_GIVEN: Any = object()


@dataclass(kw_only=True, eq=False, repr=False)
class MPIJobTrigger(BaseTrigger):
    """Wait for an MPIJob (or one of its conditions) while streaming the launcher log; serializes its fields."""

    # the job, and the connection settings resolved on the worker
    name: str
    namespace: str
    uid: str | None = None
    kubernetes_conn_id: str = "kubernetes_default"
    api_version: str = DEFAULT_KIND.api_version
    connection: dict[str, Any] | None = None
    # the wait: how (its dict form, as serialized, is accepted too), since when, and where the log resumes
    options: WaitOptions = field(default_factory=WaitOptions)
    submitted_at: str
    log_state: dict[str, Any] | None = None  # LogState.to_dict()
    # the event: held until not_before; rank 0's result (@task.mpi) read here, verified with result_key (the
    # submission's nonce: a secret, kept out of repr; Airflow stores trigger arguments encrypted)
    not_before: str | None = None
    capture_result: bool = False
    result_key: str | None = None
    result_digest: str | None = None  # a trigger serialized by an earlier release; unused
    # the installation that held the deployment's id when the task deferred (jobspec/claims.py)
    installation: str | None = None
    # A trigger stored by a release before ``options`` carried them as arguments of their own (LEGACY_OPTIONS,
    # in this order): folded into ``options``, never serialized again.
    deadline: InitVar[Any] = _NOT_GIVEN
    poll_interval: InitVar[Any] = _NOT_GIVEN
    startup_timeout: InitVar[Any] = _NOT_GIVEN
    schedule_timeout: InitVar[Any] = _NOT_GIVEN
    queue_timeout: InitVar[Any] = _NOT_GIVEN
    get_logs: InitVar[Any] = _NOT_GIVEN
    max_attempts: InitVar[Any] = _NOT_GIVEN
    tail_lines: InitVar[Any] = _NOT_GIVEN
    target_condition: InitVar[Any] = _NOT_GIVEN
    owns_job: InitVar[Any] = _NOT_GIVEN

    def __post_init__(self, *legacy: Any) -> None:
        super().__init__()
        self.connection = self.connection or {}
        given = self.options
        options = given.to_dict() if isinstance(given, WaitOptions) else dict(given or {})
        options.update(
            {
                name: value
                for name, value in zip(LEGACY_OPTIONS, legacy, strict=True)
                if value is not _NOT_GIVEN
            }
        )
        self.options = WaitOptions.from_dict(options)
        self._fired = False

    def serialize(self) -> tuple[str, dict[str, Any]]:
        classpath = f"{type(self).__module__}.{type(self).__qualname__}"
        kwargs = {f.name: getattr(self, f.name) for f in fields(self)}
        return classpath, {**kwargs, "options": self.options.to_dict()}

    def __repr__(self) -> str:
        classpath, kwargs = self.serialize()
        shown = ", ".join(f"{k}={'***' if k == 'result_key' and v else v!r}" for k, v in kwargs.items())
        return f"<{classpath} {shown}>"

    def _hook(self) -> AsyncMPIJobHook:
        from airflow_mpi.hooks import AsyncMPIJobHook

        return AsyncMPIJobHook(
            conn_id=self.kubernetes_conn_id, api_version=self.api_version, **(self.connection or {})
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_mpi.wait.monitor import JobMonitor

        if refusal := await self._foreign():
            self._fired = True  # nothing of this trigger deletes the job
            yield TriggerEvent(
                WaitResult.of_error(
                    self.name, self.namespace, refusal, uid=self.uid, log_state=self.log_state
                ).to_event()
            )
            return
        log_state, emit_marked = await self._log_position()
        emit = self.log.info
        collector = ResultCollector(self.result_key, self.log.info) if self.capture_result else None
        unread: str | None = None  # why a value the wait passed could not be read back
        if collector is not None:  # rank 0's marker lines are read, not logged
            emit = hide_result_lines(emit, collector)
            emit_marked = emit_marked and hide_result_lines(emit_marked, collector)
        try:
            async with self._hook() as hook:
                result = await JobMonitor.with_options(
                    hook,
                    self.name,
                    self.namespace,
                    self.options,
                    emit=emit,
                    emit_marked=emit_marked,
                    log_state=log_state,
                    submitted_at=datetime.fromisoformat(self.submitted_at),
                    uid=self.uid,
                ).run()
                if collector is not None and result.outcome is Outcome.SUCCESS and not collector.complete:
                    unread = await self._read_back(hook, collector)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # surfaced by execute_complete, which cleans up
            why = f"{type(err).__name__}: {err}"
            result = WaitResult.of_error(
                self.name, self.namespace, why, uid=self.uid, log_state=self.log_state
            )
        if collector is not None:
            rank_result = collector.result().to_dict()
            if unread and not collector.complete:
                rank_result["error"] = unread
            result = replace(result, result=rank_result)
        await self._hold()
        await self._close_log(result)
        self._fired = True
        yield TriggerEvent(result.to_event())

    async def _read_back(self, hook: JobReads, collector: ResultCollector) -> str | None:
        """Rank 0's value from the newest launcher's whole log, streamed through ``collector`` once: the wait resumed
        past its marker lines (a triggerer failover). Why it could not be read, if it could not."""
        if not self.result_key:
            return "the trigger holds no key to verify rank 0's return value with"
        self.log.info(
            "Rank 0's return value was not among the lines this wait read: reading the launcher log"
        )
        try:
            launchers = await hook.launcher_pods(self.name, self.namespace)
            if launchers:
                pod = launchers[0]
                container = pod.spec.containers[0].name if pod.spec and pod.spec.containers else None
                async for raw in hook.read_pod_log(pod.metadata.name, self.namespace, container=container):
                    collector.take(split_timestamp(raw)[1])
        except Exception as err:
            return f"its launcher log could not be read back for rank 0's return value ({type(err).__name__}: {err})"
        return None

    async def _log_position(self) -> tuple[dict | None, Any]:
        """Where the launcher log resumes and how its lines are logged: on Airflow 3 with their position, read back
        from the task's trigger logs, so a triggerer failover neither repeats nor loses a line (wait/log_ledger.py)."""
        task_instance = getattr(self, "task_instance", None)
        if not (self.options.get_logs and AIRFLOW_V_3_0_PLUS and task_instance is not None):
            return self.log_state, None  # not in a triggerer (no task log to read back): plain log lines
        from airflow_mpi.wait.log_ledger import line_mark, marked_emitter, resume_state_off_loop

        handed_over: list[str] = []
        state = await resume_state_off_loop(task_instance, self.log_state, self.log.warning, handed_over)
        emit_marked = marked_emitter()
        if (
            handed_over
        ):  # the positions now in remote storage, marked in this triggerer's file for a successor
            for stream, position in (state or {}).get("cursor", {}).items():
                emit_marked(
                    f"Launcher log {stream}: logged up to here by a previous triggerer, whose trigger log "
                    f"({', '.join(handed_over)}) this triggerer uploaded; resuming after it",
                    line_mark(stream, position),
                )
        return state, emit_marked

    async def _close_log(self, result: WaitResult) -> None:
        """On Airflow 3, wait (bounded) until this trigger's records are in its task log before the event leaves:
        the triggerer closes the trigger's log file on the event, and a record still on its way then misses the task
        log (wait/trigger_log_flush.py). Airflow 2's triggerer writes the records in this process."""
        task_instance = getattr(self, "task_instance", None)
        if not (AIRFLOW_V_3_0_PLUS and task_instance is not None):
            return
        from airflow_mpi.jobspec.kinds import kind_or_default
        from airflow_mpi.wait.trigger_log_flush import FLUSH_TIMEOUT, close_trigger_log

        kind = kind_or_default(self.api_version).kind
        message = f"{kind} {self.namespace}/{self.name}: the wait ended ({result.outcome}); the task resumes"
        if not await close_trigger_log(task_instance, message):
            self.log.warning(
                "This trigger did not see its last records in its task log file (waited up to %.0f s): some may be in "
                "the triggerer's own log instead",
                FLUSH_TIMEOUT,
            )

    async def _hold(self) -> None:
        """Wait until ``not_before`` (an absolute time: a restarted triggerer waits only what is left)."""
        wait = hold_seconds(
            datetime.fromisoformat(self.not_before) if self.not_before else None, datetime.now(UTC)
        )
        if wait > 0:
            self.log.info(
                "Holding the result %.1f s: the deferral is too recent for this Airflow version "
                "(deferral race, apache/airflow#71580 / #72716)",
                wait,
            )
            await asyncio.sleep(wait)

    async def _foreign(self) -> str | None:
        """Why this triggerer may neither follow nor delete the job: the task deferred under another installation
        than its deployment's database records now (a copy of that deployment's database runs this trigger)."""
        if not self.installation:
            return None
        from asgiref.sync import sync_to_async

        from airflow_mpi.deployment_identity import installation_for_task

        try:
            now = await sync_to_async(installation_for_task)()
        except Exception:  # the resumed task checks the claim before it reads or deletes anything
            self.log.warning("Could not read this deployment's installation", exc_info=True)
            return None
        if now == self.installation:
            return None
        return (
            f"MPIJob {self.namespace}/{self.name} was followed for installation {self.installation!r}, and this "
            f"deployment's database records installation {now!r} (a copy of that deployment's database): not "
            "following or deleting it"
        )

    async def _delete(self) -> None:
        """Delete the job if it is still live (a finished one is kept: hooks/live_delete.py)."""
        try:
            async with self._hook() as hook:
                outcome = await hook.delete_live_mpijob(self.name, self.namespace, uid=self.uid)
            self.log.info("Deferred task killed: MPIJob %s/%s %s", self.namespace, self.name, outcome)
        except Exception:
            self.log.exception("Could not delete MPIJob %s/%s", self.namespace, self.name)

    async def on_kill(self) -> None:
        """Airflow 3.3+: a user marked the deferred task failed/success or cleared it. The delete outlives the
        triggerer's further cancellations of this trigger (triggers/cancellation.py)."""
        if self.options.owns_job and not self._fired:
            await outlive_cancellation(self._delete())

    async def cleanup(self) -> None:
        """Before Airflow 3.3 ``on_kill`` is not called: delete only if this try left ``deferred``
        (a triggerer restart also calls cleanup, and must not kill the job)."""
        if AIRFLOW_V_3_3_PLUS or self._fired or not self.options.owns_job:
            return
        await outlive_cancellation(self._delete_unless_deferred())

    async def _delete_unless_deferred(self) -> None:
        """Keep the job while this trigger's try is still deferred. A task ``deferred`` under a newer try (where the
        database tells: Airflow 2) was cleared, and its next try reattached to this job before this cleanup ran: the
        job is deleted, and that try submits a fresh one (operators/submission.deleted_by_earlier_try)."""
        try:
            state, current_try = await self._task_state()
        except Exception:
            self.log.warning("Could not read the task state; keeping MPIJob %s", self.name, exc_info=True)
            return
        own_try = getattr(self.task_instance, "try_number", None)
        newer_try = isinstance(current_try, int) and isinstance(own_try, int) and current_try > own_try
        if state != "deferred" or newer_try:
            await self._delete()

    async def _task_state(self) -> tuple[str | None, int | None]:
        """The task instance's state now, and its try number where the triggerer can read it (Airflow 2)."""
        from asgiref.sync import sync_to_async

        ti = self.task_instance
        if ti is None:  # not run by a triggerer: the caller keeps the job
            raise RuntimeError("the trigger has no task instance")
        if AIRFLOW_V_3_0_PLUS:
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

            states = await sync_to_async(RuntimeTaskInstance.get_task_states)(
                dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id], map_index=ti.map_index
            )
            key = f"{ti.task_id}_{ti.map_index}" if ti.map_index >= 0 else ti.task_id
            return str(states[ti.run_id][key]), None

        def read_state() -> tuple[str | None, int | None]:  # Airflow 2: the triggerer has database access
            from airflow.models.taskinstance import TaskInstance
            from airflow.utils.session import create_session

            with create_session() as session:
                row = (
                    session.query(TaskInstance.state, TaskInstance.try_number)
                    .filter_by(dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id, map_index=ti.map_index)
                    .one_or_none()
                )
                if row is None:
                    return None, None
                return (str(row[0]) if row[0] is not None else None), row[1]

        return await sync_to_async(read_state)()
