"""The end of scripts/test: where the time went, what was cold, what the counts are, and the closing line.

Reads what the run wrote into .artifacts/: the phases' wall times (``test-phases.tsv``: scripts/test and
tests/conftest.py), the build ledger (``test-builds.tsv``: localcluster/build_ledger.py and the shell steps), each
pytest run's JUnit XML (``junit-<run>.xml``) and the machine's CPU counters at the start (``cpu-start.txt``: the
first line of /proc/stat), to say how busy the machine was: a run that kept every core busy is CPU-bound, and no
new order of its lanes shortens it (docs/test-loop.md, runs M and N). Stdlib only: it runs even when the
virtualenvs could not be made.

A run's time is reported against the README's targets and never decides the exit code: a green run exits 0.
"""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # localcluster/ (dev-only, not installed); build_ledger needs only the stdlib
from localcluster.build_ledger import BUILT, CACHED, CHECKOUT_OWN  # noqa: E402 - what is built, what every clone rebuilds

ARTIFACTS = REPO / ".artifacts"
# the README's targets (minutes), by what the run found built: nothing (cold), everything (warm), or in between
# (the Go binaries built, as after scripts/demo on a fresh machine, but an image or add-on missing)
TARGETS = {"cold": 40, "partly cold": 25, "warm": 15}
GO_BINARIES = "Go binaries"
# pytest runs whose tests run real containers (the real node's ranks, the compose stack)
REAL_CONTAINER_RUNS = ("real-node", "compose")
# the unit suite's pytest runs, one per Airflow version (3.3.2, 2.11, 3.4.0b2: scripts/bootstrap's virtualenvs)
UNIT_RUNS = ("unit", "af2-unit", "af34-unit")


def cpu_ticks(stat_line: str) -> tuple[int, int]:
    """(busy, total) clock ticks of /proc/stat's ``cpu`` line: busy is all but idle and iowait; guest time is
    already in user and nice, so it is not counted again."""
    name, *fields = stat_line.split()
    if name != "cpu" or len(fields) < 5:
        raise ValueError(f"not the aggregate cpu line of /proc/stat: {stat_line!r}")
    ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def cpu_use(start_line: str, end_line: str, hz: int) -> tuple[float, float]:
    """(busy CPU seconds, core-seconds) between two readings of /proc/stat's ``cpu`` line."""
    (busy0, total0), (busy1, total1) = cpu_ticks(start_line), cpu_ticks(end_line)
    return (busy1 - busy0) / hz, (total1 - total0) / hz


def phases(path: Path) -> list[tuple[str, int]]:
    rows = (
        [line.split("\t") for line in path.read_text().splitlines() if "\t" in line] if path.exists() else []
    )
    return [(name, int(float(seconds))) for name, seconds in rows]


def builds(path: Path) -> dict[str, tuple[bool, int]]:
    """What -> (built now by any step, seconds of the steps that built it, or of the longest wait for it)."""
    seen: dict[str, list] = defaultdict(lambda: [False, 0, 0])
    rows = [line.split("\t") for line in path.read_text().splitlines()] if path.exists() else []
    for what, state, seconds in (r for r in rows if len(r) == 3):
        entry = seen[what]
        if state == BUILT:
            entry[0] = True
            entry[1] += int(seconds)
        entry[2] = max(entry[2], int(seconds))
    return {what: (built, built_s if built else waited) for what, (built, built_s, waited) in seen.items()}


def kind_of(built: dict[str, tuple[bool, int]]) -> tuple[str, list[str]]:
    """cold (the Go binaries were built now), partly cold (something else was), or warm; and what was built."""
    now = [what for what, (b, _) in built.items() if b and CHECKOUT_OWN not in what]
    if any(what.startswith(GO_BINARIES) for what in now):
        return "cold", now
    return ("partly cold" if now else "warm"), now


def junit_cases(folder: Path) -> dict[str, list[tuple[str, str]]]:
    """Run name -> [(test id, outcome)] from each run's JUnit XML."""
    runs: dict[str, list[tuple[str, str]]] = {}
    for xml in sorted(folder.glob("junit-*.xml")):
        try:
            root = ET.parse(xml).getroot()
        except ET.ParseError:
            continue
        cases = []
        for case in root.iter("testcase"):
            tags = {child.tag for child in case}
            outcome = (
                "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
            )
            cases.append((f"{case.get('classname')}::{case.get('name')}", outcome))
        runs[xml.stem.removeprefix("junit-")] = cases
    return runs


def counts(cases: list[tuple[str, str]]) -> str:
    tally = defaultdict(int)
    for _, outcome in cases:
        tally[outcome] += 1
    return ", ".join(f"{tally[o]} {o}" for o in ("passed", "failed", "skipped") if tally[o] or o == "passed")


def _proc_stat_cpu() -> str | None:
    try:
        return Path("/proc/stat").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None


def report(artifacts: Path = ARTIFACTS, total: int = 0, out=sys.stdout, cpu_now: str | None = None) -> None:
    say = lambda line="": print(line, file=out)  # noqa: E731
    say("== where the time went ==")
    for name, seconds in phases(artifacts / "test-phases.tsv"):
        say(f"{seconds:7d} s  {name}")
    built = builds(artifacts / "test-builds.tsv")
    say("== what this run built, and what it found built (waits for another step's build count as cached) ==")
    for what, (b, seconds) in sorted(built.items(), key=lambda kv: (not kv[1][0], kv[0])):
        say(f"  {BUILT if b else CACHED:9s} {seconds:5d} s  {what}")
    runs = junit_cases(artifacts)
    if runs:
        say("== the tests: each pytest run, then distinct tests ==")
        for run, cases in runs.items():
            say(f"  run {run}: {counts(cases)}")
        distinct = {test for cases in runs.values() for test, _ in cases}
        runs_of = Counter(t for r in UNIT_RUNS for t in {t for t, _ in runs.get(r, [])})
        on_several = [t for t, n in runs_of.items() if n > 1]
        real = {t for r in REAL_CONTAINER_RUNS for t, o in runs.get(r, []) if o != "skipped"}
        say(
            f"  {len(distinct)} distinct tests; {len(on_several)} of them are unit tests run on more than one "
            f"Airflow version (runs {', '.join(UNIT_RUNS)}); "
            f"{len(real)} ran real containers (runs {', '.join(REAL_CONTAINER_RUNS)})"
        )
    kind, now = kind_of(built)
    target = TARGETS[kind]
    verdict = (
        f"within the target of {target} min"
        if total <= target * 60
        else f"OVER the target of {target} min by {(total - target * 60) / 60:.1f} min"
    )
    say(f"== this run was {kind}{': built now: ' + '; '.join(now) if now else ' (nothing built now)'} ==")
    say(
        f"  {total:,} s ({total / 60:.1f} min): {verdict} for a {kind} run (README, Tests; reported, not an exit code)"
    )
    start, end = artifacts / "cpu-start.txt", cpu_now or _proc_stat_cpu()
    if start.exists() and end:
        busy, cores = cpu_use(start.read_text().strip(), end, os.sysconf("SC_CLK_TCK"))
        say(
            f"  the machine's CPU (whatever ran on it): {busy:,.0f} s busy of {cores:,.0f} core-seconds "
            f"({100 * busy / cores if cores else 0:.0f} %); near 100 % the run is CPU-bound"
        )


if __name__ == "__main__":
    report(total=int(sys.argv[1]) if len(sys.argv) > 1 else 0)
