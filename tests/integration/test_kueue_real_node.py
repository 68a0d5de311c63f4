"""Kueue on the real node: a queued MPIJob is suspended by Kueue's webhook, admitted, and its MPI program runs for
real (launcher and workers are containers, mpirun reaches the workers over SSH), then its Workload is Finished.

The same code path as the kwok cluster's Kueue (localcluster/kueue.py), inside the node container. Plain manifests
and the kubernetes client only; the job is upstream's v2beta1 pi example (examples/v2beta1/pi/pi.yaml) with small
requests so that it fits the ClusterQueue's quota (cpu 2) and the 2-core node.
"""

from __future__ import annotations

import re
import uuid

import pytest
from kubernetes import client
from kubernetes import config as kconfig

from localcluster import kueue as lk
from localcluster.node_container import UPSTREAM_IMAGES
from tests.integration.test_kueue_cluster import Jobs, _admitted, _true

pytestmark = pytest.mark.real_node
PI_LINE = re.compile(r"^pi is approximately \d+\.\d+ \(2 ranks")


def pi_job(name: str) -> dict:
    image = UPSTREAM_IMAGES["openmpi-upstream"]
    requests = {"requests": {"cpu": "500m", "memory": "256Mi"}}

    def template(container: dict) -> dict:
        return {"spec": {"containers": [{"image": image, "imagePullPolicy": "IfNotPresent", "securityContext": {"runAsUser": 1000},
                                         "resources": requests, **container}]}}  # fmt: skip

    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "labels": {lk.QUEUE_LABEL: lk.LOCAL_QUEUE}},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "sshAuthMountPath": "/home/mpiuser/.ssh",
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": template({"name": "mpi-launcher", "command": ["mpirun"], "args": ["-n", "2", "/home/mpiuser/pi"]}),
                },
                "Worker": {
                    "replicas": 2,
                    "template": template(
                        {"name": "mpi-worker", "command": ["/usr/sbin/sshd"], "args": ["-De", "-f", "/home/mpiuser/.sshd_config"]}
                    ),
                },
            },
        },
    }


def test_a_queued_mpijob_runs_real_mpi_once_kueue_admits_it(kueue_real_node):
    api = kconfig.new_client_from_config(config_file=str(kueue_real_node.kubeconfig_path))
    core = client.CoreV1Api(api)
    ns = f"it-kueue-real-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    try:
        lk.create_local_queue(api, ns)
        jobs = Jobs(api, ns)
        created = jobs.create(pi_job("pi"))
        assert created["spec"]["runPolicy"]["suspend"] is True  # Kueue's webhook, at creation

        wl = jobs.workload("pi", _admitted, "Admitted")
        assert wl["status"]["admission"]["clusterQueue"] == lk.CLUSTER_QUEUE
        job = jobs.mpijob("pi", lambda j: _true(j, "Succeeded") or _true(j, "Failed"), "finished")
        assert _true(job, "Succeeded"), job["status"]
        assert lk.condition(job, "Suspended")["reason"] == "MPIJobResumed"

        (launcher,) = [p for p in core.list_namespaced_pod(ns, label_selector="training.kubeflow.org/job-role=launcher").items
                       if p.status.phase == "Succeeded"]  # fmt: skip
        assert launcher.spec.node_name == "real-node-0"
        log = core.read_namespaced_pod_log(launcher.metadata.name, ns, _preload_content=False).data.decode()
        assert any(PI_LINE.match(line) for line in log.splitlines()), log

        finished = jobs.workload("pi", lambda w: _true(w, "Finished"), "Finished")
        assert lk.condition(finished, "Finished")["reason"] == "Succeeded"
    finally:
        core.delete_namespace(ns)
