"""A trigger's kill that outlives the triggerer's repeated cancellations.

When a user clears or marks a deferred task, Airflow 3.3+'s triggerer cancels the trigger's task with its "user
action" message and awaits ``on_kill`` (up to ``[triggerer] on_kill_timeout``, 30 s by default). But the trigger's
id stays among those to cancel until its task has ended, and each sync of the triggerer's loop (about one a second)
sends it again: each cancels the task again, and an ``on_kill`` still waiting for the API server is interrupted,
which the triggerer swallows (Airflow 3.3.2 and 3.4.0b2, ``TriggerRunnerSupervisor.cancelling_triggers``). On a
loaded machine the delete of a cleared task's MPIJob took more than that second: the job lived on, and the next try
took it for a lost worker's and followed it. Before 3.3 ``cleanup`` runs in the same task after the cancellation and
meets the same interruptions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

# seconds a kill may spend on the API server: below the triggerer's default on_kill_timeout (30 s)
KILL_BUDGET = 20.0


def kill_budget() -> float:
    """``KILL_BUDGET``, or the triggerer's ``[triggerer] on_kill_timeout`` where it is shorter: a platform that gives
    kills less time gets its bound kept (the triggerer's own timeout is a cancellation too, which the kill outlives)."""
    from airflow.configuration import conf

    return min(KILL_BUDGET, conf.getfloat("triggerer", "on_kill_timeout", fallback=30.0))


async def outlive_cancellation(work: Awaitable[T], budget: float | None = None) -> T | None:
    """Await ``work`` until it ends or ``budget`` seconds pass (default ``kill_budget()``), whatever cancellations of
    the caller arrive meanwhile; then re-raise the first of those, if any (the caller's cancellation is deferred, never
    lost). ``work`` runs in a task of its own, which those cancellations do not reach; past the budget it is cancelled
    and None returned."""
    budget = kill_budget() if budget is None else budget
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget
    interrupted: asyncio.CancelledError | None = None
    while not task.done():
        remaining = deadline - loop.time()
        if remaining <= 0:
            task.cancel()
            break
        try:
            await asyncio.wait({task}, timeout=remaining)
        except asyncio.CancelledError as err:
            interrupted = interrupted or err
    if interrupted is not None:
        raise interrupted
    if not task.done() or task.cancelled():
        return None
    return task.result()
