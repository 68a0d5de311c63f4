"""MPIJobSensor: wait for an existing MPIJob to reach a condition."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_mpi.jobspec.errors import MPIJobValidationError
from airflow_mpi.jobspec.kinds import DEFAULT_KIND, kind_or_default
from airflow_mpi.jobspec.status import KNOWN_CONDITIONS, job_state, true_condition_types
from airflow_mpi.jobspec.vocabulary import JobCondition
from airflow_mpi.operators.finish_action import OnFinishAction
from airflow_mpi.operators.links import LinkValues, extra_links, persist_links
from airflow_mpi.operators.outcome import finish
from airflow_mpi.version_compat import (
    AIRFLOW_VERSION,
    AirflowException,
    AirflowFailException,
    BaseSensorOperator,
    conf,
)
from airflow_mpi.wait.contract import Outcome, WaitOptions, WaitResult
from airflow_mpi.wait.deferral import not_before_text

if TYPE_CHECKING:
    from airflow_mpi.hooks import MPIJobHook


class MPIJobSensor(BaseSensorOperator):
    """Wait for MPIJob ``job_name`` to have condition ``target_condition`` (``Succeeded`` by default), in poke,
    reschedule or deferrable mode (:class:`~airflow_mpi.triggers.MPIJobTrigger`); a ``Failed`` job fails the sensor
    at once instead of poking until the timeout.

    :param attach_logs: print the launcher's log into the task log when the wait ends.
    """

    template_fields: Sequence[str] = ("job_name", "namespace", "target_condition")
    operator_extra_links = extra_links()  # the job, its launcher pod, its logs (operators/links.py)

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        api_version: str = DEFAULT_KIND.api_version,
        target_condition: str = JobCondition.SUCCEEDED.value,
        attach_logs: bool = False,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_name, self.namespace = job_name, namespace
        known = tuple(dict.fromkeys((*KNOWN_CONDITIONS, *kind_or_default(api_version).conditions)))
        if "{{" not in target_condition and target_condition not in known:
            raise MPIJobValidationError("target_condition", target_condition, f"must be one of {known}")
        self.target_condition = target_condition
        self.attach_logs = attach_logs
        self.kubernetes_conn_id, self.api_version = kubernetes_conn_id, api_version
        self.deferrable = deferrable

    @cached_property
    def hook(self) -> MPIJobHook:
        from airflow_mpi.hooks import MPIJobHook

        return MPIJobHook(conn_id=self.kubernetes_conn_id, api_version=self.api_version)

    @property
    def _kind(self) -> str:
        """The job's kind, as messages name it (``MPIJob``, ``TrainJob``)."""
        return kind_or_default(self.api_version).kind

    def _namespace(self) -> str:
        return self.hook.resolve_namespace(self.namespace)

    def execute(self, context: Any) -> Any:
        persist_links(context, self.hook, LinkValues(self._namespace(), self.job_name), self.log)
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):  # never defer on a job already there: wait/deferral.py
            return None
        from airflow_mpi.triggers import MPIJobTrigger

        now = datetime.now(UTC)
        trigger = MPIJobTrigger(
            name=self.job_name,
            namespace=self._namespace(),
            api_version=self.api_version,
            kubernetes_conn_id=self.kubernetes_conn_id,
            connection=self.hook.connection_settings(),
            submitted_at=now.isoformat(),
            options=self._wait_options(now),
            not_before=not_before_text(now, AIRFLOW_VERSION),
        )
        self.defer(trigger=trigger, method_name="execute_complete")

    def _wait_options(self, now: datetime) -> WaitOptions:
        """The deferred wait: for the condition, at the poke interval, until the sensor's timeout; the job is
        someone else's (never deleted), its start is not this sensor's to time, its log printed at the end."""
        deadline = now + timedelta(seconds=self.timeout) if self.timeout else None
        return WaitOptions(
            poll_interval=self.poke_interval,
            startup_timeout=None,
            schedule_timeout=None,
            get_logs=False,
            target_condition=self.target_condition,
            deadline=deadline,
            owns_job=False,
        )

    def poke(self, context: Any) -> bool:
        from airflow_mpi.hooks.retries import through_outage_sync

        namespace = self._namespace()
        obj = through_outage_sync(self.hook.get_mpijob, self.job_name, namespace)  # a restart is no failure
        if obj is None:
            raise AirflowException(f"{self._kind} {namespace}/{self.job_name} does not exist")
        state = job_state(obj)
        self.log.info("%s %s/%s: %s", self._kind, namespace, self.job_name, state.describe())
        if state.terminal and not state.succeeded:
            self._attach_logs(namespace)
            raise AirflowFailException(f"{self._kind} {namespace}/{self.job_name} failed: {state.describe()}")
        if self.target_condition in true_condition_types(obj) or state.succeeded:
            self._attach_logs(namespace)
            return True
        return False

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict:
        result = WaitResult.from_event(event)
        persist_links(context, self.hook, LinkValues.of_result(result, datetime.now(UTC)), self.log)
        if result.outcome.succeeded:
            assert result.namespace is not None, "a trigger's success names its job's namespace"
            self._attach_logs(result.namespace)
        elif result.outcome is Outcome.TIMEOUT:
            raise AirflowException(f"{self._kind} {result.namespace}/{self.job_name}: sensor timed out")
        return finish(
            self,
            result,
            api_version=self.api_version,
            on_finish_action=OnFinishAction.KEEP,
            fail_permanently=True,
            owns_job=False,
        )

    def _attach_logs(self, namespace: str) -> None:
        if not self.attach_logs:
            return
        from airflow_mpi.wait.monitor import monitor_with

        options = WaitOptions(owns_job=False)  # the drain reads the launcher log, once, and waits for nothing
        asyncio.run(
            monitor_with(self.hook, self.job_name, namespace, options, drain_only=True, emit=self.log.info)
        )
