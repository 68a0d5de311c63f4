"""The request layer's one retry policy: what is tried again, after how long, for how long, and what is logged.

Only a failure that says nothing about the request is tried again (errors.is_transient), after a delay that doubles
from a first one up to a cap (:func:`backoff`). Two budgets, and they nest (an outage logs both warnings):

* a request: an idempotent call of a hook is sent ``api_retries`` times at most (5, 1 s doubling to 15 s), enough
  for a blip; a create is looked up before it is sent again (hooks/mpijob.py);
* an outage: a wait's reads (:func:`through_outage`) and the watch hub's watches (:class:`Outage`) go on through
  ``API_OUTAGE_LIMIT`` seconds of failures (1 s doubling to 30 s): a task waiting on a training run of hours must not
  fail because one read met an API server restart or a control-plane upgrade.

A 401/403 is an answer, except from an API server just back (:func:`worth_retrying`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import tenacity

from airflow_mpi.hooks.errors import describe_error, is_transient

log = logging.getLogger(__name__)

API_OUTAGE_LIMIT = 300.0  # seconds of failures in a row a wait rides out before it fails
OUTAGE_RETRY_DELAY = 1.0  # first delay, doubled up to MAX_OUTAGE_RETRY_DELAY
MAX_OUTAGE_RETRY_DELAY = 30.0

T = TypeVar("T")


def backoff(failures: int, first: float, most: float) -> float:
    return min(most, first * 2 ** min(failures - 1, 32))  # the exponent's cap: no overflow whatever the count


RECENT_FAILURE_WINDOW = 60.0  # seconds after a transient failure in which a 401/403 is still the outage's


class _Recent:
    """When this process last saw the API fail transiently (any call, any watch): a call whose first answer is a
    401/403 just after a restart is the new API server refusing until its caches synced, not the answer."""

    last: float | None = None

    @classmethod
    def note(cls, err: BaseException) -> None:
        if is_transient(err):
            cls.last = time.monotonic()

    @classmethod
    def failing(cls) -> bool:
        return cls.last is not None and time.monotonic() - cls.last < RECENT_FAILURE_WINDOW


def refused_in_an_outage(err: BaseException) -> bool:
    """A 401/403 within RECENT_FAILURE_WINDOW of a transient failure: a restarted API server refusing until its caches
    synced, not a verdict on the grants (a caller that turns 403 into an answer re-raises it then)."""
    return getattr(err, "status", None) in (401, 403) and _Recent.failing()


def worth_retrying(err: BaseException, *, in_outage: bool) -> bool:
    """Transient, and 401/403 once the API was seen failing, by this call or, within RECENT_FAILURE_WINDOW, by any
    (else an answer): an API server coming back refuses non-admin identities until its authentication and RBAC
    caches synced (seen with a least-privilege account), also to a call that was not sent during the outage."""
    _Recent.note(err)
    refused = getattr(err, "status", None) in (401, 403)
    return is_transient(err) or (refused and (in_outage or _Recent.failing()))


def outage_delay(err: BaseException, failures: int, seconds: float) -> float | None:
    """The delay before trying again after ``err``, the ``failures``-th failure in a row ``seconds`` into an outage;
    None: give up (an answer, not an outage, or the outage lasts too long)."""
    if not worth_retrying(err, in_outage=failures > 1) or seconds >= API_OUTAGE_LIMIT:
        return None
    return backoff(failures, OUTAGE_RETRY_DELAY, MAX_OUTAGE_RETRY_DELAY)


class Outage:
    """The failures in a row of a loop that resumes by itself (the watch hub's), from the first one on."""

    def __init__(self) -> None:
        self.failures = 0
        self._since = time.monotonic()

    def next_delay(self, err: BaseException) -> float | None:
        """Seconds to wait before resuming after ``err``; None: give up (see :func:`outage_delay`)."""
        self.failures += 1
        return outage_delay(err, self.failures, time.monotonic() - self._since)


def _failure(state: tenacity.RetryCallState) -> tuple[BaseException | None, float]:
    exc = state.outcome.exception() if state.outcome else None
    return exc, state.next_action.sleep if state.next_action else 0.0


def _log_request_retry(state: tenacity.RetryCallState) -> None:
    exc, delay = _failure(state)
    log.warning(
        "Kubernetes API call failed (%s); attempt %d, retrying in %.1fs",
        describe_error(exc),
        state.attempt_number,
        delay,
    )


def _log_outage(state: tenacity.RetryCallState) -> None:
    exc, delay = _failure(state)
    log.warning(
        "Kubernetes API unavailable for %.0fs (%s): the wait goes on, next try in %.0fs (gives up after %.0fs)",
        state.seconds_since_start or 0.0,
        describe_error(exc),
        delay,
        API_OUTAGE_LIMIT,
    )


def request_retrying(attempts: int, first: float, most: float) -> dict[str, Any]:
    """tenacity arguments of an idempotent request: ``attempts`` sends at most, ``first`` doubling to ``most``."""
    return {
        "stop": tenacity.stop_after_attempt(max(1, attempts)),
        "retry": tenacity.retry_if_exception(lambda err: worth_retrying(err, in_outage=False)),
        "wait": lambda state: backoff(state.attempt_number, first, most),
        "reraise": True,
        "before_sleep": _log_request_retry,
    }


def _outage_retrying() -> dict[str, Any]:
    """tenacity arguments of :func:`through_outage`: :func:`outage_delay` from the first send on."""

    def delay(state: tenacity.RetryCallState) -> float | None:
        exc = state.outcome.exception() if state.outcome else None
        return (
            None if exc is None else outage_delay(exc, state.attempt_number, state.seconds_since_start or 0.0)
        )

    # a failure not retried is raised as it is (tenacity returns the outcome's result)
    return {"retry": lambda state: delay(state) is not None, "wait": delay, "before_sleep": _log_outage}


async def through_outage(fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
    """Await ``fn(*args, **kwargs)``, riding out an API outage of up to ``API_OUTAGE_LIMIT`` seconds."""

    async def call() -> (
        T
    ):  # the hooks' shared reads are plain methods returning an awaitable: tenacity would not await
        return await fn(*args, **kwargs)

    return await tenacity.AsyncRetrying(**_outage_retrying())(call)


def through_outage_sync(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """:func:`through_outage` for a blocking read (a sensor's poke)."""
    return tenacity.Retrying(**_outage_retrying())(fn, *args, **kwargs)
