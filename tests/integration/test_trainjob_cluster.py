"""Kubeflow Trainer v2.3.0 and JobSet v0.12.0 in the local clusters, with this project's MPI runtime
(deploy/trainjob-mpi-runtime.yaml): the harness side of issue 35 item 4.

On the sessions' clusters (tests/integration/conftest.py): the kwok tests on the simulated lane's ``cluster`` with
Trainer and JobSet added (``trainjob_cluster``), the real-node one on the session's ``real_node`` with them added
(``trainjob_real_node``, before its v1 switch: REAL_NODE_ORDER). Marked ``trainjob``: ``-m trainjob`` selects them.

* On simulated nodes (kwok): a TrainJob of the runtime becomes a JobSet of its name, the MPI plugin's Secret and
  hostfile ConfigMap, node pods then (once they are Ready) the launcher pod, with the documented names, labels,
  hostnames, mounts and Open MPI environment; kwok ends the launcher (behaviour.py: only a JobSet's ``launcher``
  pods succeed on their own), the TrainJob turns Complete and the JobSet deletes the node Jobs.
* The provider's wait follows a hand-written TrainJob of that runtime (as the shipped role's service account): the
  hook and wait engine (JobMonitor) to Complete, the launcher's log once, its launcher pod found through the owner
  chain pod -> Job -> JobSet -> TrainJob and a co-tenant's pod with the same labels ignored; then a delete by uid
  cascades to every pod. MPIJobSensor, deferred, follows another to Complete.
* The API server refuses a runtime asking for Intel MPI (the CRD's enum; v2.3.0 knows Open MPI only).
* On the real node: the same TrainJob runs pi with real ranks on the project's Open MPI image, one rank on each of
  the two node pods, and ends Complete.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime

import pytest
from kubernetes import client

from airflow_mpi.hooks import AsyncMPIJobHook, MPIJobHook
from airflow_mpi.jobspec.kinds.trainjob import API_TRAINJOB
from airflow_mpi.sensors import MPIJobSensor
from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.version_compat import TaskDeferred
from airflow_mpi.wait.monitor import JobMonitor
from localcluster import behaviour as bh
from localcluster.waiting import wait_until
from tests.integration.least_privilege import (
    apply_role,
    bound_service_account_kubeconfig,
    use_as_kubernetes_default,
)
from tests.integration.test_operator import ctx, run_trigger
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


LINES = ["rank 0 of 2 on pi-node-0-0", "pi is approximately 3.14"]  # the launcher's log (kwok's ClusterLogs)


@pytest.fixture
def tj_conn(trainjob_cluster, tj_namespace, monkeypatch, tmp_path) -> str:
    """``kubernetes_default``: a service account of the namespace bound only to the shipped role."""
    api = trainjob_cluster.api_client()
    path = bound_service_account_kubeconfig(
        api, str(trainjob_cluster.kubeconfig_path), tj_namespace, apply_role(api), tmp_path / "sa"
    )
    return use_as_kubernetes_default(monkeypatch, path, tj_namespace)


def _forged_pod(name: str, job: str, replicated_job: str) -> dict:
    """A co-tenant's pod with the labels the JobSet gives the TrainJob ``job``'s pods, no controller."""
    behaviour = bh.pod_metadata(run_duration=1)
    labels = {
        f"{JOBSET[0]}/jobset-name": job,
        f"{JOBSET[0]}/replicatedjob-name": replicated_job,
        **behaviour["labels"],
    }
    return {
        "metadata": {"name": name, "labels": labels, "annotations": behaviour["annotations"]},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "intruder", "image": "busybox"}],
            "tolerations": [{"operator": "Exists"}],
        },
    }


def test_the_wait_follows_a_trainjob_through_its_owner_chain_and_a_delete_by_uid_cascades(
    trainjob_cluster, tj_namespace, tj_conn
):
    api, ns = trainjob_cluster.api_client(), tj_namespace
    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    trainjob_cluster.set_launcher_logs(ns, LINES, containers=("node",))
    forged = "pi-launcher-0-0-forged"
    core.create_namespaced_pod(ns, _forged_pod(forged, "pi", "launcher"))
    uid = co.create_namespaced_custom_object(*TRAINER, ns, "trainjobs", _trainjob("pi"))["metadata"]["uid"]
    lines: list[str] = []

    async def wait():
        hook = AsyncMPIJobHook(conn_id=tj_conn, api_version=API_TRAINJOB)
        monitor = JobMonitor(
            hook, "pi", ns, emit=lines.append, submitted_at=datetime.now(UTC), poll_interval=2, uid=uid
        )
        return await monitor.run()

    result = asyncio.run(asyncio.wait_for(wait(), 180))
    assert (result.outcome, result.condition) == ("success", "Complete"), (result, lines)
    (launcher,) = result.launcher_pods
    assert re.fullmatch(r"pi-launcher-0-0-[a-z0-9]{5}", launcher) and result.launcher_attempts == 1
    assert [ln for ln in lines if ln in LINES] == LINES, lines
    assert [ln.split(":")[0] for ln in lines if ln.startswith("(ignoring pod")] == [f"(ignoring pod {forged}"]

    hook = MPIJobHook(conn_id=tj_conn, api_version=API_TRAINJOB)
    assert hook.delete_mpijob("pi", ns, uid="not-" + uid) is False  # another incarnation's uid: kept
    assert hook.delete_mpijob("pi", ns, uid=uid) is True
    assert hook.wait_for_deleted("pi", ns, timeout=120)
    wait_until(
        lambda: [p.metadata.name for p in core.list_namespaced_pod(ns).items] == [forged],
        120,
        "the TrainJob's pods gone with it (TrainJob -> JobSet -> Jobs -> pods)",
        interval=0.5,
    )


def test_the_sensor_deferred_follows_a_trainjob_to_complete(trainjob_cluster, tj_namespace, tj_conn):
    co = client.CustomObjectsApi(trainjob_cluster.api_client())
    co.create_namespaced_custom_object(*TRAINER, tj_namespace, "trainjobs", _trainjob("pi"))
    waits = {"deferrable": True, "poke_interval": 2, "timeout": 180}
    sensor = MPIJobSensor(
        task_id="tj_sensor", job_name="pi", namespace=tj_namespace, api_version=API_TRAINJOB, **waits
    )
    with pytest.raises(TaskDeferred) as deferred:  # not Complete yet: the sensor defers
        sensor.execute(ctx("tj_sensor"))
    event = run_trigger(MPIJobTrigger(**deferred.value.trigger.serialize()[1]))
    assert (event["status"], event["condition"]) == ("success", "Complete"), event
    assert re.fullmatch(r"pi-launcher-0-0-[a-z0-9]{5}", *event["launcher_pods"]), event
    sensor.execute_complete(ctx("tj_sensor"), event)
    assert sensor.poke(ctx("tj_sensor"))  # poke mode reads the TrainJob's Complete as success


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
