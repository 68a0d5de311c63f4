"""The hub keeps pods and MPIJobs cut to what their readers need (wait/summaries.py ``slim_pod``,
``slim_mpijob``): the readers must see the same object, and the cut must be worth it."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio.client import ApiClient

from airflow_mpi.hooks.answers import sort_newest_first, sort_workers
from airflow_mpi.jobspec.status import job_state, true_condition_types
from airflow_mpi.wait.failure_causes import pod_cause
from airflow_mpi.wait.namespace_watch import _Body
from airflow_mpi.wait.summaries import object_meta as _meta
from airflow_mpi.wait.summaries import pod_role, pod_summary, slim_mpijob, slim_pod


def full_pod(name: str, *, role: str, state: dict, phase: str, restarts: int = 0, index: str = "0") -> dict:
    """A pod as the API server returns it for an mpi-operator launcher or worker (big parts included)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "42",
            "creationTimestamp": f"2026-11-23T10:00:0{index}Z",
            "labels": {
                "training.kubeflow.org/job-name": "job",
                "training.kubeflow.org/job-role": role,
                "training.kubeflow.org/replica-index": index,
            },
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x" * 2000},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "job-launcher", "uid": "j"}
            ],
            "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {"f:conditions": {}}}}] * 5,
        },
        "spec": {
            "nodeName": "node-1",
            "volumes": [
                {
                    "name": f"v{i}",
                    "configMap": {"name": "job-config", "items": [{"key": "hostfile", "path": "hostfile"}]},
                }
                for i in range(5)
            ],
            "containers": [
                {
                    "name": role,
                    "image": "mpi-pi:openmpi",
                    "command": ["mpirun", "-np", "4", "/home/mpiuser/pi"],
                    "env": [{"name": f"E{i}", "value": "v" * 50} for i in range(30)],
                    "volumeMounts": [{"name": f"v{i}", "mountPath": f"/etc/v{i}"} for i in range(5)],
                    "readinessProbe": {"tcpSocket": {"port": 2222}, "periodSeconds": 1},
                }
            ],
            "tolerations": [{"operator": "Exists"}],
        },
        "status": {
            "phase": phase,
            "hostIP": "10.0.0.1",
            "podIP": "10.244.0.5",
            "podIPs": [{"ip": "10.244.0.5"}],
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": "2026-11-23T10:00:01Z"}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
            "containerStatuses": [
                {
                    "name": role,
                    "image": "mpi-pi:openmpi",
                    "imageID": "sha256:abc",
                    "containerID": "containerd://1",
                    "ready": True,
                    "started": True,
                    "restartCount": restarts,
                    "state": state,
                    "lastState": {
                        "terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2026-11-23T10:00:03Z"}
                    },
                    "volumeMounts": [{"name": f"v{i}", "mountPath": f"/etc/v{i}"} for i in range(5)],
                }
            ],
        },
    }


def evicted_pod(name: str) -> dict:
    """A worker the Eviction API is deleting: its DisruptionTarget condition says why (a failure's cause)."""
    pod = full_pod(name, role="worker", phase="Running", index="2", state={"running": {}})
    pod["metadata"]["deletionTimestamp"] = "2026-11-23T10:02:00Z"
    pod["status"]["conditions"].append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
            "lastTransitionTime": "2026-11-23T10:01:30Z",
        }
    )
    return pod


def cleaned_up_after_its_own_end(name: str) -> dict:
    """A worker that exited by itself (code 3), reported only once the clean-up's deletion was under way: the end
    came before the deletion was asked for (deletionTimestamp less its grace period), so it is a cause."""
    pod = full_pod(
        name,
        role="worker",
        phase="Running",
        index="3",
        state={"terminated": {"exitCode": 3, "reason": "Error", "finishedAt": "2026-11-23T10:01:29Z"}},
    )
    pod["metadata"].update(deletionTimestamp="2026-11-23T10:02:00Z", deletionGracePeriodSeconds=30)
    return pod


PODS = [
    full_pod(
        "job-launcher-a",
        role="launcher",
        phase="Running",
        restarts=1,
        state={"running": {"startedAt": "2026-11-23T10:00:04Z"}},
    ),
    full_pod(
        "job-launcher-b",
        role="launcher",
        phase="Succeeded",
        index="1",
        state={"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": "2026-11-23T10:01:00Z"}},
    ),
    full_pod(
        "job-worker-1",
        role="worker",
        phase="Pending",
        index="1",
        state={"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}},
    ),
    full_pod("job-worker-0", role="worker", phase="Running", state={"running": {}}),
    evicted_pod("job-worker-2"),
    cleaned_up_after_its_own_end("job-worker-3"),
]


async def as_models(*objs: dict) -> list:
    """As wait/namespace_watch.py makes them (the asyncio client's models)."""
    async with ApiClient() as api_client:
        return [api_client.deserialize(_Body(json.dumps(obj)), "V1Pod") for obj in objs]


@pytest.mark.parametrize("raw", PODS, ids=[p["metadata"]["name"] for p in PODS])
async def test_the_slim_pod_reads_as_the_full_pod_does(raw):
    full, slim = await as_models(raw, slim_pod(raw))
    assert pod_summary(slim) == pod_summary(full)
    assert pod_summary(slim).disruption == (
        "EvictionByEvictionAPI: Eviction API: evicting" if raw["metadata"]["name"] == "job-worker-2" else None
    )
    if raw["metadata"]["name"] == "job-worker-3":
        assert pod_summary(slim).deletion_grace == 30 and pod_cause(pod_summary(slim)) == (
            "worker pod job-worker-3 (container worker): Error, exit code 3"
        )
    assert pod_role(slim) == pod_role(full)
    assert slim.metadata.uid == full.metadata.uid and slim.metadata.labels == full.metadata.labels


async def test_orderings_are_unchanged_and_the_cut_is_worth_it():
    full = await as_models(*PODS)
    slim = await as_models(*map(slim_pod, PODS))
    assert [p.metadata.name for p in sort_newest_first(slim)] == [
        p.metadata.name for p in sort_newest_first(full)
    ]
    assert [p.metadata.name for p in sort_workers(slim)] == [p.metadata.name for p in sort_workers(full)]
    assert all(len(json.dumps(slim_pod(p))) * 5 < len(json.dumps(p)) for p in PODS)


def full_mpijob(conditions: list[dict], **metadata) -> dict:
    """An MPIJob as the API server returns it after kubectl apply (big parts included)."""
    template = {
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "mpi-pi:openmpi",
                    "command": ["mpirun", "/home/mpiuser/pi"],
                    "env": [{"name": f"E{i}", "value": "v" * 50} for i in range(30)],
                }
            ]
        }
    }
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {
            "name": "job",
            "namespace": "ns",
            "uid": "uid-1",
            "resourceVersion": "77",
            "generation": 1,
            "labels": {"airflow-mpi.apache.org/dag-id": "d"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x" * 3000},
            "managedFields": [{"manager": "mpi-operator", "fieldsV1": {"f:status": {}}}] * 5,
            **metadata,
        },
        "spec": {
            "slotsPerWorker": 2,
            "runPolicy": {"backoffLimit": 3, "cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": template},
                "Worker": {"replicas": 2, "template": template},
            },
        },
        "status": {
            "conditions": conditions,
            "startTime": "2026-11-23T10:00:00Z",
            "replicaStatuses": {"Launcher": {"active": 1}, "Worker": {"active": 2}},
        },
    }


def condition(kind: str, at: str, reason: str = "", message: str = "", status: str = "True") -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": at}


JOBS = [
    full_mpijob([]),
    full_mpijob([condition("Created", "2026-11-23T10:00:01Z", "MPIJobCreated")]),
    full_mpijob([condition("Created", "2026-11-23T10:00:01Z"), condition("Running", "2026-11-23T10:00:05Z")]),
    full_mpijob(
        [
            condition("Created", "2026-11-23T10:00:01Z"),
            condition("Running", "2026-11-23T10:00:05Z", status="False"),
            condition("Succeeded", "2026-11-23T10:01:00Z", "MPIJobSucceeded", "done"),
        ]
    ),
    full_mpijob(
        [
            condition("Created", "2026-11-23T10:00:01Z"),
            condition("Failed", "2026-11-23T10:01:00Z", "BackoffLimitExceeded", "launcher failed"),
        ],
        deletionTimestamp="2026-11-23T10:02:00Z",
    ),
]


@pytest.mark.parametrize("raw", JOBS, ids=["new", "created", "running", "succeeded", "failed-deleting"])
def test_the_slim_mpijob_reads_as_the_full_one_does(raw):
    slim = slim_mpijob(raw)
    assert job_state(slim) == job_state(raw) and true_condition_types(slim) == true_condition_types(raw)
    assert _meta(slim) == _meta(raw)  # name, uid, labels: how the hub files and matches it
    assert slim["metadata"].get("deletionTimestamp") == raw["metadata"].get("deletionTimestamp")
    assert len(json.dumps(slim)) * 5 < len(json.dumps(raw))
