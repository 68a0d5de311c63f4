"""Kubeflow Trainer on the test sessions' clusters: this project's MPI runtime (deploy/trainjob-mpi-runtime.yaml)
and Trainer + JobSet added to a running cluster (the fixtures ``trainjob_cluster`` and ``trainjob_real_node`` of
tests/integration/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import yaml
from kubernetes import client

from localcluster import behaviour as bh

RUNTIME_FILE = Path(__file__).resolve().parents[2] / "deploy" / "trainjob-mpi-runtime.yaml"
RUNTIME = "openmpi-mpiuser"
TRAINER = ("trainer.kubeflow.org", "v1alpha1")
TRAINER_CONTROLLERS = ("trainer",)  # JobSet comes with it (localcluster.controllers: Trainer requires jobset)


def runtime_manifest() -> dict:
    return yaml.safe_load(RUNTIME_FILE.read_text())


def apply_runtime(api_client) -> dict:
    """Create or replace the ClusterTrainingRuntime of RUNTIME_FILE (a reused cluster may hold it already)."""
    co = client.CustomObjectsApi(api_client)
    runtime = runtime_manifest()
    try:
        return co.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime)
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
    current = co.get_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime["metadata"]["name"])
    runtime["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    return co.replace_cluster_custom_object(
        *TRAINER, "clustertrainingruntimes", runtime["metadata"]["name"], runtime
    )


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
