"""Kubernetes API errors: what a response's error says, and which failures are worth retrying."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import tenacity

log = logging.getLogger(__name__)

TRANSIENT_HTTP_STATUSES = frozenset({429, 500, 502, 503, 504})
#: seconds of API errors a wait rides out (an API server restart, a control-plane upgrade) before it fails;
#: the watch hub and every read of a wait share this budget, one call's own retries last about 15 s
API_OUTAGE_LIMIT = 300.0
OUTAGE_RETRY_DELAY = 1.0  # first delay, doubled up to MAX_OUTAGE_RETRY_DELAY
MAX_OUTAGE_RETRY_DELAY = 30.0

T = TypeVar("T")


# --------------------------------------------------------------------------------------- errors
def error_body(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, (bytes, bytearray)):
        return bytes(body).decode("utf-8", errors="replace")
    return body or ""


def error_message(exc: BaseException) -> str:
    """The ``message`` of the API server's Status in an ApiException, or its reason."""
    body = error_body(exc)
    try:
        status = json.loads(body)
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])
    except ValueError:
        pass
    return body.strip() or str(getattr(exc, "reason", "") or exc)


def is_missing_resource_type(exc: BaseException) -> bool:
    """A 404 whose body is not a Status object: the URL itself is unknown (CRD/version not served)."""
    if getattr(exc, "status", None) != 404:
        return False
    body = error_body(exc)
    try:
        status = json.loads(body)
    except ValueError:
        return True
    return not (isinstance(status, dict) and status.get("kind") == "Status" and status.get("details"))


def _connection_error_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [ConnectionError, TimeoutError, asyncio.TimeoutError]
    try:
        from urllib3.exceptions import HTTPError

        types.append(HTTPError)
    except ImportError:  # pragma: no cover
        pass
    try:
        from aiohttp import ClientConnectionError, ClientPayloadError

        types.extend([ClientConnectionError, ClientPayloadError])
    except ImportError:  # pragma: no cover
        pass
    return tuple(types)


CONNECTION_ERRORS = _connection_error_types()


def is_api_exception(exc: BaseException) -> bool:
    from kubernetes.client.exceptions import ApiException
    from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

    return isinstance(exc, (ApiException, AsyncApiException))


def is_connection_error(exc: BaseException) -> bool:
    return isinstance(exc, CONNECTION_ERRORS) and not is_api_exception(exc)


def is_transient(exc: BaseException) -> bool:
    """Worth retrying an idempotent request: 429, 5xx gateway/server errors, connection-level failures.

    409 is never transient here (unlike the stock hook): a conflict on create is a decision, not a blip.
    """
    if is_api_exception(exc):
        return getattr(exc, "status", None) in TRANSIENT_HTTP_STATUSES
    return isinstance(exc, CONNECTION_ERRORS)


def describe_error(exc: BaseException | None) -> str:
    """Short text of an API or connection error for log lines."""
    if exc is None:
        return "no error"
    status = getattr(exc, "status", None)
    if status is not None and is_api_exception(exc):
        return f"HTTP {status} {getattr(exc, 'reason', '') or ''}".strip()
    return f"{type(exc).__name__}: {exc}"


def log_before_retry(retry_state) -> None:
    """tenacity ``before_sleep``: one warning per retried call."""
    exc = retry_state.outcome.exception() if retry_state.outcome else None
    delay = retry_state.next_action.sleep if retry_state.next_action else 0.0
    log.warning(
        "Kubernetes API call failed (%s); attempt %d, retrying in %.1fs",
        describe_error(exc),
        retry_state.attempt_number,
        delay,
    )


def unsynced_after_outage(err: BaseException, *, in_outage: bool) -> bool:
    """401/403 while an API server comes back: it refuses non-admin identities until its authentication and
    RBAC caches have synced (seen with a least-privilege service account), so during an outage they are transient."""
    return in_outage and getattr(err, "status", None) in (401, 403)


def _worth_waiting_out(retry_state: tenacity.RetryCallState) -> bool:
    exc = retry_state.outcome.exception() if retry_state.outcome else None
    if exc is None:
        return False
    # 401/403 only once the API was seen failing (the watch hub's rule): a plain permission error is an answer
    return is_transient(exc) or unsynced_after_outage(exc, in_outage=retry_state.attempt_number > 1)


def _log_outage(retry_state: tenacity.RetryCallState) -> None:
    exc = retry_state.outcome.exception() if retry_state.outcome else None
    delay = retry_state.next_action.sleep if retry_state.next_action else 0.0
    log.warning(
        "Kubernetes API unavailable for %.0fs (%s): the wait goes on, next try in %.0fs (gives up after %.0fs)",
        retry_state.seconds_since_start or 0.0, describe_error(exc), delay, API_OUTAGE_LIMIT,
    )


def _outage_policy() -> dict[str, Any]:
    return {
        "stop": tenacity.stop_after_delay(API_OUTAGE_LIMIT),
        "wait": tenacity.wait_exponential(multiplier=OUTAGE_RETRY_DELAY, max=MAX_OUTAGE_RETRY_DELAY),
        "retry": _worth_waiting_out,
        "reraise": True,
        "before_sleep": _log_outage,
    }


async def through_outage(fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
    """Await ``fn(*args, **kwargs)``, riding out an API outage of up to ``API_OUTAGE_LIMIT`` seconds.

    For the reads of a wait only: the hub's watches already survive such an outage, and a task that waits on
    a training run of hours must not fail because one of its reads met the API server restarting (the
    call's own retries cover a blip, not a restart). Other errors are raised at once.
    """
    return await tenacity.AsyncRetrying(**_outage_policy())(fn, *args, **kwargs)


def through_outage_sync(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """:func:`through_outage` for a blocking read (a sensor's poke)."""
    return tenacity.Retrying(**_outage_policy())(fn, *args, **kwargs)
