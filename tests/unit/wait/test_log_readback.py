"""The trigger reads its position back from the trigger log files of its try (Airflow 3's layout)."""

from __future__ import annotations

import asyncio
import json
import threading
from types import SimpleNamespace

import pytest

from airflow_mpi.wait.log_ledger import MARK_FIELD, line_mark
from airflow_mpi.wait import log_ledger
from airflow_mpi.version_compat import AIRFLOW_V_3_0_PLUS

pytestmark = pytest.mark.skipif(not AIRFLOW_V_3_0_PLUS, reason="Airflow 3's JSON trigger logs")

TI = SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=-1, try_number=2)


@pytest.fixture
def log_folder(tmp_path, monkeypatch):
    from airflow.configuration import conf

    monkeypatch.setattr(conf, "get", lambda section, key, *a, **kw: str(tmp_path)
                        if (section, key) == ("logging", "base_log_folder") else type(conf).get(conf, section, key, *a, **kw))
    folder = tmp_path / "dag_id=d" / "run_id=r" / "task_id=t"
    folder.mkdir(parents=True)
    return folder


def _write(path, *records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_every_triggerer_file_of_the_try_is_read_and_other_tries_are_not(log_folder):
    _write(log_folder / "attempt=2.log.trigger.7.log", {"event": "a", MARK_FIELD: line_mark("s", [100, 0, 1])})
    _write(log_folder / "attempt=2.log.trigger.9.log", {"event": "b", MARK_FIELD: line_mark("s", [100, 0, 2])})
    _write(log_folder / "attempt=1.log.trigger.5.log", {"event": "z", MARK_FIELD: line_mark("s", [900, 0, 1])})
    _write(log_folder / "attempt=2.log", {"event": "worker", MARK_FIELD: line_mark("s", [800, 0, 1])})
    deferred = {"cursor": {"s": [99, 0, 4]}, "streams": ["s"], "done": []}
    assert log_ledger.resume_state(TI, deferred, pytest.fail) == {"cursor": {"s": [100, 0, 2]}, "streams": ["s"], "done": []}


def test_an_unreadable_log_folder_keeps_the_defer_time_position(log_folder):
    (log_folder / "attempt=2.log.trigger.7.log").mkdir()  # cannot be opened as a file
    warnings = []
    deferred = {"cursor": {"s": [99, 0, 4]}, "streams": ["s"], "done": []}
    assert log_ledger.resume_state(TI, deferred, lambda *a: warnings.append(a)) is deferred
    assert warnings and "may repeat" in warnings[0][0]


async def test_the_read_back_runs_beside_the_event_loop_which_keeps_serving_other_triggers(monkeypatch):
    """A long task log is read in a thread: the triggerer's other triggers (same loop) run meanwhile."""
    loop_ran = threading.Event()

    def slow_read_back(ti):  # returns only once a coroutine of the loop has run
        assert loop_ran.wait(timeout=30), "the event loop was blocked while the log was read back"
        return {"cursor": {"s": [100, 0, 7]}, "streams": ["s"], "done": []}

    async def another_trigger():
        loop_ran.set()

    monkeypatch.setattr(log_ledger, "read_back", slow_read_back)
    deferred = {"cursor": {"s": [99, 0, 4]}, "streams": ["s"], "done": []}
    state, _ = await asyncio.gather(log_ledger.resume_state_off_loop(TI, deferred, pytest.fail), another_trigger())
    assert state == {"cursor": {"s": [100, 0, 7]}, "streams": ["s"], "done": []}
