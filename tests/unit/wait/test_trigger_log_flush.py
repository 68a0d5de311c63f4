"""A trigger's event leaves once its closing record is in its try's trigger log file (Airflow 3's triggerer closes
that file on the event: a record still on its way would miss the task log)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from airflow_mpi.version_compat import AIRFLOW_V_3_0_PLUS
from airflow_mpi.wait import trigger_log_flush
from airflow_mpi.wait.contract import WaitOptions
from airflow_mpi.wait.trigger_log_flush import FLUSH_FIELD, close_trigger_log
from tests.unit.fakes import FakeAsyncHook, job

pytestmark = pytest.mark.skipif(not AIRFLOW_V_3_0_PLUS, reason="Airflow 3's triggerer")

TI = SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=-1, try_number=2)
TRIGGER_FILE = "attempt=2.log.trigger.7.log"


def lagging_supervisor(path, delay: float, written: list):
    """An emitter whose record reaches ``path`` ``delay`` seconds later: a triggerer behind on its log socket."""
    loop = asyncio.get_running_loop()

    def emit(message: str, token: str) -> None:
        def write() -> None:
            with path.open("ab") as file:
                file.write(json.dumps({"event": message, FLUSH_FIELD: token}).encode() + b"\n")
            written.append(message)

        loop.call_later(delay, write)

    return emit


async def test_the_wait_ends_once_the_record_is_in_the_trigger_log_file(log_folder):
    written: list[str] = []
    emit = lagging_supervisor(log_folder / TRIGGER_FILE, 0.3, written)
    assert await close_trigger_log(TI, "the wait ended", emit=emit, timeout=10)
    assert written == ["the wait ended"]


async def test_the_record_is_found_behind_a_long_log(log_folder):
    filler = json.dumps({"event": "launcher line " + "x" * 200}) + "\n"
    (log_folder / TRIGGER_FILE).write_text(filler * 5000)  # 1 MB before it
    written: list[str] = []
    assert await close_trigger_log(
        TI, "end", emit=lagging_supervisor(log_folder / TRIGGER_FILE, 0.05, written), timeout=10
    )
    assert written == ["end"]


@pytest.mark.parametrize("elsewhere", ["attempt=1.log.trigger.7.log", "attempt=2.log"])
async def test_a_record_in_another_trys_file_or_in_the_workers_log_does_not_count(log_folder, elsewhere):
    written: list[str] = []
    emit = lagging_supervisor(log_folder / elsewhere, 0.0, written)
    started = asyncio.get_running_loop().time()
    assert not await close_trigger_log(TI, "end", emit=emit, timeout=0.5)
    assert written == ["end"]
    assert asyncio.get_running_loop().time() - started >= 0.5  # it waited out its bound, then gave up


async def test_an_unreadable_log_folder_lets_the_event_go_without_waiting(monkeypatch):
    def unreadable(ti):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(trigger_log_flush, "trigger_log_files", unreadable)
    emitted: list[str] = []
    started = asyncio.get_running_loop().time()
    assert not await close_trigger_log(TI, "end", emit=lambda m, t: emitted.append(m), timeout=60)
    assert emitted == ["end"]
    assert asyncio.get_running_loop().time() - started < 30  # not the 60 s bound: nothing to wait for


# ------------------------------------------------------------------------------------------------- the trigger
def finished_trigger(monkeypatch, **kw):
    from airflow_mpi.triggers import MPIJobTrigger

    t = MPIJobTrigger(
        name="job",
        namespace="ns",
        submitted_at=datetime.now(UTC).isoformat(),
        options=WaitOptions(poll_interval=0.01, get_logs=False),
        **kw,
    )
    hook = FakeAsyncHook(job_obj=job("job", "ns", ("Created", "x"), ("Succeeded", "MPIJobSucceeded")))

    @contextlib.asynccontextmanager
    async def use():
        yield hook

    monkeypatch.setattr(t, "_hook", use)
    return t


async def test_a_triggers_event_leaves_after_its_closing_record_is_in_its_task_log(monkeypatch, log_folder):
    written: list[str] = []
    monkeypatch.setattr(
        trigger_log_flush,
        "closing_emitter",
        lambda: lagging_supervisor(log_folder / TRIGGER_FILE, 0.3, written),
    )
    t = finished_trigger(monkeypatch)
    t.task_instance = TI
    async for event in t.run():
        assert event.payload["status"] == "success"
        assert written == ["MPIJob ns/job: the wait ended (success); the task resumes"]  # in the file already
        records = [json.loads(line) for line in (log_folder / TRIGGER_FILE).read_text().splitlines()]
        assert [r["event"] for r in records if FLUSH_FIELD in r] == written


async def test_outside_a_triggerer_the_event_does_not_wait_for_a_file(monkeypatch):
    """No task instance: not run by Airflow 3's triggerer (e.g. a test, or Airflow 2's, which logs in-process)."""
    monkeypatch.setattr(trigger_log_flush, "closing_emitter", lambda: pytest.fail("nothing to close"))
    events = [e async for e in finished_trigger(monkeypatch).run()]
    assert [e.payload["status"] for e in events] == ["success"]


def test_the_closing_record_carries_its_token_as_a_field_of_its_own():
    """The token is a structured field (Airflow 3's triggerer writes it into the record's JSON), not in the message."""
    from structlog.testing import capture_logs

    with capture_logs() as records:
        trigger_log_flush.closing_emitter()("the wait ended", "0123abcd")
    assert [(r["event"], r[FLUSH_FIELD]) for r in records] == [("the wait ended", "0123abcd")]
