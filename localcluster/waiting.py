"""How the harness waits: poll a readiness check to a deadline (never a fixed sleep); the error it raises."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class ClusterError(RuntimeError):
    """A local cluster (or one of its processes) did not do what was asked in time."""


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll ``predicate`` every ``interval`` s until it returns a truthy value (returned) or ``timeout`` ends.

    Exceptions of the predicate count as "not yet" (readiness probes fail in many ways while a process
    starts); the last one is named in the ``ClusterError`` raised at the deadline.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - readiness probes fail in many ways while starting
            last_exc = exc
        if time.monotonic() > deadline:
            detail = f": {last_exc}" if last_exc else ""
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)
