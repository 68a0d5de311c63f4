"""Process plumbing shared by the PostgreSQL and Airflow services: process groups, ports, deadlines."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class StackError(RuntimeError):
    """A service did not start, died, or did not reach the expected state in time."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (callers retry if they lose the race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_until(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.5,
    what: str = "condition",
    check: Callable[[], None] | None = None,
    ignore: tuple[type[BaseException], ...] = (Exception,),
    progress: Callable[[], float] | None = None,
    backstop: float | None = None,
) -> T:
    """Poll ``probe`` until it returns something truthy; raise StackError after ``timeout`` seconds.

    ``check`` runs before each probe and may raise (e.g. "the service died") to stop early. Exceptions of the
    ``ignore`` types raised by the probe mean "not yet" (the last one is reported on timeout); others propagate.
    ``progress``: a measure of the awaited work that grows while it is being done (the CPU seconds of the services
    starting: :func:`group_cpu_seconds`); ``timeout`` then counts only the time in which it did not grow, within
    ``backstop`` seconds in all: a starved machine slows a start down, only a stalled start times out.
    """
    start = deadline = time.monotonic()
    deadline += timeout
    done = progress() if progress is not None else 0.0
    last_exc: Exception | None = None
    while True:
        if check is not None:
            check()
        try:
            value = probe()
        except ignore as exc:
            last_exc = exc
            value = None
        if value:
            return value
        now = time.monotonic()
        if progress is not None and (worked := progress()) > done:
            done, deadline = worked, now + timeout
        out_of_time = backstop is not None and now - start >= backstop
        if now >= deadline or out_of_time:
            detail = f" (last error: {last_exc!r})" if last_exc else ""
            how = (
                f"after {now - start:.0f}s"
                if progress is None
                else f"after {now - start:.0f}s, the last {min(timeout, now - start):.0f}s without progress"
                if not out_of_time
                else f"after {backstop:.0f}s in all"
            )
            raise StackError(f"timed out {how} waiting for {what}{detail}")
        time.sleep(interval)


class Background(threading.Thread):
    """``fn()`` in a daemon thread, started at once (slow set-up runs while the caller does other work);
    ``result()`` waits for it and returns its value or re-raises its exception in the caller's thread."""

    def __init__(self, fn: Callable[[], T], name: str = "background"):
        super().__init__(daemon=True, name=name)
        self._fn, self._value, self._error = fn, None, None
        self.start()

    def run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised by result() in the caller's thread
            self._error = exc

    def result(self):
        self.join()
        if self._error is not None:
            raise self._error
        return self._value


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def start_on_free_port(
    name: str,
    host: str,
    start: Callable[[int], Service],
    ready: Callable[[], object],
    *,
    timeout: float,
    attempts: int = 5,
) -> Service:
    """``start(port)`` on a port that was free a moment ago, until ``ready()`` (polled every 0.2 s); another port
    when the first was taken between picking and binding it (up to ``attempts``)."""
    last_error: Exception | None = None
    for _attempt in range(attempts):
        service = start(free_port(host))
        try:
            wait_until(
                ready,
                timeout=timeout,
                interval=0.2,
                what=f"{name} to accept connections",
                check=service.check_alive,
            )
            return service
        except StackError as exc:
            last_error = exc
            service.stop()
    raise StackError(f"{name} did not start: {last_error}")


class Service:
    """One long-running command in its own process group, output appended to ``log_path``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        log_path: Path,
        cwd: str | os.PathLike | None = None,
        stop_signal: int = signal.SIGTERM,
        stop_timeout: float = 20.0,
    ):
        self.name = name
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.cwd = cwd
        self.stop_signal = stop_signal
        self.stop_timeout = stop_timeout
        self.proc: subprocess.Popen | None = None
        self.stopped = False  # stopped on purpose (stop, kill): its exit is no failure until it starts again

    def start(self) -> Service:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed right after
        try:
            log.write(
                f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(self.argv)}\n".encode()
            )
            log.flush()
            self.stopped = False
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: stop() signals the service and all its children
            )
        finally:
            log.close()
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        if self.proc is not None and not self.stopped and self.proc.poll() is not None:
            raise StackError(
                f"{self.name} exited with code {self.proc.returncode}; last lines of {self.log_path}:\n"
                f"{tail(self.log_path)}"
            )

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the whole group (e.g. SIGSTOP / SIGCONT to freeze a service for a while)."""
        self._signal_group(sig)

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # a member changed user (runuser): it still exists
            return True
        return True

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the whole group (no grace) and wait until every member is gone."""
        if self.proc is None:
            return
        self.stopped = True
        self._signal_group(sig)
        self.proc.wait(timeout=30)
        for _ in range(100):
            if not self._group_alive():
                return
            self._signal_group(signal.SIGKILL)
            time.sleep(0.1)

    def stop(self) -> None:
        """Signal the whole group, wait up to ``stop_timeout``, then KILL whatever is left of it."""
        if self.proc is None:
            return
        self.stopped = True
        self._signal_group(self.stop_signal)
        deadline = time.monotonic() + self.stop_timeout
        while time.monotonic() < deadline:
            self.proc.poll()
            if self.proc.returncode is not None and not self._group_alive():
                break
            time.sleep(0.2)
        else:
            self._signal_group(signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - KILL does not fail
            pass
        # children re-parented to init may linger a moment after KILL
        for _ in range(50):
            if not self._group_alive():
                break
            self._signal_group(signal.SIGKILL)
            time.sleep(0.1)


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    log_path: Path | None = None,
    cwd: str | os.PathLike | None = None,
) -> str:
    """Run a command to completion; raise StackError with its output on failure."""
    try:
        cp = subprocess.run(
            list(argv),
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            text=True,
            errors="replace",
        )
    except subprocess.TimeoutExpired as exc:
        raise StackError(f"{' '.join(argv)} timed out after {timeout:.0f}s") from exc
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a") as f:
            f.write(f"\n=== {' '.join(argv)}\n{cp.stdout}")
    if cp.returncode != 0:
        raise StackError(f"{' '.join(argv)} failed with code {cp.returncode}:\n{cp.stdout[-4000:]}")
    return cp.stdout


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command (state, ppid, pgrp, ...), None when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()  # the command may hold spaces and parentheses: after the last ")"


def parent_pid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def group_members(pgid: int) -> list[int]:
    """The pids of process group ``pgid``'s members."""
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and (fields := _stat_fields(entry.name)) and int(fields[2]) == pgid
    ]


def group_cpu_seconds(groups: Collection[int]) -> float:
    """The CPU seconds the live members of the process ``groups`` have used: what services that are starting have
    done so far, whatever the machine's load."""
    ticks = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(entry.name)) and int(fields[2]) in groups:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def open_paths(pid: int) -> list[str]:
    """The paths of the files process ``pid`` has open (empty when it is gone)."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return []
    paths = []
    for fd in fds:
        try:
            paths.append(os.readlink(fd))
        except OSError:
            continue
    return paths


def descendant_titled(root: int, title: str) -> int | None:
    """The pid of a process under ``root`` whose command line (a title set with setproctitle) starts with ``title``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if not cmdline.startswith(title):
            continue
        pid = ancestor = int(entry.name)
        while ancestor not in (None, 0, 1):
            if ancestor == root:
                return pid
            ancestor = parent_pid(ancestor)
    return None
