"""The exceptions a task raises when its MPIJob did not succeed: one class per kind of failure, the job and the
cause as attributes, so that a ``retry_policy`` (Airflow 3.3+) or an ``on_failure_callback`` can tell a program's
failure from an out-of-memory kill, an invalid spec, a timeout or an outage without parsing the message
(docs/exceptions.md).

Every class is an ``AirflowException``. Where the task must not be retried (an invalid spec; a failed job whose
retries were the MPIJob's own ``runPolicy.backoffLimit``) the exception is an ``AirflowFailException`` too, which
Airflow never retries: ``retryable`` says which. Import-light: DAG files import it at parse time (a callback's
``isinstance``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow_mpi.version_compat import AirflowException, AirflowFailException
from airflow_mpi.wait.contract import Cause, WaitResult


class MPIJobError(AirflowException):
    """A task's MPIJob did not succeed.

    :ivar namespace: / :ivar name: / :ivar uid: the MPIJob (``uid``: the incarnation the task followed).
    :ivar outcome: how the wait ended (``airflow_mpi.wait.contract.Outcome``'s value: ``failed``, ``invalid``...).
    :ivar cause: the failure's kind in one word (``Cause``'s value: ``program``, ``oom``, ``disrupted``...), the
        metrics' ``cause`` tag.
    :ivar reason: / :ivar job_message: the job's last condition's reason and message.
    :ivar launcher_attempts: the launcher attempts the job made; :ivar exit_codes: the ended launchers' exit codes,
        oldest first; :ivar causes: the lines naming the failed pods' causes (the ``cause:`` lines of the message).
    """

    def __init__(
        self,
        message: str,
        *,
        namespace: str | None = None,
        name: str | None = None,
        uid: str | None = None,
        outcome: str | None = None,
        cause: str | None = None,
        reason: str | None = None,
        job_message: str | None = None,
        launcher_attempts: int = 0,
        exit_codes: Iterable[int] = (),
        causes: Iterable[str] = (),
    ) -> None:
        super().__init__(message)
        self.namespace, self.name, self.uid = namespace, name, uid
        self.outcome, self.cause, self.reason, self.job_message = outcome, cause, reason, job_message
        self.launcher_attempts = launcher_attempts
        self.exit_codes, self.causes = list(exit_codes), list(causes)

    @property
    def retryable(self) -> bool:
        """False where Airflow never retries the task (an ``AirflowFailException``); a ``retry_policy`` decides the
        others."""
        return not isinstance(self, AirflowFailException)

    def reworded(self, message: str) -> MPIJobError:
        """The same failure, another message (the decorators add what rank 0 said)."""
        twin = type(self)(message)
        twin.__dict__.update(self.__dict__)
        return twin

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self),), dict(self.__dict__)


class MPIJobFailedError(MPIJobError):
    """The job failed (or a worker failed before its launcher started): one of the three subclasses says why."""


class MPIJobProgramError(MPIJobFailedError):
    """The MPI program failed by itself (a non-zero exit, a rank mpirun reports dead); no pod was killed from
    outside: running it again usually fails again."""


class MPIJobOutOfMemoryError(MPIJobFailedError):
    """A pod of the job was OOMKilled (its memory limit, or the node's memory): more memory, or fewer ranks per
    worker, may help."""


class MPIJobInfrastructureError(MPIJobError):
    """The cluster failed the task, not the program: the wait could not follow the job (the API server unreachable
    past the retries; outcome ``error``), or, as :class:`MPIJobDisruptedError`, a pod was evicted or disrupted.
    Worth a retry."""


class MPIJobTaskPodDeletedError(MPIJobInfrastructureError):
    """The task's own pod (KubernetesExecutor) was deleted by the cluster while it waited (a drain, an eviction,
    ``kubectl delete pod``): the job was kept, and the retry reattaches to it (raised only when a retry follows)."""


class MPIJobDisruptedError(MPIJobFailedError, MPIJobInfrastructureError):
    """A pod of the failed job was evicted or disrupted (a node drained or under pressure, a preemption)."""


class MPIJobInvalidSpecError(MPIJobError, AirflowFailException):
    """The spec was refused (the mpi-operator's ValidationError, the API server's 400/422): never retried."""


class MPIJobUnschedulableError(MPIJobError):
    """A pod could not be scheduled or started within ``schedule_timeout`` (no capacity, an image that cannot be
    pulled, a missing volume): the job was deleted."""


class MPIJobStartupTimeoutError(MPIJobError):
    """The job was not ``Created`` within ``startup_timeout`` (the mpi-operator down or overloaded)."""


class MPIJobQueueTimeoutError(MPIJobError):
    """Kueue did not admit the job within ``queue_timeout``: the job was deleted."""


class MPIJobTimeoutError(MPIJobError):
    """The task's ``execution_timeout`` passed while it waited (also while deferred): the job was deleted."""


class MPIJobDeletedError(MPIJobError):
    """The job was deleted, or replaced by another of its name, while the task waited."""


# A failed job whose retries were its own (runPolicy.backoffLimit) fails the task for good: these are raised then.
# Public names: the task log shows the class ("MPIJobProgramErrorNoRetry: MPIJob ns/name failed: ...").
class MPIJobProgramErrorNoRetry(MPIJobProgramError, AirflowFailException):
    """An MPIJobProgramError Airflow does not retry (the job already made its attempts)."""


class MPIJobOutOfMemoryErrorNoRetry(MPIJobOutOfMemoryError, AirflowFailException):
    """An MPIJobOutOfMemoryError Airflow does not retry (the job already made its attempts)."""


class MPIJobDisruptedErrorNoRetry(MPIJobDisruptedError, AirflowFailException):
    """An MPIJobDisruptedError Airflow does not retry (the job already made its attempts)."""


#: the class of each cause (WaitResult.cause), and of a failed job's cause when Airflow must not retry it
CLASSES: dict[Cause, type[MPIJobError]] = {
    Cause.PROGRAM: MPIJobProgramError,
    Cause.OOM: MPIJobOutOfMemoryError,
    Cause.DISRUPTED: MPIJobDisruptedError,
    Cause.INVALID: MPIJobInvalidSpecError,
    Cause.UNSCHEDULABLE: MPIJobUnschedulableError,
    Cause.STARTUP_TIMEOUT: MPIJobStartupTimeoutError,
    Cause.QUEUE_TIMEOUT: MPIJobQueueTimeoutError,
    Cause.TIMEOUT: MPIJobTimeoutError,
    Cause.DELETED: MPIJobDeletedError,
    Cause.ERROR: MPIJobInfrastructureError,
}
FINAL: dict[Cause, type[MPIJobError]] = {
    Cause.PROGRAM: MPIJobProgramErrorNoRetry,
    Cause.OOM: MPIJobOutOfMemoryErrorNoRetry,
    Cause.DISRUPTED: MPIJobDisruptedErrorNoRetry,
}


def error_of(result: WaitResult, message: str, *, final: bool) -> MPIJobError:
    """The exception for a wait that did not succeed (``final``: Airflow must not retry it), ``message`` its text."""
    cause = result.cause or Cause.ERROR
    cls = FINAL.get(cause, CLASSES[cause]) if final else CLASSES[cause]
    assert not final or issubclass(cls, AirflowFailException), f"a {cause} is never final"
    return cls(
        message,
        namespace=result.namespace,
        name=result.name,
        uid=result.uid,
        outcome=result.outcome.value,
        cause=cause.value,
        reason=result.reason,
        job_message=result.job_message,
        launcher_attempts=result.launcher_attempts,
        exit_codes=result.launcher_exit_codes,
        causes=(result.failure or {}).get("causes") or (),
    )


__all__ = [
    "MPIJobDeletedError",
    "MPIJobDisruptedError",
    "MPIJobDisruptedErrorNoRetry",
    "MPIJobError",
    "MPIJobFailedError",
    "MPIJobInfrastructureError",
    "MPIJobInvalidSpecError",
    "MPIJobOutOfMemoryError",
    "MPIJobOutOfMemoryErrorNoRetry",
    "MPIJobProgramError",
    "MPIJobProgramErrorNoRetry",
    "MPIJobQueueTimeoutError",
    "MPIJobStartupTimeoutError",
    "MPIJobTaskPodDeletedError",
    "MPIJobTimeoutError",
    "MPIJobUnschedulableError",
]
