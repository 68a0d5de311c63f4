"""What the wait benchmarks put on the local cluster and read back from it.

MPIJobs for this provider, batch Jobs for the peer (``KubernetesJobTrigger`` waits on a Job), both
with simulated pods (localcluster.behaviour: how long the main container runs); the API server's
request counters (its /metrics); when each main container was seen ending (a pod watch).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from kubernetes import client, watch

from localcluster import behaviour as bh
from localcluster import kueue as lk

TOLERATE_ALL = [{"operator": "Exists"}]


def _template(container: str, lifecycle: str, run_duration: str | None, cpu: str | None = None) -> dict:
    """``cpu``: the container's CPU request (what a Kueue quota counts; none otherwise)."""
    annotations = {bh.RUN_DURATION: run_duration} if run_duration else {}
    main = {"name": container, "image": "mpioperator/mpi-pi:openmpi", "command": ["true"]}
    if cpu:
        main["resources"] = {"requests": {"cpu": cpu}}
    return {
        "metadata": {"labels": {bh.LIFECYCLE: lifecycle}, "annotations": annotations},
        "spec": {
            "containers": [main],
            "tolerations": TOLERATE_ALL,
            **({"restartPolicy": "Never"} if container == "base" else {}),
        },
    }


def mpijob(name: str, lifecycle: str, run_duration: str | None, queue: Queue | None = None) -> dict:
    """A launcher and one worker; with ``queue``, labelled for that Kueue LocalQueue, each pod requesting its CPU."""
    cpu = queue.pod_cpu if queue else None
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, **({"labels": {lk.QUEUE_LABEL: queue.local_queue}} if queue else {})},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0},
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": _template("launcher", lifecycle, run_duration, cpu),
                },
                "Worker": {"replicas": 1, "template": _template("worker", bh.RUN, None, cpu)},
            },
        },
    }


def batch_job(name: str, lifecycle: str, run_duration: str | None) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": _template("base", lifecycle, run_duration)},
    }


def ensure_namespace(api: client.ApiClient, namespace: str) -> None:
    try:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    except client.exceptions.ApiException as err:
        if err.status != 409:
            raise


def create(
    api: client.ApiClient,
    namespace: str,
    side: str,
    names: list[str],
    lifecycle: str,
    run_duration: str | None = None,
    queue: Queue | None = None,
) -> None:
    """Create the jobs; those that exist already (an earlier, smaller N) are kept. More jobs than ``names`` in the
    namespace (a larger N run before) would be watched and cached too: refused, the namespace must go first."""
    listed = (
        client.CustomObjectsApi(api).list_namespaced_custom_object(
            "kubeflow.org", "v2beta1", namespace, "mpijobs"
        )
        if side == "provider"
        else client.BatchV1Api(api).list_namespaced_job(namespace).to_dict()
    )
    refuse_larger(namespace, listed.get("items") or [], names)
    for name in names:
        try:
            if side == "provider":
                client.CustomObjectsApi(api).create_namespaced_custom_object(
                    "kubeflow.org",
                    "v2beta1",
                    namespace,
                    "mpijobs",
                    mpijob(name, lifecycle, run_duration, queue),
                )
            else:
                client.BatchV1Api(api).create_namespaced_job(
                    namespace, batch_job(name, lifecycle, run_duration)
                )
        except client.exceptions.ApiException as err:
            if err.status != 409:
                raise


def refuse_larger(namespace: str, listed: list[dict], names: list[str]) -> None:
    """Raise when ``namespace`` holds jobs beyond ``names`` (a larger N run before): the waits' hub would watch and
    cache them too, and the figures would not be N's."""
    extra = {(j.get("metadata") or {}).get("name") for j in listed} - set(names)
    if extra:
        raise RuntimeError(
            f"namespace {namespace} holds {len(extra)} jobs of a larger N: delete it first "
            f"(kubectl delete namespace {namespace}) or run the sizes in increasing order"
        )


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The counters of ``request_counts`` that grew from ``before`` to ``after``, by how much."""
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0) > 0}


@dataclass(frozen=True)
class Queue:
    """A ClusterQueue of its own for one benchmark namespace, with quota for exactly ``admitted`` jobs, and the
    namespace's LocalQueue feeding it (Kueue admits jobs in creation order while they fit, queues the rest)."""

    namespace: str
    admitted: int
    pod_cpu_milli: int = 50  # per pod: launcher + worker = 100m a job

    @property
    def pod_cpu(self) -> str:
        return f"{self.pod_cpu_milli}m"

    @property
    def cluster_queue(self) -> str:
        return f"bench-{self.namespace}"

    local_queue = "bench-queue"

    def create(self, api: client.ApiClient) -> None:
        """The ClusterQueue (cpu only: the jobs request nothing else) and the LocalQueue (409: there already)."""
        quota = f"{self.admitted * 2 * self.pod_cpu_milli}m"
        cluster_queue = {
            "apiVersion": f"{lk.GROUP}/{lk.VERSION}",
            "kind": "ClusterQueue",
            "metadata": {"name": self.cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": lk.FLAVOR, "resources": [{"name": "cpu", "nominalQuota": quota}]}
                        ],
                    }
                ],
            },
        }
        local_queue = {
            "apiVersion": f"{lk.GROUP}/{lk.VERSION}",
            "kind": "LocalQueue",
            "metadata": {"name": self.local_queue, "namespace": self.namespace},
            "spec": {"clusterQueue": self.cluster_queue},
        }
        api_ = client.CustomObjectsApi(api)
        for create in (
            lambda: api_.create_cluster_custom_object(lk.GROUP, lk.VERSION, "clusterqueues", cluster_queue),
            lambda: api_.create_namespaced_custom_object(
                lk.GROUP, lk.VERSION, self.namespace, "localqueues", local_queue
            ),
        ):
            try:
                create()
            except client.exceptions.ApiException as err:
                if err.status != 409:
                    raise
        deadline = time.time() + 60
        while not lk.cluster_queue_active(api, self.cluster_queue):
            if time.time() > deadline:
                raise RuntimeError(f"ClusterQueue {self.cluster_queue} not Active after 60 s")
            time.sleep(0.5)

    def delete(self, api: client.ApiClient) -> None:
        """The ClusterQueue (Kueue removes it once the namespace's Workloads are gone)."""
        client.CustomObjectsApi(api).delete_cluster_custom_object(
            lk.GROUP, lk.VERSION, "clusterqueues", self.cluster_queue
        )

    def workloads(self, api: client.ApiClient) -> tuple[int, int]:
        """(admitted, queued): Workloads of the namespace with QuotaReserved True, and with it False."""
        items = client.CustomObjectsApi(api).list_namespaced_custom_object(
            lk.GROUP, lk.VERSION, self.namespace, "workloads"
        )["items"]
        reserved = [(lk.condition(w, "QuotaReserved") or {}).get("status") for w in items]
        return reserved.count("True"), reserved.count("False")

    def settled(
        self, api: client.ApiClient, jobs: int, timeout: float = 1200, quiet: float = 10
    ) -> tuple[int, int]:
        """(admitted, queued) once nothing changes: every job has a Workload that Kueue admitted or left queued, the
        admitted ones' launchers run, the mpi-operator has marked every job Created (the queued ones Suspended too)
        and no MPIJob changed for ``quiet`` seconds (else after ``timeout``)."""
        deadline, last, since = time.time() + timeout, None, time.time()
        while True:
            admitted, queued = self.workloads(api)
            listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
                "kubeflow.org", "v2beta1", self.namespace, "mpijobs"
            )["items"]
            versions = sorted(j["metadata"]["resourceVersion"] for j in listed)
            if versions != last:
                last, since = versions, time.time()
            conditions = [
                {c["type"] for c in (j.get("status") or {}).get("conditions") or [] if c["status"] == "True"}
                for j in listed
            ]
            ready = (
                admitted + queued >= jobs
                and running_main_containers(api, self.namespace) >= admitted
                and sum("Created" in c for c in conditions) >= jobs
                and sum("Suspended" in c for c in conditions) >= queued
            )
            if (ready and time.time() - since >= quiet) or time.time() > deadline:
                return admitted, queued
            time.sleep(2)


def running_main_containers(api: client.ApiClient, namespace: str) -> int:
    """Launcher (provider) and Job (peer) containers running in ``namespace``."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
    return sum(
        1
        for p in pods
        for s in (p.status.container_statuses or [])
        if s.name in ("launcher", "base") and s.state and s.state.running
    )


def wait_running(
    api: client.ApiClient, namespace: str, count: int, stall: float = 45, timeout: float = 900
) -> int:
    """Main containers running in ``namespace`` once ``count`` run, or once their number stopped growing for
    ``stall`` seconds (the simulated nodes hold about 440 pods: beyond, pods stay Pending), or after ``timeout``.
    The stall is counted from the first one running: on a busy machine the mpi-operator took over 45 s to make the
    first pods of 300 jobs."""
    best, since, start = 0, time.time(), time.time()
    while (running := running_main_containers(api, namespace)) < count:
        if running > best:
            best, since = running, time.time()
        elif (best and time.time() - since > stall) or time.time() - start > timeout:
            return running
        time.sleep(2)
    return running


def request_counts(api: client.ApiClient) -> dict[str, float]:
    """``apiserver_request_total`` of namespace- and object-scoped reads (GET, LIST, WATCH) by verb and resource.

    The controllers read through cluster-wide informers, so these are the waiting process's requests
    (a watch counts when it ends).
    """
    text = api.call_api(
        "/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False
    ).data.decode()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{") or not _ours(line):
            continue
        labels = dict(part.split("=", 1) for part in line[line.index("{") + 1 : line.index("}")].split(","))
        labels = {k: v.strip('"') for k, v in labels.items()}
        if labels.get("verb") not in ("GET", "LIST", "WATCH"):
            continue
        key = f"{labels['verb']} {labels['resource']}" + (
            f"/{labels['subresource']}" if labels.get("subresource") else ""
        )
        counts[key] = counts.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def _ours(line: str) -> bool:
    """Namespace-scoped (lists, watches) or object-scoped (GET of a named object, its log) requests."""
    return (
        ('scope="namespace"' in line or 'scope="resource"' in line)
        and 'resource="leases"' not in line
        and 'resource="configmaps"' not in line
        and 'resource="endpoint' not in line
        and 'resource="servicecidrs"' not in line
    )


class EndWatcher(threading.Thread):
    """Records when each main container (launcher / base) is first seen terminated: the job-name label."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        super().__init__(daemon=True)
        self.api, self.namespace = api, namespace
        self.ended: dict[str, float] = {}
        self._watch = watch.Watch()

    def run(self) -> None:
        core = client.CoreV1Api(self.api)
        try:
            self._follow(core)
        except Exception:  # stop() closes the stream under the reader
            pass

    def _follow(self, core: client.CoreV1Api) -> None:
        for event in self._watch.stream(core.list_namespaced_pod, self.namespace, timeout_seconds=3600):
            pod = event["object"]
            labels = pod.metadata.labels or {}
            job = labels.get("training.kubeflow.org/job-name") or labels.get("job-name")
            for status in pod.status.container_statuses or []:
                if status.name in ("launcher", "base") and status.state and status.state.terminated:
                    self.ended.setdefault(job, time.time())

    def stop(self) -> None:
        self._watch.stop()


def long_running(api: client.ApiClient) -> dict[str, float]:
    """Open namespace-scoped long-running requests (watches, log follows) by verb and resource."""
    text = api.call_api(
        "/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False
    ).data.decode()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("apiserver_longrunning_requests{") and _ours(line):
            labels = {
                k: v.strip('"')
                for k, v in (p.split("=", 1) for p in line[line.index("{") + 1 : line.index("}")].split(","))
            }
            value = float(line.rsplit(" ", 1)[1])
            if value:
                key = f"{labels['verb']} {labels['resource']}" + (
                    f"/{labels['subresource']}" if labels.get("subresource") else ""
                )
                counts[key] = counts.get(key, 0.0) + value
    return counts


class SucceededWatcher(EndWatcher):
    """Records when each MPIJob's Succeeded condition is first seen (the controllers' share of P1 ends there)."""

    def _follow(self, core: client.CoreV1Api) -> None:
        api = client.CustomObjectsApi(self.api)
        for event in self._watch.stream(
            api.list_namespaced_custom_object,
            "kubeflow.org",
            "v2beta1",
            self.namespace,
            "mpijobs",
            timeout_seconds=3600,
        ):
            obj = event["object"]
            conditions = (obj.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Succeeded" and c.get("status") == "True" for c in conditions):
                self.ended.setdefault(obj["metadata"]["name"], time.time())
