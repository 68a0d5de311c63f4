"""A TrainJob and what Kubeflow Trainer v2.3.0 and JobSet v0.12.0 make of it, as the API returns them (shaped on
tests/integration/test_trainjob_cluster.py's cluster): the JobSet ``<job>`` controlled by the TrainJob, the batch
Jobs ``<job>-launcher-0`` and ``<job>-node-0`` controlled by the JobSet, their pods ``<job>-launcher-0-0-<x>`` and
``<job>-node-0-<i>-<x>`` controlled by their Job and labelled with the JobSet's names; and a fake async hook
answering for them."""

from __future__ import annotations

from types import SimpleNamespace as NS

from airflow_mpi.jobspec.kinds.trainjob import API_TRAINJOB, TRAINJOB
from tests.unit.fakes import FakeAsyncHook, pod

NAME, UID, JOBSET_UID = "pi", "uid-pi", "uid-pi-jobset"
JOB_UIDS = {"launcher": "uid-pi-launcher-0", "node": "uid-pi-node-0"}
CREATED = "2026-11-22T10:00:00Z"


def condition(type_: str, reason: str, message: str, status: str = "True") -> dict:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-11-22T10:01:00Z",
    }


COMPLETE = condition("Complete", "AllJobsCompleted", "jobset completed successfully")
FAILED = condition("Failed", "FailedJobs", "jobset failed due to one or more job failures")
SUSPENDED = condition("Suspended", "Suspended", "TrainJob is suspended")


def jobs_status(**launcher: int) -> list[dict]:
    counts = {"ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
    return [{"name": "node", **counts, "active": 2}, {"name": "launcher", **counts, **launcher}]


def trainjob(*conditions: dict, jobs: list[dict] | None = None, rv: str = "1", uid: str = UID) -> dict:
    """The TrainJob ``pi`` of the openmpi-mpiuser runtime; ``jobs``: its status.jobsStatus (None: no status yet)."""
    status: dict = {}
    if conditions:
        status["conditions"] = list(conditions)
    if jobs is not None:
        status["jobsStatus"] = jobs
    return {
        "apiVersion": API_TRAINJOB,
        "kind": "TrainJob",
        "metadata": {
            "name": NAME,
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": rv,
            "creationTimestamp": CREATED,
        },
        "spec": {"runtimeRef": {"name": "openmpi-mpiuser"}, "trainer": {"numNodes": 2}},
        "status": status,
    }


def _controller(kind: str, api_version: str, name: str, uid: str) -> dict:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def jobset(owner_uid: str = UID) -> dict:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": NAME,
            "uid": JOBSET_UID,
            "ownerReferences": [_controller("TrainJob", API_TRAINJOB, NAME, owner_uid)],
        },
    }


def batch_job(replicated: str, owner_uid: str = JOBSET_UID) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{NAME}-{replicated}-0",
            "uid": JOB_UIDS[replicated],
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": NAME,
                "jobset.sigs.k8s.io/replicatedjob-name": replicated,
            },
            "ownerReferences": [_controller("JobSet", "jobset.x-k8s.io/v1alpha2", NAME, owner_uid)],
        },
    }


def job_ref(replicated: str, uid: str | None = None) -> NS:
    """A pod's controller reference to its batch Job (the Job controller's)."""
    return NS(
        api_version="batch/v1",
        kind="Job",
        name=f"{NAME}-{replicated}-0",
        uid=uid or JOB_UIDS[replicated],
        controller=True,
    )


def tj_pod(name: str, replicated: str, *, index: int | None = None, owner: object = "made", **fields) -> NS:
    """A pod of the JobSet's replicated job ``replicated`` (``launcher``/``node``) as the Job controller makes it:
    the JobSet's labels, the completion index of an indexed Job, its Job as controller (``owner``: another
    reference, or None for labels only)."""
    made = pod(name, container="node", **fields)
    labels = {
        "jobset.sigs.k8s.io/jobset-name": NAME,
        "jobset.sigs.k8s.io/replicatedjob-name": replicated,
        "jobset.sigs.k8s.io/job-index": "0",
        "batch.kubernetes.io/job-completion-index": str(0 if index is None else index),
    }
    made.metadata.labels = labels
    made.metadata.owner_references = (
        [job_ref(replicated)] if owner == "made" else [owner] if owner is not None else None
    )
    return made


def launcher_pod(suffix: str = "x7k2q", **fields) -> NS:
    return tj_pod(f"{NAME}-launcher-0-0-{suffix}", "launcher", **fields)


def node_pod(index: int, suffix: str = "abcde", **fields) -> NS:
    fields.setdefault("role", "worker")
    return tj_pod(f"{NAME}-node-0-{index}-{suffix}", "node", index=index, **fields)


class TrainJobHook(FakeAsyncHook):
    """The fake cluster of a TrainJob: the hub is the TrainJob kind's, and the objects between the job and its pods
    are its JobSet and batch Jobs (``owner_objects``: what the GETs find), each check recorded."""

    api_version = API_TRAINJOB
    owner_objects: list | None = None

    async def get_launcher_job(self, name, namespace):
        self.__dict__.setdefault("owner_checks", []).append(name)
        if self.owner_objects is not None:
            return list(self.owner_objects)
        return [jobset(), batch_job("launcher"), batch_job("node")]


__all__ = ["TRAINJOB"]
