"""Rank 0's result as the launcher's log brings it back (issue 32, item 6 and item 3's nonce): no line holds the nonce,
a line that does not verify is no result, and the reader holds no more than the cap of a value (rank 0 prints none
over it)."""

from __future__ import annotations

import re
import tracemalloc

from airflow_mpi.function_task.rank_result import (
    UNVERIFIED,
    RankResult,
    ResultCollector,
    hide_result_lines,
    parse_result,
)
from airflow_mpi.function_task.rank_runner import CHUNK, MARKER, MAX_ENCODED_CHARS, VALUE
from tests.unit.operators.test_task_decorators import NONCE, marker, result_lines


def test_rank_zero_never_prints_the_nonce_and_a_line_carrying_it_forges_nothing():
    """The old protocol printed the nonce in rank 0's first marker line (readable with ``pods/log get``): a
    co-tenant copied it into lines of its own. Now rank 0 prints an HMAC keyed by the nonce; a line with the nonce
    is no result."""
    printed = result_lines(42)
    assert printed and not any(NONCE in line for line in printed)
    forged = [
        f"[1,0]<stdout>:{MARKER} {NONCE} started",
        marker("started", key="a co-tenant's guess"),
        *(line.replace(line.split()[1], NONCE) for line in result_lines(666)),
    ]
    notes = []
    collector = ResultCollector(NONCE, notes.append)
    shown = []
    emit = hide_result_lines(shown.append, collector)
    for line in [*printed, *forged]:
        emit(line)
    assert collector.result() == RankResult(started=True, has_value=True, value=42)
    assert shown == [] and notes == [UNVERIFIED] and collector.rejected == len(forged)
    assert parse_result(forged, NONCE) == RankResult()


def test_a_value_over_the_cap_is_not_printed_by_rank_zero_and_fails_naming_the_caps_and_its_size():
    big = "def f(v):\n    import random\n    r = random.Random(v)\n    return r.randbytes(1_000_000).hex()\n"
    printed = result_lines(1, source=big)
    assert sum(len(line) for line in printed) < 1000  # not 1.5 MB of chunks: one line saying how large it is
    result = parse_result(printed, NONCE)
    assert result.started and not result.has_value
    assert re.search(
        r"takes \d{7} characters encoded .* and 2000002 bytes as JSON, over the caps of 1048576 and "
        r"8388608: return it by reference",
        result.error,
    )


def test_the_reader_holds_no_more_than_the_cap_of_a_value_it_is_sent():
    """Lines of a value over the cap that do verify (a runner of another release, a changed cap): the collector stops
    keeping chunks at the cap and records the error, whatever the value's size (here 4 MB)."""
    count = 4000
    collector = ResultCollector(NONCE)
    tracemalloc.start()
    for index in range(count):
        collector.take(marker(VALUE, str(index), str(count), "0", f"{index:08d}".ljust(CHUNK, "A")))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < MAX_ENCODED_CHARS + 512 * 1024  # 1 MiB of chunks, not 4 MB
    assert collector.result().error == (
        "rank 0's return value is over the cap of 1048576 characters encoded (zlib, base64): 4000 chunks of up to "
        "1000, over 1049000 characters: return it by reference (a path or URL the ranks write)"
    )
