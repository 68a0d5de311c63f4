from __future__ import annotations

import hashlib
import re
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_mpi.hooks.answers import MAX_LOG_LINE_BYTES, LineSplitter, iter_lines, split_timestamp
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
    second = first[1:] + lines(
        ("2026-11-22T10:00:01.200Z", "third-at-same-stamp"), ("2026-11-22T10:00:02Z", "c")
    )
    assert read(cursor, KEY, second) == ["third-at-same-stamp", "c"]


def test_cursor_survives_serialisation():
    cursor = LogCursor()
    read(cursor, KEY, lines(("2026-11-22T10:00:00Z", "a"), ("2026-11-22T10:00:00Z", "a2")))
    restored = LogCursor.from_dict(cursor.to_dict())
    assert read(
        restored,
        KEY,
        lines(("2026-11-22T10:00:00Z", "a"), ("2026-11-22T10:00:00Z", "a2"), ("2026-11-22T10:00:03Z", "b")),
    ) == ["b"]


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
    assert rotated.accept("2026-11-22T10:00:08Z e") == "e" and rotated.gap == (
        (1795341601, 200_000_000),
        (1795341607, 500_000_000),
    )


@pytest.mark.parametrize(
    "answer",
    [
        [
            "2026-11-22T10:00:01.200Z b",
            "2026-11-22T10:00:07.500Z d",
        ],  # the last line printed comes back first
        ["2026-11-22T10:00:01.200Z b"],  # nothing new yet
        [],
    ],
)
def test_a_resumed_read_that_starts_at_the_last_line_printed_has_no_gap(answer):
    cursor = LogCursor()
    read(cursor, KEY, lines(("2026-11-22T10:00:00.100Z", "a"), ("2026-11-22T10:00:01.200Z", "b")))
    log_pass = cursor.new_pass(KEY)
    [log_pass.accept(raw) for raw in answer]
    assert log_pass.gap is None
    assert LogCursor().new_pass(KEY).gap is None  # a first read has nothing to miss by this measure


# ---------------------------------------------------------------- a line without a newline (issue 32, item 11)
def _message_of(pieces: list[str], stamp: str) -> str:
    """The line's message the pieces of it add up to, marks taken off."""
    text = ""
    for piece in pieces:
        assert piece.startswith(stamp + " ")  # every piece carries the line's timestamp
        body = re.sub(r"^\[line continued from byte \d+\] ", "", piece[len(stamp) + 1 :])
        text += re.sub(r" \[line cut at \d+ bytes\]$", "", body)
    return text


def test_a_10_mb_line_without_a_newline_is_held_at_most_the_cap_and_passed_on_in_marked_pieces():
    """tqdm's progress bar: carriage returns, never a newline, for 10 MB. Before, the splitter held it whole (and
    the triggerer logged it as one record); now it holds the cap and a chunk, and every piece is marked."""
    stamp = "2026-11-22T10:00:01.123456789Z"
    bar = "".join(f"\r{i % 100:3d}%|{'█' * (i % 40):<40}| {i}/100000" for i in range(100_000)).encode()
    assert len(bar) > 9_800_000
    splitter = LineSplitter(MAX_LOG_LINE_BYTES)
    received, offset, pieces, longest = hashlib.sha256(), 0, 0, 0

    def take(lines: list[str]) -> None:  # each piece checked and dropped, as the task log's handler would
        nonlocal offset, pieces, longest
        for piece in lines:
            message = _message_of([piece], stamp).encode()
            assert (offset == 0) == ("[line continued from byte" not in piece)
            assert offset == 0 or piece.startswith(f"{stamp} [line continued from byte {offset}] ")
            offset += len(message)
            assert piece.endswith(f" [line cut at {offset} bytes]") == (offset < len(bar))
            received.update(message)
            pieces, longest = pieces + 1, max(longest, len(message))

    tracemalloc.start()
    take(splitter.feed(stamp.encode() + b" "))
    for start in range(0, len(bar), 65536):  # aiohttp's chunks
        take(splitter.feed(bar[start : start + 65536]))
    take(splitter.feed(b"\n"))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert (
        peak < 16 * MAX_LOG_LINE_BYTES
    )  # the cap, a chunk, pieces decoded (0.6 MB): was the whole line, 10 MB
    assert received.digest() == hashlib.sha256(bar).digest() and offset == len(bar)  # no byte lost or doubled
    assert longest <= MAX_LOG_LINE_BYTES and len(bar) // MAX_LOG_LINE_BYTES < pieces < len(bar) // 65533 + 2


@given(
    data=st.binary(min_size=100, max_size=300), sizes=st.lists(st.integers(1, 40), min_size=1, max_size=30)
)
def test_a_line_is_cut_into_the_same_pieces_whatever_chunks_it_arrives_in(data, sizes):
    """What makes a resumed read exact: the pieces of a line depend on the line only (the cursor counts them)."""
    raw = b"2026-11-22T10:00:01Z " + data.replace(b"\n", b"x") + b"\nnext\n2026-11-22T10:00:02Z tail"
    whole = list(iter_lines([raw], 48))  # over the 36 bytes a timestamp takes at most
    chunks, at = [], 0
    for size in sizes * (len(raw) // sum(sizes) + 1):
        chunks.append(raw[at : at + size])
        at += size
    assert list(iter_lines(chunks, 48)) == whole
    assert all(
        len(piece) <= 21 + 48 + 60 for piece in whole if piece.startswith("2026-11-22T10:00:01Z")
    )  # chars
    if b"\xef\xbf\xbd" not in data and _valid_utf8(data):
        first = [p for p in whole if p.startswith("2026-11-22T10:00:01Z")]
        assert _message_of(first, "2026-11-22T10:00:01Z") == data.replace(b"\n", b"x").decode().removesuffix(
            "\r"
        )


def _valid_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True
