"""A ``kubeflow.org/v1`` MPIJob run by the real training-operator v1.9.4 on the real node.

The job has Flyte's shape (flytekitplugins-kfmpi writes v1 MPIJobs: slotsPerWorker, a launcher with
``restartPolicy: OnFailure``, runPolicy backoffLimit and cleanPodPolicy, mpirun with Flyte's flags); plain manifest
and the kubernetes client only. The v1 controller wires launcher and workers itself: no SSH; the launcher's init
container ``kubectl-delivery`` (images/kubectl-delivery) copies kubectl in and waits for the workers, and mpirun
starts the remote ranks through ``/etc/mpi/kubexec.sh`` (``kubectl exec``, with the launcher's service account,
through the ``kubernetes`` Service). Workers carry no command: the controller runs ``sleep 365d`` in them, which
is all a v1 worker must run (the ranks are ``kubectl exec``'d into it).
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
from kubernetes import client, watch
from kubernetes import config as kconfig

from localcluster.mpi_images import MPI_IMAGES
from tests.integration.test_real_mpi import pod_log

pytestmark = pytest.mark.v1_node
RANK_LINE = re.compile(r"^rank (\d+) of 2 on (\S+)$")
PI_LINE = re.compile(r"^pi is approximately \d+\.\d+ \(2 ranks")
# flytekitplugins-kfmpi's default mpirun flags, before the program
FLYTE_MPIRUN = ["mpirun", "--allow-run-as-root", "-bind-to", "none", "-map-by", "slot", "-x", "LD_LIBRARY_PATH",
                "-x", "PATH", "-mca", "pml", "ob1", "-mca", "btl", "^openib", "-np", "2"]  # fmt: skip


def flyte_job(name: str) -> dict:
    image = MPI_IMAGES["openmpi"]

    def template(container: dict) -> dict:
        return {"spec": {"containers": [{"name": "mpi", "image": image, "imagePullPolicy": "IfNotPresent",
                                         **container}]}}  # fmt: skip

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"backoffLimit": 1, "cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": template({"command": [*FLYTE_MPIRUN, "/home/mpiuser/pi"]}),
                },
                "Worker": {"replicas": 2, "template": template({})},  # no command: the controller's sleep
            },
        },
    }


def await_condition(co: client.CustomObjectsApi, namespace: str, name: str, timeout: int = 300) -> dict:
    """Watch the job until it has condition Succeeded or Failed True; returns it (fails the test on a timeout)."""
    w = watch.Watch()
    for event in w.stream(
        co.list_namespaced_custom_object, "kubeflow.org", "v1", namespace, "mpijobs",
        field_selector=f"metadata.name={name}", timeout_seconds=timeout,
    ):  # fmt: skip
        job = event["object"]
        conditions = {c["type"]: c for c in (job.get("status") or {}).get("conditions") or []}
        if any(conditions.get(t, {}).get("status") == "True" for t in ("Succeeded", "Failed")):
            w.stop()
            return job
    pytest.fail(f"MPIJob {namespace}/{name} neither Succeeded nor Failed within {timeout}s")


def test_flyte_shaped_v1_mpijob_runs_every_rank_and_succeeds(v1_real_node):
    api = kconfig.new_client_from_config(config_file=str(v1_real_node.kubeconfig_path))
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = f"it-v1-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    name = "pi"
    t0 = time.monotonic()
    co.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "mpijobs", flyte_job(name))
    job = await_condition(co, namespace, name)
    elapsed = time.monotonic() - t0
    conditions = {c["type"]: c for c in job["status"]["conditions"]}
    assert conditions.get("Succeeded", {}).get("status") == "True", job["status"]

    launcher = core.read_namespaced_pod(f"{name}-launcher", namespace)
    labels = launcher.metadata.labels
    assert labels["training.kubeflow.org/replica-type"] == "launcher"
    assert labels["training.kubeflow.org/job-role"] == "master"
    assert [c.name for c in launcher.spec.init_containers] == ["kubectl-delivery"]
    lines = pod_log(api, namespace, f"{name}-launcher")  # its one container (the init container aside)
    ranks = {int(m[1]): m[2] for m in map(RANK_LINE.match, lines) if m}
    assert sorted(ranks) == [0, 1], lines
    # each rank ran in a worker pod of this job (kubectl exec), one slot each
    assert sorted(ranks.values()) == [f"{name}-worker-0", f"{name}-worker-1"], lines
    assert any(PI_LINE.match(line) for line in lines), lines
    print(f"v1 MPIJob Succeeded {elapsed:.1f}s after its creation")
