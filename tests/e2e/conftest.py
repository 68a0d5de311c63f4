"""End-to-end fixtures: one PostgreSQL + Airflow 3 stack (api-server, scheduler, dag-processor, triggerer) per session.

Service logs and task logs stay under .artifacts/e2e/airflow-home/ (gitignored) for inspection after a run.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # airflowstack/ and localcluster/ are dev-only folders, not installed
    sys.path.insert(0, str(REPO))

from airflowstack import AirflowStack  # noqa: E402

ARTIFACTS = REPO / ".artifacts" / "e2e"
E2E_DAGS = Path(__file__).resolve().parent / "dags"


def _require_installed() -> None:
    try:
        importlib.metadata.distribution("airflow-mpi")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("airflow-mpi is not installed in this environment: run scripts/bootstrap first", pytrace=False)


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def dags_folder(tmp_path_factory) -> Path:
    """The repository's example DAGs plus the e2e-only DAGs, linked into one folder."""
    folder = tmp_path_factory.mktemp("dags")
    for src in sorted((REPO / "dags").glob("*.py")) + sorted(E2E_DAGS.glob("*.py")):
        (folder / src.name).symlink_to(src)
    return folder


@pytest.fixture(scope="session")
def airflow_stack(dags_folder, artifacts_dir):
    _require_installed()
    home = artifacts_dir / "airflow-home"
    shutil.rmtree(home, ignore_errors=True)
    stack = AirflowStack(dags_folder, home=home)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def client(airflow_stack):
    return airflow_stack.client()
