"""One background worker for the orphan listener: a daemon thread fed by a bounded queue.

Airflow calls listeners in its own threads: the scheduler's loop (inside its locked transaction, holding the
thread's scoped session) and the API server's request handlers. A listener that reads the database or calls
Kubernetes there commits the scheduler's session ("UNEXPECTED COMMIT - THIS WILL BREAK HA LOCKS!"), holds up
scheduling, or keeps a UI request waiting on an unreachable API server. So the listener only hands ids over:
``submit`` never blocks, and the work runs here, one request at a time, in sessions of its own, within a budget.

The processes it runs in fork (the scheduler its LocalExecutor workers): a fork while this thread is inside a
request would hand the child locks no thread of the child will ever release (a module being imported: the child
then hangs at its first import of that module, as a triggerer's trigger runner once did). So a fork waits until
the request at hand is done, and the child starts with an idle worker, no thread.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

QUEUE_SIZE = 1000


class SweepWorker:
    """Runs ``handle(request)`` for each submitted request, in one daemon thread started on first use."""

    def __init__(
        self, handle: Callable[[Any], Any], size: int = QUEUE_SIZE, name: str = "airflow-mpi-sweeper"
    ):
        self._handle, self._size, self._name = handle, size, name
        self._reset()
        _WORKERS.add(self)

    def _reset(self) -> None:
        """Idle, no thread (a new worker, or a forked child's copy)."""
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=self._size)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._busy = threading.RLock()  # held while a request is handled, and by a fork in progress

    def submit(self, request: Any) -> bool:
        """Queue ``request`` without waiting; False (and a warning) when the queue is full."""
        self._start()
        try:
            self._queue.put_nowait(request)
        except queue.Full:
            log.warning(
                "airflow-mpi: the orphan sweeper is %d requests behind: dropped %s (a later sweep of its "
                "namespace still finds its job)",
                self._queue.maxsize,
                request,
            )
            return False
        return True

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every request submitted so far is handled; False on timeout."""
        done = threading.Event()

        def join_then_set() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=join_then_set, daemon=True).start()
        return done.wait(timeout)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            request = self._queue.get()
            try:
                with self._busy:
                    self._handle(request)
            except Exception:
                log.exception("airflow-mpi: the orphan sweep for %s failed", request)
            finally:
                self._queue.task_done()


_WORKERS: weakref.WeakSet[SweepWorker] = weakref.WeakSet()


def _before_fork() -> None:
    for worker in list(_WORKERS):
        worker._busy.acquire()


def _after_fork_in_parent() -> None:
    for worker in list(_WORKERS):
        worker._busy.release()


def _after_fork_in_child() -> None:
    for worker in list(_WORKERS):
        worker._reset()


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
)
