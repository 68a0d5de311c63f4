"""The harness's own processes: liveness, stopping, and the restart loop every controller runs under.

A Deployment restarts a controller that exits (the mpi-operator exits when it loses its leader lease, e.g.
while the API server restarts); here a small shell loop does: ``RESTART_LOOP`` runs the command, waits, says
so in the log and starts it again after 1 s (a crash-loop backoff), until SIGTERM, which it passes on before
it exits. The loop leads its own process group (``start_new_session``): stopping it stops all it started.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import atomic_file

# $0: the name in messages; "$@": the command. A prelude (see Launch) runs before it, once, under `set -e`.
RESTART_LOOP = r"""set +e
trap 'kill -TERM "$pid" 2>/dev/null; wait "$pid"; exit 0' TERM INT
while :; do "$@" & pid=$!; wait "$pid"; echo "[localcluster] $0 exited with $?, restarting" >&2; sleep 1; done
"""
STOP_GRACE = 15.0  # seconds between SIGTERM and SIGKILL of a supervised process group


def child_env(**extra: str) -> dict[str, str]:
    """A copy of this process's environment, plus ``extra``, for a child process: every process the harness and
    the tests start is given one (tests/harness/test_child_env.py checks). With an explicit environment the child
    execs an array Python built; without one it reads the C library's ``environ``, and CPython's vfork child reads
    it while the parent's other threads run: a thread starting ``docker`` while the main thread changes the
    environment (pytest sets PYTEST_CURRENT_TEST at every phase of every test; fixtures set connections) made the
    exec fail with EFAULT, "Bad address" (in about 1 of 4 starts under such churn).

    The copy is taken in one step: ``os.environ``'s own copy lists the keys, then reads them one by one, and a
    key another thread removes in between raised KeyError (seen once in about 3,000 copies under the same churn).
    Its underlying dict of encoded names and values copies atomically under the GIL; it is decoded as
    ``os.environ`` decodes it (the file system encoding, surrogateescape)."""
    raw = dict(os.environ._data)  # type: ignore[attr-defined]  # CPython's os._Environ keeps it there
    return {**{os.fsdecode(k): os.fsdecode(v) for k, v in raw.items()}, **extra}


@dataclass(frozen=True)
class Launch:
    """What to run under the restart loop.

    ``prelude``: shell run once before the loop (``set -e``), consuming its own ``prelude_args`` with
    ``shift`` (Kueue mounts an overlay on /etc there). ``wrapper``: an argv the whole loop runs under (e.g.
    ``unshare``).
    """

    argv: Sequence[str]
    env: Mapping[str, str]
    prelude: str = ""
    prelude_args: Sequence[str] = ()
    wrapper: Sequence[str] = ()

    def command(self, name: str) -> list[str]:
        script = f"set -e\n{self.prelude}\n{RESTART_LOOP}" if self.prelude else RESTART_LOOP
        return [*self.wrapper, "/bin/sh", "-c", script, name, *self.prelude_args, *self.argv]


def pid_alive(pid: int) -> bool:
    """``pid`` runs (a zombie does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def kill_pid(pid: int, timeout: float = 20) -> None:
    """SIGTERM ``pid``, SIGKILL after ``timeout`` s; returns once it is gone."""
    if not pid_alive(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while pid_alive(pid):
            time.sleep(0.05)


def start_supervised(name: str, launch: Launch, log_path: Path, pid_file: Path) -> int:
    """Start ``launch`` under the restart loop, detached (it outlives this process), output appended to
    ``log_path``; the loop's pid (= its process group) goes to ``pid_file`` and is returned."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            launch.command(name),
            env=dict(launch.env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    # atomically: ``switch-api`` beside ``serve`` never reads it empty or half-written
    atomic_file.write_text(pid_file, str(proc.pid))
    return proc.pid


def supervisor_pid(pid_file: Path) -> int | None:
    """The pid of a running restart loop recorded in ``pid_file`` (None: none runs)."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def _pgroup_alive(pgid: int) -> bool:
    """A process of the group still runs. Zombies do not count: a restart loop started by another process (``serve``
    in a node container, stopped by ``switch-api`` run beside it) stays a zombie until that process reaps it, and
    ``killpg(pgid, 0)`` still finds it (each stop then waited out its whole grace)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pgid, os.WNOHANG)  # reap the leader if it is our child
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return any(_running_in_group(entry.name, pgid) for entry in os.scandir("/proc") if entry.name.isdigit())


def _running_in_group(pid: str, pgid: int) -> bool:
    """Process ``pid`` is in process group ``pgid`` and not a zombie (``/proc/<pid>/stat``: state, ppid, pgrp)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state, _ppid, pgrp = f.read().rsplit(")", 1)[-1].split()[:3]
    except (OSError, ValueError):
        return False
    return int(pgrp) == pgid and state != "Z"


def stop_supervised(pid_file: Path, grace: float = STOP_GRACE) -> None:
    """SIGTERM the process group of a restart loop (SIGKILL after ``grace`` s) and forget its pid file."""
    pid = supervisor_pid(pid_file)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _pgroup_alive(pid):
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        while pid_alive(pid):
            time.sleep(0.05)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)  # our child: reaped (it has ended: this returns at once)
    with contextlib.suppress(FileNotFoundError):
        pid_file.unlink()


def child_started(pid_file: Path, executable: str) -> float | None:
    """Start time (epoch) of the process named ``executable`` the restart loop of ``pid_file`` runs now."""
    sup = supervisor_pid(pid_file)
    if sup is None:
        return None
    try:
        children = Path(f"/proc/{sup}/task/{sup}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{child}/exe").resolve().name == executable:
                return os.stat(f"/proc/{child}").st_ctime
    return None


class StopSignal:
    """True once one of ``signals`` came (SIGTERM by default); ``wait`` returns at once when it does.

    The handler only appends to a list and the interpreter writes its wakeup byte: no lock. A handler may run inside
    another (a process group's SIGTERM, then its restart loop's trap sending one more): ``threading.Event.set`` there
    waited on the lock its interrupted self held, for good (a component keeper of run R4, seen with py-spy). Install
    it in the main thread, once per process.
    """

    def __init__(self, signals: Sequence[int] = (signal.SIGTERM,)) -> None:
        self._came: list[int] = []
        self._wakeup, write = os.pipe()
        os.set_blocking(self._wakeup, False)
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write)
        for signum in signals:
            signal.signal(signum, lambda signum, _frame: self._came.append(signum))

    def __bool__(self) -> bool:
        return bool(self._came)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the signal; True once it came."""
        if not self._came:
            select.select([self._wakeup], [], [], timeout)
            with contextlib.suppress(BlockingIOError):
                os.read(self._wakeup, 4096)
        return bool(self._came)
