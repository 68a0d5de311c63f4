"""Kubeflow Trainer on the test sessions' clusters: this project's MPI runtime (deploy/trainjob-mpi-runtime.yaml,
applied by airflowstack/trainer_runtime.py, which the demo shares), Trainer + JobSet added to a running cluster
(the fixtures ``trainjob_cluster`` and ``trainjob_real_node`` of tests/integration/conftest.py) and a launcher's
run time on kwok."""

from __future__ import annotations

from airflowstack.trainer_runtime import (
    RUNTIME,
    RUNTIME_FILE,
    TRAINER,
    TRAINER_CONTROLLERS,
    apply_runtime,
    runtime_manifest,
)
from localcluster import behaviour as bh

__all__ = [
    "RUNTIME",
    "RUNTIME_FILE",
    "TRAINER",
    "TRAINER_CONTROLLERS",
    "apply_runtime",
    "launcher_runs",
    "runtime_manifest",
]


def launcher_runs(duration: str) -> dict:
    """A base manifest whose launcher pods run ``duration`` on kwok (``localcluster.behaviour.RUN_DURATION``; default
    8 s) and then succeed: one ``spec.runtimePatches`` entry annotating the runtime's ``launcher`` pod template
    (Trainer v2.3.0 merges it into the JobSet's; a TrainJob has no pod template of its own)."""
    pod_template = {"metadata": {"annotations": {bh.RUN_DURATION: duration}}}
    launcher = {"name": "launcher", "template": {"spec": {"template": pod_template}}}
    patch = {
        "manager": "airflow-mpi.io/tests",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [launcher]}}},
    }
    return {"spec": {"runtimePatches": [patch]}}
