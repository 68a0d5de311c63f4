"""Log groups: only the provider's own balanced markers fold the task log; text from elsewhere never opens or closes
a group in either Airflow version's view, and reads as it was printed."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_mpi.wait.log_groups import ESCAPE, GROUP_END, GROUP_START, escape, log_group
from airflow_mpi.wait.monitor import JobMonitor
from tests.unit.fakes import FakeAsyncHook, job, pod
from tests.unit.log_views import Group, LevelRecorder, airflow2_view, airflow3_view, groups

NOW = datetime.now(UTC)
# every spelling either view takes for a marker, anywhere in a line (Airflow 2 needs " INFO - " before it)
ANY_MARKER = re.compile(r"(::|##\[\]?)(end)?group(::|\])")
MARKERS = ["::group::", "::endgroup::", "##[group]", "##[endgroup]", "##[]group]", "##[]endgroup::"]


@given(
    st.lists(st.sampled_from([*MARKERS, ":", "#", "[", "]", "group", "end", " INFO - ", "x", ESCAPE])).map(
        "".join
    )
)
def test_escaped_text_holds_no_marker_and_reads_the_same(text):
    escaped = escape(text)
    assert not ANY_MARKER.search(escaped)
    assert escaped.replace(ESCAPE, "") == text.replace(ESCAPE, "")  # only invisible characters were added


@pytest.mark.parametrize(
    "line", ["[1,0]<stdout>:loss 0.1", "a group of ranks", "::airflow-mpi-result:: x", ""]
)
def test_ordinary_lines_are_left_alone(line):
    assert escape(line) == line


@pytest.mark.parametrize("view", [airflow3_view, airflow2_view])
def test_a_group_holds_what_was_logged_inside_and_is_closed_when_the_block_raises(view):
    log = LevelRecorder()
    with pytest.raises(RuntimeError), log_group(log, "settings"):
        log.info("workers=2 (parameter)")
        log.info(
            "MPIJob manifest:\nspec:\n  command: [echo, '::group::x']".replace(
                "::group::", escape("::group::")
            )
        )
        raise RuntimeError("build failed")
    log.info("after")
    assert log.records[0] == ("INFO", f"{GROUP_START}settings") and log.records[-2] == ("INFO", GROUP_END)
    (group, after) = view(log.records)
    assert isinstance(group, Group) and group.title == "settings" and after == "after"
    assert "workers=2 (parameter)" in group.items and groups(group.items) == []


def _finished_job_printing(lines: list[str]) -> FakeAsyncHook:
    stamps = [f"2026-11-22T10:00:{i + 1:02d}Z {line}" for i, line in enumerate(lines)]
    return FakeAsyncHook(
        job_obj=job("job", "ns", ("Created", "x"), ("Succeeded", "MPIJobSucceeded")),
        launchers=[pod("job-launcher-a", state="terminated", phase="Succeeded")],
        logs={("job-launcher-a", False): stamps},
    )


LAUNCHER_MARKERS = [
    "::group::from the program",  # as Airflow's own examples print them
    "[1,0]<stdout>:::group::tagged by mpirun",
    "12:00:01 INFO - ::group::a Python log line",
    "##[group]Azure DevOps",
    "::endgroup::",
    "plain",
]


@pytest.mark.parametrize("view", [airflow3_view, airflow2_view])
async def test_launcher_lines_that_look_like_markers_fold_nothing_and_each_is_printed_once(view):
    hook = _finished_job_printing(LAUNCHER_MARKERS)
    lines: list[str] = []
    marked: list[tuple[str, str]] = []
    monitor = JobMonitor(
        hook,
        "job",
        "ns",
        emit=lines.append,
        emit_marked=lambda message, mark: marked.append((message, mark)),
        submitted_at=NOW,
        poll_interval=0.01,
    )
    assert (await monitor.run()).outcome == "success"
    printed = [message for message, _ in marked]
    assert printed[0].startswith("========== launcher attempt 1")
    assert [
        line.replace(ESCAPE, "") for line in printed[1:]
    ] == LAUNCHER_MARKERS  # each once, reading the same
    assert len({mark for _, mark in marked[1:]}) == len(LAUNCHER_MARKERS)  # one ledger position per line
    shown = view([("INFO", message) for message in printed])
    assert groups(shown) == [] and len(shown) == len(printed)
