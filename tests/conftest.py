"""Every test session gets its own AIRFLOW_HOME (set before Airflow is first imported).

The Airflow 3 and 2.11 environments must not share ``~/airflow/airflow.cfg``: each writes defaults
the other cannot load (e.g. Airflow 3's XCom backend path).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

if "AIRFLOW_MPI_KEEP_AIRFLOW_HOME" not in os.environ:
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="airflow-mpi-tests-home-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], True)
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
# Operators run in-process here, outside any deployment's task runner: they get a pinned deployment identity
# (the e2e and compose stacks run real deployments with an environment of their own, without this variable).
os.environ.setdefault("AIRFLOW__AIRFLOW_MPI__DEPLOYMENT_ID", "tests-in-process")
os.environ.setdefault(
    "AIRFLOW__AIRFLOW_MPI__INSTALLATION", "tests-in-process"
)  # and the installation holding it


# ------------------------------------------------------------------ where a run's time goes (scripts/test's table)
import time

_SUITE_SPANS: dict[str, list[float]] = {}


def _suite(nodeid: str) -> str:
    parts = nodeid.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def pytest_runtest_logstart(nodeid, location):
    span = _SUITE_SPANS.setdefault(_suite(nodeid), [time.time(), time.time()])
    span[1] = time.time()


def pytest_runtest_logfinish(nodeid, location):
    _SUITE_SPANS[_suite(nodeid)][1] = time.time()


def pytest_terminal_summary(terminalreporter):
    """Each suite's wall time, first test's start to last test's end (package fixtures included), also appended
    to $AIRFLOW_MPI_PHASES (scripts/test prints the whole run's table from it)."""
    if not _SUITE_SPANS:
        return
    terminalreporter.section("wall time per suite")
    rows = [(suite, end - start) for suite, (start, end) in _SUITE_SPANS.items()]
    for suite, seconds in rows:
        terminalreporter.write_line(f"{seconds:8.1f} s  {suite}")
    phases = os.environ.get("AIRFLOW_MPI_PHASES")
    if phases:
        with open(phases, "a") as out:
            run = f" (run {os.environ['AIRFLOW_MPI_RUN']})" if os.environ.get("AIRFLOW_MPI_RUN") else ""
            out.writelines(f"  suite {suite}{run}\t{seconds:.0f}\n" for suite, seconds in rows)
