"""Kubeflow Trainer v2.3.0 and JobSet v0.12.0 in the local clusters, with this project's MPI runtime
(deploy/trainjob-mpi-runtime.yaml): the harness side of issue 35 item 4.

On the sessions' clusters (tests/integration/conftest.py): the kwok tests on the simulated lane's ``cluster`` with
Trainer and JobSet added (``trainjob_cluster``), the real-node one on the session's ``real_node`` with them added
(``trainjob_real_node``, before its v1 switch: REAL_NODE_ORDER). Marked ``trainjob``: ``-m trainjob`` selects them.

* On simulated nodes (kwok): a TrainJob of the runtime becomes a JobSet of its name, the MPI plugin's Secret and
  hostfile ConfigMap, node pods then (once they are Ready) the launcher pod, with the documented names, labels,
  hostnames, mounts and Open MPI environment; kwok ends the launcher (behaviour.py: only a JobSet's ``launcher``
  pods succeed on their own), the TrainJob turns Complete and the JobSet deletes the node Jobs.
* The API server refuses a runtime asking for Intel MPI (the CRD's enum; v2.3.0 knows Open MPI only).
* On the real node: the same TrainJob runs pi with real ranks on the project's Open MPI image, one rank on each of
  the two node pods, and ends Complete.
"""

from __future__ import annotations

import json
import re

import pytest
from kubernetes import client

from localcluster.waiting import wait_until
from tests.integration.trainjob_runtime import RUNTIME, TRAINER, runtime_manifest

pytestmark = pytest.mark.trainjob

JOBSET = ("jobset.sigs.k8s.io", "jobset.x-k8s.io", "v1alpha2")  # label prefix, group, version


def _trainjob(name: str, **trainer) -> dict:
    return {
        "apiVersion": "/".join(TRAINER),
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": RUNTIME}, "trainer": {"numNodes": 2, **trainer}},
    }


def _condition(obj: dict, type_: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def _finished(co, namespace: str, name: str, timeout: float) -> dict:
    """The TrainJob once it is Complete or Failed."""

    def done():
        job = co.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)
        return (
            job
            if any((_condition(job, t) or {}).get("status") == "True" for t in ("Complete", "Failed"))
            else None
        )

    return wait_until(done, timeout, f"TrainJob {namespace}/{name} Complete or Failed", interval=0.5)


def _pods(core, namespace: str, rjob: str) -> list:
    selector = f"{JOBSET[0]}/jobset-name=pi,{JOBSET[0]}/replicatedjob-name={rjob}"
    return sorted(
        core.list_namespaced_pod(namespace, label_selector=selector).items, key=lambda p: p.metadata.name
    )


@pytest.fixture
def tj_namespace(trainjob_cluster, namespace):
    """A fresh namespace of the session's cluster, Trainer running (``namespace``: deleted at teardown)."""
    return namespace


def test_a_trainjob_becomes_a_jobset_of_node_pods_then_a_launcher_and_completes(
    trainjob_cluster, tj_namespace
):
    api, ns = trainjob_cluster.api_client(), tj_namespace
    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    created = co.create_namespaced_custom_object(*TRAINER, ns, "trainjobs", _trainjob("pi"))

    jobset = wait_until(
        lambda: co.get_namespaced_custom_object(*JOBSET[1:], ns, "jobsets", "pi"),
        60,
        "JobSet pi",
        interval=0.5,
    )
    (owner,) = jobset["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "TrainJob",
        created["metadata"]["uid"],
        True,
    )
    assert [r["name"] for r in jobset["spec"]["replicatedJobs"]] == ["node", "launcher"]

    secret = core.read_namespaced_secret("pi-mpi-ssh-auth", ns)
    assert secret.type == "kubernetes.io/ssh-auth" and set(secret.data) == {"ssh-privatekey", "ssh-publickey"}
    hostfile = core.read_namespaced_config_map("pi-mpi-hostfile", ns).data["hostfile"]
    assert hostfile == "pi-node-0-0.pi slots=1\npi-node-0-1.pi slots=1\n"

    launchers = wait_until(lambda: _pods(core, ns, "launcher"), 60, "the launcher pod", interval=0.5)
    nodes = _pods(core, ns, "node")
    assert [(p.spec.hostname, p.spec.subdomain) for p in nodes] == [
        ("pi-node-0-0", "pi"),
        ("pi-node-0-1", "pi"),
    ]
    for i, pod in enumerate(nodes):
        assert re.fullmatch(rf"pi-node-0-{i}-[a-z0-9]{{5}}", pod.metadata.name)
        assert pod.metadata.labels["batch.kubernetes.io/job-completion-index"] == str(i)
        (container,) = pod.spec.containers
        assert container.command == ["/usr/sbin/sshd"]
        assert {m.mount_path for m in container.volume_mounts} >= {"/home/mpiuser/.ssh"}
        # the launcher waited for the node pods (dependsOn: Ready)
        ready = next(c for c in pod.status.conditions if c.type == "Ready")
        assert (
            ready.status == "True" and ready.last_transition_time <= launchers[0].metadata.creation_timestamp
        )
    (launcher,) = launchers
    assert re.fullmatch(r"pi-launcher-0-0-[a-z0-9]{5}", launcher.metadata.name)
    assert launcher.spec.hostname == "pi-launcher-0-0"
    (container,) = launcher.spec.containers
    assert container.command == ["mpirun", "/home/mpiuser/pi"]
    env = {e.name: e.value for e in container.env}
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["OMPI_MCA_orte_set_default_slots"] == "1"
    assert {m.mount_path for m in container.volume_mounts} >= {"/home/mpiuser/.ssh", "/etc/mpi"}

    job = _finished(co, ns, "pi", 120)
    assert _condition(job, "Complete")["status"] == "True", job["status"]
    assert {s["name"] for s in job["status"]["jobsStatus"]} == {"launcher", "node"}
    batch = client.BatchV1Api(api)
    wait_until(
        lambda: [j.metadata.name for j in batch.list_namespaced_job(ns).items] == ["pi-launcher-0"],
        60,
        "the JobSet to delete its node Job once done",
        interval=0.5,
    )


def test_the_api_server_refuses_a_runtime_asking_for_intel_mpi(trainjob_cluster):
    runtime = runtime_manifest()
    runtime["metadata"]["name"] = "intel-mpiuser"
    runtime["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] = "Intel"
    co = client.CustomObjectsApi(trainjob_cluster.api_client())
    with pytest.raises(client.exceptions.ApiException) as refused:
        co.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime)
    assert refused.value.status == 422
    status = json.loads(refused.value.body)
    assert status["reason"] == "Invalid"
    assert {
        "reason": "FieldValueNotSupported",
        "message": 'Unsupported value: "Intel": supported values: "OpenMPI", ""',
        "field": "spec.mlPolicy.mpi.mpiImplementation",
    } in status["details"]["causes"]


@pytest.mark.real_node
def test_a_trainjob_runs_pi_with_real_ranks_on_two_node_pods(trainjob_real_node, real_k8s, real_namespace):
    api, ns = real_k8s, real_namespace
    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    co.create_namespaced_custom_object(*TRAINER, ns, "trainjobs", _trainjob("pi"))
    job = _finished(co, ns, "pi", 300)
    (launcher,) = _pods(core, ns, "launcher")
    log = core.read_namespaced_pod_log(launcher.metadata.name, ns, _preload_content=False).data.decode()
    assert (_condition(job, "Complete") or {}).get("status") == "True", f"{job['status']}\n{log}"
    # one rank on each node pod (their hostnames), rank 0 on the hostfile's first
    ranks = re.findall(r"^rank (\d) of 2 on (\S+)$", log, re.MULTILINE)
    assert sorted(ranks) == [("0", "pi-node-0-0"), ("1", "pi-node-0-1")], log
    assert re.search(r"^pi is approximately 3\.1\d+ \(2 ranks", log, re.MULTILINE), log
    assert launcher.status.container_statuses[0].state.terminated.exit_code == 0
