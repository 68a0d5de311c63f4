from __future__ import annotations

import pytest

from airflow_mpi.hooks.answers import split_timestamp
from airflow_mpi.wait.logs import LogCursor, stream_key

KEY = stream_key("job-launcher-abc", "launcher", 0)


def lines(*pairs: tuple[str, str]) -> list[str]:
    return [f"{ts} {msg}" for ts, msg in pairs]


def read(cursor: LogCursor, key: str, raw: list[str]) -> list[str]:
    log_pass = cursor.new_pass(key)
    return [m for m in (log_pass.accept(r) for r in raw) if m is not None]


def test_split_timestamp_handles_nanoseconds_and_offsets():
    assert split_timestamp("2026-11-22T10:00:00.000000001Z hello") == ((1795341600, 1), "hello")
    assert split_timestamp("2026-11-22T11:00:00+01:00 x")[0] == (1795341600, 0)
    assert split_timestamp("no timestamp here") == (None, "no timestamp here")


def test_reconnect_with_second_precision_drops_exactly_the_repeats():
    first = lines(
        ("2026-11-22T10:00:00.100Z", "a"),
        ("2026-11-22T10:00:01.200Z", "b"),
        ("2026-11-22T10:00:01.200Z", "b-again-same-stamp"),
    )
    cursor = LogCursor()
    assert read(cursor, KEY, first) == ["a", "b", "b-again-same-stamp"]
    assert cursor.since_time(KEY) == "2026-11-22T10:00:01Z"
    # The server answers from the whole second on: both lines at .200 again, plus new ones.
    second = first[1:] + lines(("2026-11-22T10:00:01.200Z", "third-at-same-stamp"), ("2026-11-22T10:00:02Z", "c"))
    assert read(cursor, KEY, second) == ["third-at-same-stamp", "c"]


def test_cursor_survives_serialisation():
    cursor = LogCursor()
    read(cursor, KEY, lines(("2026-11-22T10:00:00Z", "a"), ("2026-11-22T10:00:00Z", "a2")))
    restored = LogCursor.from_dict(cursor.to_dict())
    assert read(restored, KEY, lines(("2026-11-22T10:00:00Z", "a"), ("2026-11-22T10:00:00Z", "a2"), ("2026-11-22T10:00:03Z", "b"))) == ["b"]


def test_streams_are_independent_and_unstamped_lines_are_never_dropped():
    cursor = LogCursor()
    other = stream_key("job-launcher-abc", "launcher", 1)
    read(cursor, KEY, lines(("2026-11-22T10:00:05Z", "late")))
    assert read(cursor, other, lines(("2026-11-22T10:00:00Z", "early"))) == ["early"]
    assert read(cursor, KEY, ["garbage without stamp"]) == ["garbage without stamp"]
    assert cursor.position(stream_key("p", "c", 0)) is None  # a stream never read


@pytest.mark.parametrize("raw", ["2026-11-22T10:00:00Z older", "2026-11-22T09:59:59.999999999Z older"])
def test_older_lines_are_dropped(raw):
    cursor = LogCursor()
    read(cursor, KEY, lines(("2026-11-22T10:00:00.5Z", "x")))
    assert read(cursor, KEY, [raw]) == []


def test_a_resumed_read_that_no_longer_has_the_last_line_printed_names_the_gap():
    """A kubelet serves only the current log file: after a rotation the answer starts past the last line printed."""
    printed = lines(("2026-11-22T10:00:00.100Z", "a"), ("2026-11-22T10:00:01.200Z", "b"))
    cursor = LogCursor()
    read(cursor, KEY, printed)
    rotated = cursor.new_pass(KEY)  # "b" and whatever followed it went with the rotated file
    assert rotated.accept("2026-11-22T10:00:07.500Z d") == "d"
    assert rotated.gap == ((1795341601, 200_000_000), (1795341607, 500_000_000))
    assert rotated.accept("2026-11-22T10:00:08Z e") == "e" and rotated.gap == ((1795341601, 200_000_000), (1795341607, 500_000_000))


@pytest.mark.parametrize("answer", [
    ["2026-11-22T10:00:01.200Z b", "2026-11-22T10:00:07.500Z d"],  # the last line printed comes back first
    ["2026-11-22T10:00:01.200Z b"],  # nothing new yet
    [],
])
def test_a_resumed_read_that_starts_at_the_last_line_printed_has_no_gap(answer):
    cursor = LogCursor()
    read(cursor, KEY, lines(("2026-11-22T10:00:00.100Z", "a"), ("2026-11-22T10:00:01.200Z", "b")))
    log_pass = cursor.new_pass(KEY)
    [log_pass.accept(raw) for raw in answer]
    assert log_pass.gap is None
    assert LogCursor().new_pass(KEY).gap is None  # a first read has nothing to miss by this measure
