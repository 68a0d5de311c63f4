"""The log position read back from the task log: a triggerer killed after any record resumes exactly once."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from airflow_mpi.wait.monitor import JobMonitor
from airflow_mpi.wait.log_ledger import (
    MARK_FIELD,
    header_mark,
    ledger_from_records,
    line_mark,
    merge_log_states,
    records_from_lines,
)
from tests.unit.fakes import FakeAsyncHook, job, pod

NOW = datetime.now(timezone.utc)
BASE = datetime(2026, 11, 22, 10, 0, 0, tzinfo=timezone.utc)


def test_marks_round_trip_through_a_json_log_file():
    records = [
        {"event": "== attempt 1 ==", MARK_FIELD: header_mark("p/launcher/0")},
        {"event": "a", MARK_FIELD: line_mark("p/launcher/0", [1795341600, 5, 1])},
        {"event": "trigger starting"},  # not ours
        {"event": "b", MARK_FIELD: line_mark("p/launcher/0", [1795341600, 5, 2])},
        {"event": "== attempt 2 ==", MARK_FIELD: header_mark("q/launcher/0")},
    ]
    text = [json.dumps(r).encode() for r in records] + [b'{"event": "cut sho']  # a record cut by a kill
    assert ledger_from_records(records_from_lines(text)) == {
        "cursor": {"p/launcher/0": [1795341600, 5, 2]}, "streams": ["p/launcher/0", "q/launcher/0"], "done": []}


def test_records_are_read_one_at_a_time_never_the_whole_log():
    """The read-back holds a position per stream, not the log: records come as the lines are read."""
    def log_lines():
        for n in range(3):
            yield json.dumps({"event": str(n), MARK_FIELD: line_mark("s", [1, 0, n + 1])}).encode()
        raise AssertionError("read past the records asked for")

    records = records_from_lines(log_lines())
    assert [next(records)["event"] for _ in range(3)] == ["0", "1", "2"]


def test_merge_takes_the_furthest_position_and_keeps_done_only_when_nothing_is_further():
    deferred = {"cursor": {"a": [10, 0, 1], "b": [20, 0, 3]}, "streams": ["a", "b"], "done": ["a", "b"]}
    ledger = {"cursor": {"a": [10, 0, 2], "b": [19, 9, 9], "c": [30, 0, 1]}, "streams": ["b", "c"], "done": []}
    assert merge_log_states(deferred, ledger) == {
        "cursor": {"a": [10, 0, 2], "b": [20, 0, 3], "c": [30, 0, 1]}, "streams": ["a", "b", "c"], "done": ["b"]}
    assert merge_log_states(None, None) == {"cursor": {}, "streams": [], "done": []}


def _raw(offsets_ms: list[int]) -> list[str]:
    """Launcher lines ``line <i>`` with timestamps BASE + offset (many share a second, some a nanosecond)."""
    stamps = [BASE + timedelta(milliseconds=ms) for ms in sorted(offsets_ms)]
    return [f"{s.strftime('%Y-%m-%dT%H:%M:%S.%f')}Z line {i}" for i, s in enumerate(stamps)]


async def _trigger_run(raw: list[str], log_state: dict | None) -> list[dict]:
    """One trigger's records, as the triggerer writes them to its log file (text and mark)."""
    done = job("job", "ns", ("Created", "x"), ("Succeeded", "x"))
    hook = FakeAsyncHook(job_obj=done, launchers=[pod("job-launcher-a", state="terminated", phase="Succeeded")],
                         logs={("job-launcher-a", False): raw})
    records: list[dict] = []
    monitor = JobMonitor(hook, "job", "ns", emit=lambda m: records.append({"event": m}), submitted_at=NOW,
                         poll_interval=0.01, log_state=log_state,
                         emit_marked=lambda m, mark: records.append({"event": m, MARK_FIELD: mark}))
    await monitor.run()
    return records


@given(
    offsets=st.lists(st.sampled_from([0, 1, 400, 999, 1000, 1500, 2000, 2001, 5000]), min_size=1, max_size=12),
    cuts=st.lists(st.floats(0, 1), min_size=1, max_size=3),
)
async def test_a_triggerer_killed_after_any_record_leaves_every_line_once_in_the_task_log(offsets, cuts):
    raw = _raw(offsets)
    log_file: list[str] = []  # the task's trigger log files, in order
    for cut in cuts:  # each triggerer writes a prefix of its records, then is killed
        resumed = merge_log_states({"cursor": {}, "streams": [], "done": []},
                                   ledger_from_records(records_from_lines(log_file)))
        records = await _trigger_run(raw, resumed)
        log_file += [json.dumps(r) for r in records[: int(cut * len(records))]]
    final = await _trigger_run(raw, ledger_from_records(records_from_lines(log_file)))
    log_file += [json.dumps(r) for r in final]

    messages = [json.loads(line)["event"] for line in log_file]
    assert [m for m in messages if m.startswith("line ")] == [f"line {i}" for i in range(len(raw))]
    assert sum(m.startswith("==========") for m in messages) == 1  # the attempt header too
