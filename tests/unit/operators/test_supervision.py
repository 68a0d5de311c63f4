"""A task process that outlived its Airflow 3 supervisor decides nothing about its job (operators/supervision.py)."""

from __future__ import annotations

import asyncio
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_mpi.operators.supervision import ORPHANED_EXIT_CODE, orphaned, supervisor_pid, until_orphaned
from localcluster.processes import child_env

REPO = Path(__file__).resolve().parents[3]
JOB_SECONDS = 60  # the orphan's job: it would end the process by itself after this


class Exited(Exception):
    """What the fake ``exit`` raises instead of ending the test process."""


def _exit(code: int):
    raise Exited(code)


def test_no_supervisor_outside_a_forked_task_runner():
    """Unit tests, ``dag.test()`` and Airflow 2 run no supervised task process: the guard stays off."""
    assert supervisor_pid() is None
    assert not orphaned(None)


def test_the_supervisor_of_a_forked_task_runner_is_its_parent(monkeypatch):
    comms = pytest.importorskip("airflow.sdk.execution_time.comms")
    import socket

    from airflow.sdk.execution_time import task_runner

    left, right = socket.socketpair()
    try:
        monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", comms.CommsDecoder(socket=left), raising=False)
        assert supervisor_pid() == os.getppid()
    finally:
        left.close()
        right.close()


def test_orphaned_once_the_parent_is_not_the_supervisor():
    assert not orphaned(os.getppid())
    assert orphaned(os.getppid() + 1)  # the parent changed: the supervisor died


async def test_a_supervised_wait_returns_its_result():
    async def wait():
        await asyncio.sleep(0.05)
        return "done"

    assert await until_orphaned(wait(), os.getppid(), interval=0.01, exit=_exit) == "done"
    assert await until_orphaned(wait(), None, interval=0.01, exit=_exit) == "done"


async def test_a_supervised_wait_raises_what_the_wait_raises():
    async def wait():
        raise ValueError("job deleted")

    with pytest.raises(ValueError, match="job deleted"):
        await until_orphaned(wait(), os.getppid(), interval=0.01, exit=_exit)


async def test_an_orphaned_wait_ends_the_process_and_stops_waiting():
    cancelled = asyncio.Event()

    async def wait():
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(Exited) as exited:
        await until_orphaned(wait(), os.getppid() + 1, interval=0.01, exit=_exit)
    assert exited.value.args == (ORPHANED_EXIT_CODE,)
    await asyncio.sleep(0)
    assert cancelled.is_set()


def test_a_real_orphan_exits_within_a_check(tmp_path):
    """A process whose parent dies (as a task process whose supervisor was SIGKILLed) is re-parented: its wait ends
    with the orphan's exit code, not with its 60 s job. Awaited on the process itself (a pidfd), from the moment its
    supervisor died: the imports before it (tens of seconds on a loaded machine) are no part of the claim."""
    marker = tmp_path / "exited"
    script = f"""
import asyncio, os, sys
from airflow_mpi.operators.supervision import until_orphaned
read_end, write_end = os.pipe()
child = os.fork()
if child == 0:  # the task process
    supervisor = os.getppid()
    os.write(write_end, b"1")  # it knows its supervisor (a loaded machine may run it after the parent died)
    def exit(code):
        open({str(marker)!r}, "w").write(str(code))
        os._exit(code)
    asyncio.run(until_orphaned(asyncio.sleep({JOB_SECONDS}), supervisor, interval=0.05, exit=exit))
    os._exit(0)
os.read(read_end, 1)
print(child, flush=True)
os._exit(0)  # the supervisor dies, its task process does not
"""
    supervisor = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
        env=child_env(),
    )
    orphan = int(supervisor.stdout)
    try:
        pidfd = os.pidfd_open(orphan)
    except ProcessLookupError:  # already gone
        pass
    else:
        try:  # readable once the process ended; its job would end it 60 s after it started
            assert select.select([pidfd], [], [], JOB_SECONDS)[0], "the orphan still runs"
        finally:
            os.close(pidfd)
    assert marker.read_text() == str(ORPHANED_EXIT_CODE)  # ended by the orphan check, not by its job


def test_a_retry_follows_every_try_but_the_last():
    from types import SimpleNamespace as NS

    from airflow_mpi.operators.supervision import retry_follows

    assert retry_follows(NS(try_number=1), 1) and retry_follows(NS(try_number=2), 2)
    assert not retry_follows(NS(try_number=2), 1)
    assert not retry_follows(NS(try_number=1), 0) and not retry_follows(NS(try_number=1), None)
    assert not retry_follows(None, 3)  # no task instance: an offline build


def test_a_cut_short_try_ends_its_wait_with_the_error_on_kill_left():
    """``on_kill`` cannot stop a wait (Airflow 3 calls it and returns): the wait raises what it left."""
    left: list[BaseException] = []

    async def endless():
        await asyncio.sleep(JOB_SECONDS)

    async def scenario():
        wait = until_orphaned(
            endless(), os.getppid(), interval=0.05, cut_short=lambda: left[0] if left else None
        )
        task = asyncio.ensure_future(wait)
        await asyncio.sleep(0.2)
        assert not task.done()
        left.append(RuntimeError("pod deleted"))
        with pytest.raises(RuntimeError, match="pod deleted"):
            await task

    asyncio.run(scenario())
