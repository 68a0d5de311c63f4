"""Kubeflow Trainer on the test sessions' clusters: this project's MPI runtime (deploy/trainjob-mpi-runtime.yaml,
applied by airflowstack/trainer_runtime.py, which the demo shares) and Trainer + JobSet added to a running cluster
(the fixtures ``trainjob_cluster`` and ``trainjob_real_node`` of tests/integration/conftest.py)."""

from __future__ import annotations

from airflowstack.trainer_runtime import RUNTIME, RUNTIME_FILE, TRAINER, apply_runtime, runtime_manifest

TRAINER_CONTROLLERS = ("trainer",)  # JobSet comes with it (localcluster.controllers: Trainer requires jobset)

__all__ = ["RUNTIME", "RUNTIME_FILE", "TRAINER", "TRAINER_CONTROLLERS", "apply_runtime", "runtime_manifest"]
