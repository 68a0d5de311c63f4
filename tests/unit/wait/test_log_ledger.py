"""The log position read back from the task log: a triggerer killed after any record resumes exactly once."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from airflow_mpi.hooks.answers import aiter_lines, split_timestamp
from airflow_mpi.wait.log_ledger import (
    MARK_FIELD,
    header_mark,
    ledger_from_records,
    line_mark,
    merge_log_states,
    records_from_lines,
)
from airflow_mpi.wait.monitor import JobMonitor
from tests.unit.fakes import FakeAsyncHook, job, pod

NOW = datetime.now(UTC)
BASE = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)


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
        "cursor": {"p/launcher/0": [1795341600, 5, 2]},
        "streams": ["p/launcher/0", "q/launcher/0"],
        "done": [],
    }


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
    ledger = {
        "cursor": {"a": [10, 0, 2], "b": [19, 9, 9], "c": [30, 0, 1]},
        "streams": ["b", "c"],
        "done": [],
    }
    assert merge_log_states(deferred, ledger) == {
        "cursor": {"a": [10, 0, 2], "b": [20, 0, 3], "c": [30, 0, 1]},
        "streams": ["a", "b", "c"],
        "done": ["b"],
    }
    assert merge_log_states(None, None) == {"cursor": {}, "streams": [], "done": []}


def _raw(offsets_ms: list[int]) -> list[str]:
    """Launcher lines ``line <i>`` with timestamps BASE + offset (many share a second, some a nanosecond)."""
    stamps = [BASE + timedelta(milliseconds=ms) for ms in sorted(offsets_ms)]
    return [f"{s.strftime('%Y-%m-%dT%H:%M:%S.%f')}Z line {i}" for i, s in enumerate(stamps)]


async def _trigger_run(
    raw: list[str], log_state: dict | None, hook_class: type = FakeAsyncHook
) -> list[dict]:
    """One trigger's records, as the triggerer writes them to its log file (text and mark)."""
    done = job("job", "ns", ("Created", "x"), ("Succeeded", "x"))
    hook = hook_class(
        job_obj=done,
        launchers=[pod("job-launcher-a", state="terminated", phase="Succeeded")],
        logs={("job-launcher-a", False): raw},
    )
    records: list[dict] = []
    monitor = JobMonitor(
        hook,
        "job",
        "ns",
        emit=lambda m: records.append({"event": m}),
        submitted_at=NOW,
        poll_interval=0.01,
        log_state=log_state,
        emit_marked=lambda m, mark: records.append({"event": m, MARK_FIELD: mark}),
    )
    await monitor.run()
    return records


@given(
    offsets=st.lists(
        st.sampled_from([0, 1, 400, 999, 1000, 1500, 2000, 2001, 5000]), min_size=1, max_size=12
    ),
    cuts=st.lists(st.floats(0, 1), min_size=1, max_size=3),
)
async def test_a_triggerer_killed_after_any_record_leaves_every_line_once_in_the_task_log(offsets, cuts):
    raw = _raw(offsets)
    log_file: list[str] = []  # the task's trigger log files, in order
    for cut in cuts:  # each triggerer writes a prefix of its records, then is killed
        resumed = merge_log_states(
            {"cursor": {}, "streams": [], "done": []}, ledger_from_records(records_from_lines(log_file))
        )
        records = await _trigger_run(raw, resumed)
        log_file += [json.dumps(r) for r in records[: int(cut * len(records))]]
    final = await _trigger_run(raw, ledger_from_records(records_from_lines(log_file)))
    log_file += [json.dumps(r) for r in final]

    messages = [json.loads(line)["event"] for line in log_file]
    assert [m for m in messages if m.startswith("line ")] == [f"line {i}" for i in range(len(raw))]
    assert sum(m.startswith("==========") for m in messages) == 1  # the attempt header too


class BytesLogHook(FakeAsyncHook):
    """The launcher's log as the API server sends it: bytes in chunks of ``chunk``, split into lines by the hooks'
    own splitter with a cap of ``MAX_LINE`` bytes (64 KiB in production: the pieces' logic is the same)."""

    chunk = 7

    async def read_pod_log(self, pod, namespace, *, since_time=None, limit_bytes=None, **_):
        lines = [ln for ln in self.logs.get((pod, False), []) if not since_time or ln[:19] >= since_time[:19]]
        data = "".join(f"{line}\n" for line in lines).encode()[:limit_bytes]

        async def chunks():
            for start in range(0, len(data), self.chunk):
                yield data[start : start + self.chunk]

        async for line in aiter_lines(chunks(), MAX_LINE):
            yield line


MAX_LINE = 40


def _joined(messages: list[str]) -> str:
    """The launcher's output the task log's records add up to: pieces of a cut line joined, marks taken off."""
    text = ""
    for message in messages:
        body = re.sub(r"^\[line continued from byte \d+\] ", "", message)
        cut = re.search(r" \[line cut at \d+ bytes\]$", body)
        text += body[: cut.start()] if cut else body + "\n"
    return text


@given(
    offsets=st.lists(st.sampled_from([0, 1, 400, 999, 1000, 2000, 2001]), min_size=1, max_size=8),
    lengths=st.lists(st.integers(0, 150), min_size=8, max_size=8),
    chunk=st.integers(1, 90),
    cuts=st.lists(st.floats(0, 1), min_size=1, max_size=3),
)
async def test_a_line_cut_into_pieces_is_neither_lost_nor_doubled_across_a_triggerer_killed_after_any_record(
    offsets, lengths, chunk, cuts
):
    """Lines longer than the cap (tqdm's progress bars) come in marked pieces; a triggerer killed after any of them
    resumes from the ledger at the next piece: the task log holds every byte once."""
    raw = [
        f"{line} {'abcdefghij' * (size // 10)}{'é' * (size % 10)}"
        for line, size in zip(_raw(offsets), lengths)
    ]
    BytesLogHook.chunk = chunk
    log_file: list[str] = []
    for cut in cuts:
        resumed = ledger_from_records(records_from_lines(log_file))
        records = await _trigger_run(raw, resumed, BytesLogHook)
        log_file += [json.dumps(r) for r in records[: int(cut * len(records))]]
    log_file += [
        json.dumps(r)
        for r in await _trigger_run(raw, ledger_from_records(records_from_lines(log_file)), BytesLogHook)
    ]

    messages = [json.loads(line)["event"] for line in log_file]
    launcher = [m for m in messages if not m.startswith("==========")]
    assert _joined(launcher) == "".join(f"{split_timestamp(line)[1]}\n" for line in raw)
    assert any("[line cut at" in m for m in launcher) == any(
        len(split_timestamp(ln)[1].encode()) > MAX_LINE for ln in raw
    )
