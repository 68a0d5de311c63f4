"""benchmarks/p1_real.py's arithmetic and its section of docs/benchmarks.md (no cluster: the runs are given)."""

from __future__ import annotations

from benchmarks.p1_real import LineClock, container_end, latencies
from benchmarks.waits_report import write_report


def test_container_end_is_the_later_of_finished_at_and_the_last_line():
    assert container_end(100.0, 100.62) == 100.62  # finishedAt truncated to the second
    assert container_end(100.0, None) == 100.0  # no line seen: finishedAt
    assert container_end(101.0, 100.98) == 101.0  # mpirun exited in the next second


def test_the_clock_counts_only_the_launchers_last_line_as_printed():
    clock = LineClock()
    clock.info("%s", "start")
    clock.info("%s", "end")
    clock.warning("end of something")
    clock.info("end")
    assert len(clock.times) == 2


def run(end: float, done: float, **seen: float) -> dict:
    return {"container_end": end, "finished_at": int(end), "done": done, **seen}


def test_latencies_are_from_the_container_end_and_unseen_ones_are_none():
    got = latencies(
        run(
            10.5,
            12.0,
            seen_ended=11.0,
            follow_ended=10.9,
            task_log_end=[10.75],
            pump_follows=[[8.0, "cut"], [10.8, "eof"]],
        )
    )
    assert got == {
        "status_seen": 0.5,
        "follow_ended": 0.4,
        "pump_follow_ended": 0.3,
        "task_log_end": 0.25,
        "job_complete": None,
        "succeeded": None,
        "done": 1.5,
    }


def test_report_has_the_real_node_table_and_its_target_row(tmp_path):
    # last lines 0.6-0.8 s into finishedAt's second: the true ends are at most 0.4, 0.3, 0.2 s later
    on = [
        run(
            end,
            end + d,
            seen_ended=end + 0.5,
            follow_ended=end + 0.2,
            task_log_end=[end + 0.1],
            job_complete=end + d - 0.15,
            succeeded=end + d - 0.1,
            pump_follows=[[end + 0.3, how]],
        )
        for end, d, how in ((10.6, 1.2, "eof"), (10.7, 0.8, "cut"), (10.8, 0.9, "eof"))
    ]
    off = [run(20.0, 20.7, seen_ended=20.5, follow_ended=20.3)]
    results = {
        "date": "2026-11-23 09:50 UTC",
        "machine": "vm",
        "p1_real": {
            "date": "2026-11-23 09:50 UTC",
            "machine": "vm",
            "kubelet": "v1.34.1",
            "runtime": "containerd://2.1",
            "program": "sh -c 'echo end'",
            "runs": {"sync execute, logs on": on, "sync execute, logs off": off},
        },
    }
    out = tmp_path / "benchmarks.md"
    write_report(results, out)
    text = out.read_text()
    assert "a REAL node" in text and "kubelet v1.34.1" in text
    assert "high by at most 0.40 s in half the runs, 1.00 s in all" in text
    (row_on,) = [ln for ln in text.splitlines() if ln.startswith("| sync execute, logs on |")]
    assert row_on.split(" | ")[1:3] == ["3", "0.90 / 1.20 / 1.20"] and row_on.endswith("| 1 x | 2 / 1 |")
    (row_off,) = [ln for ln in text.splitlines() if ln.startswith("| sync execute, logs off |")]
    assert "| 0.70 / 0.70 / 0.70 |" in row_off and "| - |" in row_off and row_off.endswith("| 0 x | 0 / 0 |")
    target = (
        "| P1 p95 with logs on <= 1 s, real node (sync execute) | 1.20 s (the wait's own share <= 0.100 s) |"
    )
    assert f"{target} 0.20 s over |" in text
    assert "all runs: p50 0.100 s, max 0.100 s" in text
    assert "pod status seen -> launcher Job Complete p50 0.25 s, max 0.55 s" in text
