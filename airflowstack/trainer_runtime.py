"""This project's Kubeflow Trainer runtime (deploy/trainjob-mpi-runtime.yaml, ClusterTrainingRuntime
``openmpi-mpiuser``) applied to a cluster that runs Trainer: by the demo's ``--dag trainjob_pi`` and the integration
tests' sessions (tests/integration/trainjob_runtime.py). The compose stack's kube service applies the same file with
``kubectl apply`` (localcluster/serve.py ``--apply``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

RUNTIME_FILE = Path(__file__).resolve().parents[1] / "deploy" / "trainjob-mpi-runtime.yaml"
RUNTIME = "openmpi-mpiuser"
TRAINER = ("trainer.kubeflow.org", "v1alpha1")
TRAINER_CONTROLLERS = ("trainer",)  # JobSet comes with it (localcluster.controllers: Trainer requires jobset)


def runtime_manifest() -> dict:
    return yaml.safe_load(RUNTIME_FILE.read_text())


def apply_runtime(api_client: Any) -> dict:
    """Create or replace the ClusterTrainingRuntime of RUNTIME_FILE (a reused cluster may hold it already)."""
    from kubernetes import client

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
