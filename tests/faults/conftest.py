"""Fault injection against real services: the e2e fixtures (real kube-apiserver and mpi-operator with simulated
kwok nodes, real Airflow 3 services), their own Airflow home under .artifacts/faults/, and a results table.

Each scenario runs ``REPEAT`` times (``AIRFLOW_MPI_FAULT_REPEAT``, default 1: the test command runs each once; the
measured run in docs/faults.md sets it higher) and records one row per run; at the
end of the package the table goes to ``.artifacts/faults/faults.md`` (copied into docs/faults.md by hand).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.e2e.conftest import (  # noqa: F401 - fixtures shared with the e2e package
    REPO,
    airflow_stack,
    client,
    cluster,
    cluster_boot,
    custom_api,
    dags_folder,
)
from tests.faults.record import Results

REPEAT = int(os.environ.get("AIRFLOW_MPI_FAULT_REPEAT", "1"))
ARTIFACTS = REPO / ".artifacts" / "faults"
DAGS = [
    "e2e_mpi_quick",
    "e2e_fault_sync",
    "e2e_fault_sync_last_try",
    "e2e_fault_cleanup_sync",
    "e2e_fault_cleanup_deferred",
    "e2e_fault_task_mpi",
]


@pytest.fixture(params=range(REPEAT), ids=lambda i: f"run{i + 1}")
def repeat(request) -> int:
    """Every scenario runs REPEAT times."""
    return request.param


@pytest.fixture(scope="package", autouse=True)
def simulated(cluster, client):
    """The scenarios script launcher lines and lifetimes: simulated nodes only; every fault DAG parsed."""
    if not cluster.simulated:
        pytest.skip("scripted launcher lines need the simulated cluster")
    client.wait_for_dags(DAGS, timeout=180)


@pytest.fixture(scope="package")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="package")
def results(artifacts_dir):
    table = Results()
    yield table
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    (artifacts_dir / "faults.md").write_text(table.markdown(started, REPEAT))
