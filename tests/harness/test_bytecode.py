"""scripts/test writes the bytecode of the checkout's own sources, whatever the environment says: where
PYTHONDONTWRITEBYTECODE is set (these machines set it), every pytest run, Airflow service, triggerer and task of a run
compiled the provider, the harness and the tests again (docs/test-loop.md, seventeenth session)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

import airflow_mpi
import localcluster

pytestmark = pytest.mark.skipif(
    "AIRFLOW_MPI_RUN" not in os.environ, reason="what scripts/test's runs see (AIRFLOW_MPI_RUN: a run of it)"
)


def test_a_run_of_scripts_test_writes_bytecode():
    assert not sys.dont_write_bytecode, (
        f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE')!r}"
    )


@pytest.mark.parametrize("package", [airflow_mpi, localcluster], ids=lambda p: p.__name__)
def test_the_checkouts_modules_come_with_their_bytecode(package):
    source = Path(package.__file__)
    assert Path(importlib.util.cache_from_source(str(source))).is_file(), source
