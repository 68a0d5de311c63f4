"""scripts/test_report.py: what the end of a test run says about its time, its builds and its counts."""

from __future__ import annotations

import importlib.util
import io
import os
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test_report.py"
spec = importlib.util.spec_from_file_location("test_report", SCRIPT)
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)

VENV = "virtualenv .venv (the checkout's own)"


def ledger(tmp_path: Path, *rows: tuple[str, str, int]) -> Path:
    (tmp_path / "test-builds.tsv").write_text("".join(f"{w}\t{s}\t{n}\n" for w, s, n in rows))
    return tmp_path


@pytest.mark.parametrize(
    ("rows", "kind"),
    [
        ([("Go binaries (k8s)", "built now", 900), ("image a", "built now", 60)], "cold"),
        (
            [("Go binaries (k8s)", "cached", 0), ("image a", "cached", 2), ("image a", "built now", 60)],
            "partly cold",
        ),
        ([("Go binaries (k8s)", "cached", 0), ("image a", "cached", 2), (VENV, "built now", 70)], "warm"),
    ],
)
def test_a_run_is_cold_partly_cold_or_warm_by_what_it_built_the_checkouts_virtualenvs_aside(
    tmp_path, rows, kind
):
    built = report.builds(ledger(tmp_path, *rows) / "test-builds.tsv")
    assert report.kind_of(built)[0] == kind


def test_a_build_counts_its_building_steps_and_a_cached_one_its_longest_wait(tmp_path):
    path = (
        ledger(
            tmp_path,
            ("image a", "built now", 50),
            ("image a", "cached", 400),
            ("image a", "built now", 10),
            ("image b", "cached", 0),
            ("image b", "cached", 30),
        )
        / "test-builds.tsv"
    )
    assert report.builds(path) == {"image a": (True, 60), "image b": (False, 30)}


def test_the_report_says_the_time_against_the_target_of_the_runs_kind_and_what_the_counts_are(tmp_path):
    ledger(tmp_path, ("Go binaries (k8s)", "cached", 0), ("image a", "built now", 60))
    case = '<testcase classname="m" name="{}">{}</testcase>'
    for run, cases in {
        "unit": [("t1", ""), ("t2", "<skipped/>")],
        "af2-unit": [("t1", ""), ("t2", "<failure/>")],
        "af34-unit": [("t1", ""), ("t3", "")],  # t3: a unit test on one Airflow version only
        "real-node": [("r1", ""), ("r2", "<skipped/>")],
    }.items():
        body = "".join(case.format(name, child) for name, child in cases)
        (tmp_path / f"junit-{run}.xml").write_text(f"<testsuites><testsuite>{body}</testsuite></testsuites>")
    out = io.StringIO()
    report.report(tmp_path, total=26 * 60, out=out)
    text = out.getvalue()
    assert "run af2-unit: 1 passed, 1 failed" in text
    assert (
        "5 distinct tests; 2 of them are unit tests run on more than one Airflow version "
        "(runs unit, af2-unit, af34-unit); 1 ran real containers" in text
    )
    assert "== this run was partly cold: built now: image a ==" in text
    assert "1,560 s (26.0 min): OVER the target of 25 min by 1.0 min" in text


# /proc/stat's aggregate line: user nice system idle iowait irq softirq steal guest guest_nice
CPU_START = "cpu  1000 20 300 5000 100 0 30 0 400 0"
CPU_END = "cpu  2500 20 600 5200 150 0 80 0 900 0"  # 1,850 ticks busy of 2,100; guest time within user


def test_cpu_ticks_count_every_field_but_idle_and_iowait_and_guest_time_once():
    assert report.cpu_ticks(CPU_START) == (1350, 6450)
    assert report.cpu_use(CPU_START, CPU_END, hz=100) == (18.5, 21.0)
    with pytest.raises(ValueError, match="cpu0 1 2 3 4"):
        report.cpu_ticks("cpu0 1 2 3 4")  # a core's line, not the machine's


def test_the_report_says_how_busy_the_machine_was_when_the_run_noted_its_start(tmp_path):
    hz = os.sysconf("SC_CLK_TCK")
    out = io.StringIO()
    report.report(tmp_path, total=60, out=out, cpu_now=CPU_END)
    assert "CPU" not in out.getvalue()  # no reading at the start: nothing to say
    (tmp_path / "cpu-start.txt").write_text(CPU_START + "\n")
    report.report(tmp_path, total=60, out=out, cpu_now=CPU_END)
    busy, cores = 1850 / hz, 2100 / hz
    assert (
        f"the machine's CPU (whatever ran on it): {busy:,.0f} s busy of {cores:,.0f} core-seconds "
        f"({100 * busy / cores:.0f} %)" in out.getvalue()
    )


def test_the_go_build_step_notes_built_now_once_and_cached_for_a_second_caller(tmp_path, monkeypatch):
    """localcluster/build.py's _build_once: the first caller builds (noted built now), a later one finds it built."""
    from localcluster import build

    monkeypatch.setenv("AIRFLOW_MPI_BUILDS", str(tmp_path / "test-builds.tsv"))
    final = tmp_path / "bin" / "key"

    def make(log: Path) -> Path:
        final.mkdir(parents=True)
        return final

    for _ in range(2):
        built = build._build_once(
            "Go binaries (t)", final, final.is_dir, make, log=tmp_path / "t.log", cold="", verbose=False
        )
        assert built == final
    lines = (tmp_path / "test-builds.tsv").read_text().splitlines()
    assert [ln.split("\t")[:2] for ln in lines] == [
        ["Go binaries (t)", "built now"],
        ["Go binaries (t)", "cached"],
    ]


PROGRESS = """#5 [airflow-init 2/7] RUN apt-get update  && apt-get install -y python3
#5 {apt}
#9 [airflow-init 6/7] COPY airflow_mpi/ /src/airflow_mpi/
#9 DONE 0.1s
#10 [airflow-init 7/7] RUN --mount=type=cache,target=/root/.cache/pip pip install -q --no-deps /src && rm -rf /src
#10 DONE 8.1s
#11 exporting to image
#11 DONE 1.0s
"""


@pytest.mark.parametrize(
    ("apt", "what"),
    [
        ("CACHED", "compose images: this checkout's provider layer (the checkout's own)"),
        ("DONE 41.2s", "compose images"),
    ],
)
def test_a_compose_build_that_only_reinstalled_the_checkout_is_the_checkouts_own(
    tmp_path, monkeypatch, apt, what
):
    """tests/compose/images.py: BuildKit's plain progress tells the steps that ran from the cached ones."""
    import subprocess
    from types import SimpleNamespace

    from tests.compose import images

    monkeypatch.setenv("AIRFLOW_MPI_BUILDS", str(tmp_path / "test-builds.tsv"))
    monkeypatch.setattr(
        subprocess,
        "run",
        lambda *a, **k: SimpleNamespace(returncode=0, stdout="", stderr=PROGRESS.format(apt=apt)),
    )
    images.compose_build(["airflow-init"], "p", "compose images")
    assert (tmp_path / "test-builds.tsv").read_text().split("\t")[:2] == [what, "built now"]
