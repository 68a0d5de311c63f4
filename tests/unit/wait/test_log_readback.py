"""The trigger reads its position back from the trigger log files of its try (Airflow 3's layout)."""

from __future__ import annotations

import asyncio
import json
import threading
from types import SimpleNamespace

import pytest

from airflow_mpi.version_compat import AIRFLOW_V_3_0_PLUS
from airflow_mpi.wait import log_ledger
from airflow_mpi.wait.log_ledger import MARK_FIELD, line_mark

pytestmark = pytest.mark.skipif(not AIRFLOW_V_3_0_PLUS, reason="Airflow 3's JSON trigger logs")

TI = SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=-1, try_number=2)


def _write(path, *records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_every_triggerer_file_of_the_try_is_read_and_other_tries_are_not(log_folder):
    _write(
        log_folder / "attempt=2.log.trigger.7.log", {"event": "a", MARK_FIELD: line_mark("s", [100, 0, 1])}
    )
    _write(
        log_folder / "attempt=2.log.trigger.9.log", {"event": "b", MARK_FIELD: line_mark("s", [100, 0, 2])}
    )
    _write(
        log_folder / "attempt=1.log.trigger.5.log", {"event": "z", MARK_FIELD: line_mark("s", [900, 0, 1])}
    )
    _write(log_folder / "attempt=2.log", {"event": "worker", MARK_FIELD: line_mark("s", [800, 0, 1])})
    deferred = {"cursor": {"s": [99, 0, 4]}, "streams": ["s"], "done": []}
    assert log_ledger.resume_state(TI, deferred, pytest.fail) == {
        "cursor": {"s": [100, 0, 2]},
        "streams": ["s"],
        "done": [],
    }


def test_an_unreadable_log_folder_keeps_the_defer_time_position(log_folder):
    (log_folder / "attempt=2.log.trigger.7.log").mkdir()  # cannot be opened as a file
    warnings = []
    deferred = {"cursor": {"s": [99, 0, 4]}, "streams": ["s"], "done": []}
    assert log_ledger.resume_state(TI, deferred, lambda *a: warnings.append(a)) is deferred
    assert warnings and "may repeat" in warnings[0][0]


async def test_the_read_back_runs_beside_the_event_loop_which_keeps_serving_other_triggers(monkeypatch):
    """A long task log is read in a thread: the triggerer's other triggers (same loop) run meanwhile."""
    loop_ran = threading.Event()

    def slow_read_back(ti, keep=None):  # returns only once a coroutine of the loop has run
        assert loop_ran.wait(timeout=30), "the event loop was blocked while the log was read back"
        return {"cursor": {"s": [100, 0, 7]}, "streams": ["s"], "done": []}

    async def another_trigger():
        loop_ran.set()

    monkeypatch.setattr(log_ledger, "read_back", slow_read_back)
    deferred = {"cursor": {"s": [99, 0, 4]}, "streams": ["s"], "done": []}
    state, _ = await asyncio.gather(
        log_ledger.resume_state_off_loop(TI, deferred, pytest.fail), another_trigger()
    )
    assert state == {"cursor": {"s": [100, 0, 7]}, "streams": ["s"], "done": []}


# ------------------------------------------------------------------------------ remote logging: the hand-over
DEFERRED = {"cursor": {"s": [99, 0, 4]}, "streams": ["s"], "done": []}
DEAD = {"event": "b", MARK_FIELD: line_mark("s", [100, 0, 2])}  # a killed triggerer's last record


class FakeRemoteIO:
    """A RemoteLogIO with the S3 handler's upload: the file goes to remote storage, the local one is emptied (or,
    ``fails``, stays as it was)."""

    processors = ()

    def __init__(self, base, delete_local_copy=False, fails=False):
        self.base, self.delete_local_copy, self.fails, self.uploaded = base, delete_local_copy, fails, {}

    def upload(self, path, ti):
        assert not str(path).startswith("/"), (
            path
        )  # relative to base_log_folder, as Airflow's triggerer passes it
        if not self.fails:
            self.uploaded[path] = (self.base / path).read_text()
            (self.base / path).write_text("")


@pytest.fixture
def remote(log_folder, monkeypatch):
    io = FakeRemoteIO(log_folder.parents[2])
    monkeypatch.setattr(log_ledger, "remote_log_io", lambda: io)
    return io


def test_with_remote_logging_a_dead_triggerers_file_is_uploaded_before_its_lines_are_resumed_past(
    log_folder, remote
):
    """Airflow uploads a trigger log only when the trigger ends: a killed triggerer's file would never reach remote
    storage, which is all the API server serves once the task has ended. The successor uploads it first."""
    _write(
        log_folder / "attempt=2.log.trigger.7.log",
        {"event": "a", MARK_FIELD: line_mark("s", [100, 0, 1])},
        DEAD,
    )
    _write(
        log_folder / "attempt=2.log.trigger.9.log", {"event": "trigger starting"}
    )  # this triggerer's own file
    handed_over = []
    state = log_ledger.resume_state(TI, DEFERRED, pytest.fail, handed_over)
    assert state == {"cursor": {"s": [100, 0, 2]}, "streams": ["s"], "done": []}
    assert handed_over == ["attempt=2.log.trigger.7.log"]
    assert list(remote.uploaded) == [
        "dag_id=d/run_id=r/task_id=t/attempt=2.log.trigger.7.log"
    ]  # not its own file
    assert '"event": "b"' in remote.uploaded["dag_id=d/run_id=r/task_id=t/attempt=2.log.trigger.7.log"]


@pytest.mark.parametrize(
    "io",
    [
        {"fails": True},  # the upload failed: the handler keeps the local file
        {
            "delete_local_copy": True
        },  # the handler would remove the folder, this triggerer's open file with it
    ],
)
def test_a_file_that_cannot_be_handed_over_does_not_count_its_lines_repeat(log_folder, remote, io):
    for key, value in io.items():
        setattr(remote, key, value)
    _write(log_folder / "attempt=2.log.trigger.7.log", DEAD)
    warnings, handed_over = [], []
    state = log_ledger.resume_state(TI, DEFERRED, lambda *a: warnings.append(a), handed_over)
    assert state == DEFERRED and handed_over == [] and not remote.uploaded
    assert warnings and "logged again" in warnings[0][0]
    assert (log_folder / "attempt=2.log.trigger.7.log").read_text()  # left as it was


def test_a_handler_that_streams_records_as_they_come_is_not_uploaded_to(log_folder, remote):
    """CloudWatch-like: a killed triggerer's last records may be lost in its buffer; its file is not trusted."""
    remote.processors = (lambda *a: a[-1],)
    _write(log_folder / "attempt=2.log.trigger.7.log", DEAD)
    assert log_ledger.resume_state(TI, DEFERRED, lambda *a: None) == DEFERRED
    assert not remote.uploaded


def test_an_upload_that_raises_leaves_the_lines_to_repeat(log_folder, remote, monkeypatch):
    monkeypatch.setattr(remote, "upload", lambda path, ti: 1 / 0)
    _write(log_folder / "attempt=2.log.trigger.7.log", DEAD)
    warnings = []
    assert log_ledger.resume_state(TI, DEFERRED, lambda *a: warnings.append(a)) == DEFERRED
    assert "ZeroDivisionError" in repr(warnings) or "division" in repr(warnings)


def test_an_unloadable_remote_handler_leaves_the_lines_to_repeat(log_folder, monkeypatch):
    monkeypatch.setattr(log_ledger, "remote_log_io", lambda: log_ledger._Unknown())
    _write(log_folder / "attempt=2.log.trigger.7.log", DEAD)
    assert log_ledger.resume_state(TI, DEFERRED, lambda *a: None) == DEFERRED


def test_without_remote_logging_nothing_is_uploaded(log_folder, monkeypatch):
    monkeypatch.setattr(log_ledger, "remote_log_io", lambda: None)
    _write(log_folder / "attempt=2.log.trigger.7.log", DEAD)
    assert log_ledger.resume_state(TI, DEFERRED, pytest.fail) == {
        "cursor": {"s": [100, 0, 2]},
        "streams": ["s"],
        "done": [],
    }
    assert (log_folder / "attempt=2.log.trigger.7.log").read_text()


def test_the_amazon_providers_s3_handler_takes_the_file(log_folder, monkeypatch):
    """The real ``S3RemoteLogIO`` against moto's S3 server (in a thread): the dead triggerer's file becomes the
    object the API server lists for the try, the local file is emptied, so the successor resumes past its lines."""
    s3_log = pytest.importorskip("airflow.providers.amazon.aws.log.s3_task_handler")
    moto_server = pytest.importorskip("moto.server")
    import socket

    import boto3

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        keys = {
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "region_name": "us-east-1",
        }
        s3 = boto3.client("s3", endpoint_url=endpoint, **keys)
        s3.create_bucket(Bucket="logs")
        monkeypatch.setenv(
            "AIRFLOW_CONN_LOGS_S3",
            json.dumps(
                {
                    "conn_type": "aws",
                    "login": "testing",
                    "password": "testing",
                    "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"},
                }
            ),
        )
        monkeypatch.setenv("AIRFLOW__LOGGING__REMOTE_LOG_CONN_ID", "logs_s3")
        _write(log_folder / "attempt=2.log.trigger.7.log", DEAD)
        io = s3_log.S3RemoteLogIO(
            remote_base="s3://logs/base", base_log_folder=log_folder.parents[2], delete_local_copy=False
        )
        monkeypatch.setattr(log_ledger, "remote_log_io", lambda: io)
        handed_over = []
        state = log_ledger.resume_state(TI, DEFERRED, pytest.fail, handed_over)
        body = s3.get_object(
            Bucket="logs", Key="base/dag_id=d/run_id=r/task_id=t/attempt=2.log.trigger.7.log"
        )
        assert json.loads(body["Body"].read()) == DEAD
    finally:
        server.stop()
    assert state == {"cursor": {"s": [100, 0, 2]}, "streams": ["s"], "done": []}
    assert handed_over == ["attempt=2.log.trigger.7.log"]
    assert (log_folder / "attempt=2.log.trigger.7.log").read_text() == ""


async def test_the_trigger_marks_the_handed_over_position_in_its_own_log(monkeypatch):
    """A successor of the successor reads the position back from this triggerer's file: the dead one's file is empty
    locally once uploaded."""
    from airflow_mpi.triggers.mpijob import MPIJobTrigger

    async def resumed(ti, deferred, warn, handed_over):
        handed_over.append("attempt=2.log.trigger.7.log")
        return {"cursor": {"s": [100, 0, 2]}, "streams": ["s"], "done": []}

    emitted = []
    monkeypatch.setattr(log_ledger, "resume_state_off_loop", resumed)
    monkeypatch.setattr(
        log_ledger, "marked_emitter", lambda: lambda message, mark: emitted.append((message, mark))
    )
    trigger = MPIJobTrigger(
        name="j", namespace="ns", submitted_at="2026-11-24T00:00:00+00:00", log_state=DEFERRED
    )
    trigger.task_instance = TI
    state, _emit = await trigger._log_position()
    assert state["cursor"] == {"s": [100, 0, 2]}
    ((message, mark),) = emitted
    assert mark == line_mark("s", [100, 0, 2]) and "attempt=2.log.trigger.7.log" in message
    assert log_ledger.ledger_from_records([{MARK_FIELD: mark}])["cursor"] == {"s": [100, 0, 2]}
