"""What the TrainJob wait benchmark puts on the local cluster and reads back from it (benchmarks/waits_trainjob.py).

TrainJobs of this project's runtime ``openmpi-mpiuser`` (deploy/trainjob-mpi-runtime.yaml), run by the real Kubeflow
Trainer and JobSet controllers on simulated (kwok) nodes: each becomes a JobSet, a node Job and a launcher Job, one
node pod and, once that is Ready, one launcher pod. kwok ends a JobSet's launcher pod after a few seconds
(localcluster/behaviour.py); for the waits to be real waits it must keep running, so each TrainJob carries one
``runtimePatches`` entry (Trainer v2.3.0; manager ``PATCH_MANAGER``) giving the launcher's pod template the
simulation's ``run`` lifecycle label. The node pods run until deleted anyway, and the runtime is left as shipped.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from benchmarks import cluster_load as load
from localcluster import behaviour as bh

TRAINER = ("trainer.kubeflow.org", "v1alpha1")
TRAINJOBS = "trainjobs"
RUNTIME = "openmpi-mpiuser"
PATCH_MANAGER = "airflow-mpi.io/benchmark"  # a domain-prefixed manager, as the Trainer's webhook requires
LAUNCHER_SELECTOR = f"{bh.JOBSET_REPLICATED_JOB}={bh.JOBSET_LAUNCHER}"
LAUNCHER_CONTAINER = "node"  # the MPI plugin's container name, the launcher's too
PODS_PER_JOB = 2  # one node pod (numNodes 1) and the launcher


def trainjob(name: str, lifecycle: str = bh.RUN) -> dict:
    """A TrainJob of ``RUNTIME`` with one node pod; its launcher pod labelled ``lifecycle`` for kwok (only the
    launcher: the label on the node pods would change nothing, their default is ``run``)."""
    launcher_pods = {"template": {"metadata": {"labels": {bh.LIFECYCLE: lifecycle}}}}
    patch = {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [{"name": bh.JOBSET_LAUNCHER, "template": {"spec": launcher_pods}}]
                }
            }
        },
    }
    return {
        "apiVersion": "/".join(TRAINER),
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": RUNTIME}, "trainer": {"numNodes": 1}, "runtimePatches": [patch]},
    }


def create(api: client.ApiClient, namespace: str, names: list[str], lifecycle: str = bh.RUN) -> None:
    """Create the TrainJobs; those that exist already (an earlier, smaller N) are kept, a larger N's refused."""
    objects = client.CustomObjectsApi(api)
    listed = objects.list_namespaced_custom_object(*TRAINER, namespace, TRAINJOBS)
    load.refuse_larger(namespace, listed.get("items") or [], names)
    for name in names:
        try:
            objects.create_namespaced_custom_object(*TRAINER, namespace, TRAINJOBS, trainjob(name, lifecycle))
        except client.exceptions.ApiException as err:
            if err.status != 409:
                raise


def running_launchers(pods: list[Any]) -> int:
    """Launcher pods (a JobSet's ``launcher`` replicated job) whose ``node`` container runs: ``V1Pod``s."""
    return sum(
        1
        for pod in pods
        if (pod.metadata.labels or {}).get(bh.JOBSET_REPLICATED_JOB) == bh.JOBSET_LAUNCHER
        for status in (pod.status.container_statuses or [])
        if status.name == LAUNCHER_CONTAINER and status.state and status.state.running
    )


def acknowledged(trainjobs: list[dict]) -> int:
    """TrainJobs the Trainer has acknowledged: their JobSet's jobs in ``status.jobsStatus`` (it made the JobSet)."""
    return sum(1 for job in trainjobs if (job.get("status") or {}).get("jobsStatus"))


def capacity(nodes: int) -> int:
    """TrainJobs whose two pods fit on ``nodes`` simulated nodes of ``NODE_PODS`` pods each (nothing else there)."""
    return nodes * int(bh.NODE_PODS) // PODS_PER_JOB


def settled(
    api: client.ApiClient, namespace: str, jobs: int, quiet: float = 30, timeout: float = 1200
) -> tuple[int, int]:
    """(acknowledged, launchers running) once nothing changes: every TrainJob acknowledged, its launcher running
    (or their number no longer growing: the nodes are full) and no TrainJob changed for ``quiet`` seconds; else
    after ``timeout``. The Trainer copies its JobSet's jobs' counts into the TrainJob's status: a TrainJob still
    changing would put the hub's events (not reads) into the window."""
    objects, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    deadline, last, since = time.time() + timeout, None, time.time()
    while True:
        listed = objects.list_namespaced_custom_object(*TRAINER, namespace, TRAINJOBS)["items"]
        running = running_launchers(
            core.list_namespaced_pod(namespace, label_selector=LAUNCHER_SELECTOR).items
        )
        seen = (sorted(j["metadata"]["resourceVersion"] for j in listed), running)
        if seen != last:
            last, since = seen, time.time()
        done = acknowledged(listed) >= jobs and time.time() - since >= quiet
        if done or time.time() > deadline:
            return acknowledged(listed), running
        time.sleep(2)
