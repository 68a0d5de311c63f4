"""Airflow 2.11 compatibility: ``airflow dags test mpi_pi`` in the Airflow 2.11 virtualenv against the same cluster.

The 2.11 environment is ``.venv-af2`` (``scripts/bootstrap`` creates it; ``AIRFLOW_MPI_AF2_VENV`` overrides).
``dags test`` runs the DAG in one process on a throw-away SQLite metadata database.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from airflowstack import kubernetes_connection
from airflowstack.kube import pi_output
from localcluster.processes import child_env

from .conftest import NAMESPACE, REPO

AF2_VENV = Path(os.environ.get("AIRFLOW_MPI_AF2_VENV") or REPO / ".venv-af2")


@pytest.fixture(scope="module")
def af2_airflow() -> Path:
    airflow = AF2_VENV / "bin" / "airflow"
    if not airflow.exists():
        pytest.fail(f"no Airflow 2.11 environment at {AF2_VENV}: run scripts/bootstrap", pytrace=False)
    version = subprocess.run(
        [str(AF2_VENV / "bin" / "python"), "-c", "import airflow; print(airflow.__version__)"],
        capture_output=True,
        text=True,
        check=True,
        env=child_env(),
    ).stdout.strip()
    assert version.startswith("2.11."), version
    return airflow


def test_dags_test_mpi_pi_on_airflow_2_11(af2_airflow, cluster, tmp_path, artifacts_dir):
    home = tmp_path / "af2-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__EXECUTOR": "SequentialExecutor",
            "AIRFLOW_CONN_KUBERNETES_DEFAULT": kubernetes_connection(cluster.kubeconfig, NAMESPACE),
            "PATH": f"{af2_airflow.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
    )
    subprocess.run(
        [str(af2_airflow), "db", "migrate"], env=env, cwd=home, check=True, capture_output=True, timeout=300
    )

    cluster.serve_launcher_logs(NAMESPACE, pi_output(4))
    conf = {"workers": 2, "slots_per_worker": 2}
    proc = subprocess.run(
        [str(af2_airflow), "dags", "test", "mpi_pi", "-c", json.dumps(conf)],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = proc.stdout + proc.stderr
    (artifacts_dir / "airflow2-dags-test.log").write_text(output)
    assert proc.returncode == 0, output[-5000:]
    assert "pi is approximately" in output, output[-5000:]
    if cluster.simulated:
        for line in pi_output(4):
            assert line in output
    assert "Succeeded" in output
    assert "slotsPerWorker: 2" in output  # the conf reached the submitted MPIJob
    # the run and both tasks ended successfully, in the 2.11 metadata database
    with sqlite3.connect(home / "airflow.db") as db:
        runs = db.execute("SELECT run_id, state FROM dag_run WHERE dag_id = 'mpi_pi'").fetchall()
        tasks = dict(
            db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = 'mpi_pi'").fetchall()
        )
    assert [state for _, state in runs] == ["success"], runs
    assert tasks == {"pi": "success", "report": "success"}
