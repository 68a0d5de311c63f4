"""Kueue in the local cluster: the real Kueue controller (v0.17.0) queues, admits and preempts MPIJobs that the real
mpi-operator (v0.8.2) runs on simulated (kwok) nodes.

Plain dict manifests and the kubernetes client only (no airflow_mpi code: the provider's Kueue support comes
later), so a failure here points at the cluster.  Quota of ``cluster-queue``: cpu 2, memory 2Gi; every job here is
one launcher + one worker, each pod requesting 500m cpu unless said otherwise, so two jobs fill the quota.
Every wait watches the objects (event driven), bounded by a deadline; no fixed sleeps.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client, watch

from localcluster import behaviour as bh
from localcluster import kueue as lk

MPI_GROUP, MPI_VERSION, MPIJOBS = "kubeflow.org", "v2beta1", "mpijobs"
JOB_NAME = "training.kubeflow.org/job-name"
JOB_ROLE = "training.kubeflow.org/job-role"
TIMEOUT = 120

pytestmark = pytest.mark.needs_simulation


def mpijob(name: str, *, cpu: str = "500m", memory: str = "256Mi", priority: str | None = None) -> dict:
    """One launcher + one worker, both Running until deleted (kwok), in the LocalQueue ``user-queue``."""

    def template(container: str) -> dict:
        return {
            "metadata": bh.pod_metadata(bh.RUN),
            "spec": {
                "containers": [
                    {
                        "name": container,
                        "image": "mpioperator/mpi-pi:openmpi",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}},
                    }
                ]
            },
        }

    labels = {lk.QUEUE_LABEL: lk.LOCAL_QUEUE}
    if priority:
        labels[lk.PRIORITY_LABEL] = priority
    return {
        "apiVersion": f"{MPI_GROUP}/{MPI_VERSION}",
        "kind": "MPIJob",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": template(bh.LAUNCHER_CONTAINER)},
                "Worker": {"replicas": 1, "template": template(bh.WORKER_CONTAINER)},
            },
        },
    }


# ------------------------------------------------------------------ waiting on watches
def _key(obj: dict) -> str:
    return obj["metadata"]["name"]


def wait_for(api, list_fn, *args, until, what: str, timeout: float = TIMEOUT, **kw) -> dict[str, dict]:
    """List a collection, then watch it, keeping its current objects (as dicts) by name; returns them once
    ``until(objects)`` is true."""
    deadline = time.monotonic() + timeout
    objs: dict[str, dict] = {}
    while True:
        lst = list_fn(*args, **kw)
        if not isinstance(lst, dict):
            lst = api.sanitize_for_serialization(lst)
        objs = {_key(o): o for o in lst["items"]}
        if until(objs):
            return objs
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what}; last state: {_summary(objs)}"
            )
        w = watch.Watch()
        for ev in w.stream(
            list_fn,
            *args,
            resource_version=lst["metadata"]["resourceVersion"],
            timeout_seconds=max(1, int(remaining)),
            **kw,
        ):
            if ev["type"] == "ERROR":
                break  # e.g. 410 Gone: list again
            obj = ev["raw_object"]
            if ev["type"] == "DELETED":
                objs.pop(_key(obj), None)
            else:
                objs[_key(obj)] = obj
            if until(objs):
                w.stop()
                return objs


def _summary(objs: dict[str, dict]) -> dict:
    return {
        name: {
            "suspend": ((o.get("spec") or {}).get("runPolicy") or {}).get(
                "suspend", (o.get("spec") or {}).get("suspend")
            ),
            "phase": (o.get("status") or {}).get("phase"),
            "conditions": [
                (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                for c in (o.get("status") or {}).get("conditions") or []
            ],
        }
        for name, o in objs.items()
    }


def _true(obj: dict | None, type_: str, reason: str | None = None) -> bool:
    c = lk.condition(obj or {}, type_)
    return bool(c and c["status"] == "True" and (reason is None or c.get("reason") == reason))


def _suspended(job: dict | None) -> bool:
    return bool(job and job["spec"].get("runPolicy", {}).get("suspend"))


class Jobs:
    """The MPIJobs, their Workloads, pods and events in one namespace."""

    def __init__(self, api, namespace: str) -> None:
        self.api, self.ns = api, namespace
        self.co = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.uids: dict[str, str] = {}

    def create(self, manifest: dict) -> dict:
        job = self.co.create_namespaced_custom_object(MPI_GROUP, MPI_VERSION, self.ns, MPIJOBS, manifest)
        self.uids[job["metadata"]["name"]] = job["metadata"]["uid"]
        return job

    def delete(self, name: str) -> None:
        self.co.delete_namespaced_custom_object(MPI_GROUP, MPI_VERSION, self.ns, MPIJOBS, name)

    def mpijob(self, name: str, until, what: str) -> dict:
        return wait_for(
            self.api, self.co.list_namespaced_custom_object, MPI_GROUP, MPI_VERSION, self.ns, MPIJOBS,
            field_selector=f"metadata.name={name}", until=lambda objs: until(objs.get(name)),
            what=f"MPIJob {name}: {what}",
        )[name]  # fmt: skip

    def workload(self, name: str, until, what: str) -> dict:
        """The Workload Kueue made for MPIJob ``name`` (found by the job's uid) once ``until(workload)``."""
        objs = wait_for(
            self.api, self.co.list_namespaced_custom_object, lk.GROUP, lk.VERSION, self.ns, "workloads",
            label_selector=f"{lk.JOB_UID_LABEL}={self.uids[name]}",
            until=lambda objs: len(objs) == 1 and until(next(iter(objs.values()))), what=f"Workload of {name}: {what}",
        )  # fmt: skip
        return next(iter(objs.values()))

    def pods(self, name: str, until, what: str) -> dict[str, dict]:
        return wait_for(
            self.api, self.core.list_namespaced_pod, self.ns, label_selector=f"{JOB_NAME}={name}",
            until=until, what=f"pods of {name}: {what}",
        )  # fmt: skip

    def running_pods(self, name: str) -> dict[str, dict]:
        """Waits for the launcher and the worker of ``name`` to be Running; returns the pods by role."""
        pods = self.pods(
            name,
            lambda ps: sorted(
                p["metadata"]["labels"].get(JOB_ROLE) for p in ps.values() if p["status"].get("phase") == "Running"
            ) == ["launcher", "worker"],
            "launcher and worker Running",
        )  # fmt: skip
        return {
            p["metadata"]["labels"][JOB_ROLE]: p
            for p in pods.values()
            if p["status"].get("phase") == "Running"
        }

    def event(self, kind: str, name: str, reason: str, contains: str = "") -> dict:
        selector = f"involvedObject.kind={kind},involvedObject.name={name},reason={reason}"
        objs = wait_for(
            self.api, self.core.list_namespaced_event, self.ns, field_selector=selector,
            until=lambda evs: any(contains in (e.get("message") or "") for e in evs.values()),
            what=f"a {reason} event on {kind} {name} saying {contains!r}",
        )  # fmt: skip
        return next(e for e in objs.values() if contains in (e.get("message") or ""))


@pytest.fixture
def jobs(kueue_cluster, kueue_namespace) -> Jobs:
    return Jobs(kueue_cluster.api_client(), kueue_namespace)


def _admitted(wl: dict) -> bool:
    return _true(wl, "QuotaReserved") and _true(wl, "Admitted")


# ------------------------------------------------------------------ the tests
def test_kueue_suspends_a_queued_mpijob_at_creation_then_admits_it(jobs):
    created = jobs.create(mpijob("one"))
    # Kueue's mutating webhook answered the create itself: the object was stored suspended
    assert created["spec"]["runPolicy"]["suspend"] is True

    wl = jobs.workload("one", _admitted, "QuotaReserved and Admitted")
    assert wl["spec"]["queueName"] == lk.LOCAL_QUEUE
    assert wl["status"]["admission"]["clusterQueue"] == lk.CLUSTER_QUEUE
    assert sorted(ps["name"] for ps in wl["spec"]["podSets"]) == ["launcher", "worker"]
    assert [(o["kind"], o["name"]) for o in wl["metadata"]["ownerReferences"]] == [("MPIJob", "one")]

    job = jobs.mpijob("one", lambda j: not _suspended(j) and _true(j, "Running"), "unsuspended and Running")
    assert not _true(job, "Suspended")
    jobs.running_pods("one")
    jobs.event("MPIJob", "one", "Started", f"Admitted by clusterQueue {lk.CLUSTER_QUEUE}")


def test_three_jobs_against_a_quota_for_two_the_third_waits_until_one_is_deleted(jobs):
    for name in ("a", "b"):
        jobs.create(mpijob(name))
    for name in ("a", "b"):
        jobs.workload(name, _admitted, "Admitted")

    jobs.create(mpijob("c"))
    wl = jobs.workload(
        "c",
        lambda w: (lk.condition(w, "QuotaReserved") or {}).get("status") == "False",
        "QuotaReserved=False",
    )
    reserved = lk.condition(wl, "QuotaReserved")
    assert reserved["reason"] == "Pending"
    assert "insufficient unused quota for cpu in flavor default-flavor" in reserved["message"], reserved
    assert not _true(wl, "Admitted")
    jobs.event("Workload", wl["metadata"]["name"], "Pending", "insufficient unused quota")
    # the mpi-operator sees a suspended job: condition Suspended, its launcher Job created suspended, no pods at all
    job = jobs.mpijob("c", lambda j: _true(j, "Suspended", "MPIJobSuspended"), "Suspended (mpi-operator)")
    assert _suspended(job)
    assert jobs.batch.read_namespaced_job("c-launcher", jobs.ns).spec.suspend is True
    assert not jobs.core.list_namespaced_pod(jobs.ns, label_selector=f"{JOB_NAME}=c").items

    jobs.delete("a")
    jobs.workload("c", _admitted, "Admitted once a is deleted")
    job = jobs.mpijob("c", lambda j: not _suspended(j) and _true(j, "Running"), "unsuspended and Running")
    assert lk.condition(job, "Suspended")["reason"] == "MPIJobResumed"
    jobs.running_pods("c")


def test_a_high_priority_job_preempts_a_running_low_one_which_resumes_later(jobs):
    # the low job alone fills the quota (2 x 1 cpu)
    jobs.create(mpijob("low", cpu="1", priority="low"))
    jobs.workload("low", _admitted, "Admitted")
    jobs.mpijob("low", lambda j: _true(j, "Running"), "Running")
    first = jobs.running_pods("low")
    launcher_job = jobs.batch.read_namespaced_job("low-launcher", jobs.ns)
    assert not launcher_job.spec.suspend

    jobs.create(mpijob("high", cpu="500m", priority="high"))

    # Kueue evicts the low job's Workload and suspends the MPIJob again
    wl = jobs.workload("low", lambda w: _true(w, "Evicted"), "Evicted")
    evicted = lk.condition(wl, "Evicted")
    assert evicted["reason"] == "Preempted", evicted
    assert "Preempted to accommodate a workload" in evicted["message"], evicted
    assert _true(wl, "Preempted", "InClusterQueue"), wl["status"]["conditions"]
    jobs.event("MPIJob", "low", "Stopped", "Preempted to accommodate a workload")
    job = jobs.mpijob(
        "low",
        lambda j: _suspended(j) and _true(j, "Suspended", "MPIJobSuspended"),
        "suspended again (Suspended)",
    )
    assert lk.condition(job, "Running")["status"] == "False"
    assert lk.condition(job, "Running")["reason"] == "MPIJobSuspended"

    # what the mpi-operator does on suspension: launcher Job suspended (the Job controller removes its pod),
    # worker pods deleted; the Job, Service, ConfigMap and Secret stay
    jobs.pods("low", lambda ps: not ps, "every pod gone")
    launcher_job = jobs.batch.read_namespaced_job("low-launcher", jobs.ns)
    assert launcher_job.spec.suspend is True
    assert any(c.type == "Suspended" and c.status == "True" for c in launcher_job.status.conditions or [])
    jobs.core.read_namespaced_service("low", jobs.ns)
    jobs.core.read_namespaced_config_map("low-config", jobs.ns)

    jobs.workload("high", _admitted, "Admitted")
    jobs.mpijob("high", lambda j: not _suspended(j) and _true(j, "Running"), "Running")
    jobs.running_pods("high")

    # the low job waits (requeued) until the high one is gone, then resumes with new pods
    wl = jobs.workload("low", lambda w: _true(w, "Requeued"), "Requeued")
    assert lk.condition(wl, "Requeued")["reason"] == "Preempted"
    assert not _true(wl, "QuotaReserved")
    jobs.delete("high")
    jobs.workload("low", _admitted, "re-admitted")
    job = jobs.mpijob("low", lambda j: not _suspended(j) and _true(j, "Running"), "resumed and Running")
    assert lk.condition(job, "Suspended")["reason"] == "MPIJobResumed"
    again = jobs.running_pods("low")
    for role in ("launcher", "worker"):
        assert again[role]["metadata"]["uid"] != first[role]["metadata"]["uid"], role
    launcher_job = jobs.batch.read_namespaced_job("low-launcher", jobs.ns)
    assert not launcher_job.spec.suspend
    assert not launcher_job.status.failed  # the pod deleted by the suspension is no failed attempt


def test_wait_for_workers_ready_does_not_hold_the_launcher_of_a_job_that_waited_in_the_queue(jobs):
    """mpi-operator v0.8.2 evaluates launcherCreationPolicy only when it creates the launcher Job, and it creates it
    (suspended) while the MPIJob is suspended, with no workers: 0 ready of 0 passes (kubeflow/mpi-operator#615, fix
    proposed in #868). On admission the Job is unsuspended in the sync that creates the workers, so the launcher pod
    starts before any worker is ready. (A job Kueue admits before the operator's first sync of it is not hit; a job
    that waited in the queue, or is resumed after a preemption, is.) Without Kueue the launcher waits for its worker."""

    def job(name: str, queued: bool) -> dict:
        m = mpijob(name)
        m["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
        m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"] = bh.pod_metadata(
            bh.RUN, start_delay=3
        )
        if not queued:
            del m["metadata"]["labels"][lk.QUEUE_LABEL]
        return m

    def launcher_exists(pods: dict) -> bool:
        return any(p["metadata"]["labels"].get(JOB_ROLE) == "launcher" for p in pods.values())

    def worker_ready(pods: dict) -> bool:
        return any(
            p["metadata"]["labels"].get(JOB_ROLE) == "worker" and _true(p, "Ready") for p in pods.values()
        )

    jobs.create(mpijob("blocker", cpu="1"))  # the whole quota
    jobs.workload("blocker", _admitted, "Admitted")
    jobs.create(job("queued", queued=True))
    jobs.mpijob(
        "queued",
        lambda j: _true(j, "Suspended", "MPIJobSuspended"),
        "Suspended (seen queued by the operator)",
    )
    assert (
        jobs.batch.read_namespaced_job("queued-launcher", jobs.ns).spec.suspend is True
    )  # made, for 0 workers
    jobs.delete("blocker")
    pods = jobs.pods("queued", launcher_exists, "a launcher pod")
    assert not worker_ready(pods), "the launcher waited for the worker (was kubeflow/mpi-operator#615 fixed?)"

    jobs.create(job("plain", queued=False))
    pods = jobs.pods("plain", launcher_exists, "a launcher pod")
    assert worker_ready(pods), "without Kueue the launcher waits for the worker"
