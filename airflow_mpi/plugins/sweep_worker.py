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

A process that ends (``airflow dags test`` when its run is over: the run's end is a request) waits for the
requests it submitted, up to ``exit_wait`` seconds: a daemon thread still inside one when the interpreter finalises
is ended in the middle of its calls, and one ended inside a native library's frames aborted the whole process after
a green run ("FATAL: exception not rethrown", exit -6: `airflow dags test` on Airflow 2.11, 2026-12-07).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

QUEUE_SIZE = 1000


class SweepWorker:
    """Runs ``handle(request)`` for each submitted request, in one daemon thread started on first use."""

    def __init__(
        self,
        handle: Callable[[Any], Any],
        size: int = QUEUE_SIZE,
        name: str = "airflow-mpi-sweeper",
        exit_wait: float = 0.0,
    ):
        self._handle, self._size, self._name, self.exit_wait = handle, size, name, exit_wait
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
        """Wait until every request submitted so far is handled; False on timeout (no thread of its own: it also
        runs at the interpreter's exit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._queue.all_tasks_done.wait(left)
        return True

    def _finish_at_exit(self) -> None:
        thread = self._thread
        if self.exit_wait > 0 and thread is not None and thread.is_alive() and not self.drain(self.exit_wait):
            log.warning(
                "airflow-mpi: the orphan sweeper had not finished after %.0f s at exit", self.exit_wait
            )

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


@atexit.register
def _finish_at_exit() -> None:
    """Atexit handlers run before the interpreter ends daemon threads: the requests in hand finish first."""
    for worker in list(_WORKERS):
        worker._finish_at_exit()


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
)
