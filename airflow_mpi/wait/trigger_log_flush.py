"""A trigger's last records reach its task log before its event leaves: awaited in its own trigger log file.

Airflow 3's triggerer runs the triggers in a subprocess that sends their log records to its supervisor over one
socket and, up to a second after a trigger yields, the trigger's end ("finished", with its event) over another. The
supervisor closes the trigger's log file when it handles "finished" (3.3.2: ``TriggerRunnerSupervisor.
_handle_request``), and records it reads from the log socket after that go to the triggerer's own output
(``fallback_log``), not to the task log. A supervisor behind on the log socket (it reads 4 KiB a turn of its select
loop, for all triggers at once: a loaded machine, a burst of launcher lines at a job's end) thus loses a job's last
lines from the task log: seen once on this project's loaded test machine.

So before yielding its event a trigger logs one record carrying a random token and waits until that record is in
one of its try's trigger log files. The records before it travel the same socket, in order, and the supervisor
writes each one with a flush: they are in the file too. The wait is bounded (``FLUSH_TIMEOUT``): a supervisor that
never writes the record (no log file on this machine) delays the event by that much, then the event goes.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import Callable
from typing import Any

from airflow_mpi.wait.log_ledger import marked_emitter, trigger_log_files

#: the structured field of the record that closes a trigger's log
FLUSH_FIELD = "trigger_log_end"
#: how long a trigger waits for that record in its log file before it yields its event anyway
FLUSH_TIMEOUT = 30.0
_TAIL_BYTES = 64 * 1024  # the record is the trigger's last: it is in the files' tails
_POLLS = (0.02, 0.05, 0.1, 0.2, 0.5)  # seconds between looks, then every 0.5 s


def logged(ti: Any, token: str) -> bool:
    """Whether a trigger log file of ``ti``'s try on this machine holds ``token`` (in its last 64 KiB)."""
    needle = token.encode()
    for path in trigger_log_files(ti):
        with path.open("rb") as file:
            size = file.seek(0, 2)
            file.seek(max(size - _TAIL_BYTES, 0))
            if needle in file.read():
                return True
    return False


def closing_emitter() -> Callable[[str, str], None]:
    """Log a message with its token as a structured field, as the trigger's launcher lines carry their marks."""
    return marked_emitter(FLUSH_FIELD, "airflow_mpi.trigger")


async def close_trigger_log(
    ti: Any, message: str, emit: Callable[[str, str], None] | None = None, timeout: float = FLUSH_TIMEOUT
) -> bool:
    """Log ``message`` as the trigger's closing record and wait (bounded) until it is in the try's trigger log
    file. True when it is; False when ``timeout`` passed first or the files cannot be read here. The files are read
    in a thread: the triggerer's other triggers share its event loop."""
    token = secrets.token_hex(16)
    (emit or closing_emitter())(message, token)
    deadline = time.monotonic() + timeout
    delays = itertools.chain(_POLLS, itertools.repeat(_POLLS[-1]))
    while True:
        try:
            if await asyncio.to_thread(logged, ti, token):
                return True
        except Exception:  # the log folder is elsewhere or unreadable: nothing to wait for, the event goes
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        await asyncio.sleep(min(next(delays), left))
