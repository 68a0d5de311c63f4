"""What a task log says about Kueue, checked against the Workloads themselves (the Kueue modules of
tests/integration: MPIJobs and TrainJobs), not against the provider's own wording.

An admin watch (``WorkloadHistory``) keeps every version of a namespace's Workloads from before the jobs exist,
including the states Kueue overwrites later and the Workloads deleted with their jobs, and
``assert_told_as_workloads`` matches each queued, admitted and evicted line of a job of one kind with them.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from dataclasses import dataclass, field

from kubernetes import client, watch

from localcluster import kueue as lk
from tests.integration.test_operator import Recorder

# the provider's Kueue lines (wait/queueing.py), each after "<kind> <name> ": what they name is checked against the
# Workloads (assert_told_as_workloads)
QUEUED_LINE = re.compile(r"is queued by Kueue in LocalQueue (\S+): (.+)$")
ADMITTED_LINE = re.compile(
    r"was admitted by Kueue: ClusterQueue (\S+), flavor (.+?)(?: after .+? in the queue)?$"
)
EVICTED_LINE = re.compile(
    r"was evicted by Kueue \((\w+): (.*)\); the .+? (?:stops|suspends) .+?, and the program starts over"
)  # the mpi-operator stops..., the Kubeflow Trainer suspends its JobSet...
NOT_YET = "waiting for Kueue to admit it"  # the Workload has no QuotaReserved message (yet)
AGAIN = "waiting to be admitted again"  # after an eviction, in place of its repeated message


def _condition(workload: dict, kind: str) -> dict:
    return lk.condition(workload, kind) or {}


@dataclass
class Told:
    """What the Workloads of one job said over time, in order."""

    queues: set = field(default_factory=set)  # spec.queueName
    pending: set = field(default_factory=set)  # QuotaReserved=False messages
    admissions: list = field(
        default_factory=list
    )  # per QuotaReserved=True transition: (ClusterQueue, {flavors})
    evictions: list = field(default_factory=list)  # per Evicted=True transition: (reason, message)
    evicted_counts: dict | None = None  # status.schedulingStats.evictions as last seen: reason -> count

    def add(self, workload: dict, seen: set) -> None:
        name, status = workload["metadata"]["name"], workload.get("status") or {}
        self.queues.add(workload["spec"].get("queueName"))
        reserved, evicted = _condition(workload, "QuotaReserved"), _condition(workload, "Evicted")
        if reserved.get("status") == "False" and reserved.get("message"):
            self.pending.add(reserved["message"])
        if (
            reserved.get("status") == "True"
            and (key := (name, "admitted", reserved["lastTransitionTime"])) not in seen
        ):
            seen.add(key)
            admission = status["admission"]
            self.admissions.append(
                (
                    admission["clusterQueue"],
                    frozenset(
                        flavor
                        for assignment in admission["podSetAssignments"]
                        for flavor in (
                            assignment.get("flavors") or {}
                        ).values()  # none: a pod set asking nothing
                    ),
                )
            )
        if (
            evicted.get("status") == "True"
            and (key := (name, "evicted", evicted["lastTransitionTime"])) not in seen
        ):
            seen.add(key)
            self.evictions.append((evicted["reason"], evicted["message"]))
        if (stats := status.get("schedulingStats")) is not None:
            self.evicted_counts = Counter()
            for eviction in stats.get("evictions") or []:
                self.evicted_counts[eviction["reason"]] += eviction.get("count", 0)

    def explains(self, why: str) -> bool:
        """A queued line's reason is one the Workload gave, or the provider's words for none yet / the eviction's."""
        return why in self.pending or why == NOT_YET or (why == AGAIN and bool(self.evictions))


class WorkloadHistory:
    """Every version of a namespace's Workloads, watched as the admin from before the jobs exist (a context manager):
    what the task log is checked against, including states Kueue overwrote and Workloads deleted with their jobs."""

    def __init__(self, api_client, namespace: str) -> None:
        self.co, self.namespace = client.CustomObjectsApi(api_client), namespace
        self.versions: dict[str, list[dict]] = {}  # Workload name -> its versions, in order
        self.deleted: set[str] = set()
        self.problems: list[str] = []  # a watch error or gap: the history may miss versions
        self._changed, self._stop = threading.Condition(), threading.Event()

    def _list(self) -> tuple[dict[str, dict], str]:
        listed = self.co.list_namespaced_custom_object(lk.GROUP, lk.VERSION, self.namespace, "workloads")
        return {w["metadata"]["name"]: w for w in listed["items"]}, listed["metadata"]["resourceVersion"]

    def _keep(self, event_type: str, workload: dict) -> None:
        with self._changed:
            name = workload["metadata"]["name"]
            versions = self.versions.setdefault(name, [])
            if (
                not versions
                or versions[-1]["metadata"]["resourceVersion"] != workload["metadata"]["resourceVersion"]
            ):
                versions.append(workload)
            if event_type == "DELETED":
                self.deleted.add(name)
            self._changed.notify_all()

    def _watch(self, resource_version: str) -> None:
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(
                    self.co.list_namespaced_custom_object,
                    lk.GROUP,
                    lk.VERSION,
                    self.namespace,
                    "workloads",
                    resource_version=resource_version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=60,
                ):
                    resource_version = w.resource_version or resource_version
                    if event["type"] != "BOOKMARK":
                        self._keep(event["type"], event["raw_object"])
                    if self._stop.is_set():
                        return
            except Exception as err:  # noqa: BLE001 - recorded, and the check says the history may be incomplete
                if self._stop.is_set():
                    return
                self.problems.append(
                    f"watch of Workloads failed ({err!r}): listed again, versions may be missing"
                )
                listed, resource_version = self._list()
                for workload in listed.values():
                    self._keep("MODIFIED", workload)

    def __enter__(self) -> WorkloadHistory:
        listed, resource_version = self._list()
        for workload in listed.values():
            self._keep("ADDED", workload)
        threading.Thread(
            target=self._watch, args=(resource_version,), daemon=True, name=f"workloads-{self.namespace}"
        ).start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()  # the thread ends at its next event, bookmark or watch timeout

    def settle(self, timeout: float = 60) -> None:
        """Until the history holds the current version of each Workload and the deletion of each one gone: then it
        holds every version before (a watch delivers them in order)."""

        def current() -> bool:
            listed, _ = self._list()
            return all(
                self.versions.get(n, [{}])[-1].get("metadata", {}).get("resourceVersion")
                == w["metadata"]["resourceVersion"]
                for n, w in listed.items()
            ) and all(name in listed or name in self.deleted for name in self.versions)

        with self._changed:
            assert self._changed.wait_for(current, timeout), (
                f"the Workload watch of {self.namespace} did not catch up in {timeout:.0f}s: {self.problems}"
            )

    def of_job(self, job: str, kind: str = "MPIJob") -> Told:
        """What the Workloads of the job ``job`` (of ``kind``) said."""
        told, seen = Told(), set()
        with self._changed:
            versions_by_name = list(self.versions.values())
        for versions in versions_by_name:
            for workload in versions:
                if any(
                    o.get("kind") == kind and o.get("name") == job
                    for o in workload["metadata"].get("ownerReferences") or []
                ):
                    told.add(workload, seen)
        return told


def _said(line: re.Pattern, lines: list[str]) -> list[tuple[str, ...]]:
    """What each line of that kind says; a line that starts like one but reads otherwise fails."""
    start = line.pattern[: line.pattern.index("by Kueue")]  # "is queued ", "was admitted ", "was evicted "
    said = [line.search(ln) for ln in lines if start in ln]
    assert all(said), (line.pattern, lines)
    return [m.groups() for m in said]


def assert_told_as_workloads(lines: list[str], history: WorkloadHistory, kind: str = "MPIJob") -> None:
    """Each Kueue line of a task log matches its job's Workloads: a queued line names the Workload's LocalQueue and a
    reason it gave; each admitted line one of its admissions (ClusterQueue and flavor of ``status.admission``), the
    last one the last; the evicted lines are its evictions (Evicted=True), one each, with their reason and message."""
    history.settle()
    jobs = {ln.split()[1] for ln in lines if ln.startswith(f"{kind} ")}
    for job in jobs:
        told, mine = history.of_job(job, kind), [ln for ln in lines if ln.startswith(f"{kind} {job} ")]
        context = f"\n{job}'s Workloads said {told}\nits task log: {mine}\n{history.problems}"
        for queue, why in _said(QUEUED_LINE, mine):
            assert queue in told.queues and told.explains(why), f"queued in {queue}: {why!r}{context}"
        admitted = [(cq, frozenset({flavor})) for cq, flavor in _said(ADMITTED_LINE, mine)]
        assert all(a in told.admissions for a in admitted) and len(admitted) <= len(told.admissions), (
            f"admitted {admitted}, the Workloads' admissions {told.admissions}{context}"
        )
        assert not admitted or admitted[-1] == told.admissions[-1], f"the last admission not said{context}"
        evicted = _said(EVICTED_LINE, mine)
        assert evicted == told.evictions, (
            f"evicted {evicted}, the Workloads' evictions {told.evictions}{context}"
        )
        assert told.evicted_counts in (None, Counter(reason for reason, _ in evicted)), (
            f"schedulingStats.evictions: {told.evicted_counts}{context}"
        )


def kueue_lines(recorder: Recorder) -> list[str]:
    return [ln for ln in recorder.lines if "by Kueue" in ln]


def assert_logs_told_as_workloads(
    logs: dict[str, Recorder], history: WorkloadHistory, kind: str = "MPIJob"
) -> None:
    for recorder in logs.values():
        assert_told_as_workloads(kueue_lines(recorder), history, kind)
