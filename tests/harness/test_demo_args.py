"""scripts/demo's choice of DAG: `--dag trainjob_pi` asks the local node for Kubeflow Trainer (the default demo
starts no add-on), refuses what a TrainJob cannot run, and the printed excerpt starts at the TrainJob's creation."""

from __future__ import annotations

import pytest

from airflowstack import demo


def test_the_default_demo_runs_mpi_pi_and_trainjob_pi_is_asked_for_by_name():
    assert demo.parse_args([]).dag == "mpi_pi"
    assert demo.parse_args(["--dag", "trainjob_pi", "--workers", "2"]).dag == "trainjob_pi"


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (["--simulated"], "not --simulated"),
        (["--implementation", "mpich"], "Open MPI only"),
    ],
)
def test_trainjob_pi_refuses_what_a_trainjob_cannot_run(extra, reason, capsys):
    with pytest.raises(SystemExit):
        demo.parse_args(["--dag", "trainjob_pi", *extra])
    assert reason in capsys.readouterr().err


def test_the_excerpt_starts_at_the_trainjob_s_creation():
    events = [
        "settings\nfolded",
        "Created TrainJob airflow-mpi-demo/trainjob-pi-pi-1a2b3c4d (trainer.kubeflow.org/v1alpha1)",
        "rank 0 of 2 on trainjob-pi-pi-1a2b3c4d-node-0-0",
    ]
    assert demo.excerpt(events)[0].startswith("Created TrainJob")
