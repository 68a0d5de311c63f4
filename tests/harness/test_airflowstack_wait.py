"""The test stack's start deadline counts the time its services stall, not the time a loaded machine takes
(airflowstack/_proc.py ``wait_until`` with ``progress``)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from airflowstack import _proc
from airflowstack._proc import StackError, group_cpu_seconds, wait_until
from localcluster.processes import child_env


class Clock:
    """time.monotonic and time.sleep of a machine where only sleeping moves time."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(_proc, "time", fake)
    return fake


def test_a_start_that_keeps_working_is_awaited_past_its_timeout(clock):
    """Starved, not stalled: the work grows at every look, the probe answers at t=30 with a timeout of 5 s."""
    value = wait_until(
        lambda: clock.now >= 30 and "healthy",
        timeout=5,
        interval=1,
        progress=lambda: clock.now / 10,
        backstop=600,
    )
    assert value == "healthy" and clock.now == 30


def test_a_start_that_stops_working_times_out_once_it_stalled_for_the_timeout(clock):
    with pytest.raises(StackError, match=r"the last 5s without progress waiting for the API"):
        wait_until(
            lambda: None,
            timeout=5,
            interval=1,
            what="the API",
            progress=lambda: min(clock.now, 12.0),  # works until t=12, then nothing
            backstop=600,
        )
    assert 17 <= clock.now <= 18


def test_a_start_that_works_forever_ends_at_the_backstop(clock):
    with pytest.raises(StackError, match=r"after 60s in all"):
        wait_until(lambda: None, timeout=5, interval=1, progress=lambda: clock.now, backstop=60)
    assert clock.now == 60


def test_without_progress_the_timeout_is_wall_time(clock):
    with pytest.raises(StackError, match=r"timed out after 5s waiting for"):
        wait_until(lambda: None, timeout=5, interval=1)
    assert clock.now == 5


def test_the_cpu_of_a_busy_process_group_is_counted_and_stops_with_it():
    busy = subprocess.Popen(
        [sys.executable, "-c", "while True: pass"], start_new_session=True, env=child_env()
    )  # its own group, as a stack's service
    try:
        assert group_cpu_seconds({busy.pid}) >= 0
        # awaited: the process gets CPU whenever the machine gives it some
        deadline = time.monotonic() + 120
        while group_cpu_seconds({busy.pid}) < 0.2:
            assert time.monotonic() < deadline, "the busy process got no CPU in 120 s"
            time.sleep(0.05)
    finally:
        busy.kill()
        busy.wait()
    assert group_cpu_seconds({busy.pid}) == 0  # gone: nothing of it is counted


def test_a_service_stopped_on_purpose_is_no_failure_until_it_starts_again_and_exits(tmp_path):
    """A test that stops a service (e.g. the triggerer, to run a patched one in its place) still has every other
    service checked: only the stopped one's exit is expected, and only until it starts again."""
    service = _proc.Service(
        "svc", [sys.executable, "-c", "import time; time.sleep(300)"], env={}, log_path=tmp_path / "svc.log"
    ).start()
    service.stop()
    service.check_alive()  # stopped on purpose
    service.argv = [sys.executable, "-c", "pass"]
    service.start().proc.wait()
    with pytest.raises(StackError, match="svc exited with code 0"):
        service.check_alive()
