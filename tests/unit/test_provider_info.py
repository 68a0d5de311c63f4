from __future__ import annotations

import importlib
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import airflow_mpi
from airflow_mpi.get_provider_info import get_provider_info
from localcluster.processes import child_env


def test_entry_point_points_at_get_provider_info():
    (ep,) = [e for e in entry_points(group="apache_airflow_provider") if e.value.startswith("airflow_mpi.")]
    assert ep.load() is get_provider_info


def test_every_listed_module_imports_and_versions_match():
    info = get_provider_info()
    assert info["package-name"] == "airflow-mpi" and info["versions"] == [airflow_mpi.__version__]
    for kind in ("operators", "sensors", "hooks", "triggers"):
        for entry in info[kind]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    for conn in info["connection-types"]:
        module, _, cls = conn["hook-class-name"].rpartition(".")
        hook = getattr(importlib.import_module(module), cls)
        assert hook.conn_type == conn["connection-type"]


def test_airflow_lists_the_provider():
    airflow = Path(sys.executable).with_name("airflow")
    out = subprocess.run(
        [str(airflow), "providers", "list", "-o", "plain"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env=child_env(),
    ).stdout
    rows = [line.split() for line in out.splitlines()]
    assert any(row[0] == "airflow-mpi" and row[-1] == airflow_mpi.__version__ for row in rows if row), out
