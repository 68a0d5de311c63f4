"""What a deferrable MPI task hands the triggerer: the trigger that follows its job, and the deferral's timeout.

The triggerer has no task object, so the trigger carries all the wait needs: the connection, how the task waits
with its deadline (``execution_timeout``, which the trigger enforces itself, deleting the job), the key of rank 0's
signed result lines, this installation for the identity checks. On the Airflow versions with the deferral race
(wait/deferral.py) it holds its event until a time it carries, and the task log says until when.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from airflow_mpi.version_compat import AIRFLOW_VERSION
from airflow_mpi.wait.contract import WaitOptions
from airflow_mpi.wait.deferral import RESUME_RACE_WINDOW, not_before_text

if TYPE_CHECKING:
    from airflow_mpi.operators.mpijob import MPIJobOperator
    from airflow_mpi.triggers import MPIJobTrigger

# The deferral's own timeout after execution_timeout (which the trigger enforces itself), in case no triggerer runs
BACKSTOP = timedelta(minutes=5)


def deferral_of(
    task: MPIJobOperator,
    name: str,
    namespace: str,
    submitted_at: datetime,
    uid: str | None,
    *,
    options: Callable[[datetime | None], WaitOptions],
    result_key: str | None,
    installation: str,
) -> tuple[MPIJobTrigger, timedelta | None]:
    """The trigger that waits for ``task``'s job ``namespace/name`` (``options``: how, given the deadline), and the
    deferral's timeout: a backstop past ``execution_timeout``, None without one."""
    from airflow_mpi.triggers import MPIJobTrigger

    deferred_at = datetime.now(UTC)
    timeout = task.execution_timeout
    if not_before := not_before_text(deferred_at, AIRFLOW_VERSION):
        task.log.info(
            "The trigger holds its event until %s, %s after this deferral: Airflow's deferral race "
            "(apache/airflow#71580 / #72716)",
            not_before,
            RESUME_RACE_WINDOW,
        )
    trigger = MPIJobTrigger(
        name=name,
        namespace=namespace,
        api_version=task.api_version,
        kubernetes_conn_id=task.kubernetes_conn_id,
        connection=task.hook.connection_settings(),
        submitted_at=submitted_at.isoformat(),
        options=options(deferred_at + timeout if timeout else None),
        not_before=not_before,
        capture_result=task.captures_result,
        uid=uid,
        result_key=result_key,
        installation=installation,
    )
    return trigger, timeout + BACKSTOP if timeout else None
