"""Offline rendering of a DAG task's MPIJob (python -m airflow_mpi.render): no task instance, cluster or database."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from airflow_mpi.render import RenderError, main, render
from localcluster.processes import child_env
from tests.unit.upstream import schema_errors

DAGS_DIR = Path(__file__).resolve().parents[2] / "dags"
MPI_PI = str(DAGS_DIR / "mpi_pi.py")


def test_renders_the_task_with_its_params_and_a_placeholder_run():
    manifest = render(MPI_PI, "pi", params={"workers": 3, "mpi_implementation": "MPICH"}, run_id="review")
    spec = manifest["spec"]
    assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 3 and spec["mpiImplementation"] == "MPICH"
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert (
        "command" not in launcher and launcher["args"][0] == "mpirun" and "3" in launcher["args"]
    )  # MPICH: args
    assert manifest["metadata"]["annotations"]["airflow-mpi.io/run-id"] == "review"
    assert manifest["metadata"]["annotations"]["airflow-mpi.io/dag-id"] == "mpi_pi"
    assert schema_errors(manifest) == []


def test_namespace_only_from_a_configured_connection(monkeypatch):
    assert "namespace" not in render(MPI_PI, "pi")["metadata"]
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT", '{"conn_type": "kubernetes", "extra": {"namespace": "mpi"}}'
    )
    assert render(MPI_PI, "pi")["metadata"]["namespace"] == "mpi"


@pytest.mark.parametrize(
    "task_id, params, message",
    [
        ("report", {}, "not an MPIJobOperator"),
        ("nope", {}, "0 DAGs"),
        ("pi", {"workers": 0}, "cannot render mpi_pi.pi offline"),  # the DAG's Param refuses it
    ],
)
def test_what_cannot_be_rendered_is_reported(task_id, params, message):
    with pytest.raises(RenderError, match=message):
        render(MPI_PI, task_id, params=params)


def test_an_invalid_rendered_value_names_the_parameter(tmp_path, capsys):
    dag = tmp_path / "bad.py"
    dag.write_text(
        textwrap.dedent(
            """
            from airflow.providers.common.compat.sdk import DAG
            from airflow_mpi.operators import MPIJobOperator

            with DAG(dag_id="bad", schedule=None, params={"slots": "1.5"}):
                MPIJobOperator(task_id="mpi", image="i", command=["true"], slots_per_worker="{{ params.slots }}")
            """
        )
    )
    assert main([str(dag), "mpi"]) == 1
    assert "slots_per_worker='1.5': must be an integer" in capsys.readouterr().err


def test_the_command_prints_only_yaml_on_stdout(tmp_path):
    env = child_env(AIRFLOW_HOME=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-m", "airflow_mpi.render", MPI_PI, "pi", "--param", "workers=2"],
        capture_output=True, text=True, timeout=300, env=env, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    manifest = yaml.safe_load(out.stdout)
    assert manifest["kind"] == "MPIJob" and manifest["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
