"""A task process that outlived its Airflow supervisor decides nothing about its MPIJob (Airflow 3).

Airflow 3 runs a try in a process its supervisor forks (a LocalExecutor worker of the scheduler, a Celery worker's
child, ``airflow tasks run`` in a Kubernetes pod), in a process group of its own
(``airflow/sdk/execution_time/supervisor.py``, ``WatchedSubprocess.start``: ``new_process_group``). The task process
talks to nothing but its supervisor, which alone writes the try's log, heartbeats for it and reports its end. When the
supervisor dies and its task does not (the scheduler SIGKILLed with its process group: the LocalExecutor's workers
die, their tasks' groups are not signalled), the task process lives on, re-parented to init: its log lines go
nowhere, its end cannot be reported, and Airflow, once it deems the dead scheduler gone, resets the try and a new try
reattaches to the same MPIJob (tests/faults/test_airflow_faults.py; before this module the orphan followed its job
until the job ended, minutes after the new try had taken over).

Such an orphan must not delete the job the next try follows:

* its ``on_kill`` keeps the job. A signal reaching an orphan comes from whoever cleans up after the dead supervisor
  (systemd sends SIGTERM to what is left of a service's control group once its main process died, and Airflow's task
  runner turns SIGTERM into ``on_kill``: ``sdk/execution_time/task_runner.py``, ``_on_term``), not from Airflow. An
  ``execution_timeout`` firing there times a try Airflow has given up; the task runner calls ``on_kill`` for it too
  (``_run_execute_callable``); on 3.3.2 it does not get there, but only by accident: the timeout handler's own log
  line fails first, on the dead log socket (BrokenPipeError);
* its synchronous wait ends at once: the process exits (``os._exit``: no clean-up, nothing reported, as nobody is
  left to read it), instead of following the job to its end with a watch, a log stream and a process of its own.

Airflow 2 (the raw task records its own state) and in-process runs (``dag.test()``, unit tests) have no such
supervisor: nothing changes there.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NoReturn, TypeVar

from airflow_mpi.exceptions import MPIJobTaskPodDeletedError
from airflow_mpi.hooks.task_pod import own_pod
from airflow_mpi.wait.contract import Cause

if TYPE_CHECKING:
    from airflow_mpi.hooks import MPIJobHook

T = TypeVar("T")

CHECK_INTERVAL = 1.0  # seconds between looks at the parent process while a synchronous wait runs
ORPHANED_EXIT_CODE = 1  # nobody reads it: the parent that would have is gone


def supervisor_pid() -> int | None:
    """The pid of the Airflow 3 supervisor this task process was forked by (its parent now), or None when this is no
    supervised task process: Airflow 2, an in-process run, a test. Call it while the try starts."""
    try:
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.comms import CommsDecoder
    except ImportError:  # Airflow 2
        return None
    if not isinstance(
        getattr(task_runner, "SUPERVISOR_COMMS", None), CommsDecoder
    ):  # not a forked task runner
        return None
    return os.getppid()


def orphaned(supervisor: int | None) -> bool:
    """True when the supervisor this process started under (``supervisor_pid()``) is no longer its parent: it died
    (the parent of a process only changes when its parent dies)."""
    return supervisor is not None and os.getppid() != supervisor


def retry_follows(ti: object | None, retries: int | None) -> bool:
    """Whether Airflow retries this try when it fails (try numbers start at 1: ``retries`` retries follow try 1)."""
    return ti is not None and getattr(ti, "try_number", 0) <= (retries or 0)


def pod_taken_away(
    hook: MPIJobHook, retry_follows: bool, namespace: str, name: str, uid: str | None
) -> MPIJobTaskPodDeletedError | None:
    """What ends the try when the cluster is deleting its KubernetesExecutor pod (a drain, an eviction,
    ``kubectl delete pod``: hooks/task_pod.py) and a retry follows, which reattaches to the job ``namespace/name``
    (kept); None when the kill is Airflow's, when no retry follows (the job would be left to the sweep at the run's
    end) or outside such a pod."""
    if not retry_follows or (pod := own_pod()) is None or not hook.task_pod_deleting(*pod):
        return None
    return MPIJobTaskPodDeletedError(
        f"Task pod {pod[0]}/{pod[1]} is being deleted by the cluster (a drain, an eviction, kubectl delete): "
        f"MPIJob {namespace}/{name} kept for the retry, which reattaches to it",
        namespace=namespace,
        name=name,
        uid=uid,
        cause=Cause.DISRUPTED.value,
    )


async def until_orphaned(
    wait: Awaitable[T],
    supervisor: int | None,
    *,
    interval: float = CHECK_INTERVAL,
    exit: Callable[[int], NoReturn] = os._exit,
    cut_short: Callable[[], BaseException | None] = lambda: None,
) -> T:
    """``await wait``, but end the process (``exit``) as soon as it is orphaned, and raise what ``cut_short``
    returns as soon as it returns one (the try's pod deleted, ``pod_taken_away``: Airflow 3's task runner turns the
    pod's SIGTERM into ``on_kill`` and nothing else, so the wait would go on until the kubelet's SIGKILL)."""
    if supervisor is None:
        return await wait
    task = asyncio.ensure_future(wait)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval)
            if done:
                return task.result()
            if orphaned(supervisor):
                exit(ORPHANED_EXIT_CODE)
            if (error := cut_short()) is not None:
                raise error
    finally:
        if not task.done():
            task.cancel()
