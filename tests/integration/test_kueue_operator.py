"""The operator under a real Kueue (v0.17.0) and the real mpi-operator (v0.8.2), on simulated (kwok) nodes: queued,
admitted, preempted and timed out in the queue, as the task log tells it.

The ClusterQueue's quota is cpu 2 / memory 2Gi; each job here is one launcher and one worker requesting 500m cpu each
(1 cpu where said), so two jobs fill it and a third one waits. Each test's tasks log
into their own recorder (by task id), as the operator's and the trigger's ``self.log``. The tasks run as the service
account bound only to the shipped role (deploy/rbac.yaml), so the role's Workload rule is proven too.

What the task log says about Kueue is checked against the Workloads themselves, not against the provider's own
wording: an admin watch (``WorkloadHistory``) keeps every version of the namespace's Workloads from before the jobs
exist, including the states Kueue overwrites later and the Workloads deleted with their jobs, and
``assert_told_as_workloads`` matches each queued, admitted and evicted line with them.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from kubernetes import client, watch

from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.version_compat import AirflowException, TaskDeferred
from localcluster import kueue as lk
from tests.integration.test_kueue_cluster import Jobs
from tests.integration.test_operator import LINES, Recorder, ctx, operator, wait_gone

pytestmark = pytest.mark.needs_simulation

REQUESTS = {"requests": {"cpu": "500m", "memory": "256Mi"}}
QUEUED = f"is queued by Kueue in LocalQueue {lk.LOCAL_QUEUE}"
# the provider's Kueue lines (wait/queueing.py), each after "MPIJob <name> ": what they name is checked against the
# Workloads (assert_told_as_workloads), not against this module's expectations
ADMITTED = re.compile(r"was admitted by Kueue: ClusterQueue \S+, flavor .+? after (.+?) in the queue")
QUEUED_LINE = re.compile(r"is queued by Kueue in LocalQueue (\S+): (.+)$")
ADMITTED_LINE = re.compile(
    r"was admitted by Kueue: ClusterQueue (\S+), flavor (.+?)(?: after .+? in the queue)?$"
)
EVICTED_LINE = re.compile(r"was evicted by Kueue \((\w+): (.*)\); the mpi-operator stops")
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
                        for flavor in assignment["flavors"].values()
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

    def of_job(self, job: str) -> Told:
        told, seen = Told(), set()
        with self._changed:
            versions_by_name = list(self.versions.values())
        for versions in versions_by_name:
            for workload in versions:
                if any(
                    o.get("kind") == "MPIJob" and o.get("name") == job
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


def assert_told_as_workloads(lines: list[str], history: WorkloadHistory) -> None:
    """Each Kueue line of a task log matches its job's Workloads: a queued line names the Workload's LocalQueue and a
    reason it gave; each admitted line one of its admissions (ClusterQueue and flavor of ``status.admission``), the
    last one the last; the evicted lines are its evictions (Evicted=True), one each, with their reason and message."""
    history.settle()
    jobs = {ln.split()[1] for ln in lines if ln.startswith("MPIJob ")}
    for job in jobs:
        told, mine = history.of_job(job), [ln for ln in lines if ln.startswith(f"MPIJob {job} ")]
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


@pytest.fixture
def workloads(kueue_cluster, kueue_namespace) -> Iterator[WorkloadHistory]:
    with WorkloadHistory(kueue_cluster.api_client(), kueue_namespace) as history:
        yield history


@pytest.fixture
def kueue_conn(monkeypatch, kueue_cluster, kueue_namespace, tmp_path) -> str:
    from tests.integration.least_privilege import (
        apply_role,
        bound_service_account_kubeconfig,
        use_as_kubernetes_default,
    )

    api = kueue_cluster.api_client()
    config = bound_service_account_kubeconfig(
        api, str(kueue_cluster.kubeconfig_path), kueue_namespace, apply_role(api), tmp_path / "sa-kubeconfig"
    )
    kueue_cluster.set_launcher_logs(kueue_namespace, LINES)
    return use_as_kubernetes_default(monkeypatch, config, kueue_namespace)


@pytest.fixture
def logs(monkeypatch):
    """One Recorder per task id: the operator's (task_id) and its trigger's (the job name holds the task id)."""
    from airflow_mpi.operators import MPIJobOperator

    recorders: dict[str, Recorder] = {}

    def of(obj) -> Recorder:
        task = getattr(obj, "task_id", None) or next(t for t in recorders if f"-{t}-" in obj.name)
        return recorders.setdefault(task, Recorder())

    for cls in (MPIJobOperator, MPIJobTrigger):
        monkeypatch.setattr(cls, "log", property(of))
    return recorders


def queued_op(task_id: str, namespace: str, **kwargs):
    kwargs.setdefault("workers", 1)
    return operator(
        task_id,
        namespace,
        queue_name=lk.LOCAL_QUEUE,
        launcher_resources=kwargs.pop("launcher_resources", REQUESTS),
        worker_resources=kwargs.pop("worker_resources", REQUESTS),
        **kwargs,
    )


def defer(op) -> MPIJobTrigger:
    """Submit ``op``'s job; the trigger, rebuilt as the triggerer would."""
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx(op.task_id))
    return MPIJobTrigger(**deferred.value.trigger.serialize()[1])


def run_trigger(trigger: MPIJobTrigger) -> dict:
    async def first_event():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(first_event())


def kueue_lines(recorder: Recorder) -> list[str]:
    return [ln for ln in recorder.lines if "by Kueue" in ln]


def assert_logs_told_as_workloads(logs: dict[str, Recorder], history: WorkloadHistory) -> None:
    for recorder in logs.values():
        assert_told_as_workloads(kueue_lines(recorder), history)


def test_three_jobs_for_a_quota_of_two_queue_and_all_succeed(kueue_conn, kueue_namespace, workloads, logs):
    ns = kueue_namespace
    first, second = (defer(queued_op(t, ns, deferrable=True, run_duration="6s")) for t in ("first", "second"))
    # (that queueing counts against neither the startup nor the schedule timeout is a unit test's: test_monitor_kueue;
    # here a 1 s startup_timeout failed once in CI because the busy mpi-operator took longer to say Created)
    third = queued_op("third", ns)
    xcom = third.execute(ctx("third"))

    assert xcom["condition"] == "Succeeded"
    lines = kueue_lines(logs["third"])
    # queued (the first line may come before Kueue's scheduler gave a reason: "waiting for Kueue to admit it"),
    # with the quota as the reason, then admitted once, last
    assert all(QUEUED in ln for ln in lines[:-1]) and any(
        "insufficient unused quota" in ln for ln in lines
    ), lines
    admitted = [ln for ln in lines if ADMITTED.search(ln)]
    assert len(admitted) == 1 and lines[-1] == admitted[0], lines
    waited = ADMITTED.search(admitted[0]).group(1)
    assert re.fullmatch(r"\d+s", waited) and waited != "0s", (
        admitted
    )  # it waited for one of the first two to finish
    order = logs["third"].lines
    assert order.index(lines[0]) < order.index(admitted[0]) < order.index(LINES[0])
    assert logs["third"].payload_lines() == LINES
    for task, trigger in (("first", first), ("second", second)):
        event = run_trigger(trigger)
        assert event["status"] == "success", event
        assert logs[task].payload_lines() == LINES
        assert not any(QUEUED in ln for ln in logs[task].lines)
    assert_logs_told_as_workloads(logs, workloads)


def test_preempted_job_is_reported_readmitted_and_its_log_stays_exactly_once(
    kueue_cluster, kueue_conn, kueue_namespace, workloads, logs
):
    ns = kueue_namespace
    jobs = Jobs(kueue_cluster.api_client(), ns)
    low = defer(queued_op("low", ns, deferrable=True, run_duration="8s", workload_priority_class="low"))
    result: dict = {}
    waiter = threading.Thread(target=lambda: result.update(run_trigger(low)))
    waiter.start()
    jobs.uids[low.name] = low.uid
    jobs.running_pods(low.name)
    # preempted only once its first attempt is in the task log: a launcher deleted before the trigger read it
    # leaves nothing to read (a real kubelet deletes its log too); seen when a loaded CI machine streamed late
    logs["low"].await_lines(lambda lines: lines.count(LINES[-1]) == 1, 60, "first attempt's last line")
    big = {"requests": {"cpu": "1", "memory": "256Mi"}}
    high = queued_op(
        "high",
        ns,
        run_duration="1s",
        workload_priority_class="high",
        launcher_resources=big,
        worker_resources=big,
    )
    assert high.execute(ctx("high"))["condition"] == "Succeeded"
    waiter.join(180)
    assert not waiter.is_alive()

    assert result["status"] == "success", result
    assert result["evictions"] == 1 and result["launcher_attempts"] == 2
    lines = kueue_lines(logs["low"])
    evicted = [ln for ln in lines if "was evicted by Kueue (Preempted:" in ln]
    assert len(evicted) == 1, lines
    after = lines[lines.index(evicted[0]) :]
    assert any(QUEUED in ln for ln in after) and ADMITTED.search(after[-1]), lines
    # the program started over: each attempt's lines once, under its own header; the eviction added an attempt
    # that backoffLimit (0) does not count
    headers = logs["low"].headers()
    assert [h.split(",")[0] for h in headers] == [
        "========== launcher attempt 1 of 1",
        "========== launcher attempt 2 of 2",
    ]
    assert logs["low"].payload_lines() == LINES * 2
    assert_logs_told_as_workloads(logs, workloads)
    assert workloads.of_job(low.name).evicted_counts == {"Preempted": 1}, workloads.of_job(
        low.name
    )  # Kueue's count


def test_job_queued_longer_than_queue_timeout_fails_clearly_and_is_deleted(
    kueue_cluster, kueue_conn, kueue_namespace, workloads, logs
):
    ns = kueue_namespace
    big = {"requests": {"cpu": "1", "memory": "256Mi"}}
    holder = defer(
        queued_op(
            "holder", ns, deferrable=True, run_duration="60s", launcher_resources=big, worker_resources=big
        )
    )
    late = queued_op("late", ns, queue_timeout=3)
    with pytest.raises(
        AirflowException,
        match=r"MPIJob (\S+) was not admitted by Kueue within queue_timeout=3s "
        rf"\(LocalQueue {lk.LOCAL_QUEUE}: (couldn't assign flavors|{NOT_YET})",
    ) as failed:
        late.execute(ctx("late"))
    assert QUEUED in kueue_lines(logs["late"])[0]
    name, why = re.search(
        r"MPIJob (\S+) was not admitted .*?: (.*)\); it is deleted", str(failed.value)
    ).group(1, 2)
    assert "-late-" in name
    wait_gone(kueue_cluster.api_client(), ns, name)
    assert_logs_told_as_workloads(logs, workloads)
    assert workloads.of_job(name).explains(why), (
        why,
        workloads.of_job(name),
    )  # the failure's reason is Kueue's
    jobs = Jobs(kueue_cluster.api_client(), ns)
    jobs.uids[holder.name] = holder.uid
    jobs.running_pods(holder.name)  # the other job is left alone
