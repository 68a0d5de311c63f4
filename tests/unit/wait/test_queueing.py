"""What the task log says of a job in a Kueue queue (wait/queueing.py), from MPIJob (and TrainJob) and Workload
objects shaped as mpi-operator v0.8.2 (Trainer v2.3.0) and Kueue v0.17.0 write them
(tests/integration/test_kueue_operator.py checks them for real)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow_mpi.jobspec.kinds.trainjob import TRAINJOB
from airflow_mpi.wait.contract import Outcome
from airflow_mpi.wait.queueing import QueueTracker, flavors

CREATED = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)
PENDING = (
    "couldn't assign flavors to pod set launcher: insufficient unused quota for cpu in flavor default-flavor"
)
PREEMPTED = "Preempted to accommodate a workload (UID: u2) due to prioritization in the ClusterQueue"


def stamp(seconds: float) -> str:
    return (CREATED + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def at(seconds: float) -> datetime:
    return CREATED + timedelta(seconds=seconds)


def mpijob(suspended: bool, queue: str | None = "user-queue") -> dict:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    conditions = [
        {"type": "Created", "status": "True"},
        {"type": "Suspended", "status": "True" if suspended else "False"},
    ]
    return {
        "metadata": {"name": "job", "labels": labels, "creationTimestamp": stamp(0)},
        "status": {"conditions": conditions},
    }


def workload(*conditions: tuple, admitted: dict | None = None) -> dict:
    """``conditions``: (type, status, reason, message, seconds after creation)."""
    status: dict = {
        "conditions": [
            {"type": t, "status": s, "reason": r, "message": m, "lastTransitionTime": stamp(x)}
            for t, s, r, m, x in conditions
        ]
    }
    if admitted is not None:
        status["admission"] = {
            "clusterQueue": "cluster-queue",
            "podSetAssignments": [{"name": name, "flavors": f} for name, f in admitted.items()],
        }
    return {"metadata": {"name": "mpijob-job-1"}, "status": status}


ONE_FLAVOR = {
    "launcher": {"cpu": "default-flavor"},
    "worker": {"cpu": "default-flavor", "memory": "default-flavor"},
}
PENDING_WL = workload(("QuotaReserved", "False", "Pending", PENDING, 1))
EVICTED_WL = workload(  # preempted 100 s after the job's creation
    ("QuotaReserved", "False", "Pending", PREEMPTED, 100),
    ("Evicted", "True", "Preempted", PREEMPTED, 100),
)


def admitted_wl(seconds: float, *extra: tuple) -> dict:
    return workload(
        ("QuotaReserved", "True", "QuotaReserved", "Quota reserved", seconds), *extra, admitted=ONE_FLAVOR
    )


def test_queued_then_admitted_says_where_why_once_then_the_flavor_and_the_time_queued():
    tracker = QueueTracker("job")
    lines, verdict = tracker.observe(mpijob(True), PENDING_WL, at(2))
    assert lines == [f"MPIJob job is queued by Kueue in LocalQueue user-queue: {PENDING}"] and verdict is None
    assert tracker.observe(mpijob(True), PENDING_WL, at(30)) == ([], None)  # no change, no line
    lines, _ = tracker.observe(mpijob(False), admitted_wl(75), at(76))
    assert lines == [
        "MPIJob job was admitted by Kueue: ClusterQueue cluster-queue, flavor default-flavor after "
        "1m15s in the queue"
    ]
    assert tracker.observe(mpijob(False), admitted_wl(75), at(90)) == ([], None)


def test_a_new_reason_is_said_again_and_a_reserved_but_still_suspended_job_says_nothing():
    tracker = QueueTracker("job")
    tracker.observe(mpijob(True), PENDING_WL, at(1))
    other = workload(("QuotaReserved", "False", "Inadmissible", "LocalQueue user-queue is stopped", 5))
    assert tracker.observe(mpijob(True), other, at(6))[0] == [
        "MPIJob job is queued by Kueue in LocalQueue user-queue: LocalQueue user-queue is stopped"
    ]
    assert tracker.observe(mpijob(True), admitted_wl(7), at(7)) == ([], None)


def test_queue_timeout_counts_from_the_job_creation_and_only_while_queued():
    tracker = QueueTracker("job", queue_timeout=60)
    assert tracker.observe(mpijob(True), PENDING_WL, at(59))[1] is None
    verdict = tracker.observe(mpijob(True), PENDING_WL, at(60))[1]
    assert verdict.outcome is Outcome.QUEUE_TIMEOUT
    assert verdict.message == (
        f"MPIJob job was not admitted by Kueue within queue_timeout=60s (LocalQueue user-queue: "
        f"{PENDING}); it is deleted"
    )
    admitted = QueueTracker("job", queue_timeout=60)
    assert admitted.observe(mpijob(False), admitted_wl(10), at(500))[1] is None  # running: no queue timeout


def test_an_eviction_is_reported_once_and_the_next_stretch_in_the_queue_is_timed_from_it():
    tracker = QueueTracker("job", queue_timeout=60)
    tracker.observe(mpijob(False), admitted_wl(5), at(6))
    evicted = EVICTED_WL
    lines, verdict = tracker.observe(mpijob(True), evicted, at(101))
    assert lines == [
        f"MPIJob job was evicted by Kueue (Preempted: {PREEMPTED}); the mpi-operator stops its launcher "
        "and workers, and the program starts over once Kueue admits the job again",
        "MPIJob job is queued by Kueue in LocalQueue user-queue: waiting to be admitted again",
    ]
    assert verdict is None and tracker.evictions == 1
    assert tracker.observe(mpijob(True), evicted, at(159))[1] is None  # 59 s since the eviction
    readmitted = admitted_wl(130, ("Evicted", "False", "QuotaReserved", f"Previously: {PREEMPTED}", 130))
    lines, _ = tracker.observe(mpijob(False), readmitted, at(131))
    assert lines == [
        "MPIJob job was admitted by Kueue: ClusterQueue cluster-queue, flavor default-flavor after 30s "
        "in the queue"
    ]
    assert tracker.evictions == 1


def test_a_trainjobs_eviction_says_the_trainer_suspends_its_jobset_whose_jobs_delete_its_pods():
    """Trainer v2.3.0 stops no pod itself, and a TrainJob has node pods, not workers (jobspec/kinds/trainjob.py;
    tests/integration/test_kueue_trainjob.py sees it happen)."""
    tracker = QueueTracker.of_kind(TRAINJOB, "pi")

    def trainjob(suspended: bool) -> dict:  # its status: no Created condition (the Trainer writes none)
        conditions = [{"type": "Suspended", "status": "True" if suspended else "False"}]
        labels = {"kueue.x-k8s.io/queue-name": "user-queue"}
        return {
            "metadata": {"name": "pi", "labels": labels, "creationTimestamp": stamp(0)},
            "status": {"conditions": conditions},
        }

    tracker.observe(trainjob(False), admitted_wl(5), at(6))
    evicted = EVICTED_WL
    lines, _ = tracker.observe(trainjob(True), evicted, at(101))
    assert lines == [
        f"TrainJob pi was evicted by Kueue (Preempted: {PREEMPTED}); the Kubeflow Trainer suspends its JobSet, "
        "whose Jobs delete the launcher and node pods, and the program starts over once Kueue admits the job "
        "again",
        "TrainJob pi is queued by Kueue in LocalQueue user-queue: waiting to be admitted again",
    ]
    assert tracker.evictions == 1


def test_the_time_queued_adds_every_stretch_in_the_queue_the_current_one_until_now():
    tracker = QueueTracker("job")
    tracker.observe(mpijob(True), PENDING_WL, at(2))
    assert tracker.seconds_queued(at(40)) == 40  # queued since the job's creation, still queued
    tracker.observe(mpijob(False), admitted_wl(75), at(76))
    assert tracker.seconds_queued(at(500)) == 75  # admitted: the running time is not queueing
    evicted = EVICTED_WL
    tracker.observe(mpijob(True), evicted, at(101))
    readmitted = admitted_wl(130, ("Evicted", "False", "QuotaReserved", f"Previously: {PREEMPTED}", 130))
    tracker.observe(mpijob(False), readmitted, at(131))
    assert tracker.seconds_queued(at(900)) == 75 + 30
    never = QueueTracker("job")
    never.observe(mpijob(False, queue=None), None, at(3))
    assert never.seconds_queued(at(9)) is None  # no LocalQueue: not a Kueue job


def test_an_eviction_seen_only_after_the_readmission_is_still_reported_once():
    tracker = QueueTracker("job")
    tracker.observe(mpijob(False), admitted_wl(5), at(6))
    readmitted = admitted_wl(130, ("Evicted", "False", "QuotaReserved", f"Previously: {PREEMPTED}", 130))
    lines, _ = tracker.observe(mpijob(False), readmitted, at(131))
    assert lines == [
        f"MPIJob job was evicted by Kueue (Evicted: {PREEMPTED}); the mpi-operator stops its launcher "
        "and workers, and the program starts over once Kueue admits the job again",
        "MPIJob job was admitted by Kueue: ClusterQueue cluster-queue, flavor default-flavor",
    ]
    assert tracker.evictions == 1
    assert tracker.observe(mpijob(False), readmitted, at(140)) == ([], None)


def test_without_kueue_or_without_the_workloads_the_job_alone_speaks():
    assert QueueTracker("job").observe(mpijob(False), None, at(1), visible=False) == (
        [],
        None,
    )  # no Kueue: silent
    tracker = QueueTracker("job")
    lines, _ = tracker.observe(mpijob(True), None, at(1), visible=False)
    assert lines == [
        "MPIJob job is queued by Kueue in LocalQueue user-queue: waiting to be resumed (its Kueue Workload "
        "is not visible: grant list and watch on workloads.kueue.x-k8s.io, deploy/rbac.yaml, to see why)"
    ]
    assert tracker.observe(mpijob(False), None, at(9), visible=False)[0] == [
        "MPIJob job was admitted (resumed) after 9s in the queue"
    ]
    plain = QueueTracker("job")
    said = "MPIJob job is suspended (runPolicy.suspend is true): waiting until it is resumed"
    assert plain.observe(mpijob(True, queue=None), None, at(1))[0] == [said]
    assert plain.observe(mpijob(True, queue=None), None, at(2))[0] == []


def test_flavors_are_named_per_pod_set_and_resource_only_where_they_differ():
    assert flavors(admitted_wl(1)) == "default-flavor"
    mixed = workload(
        admitted={"launcher": {"cpu": "cpu-nodes"}, "worker": {"cpu": "gpu-nodes", "nvidia.com/gpu": "a100"}}
    )
    assert flavors(mixed) == "launcher: cpu=cpu-nodes; worker: cpu=gpu-nodes, nvidia.com/gpu=a100"
    assert flavors(None) == "none"


def test_the_hubs_slim_workload_keeps_everything_the_lines_are_made_of():
    from airflow_mpi.wait.summaries import owner_job, slim_workload

    raw = admitted_wl(75, ("Evicted", "False", "QuotaReserved", f"Previously: {PREEMPTED}", 75))
    raw["metadata"].update(
        uid="w1",
        managedFields=[{"manager": "kueue"}] * 50,
        ownerReferences=[
            {
                "apiVersion": "kubeflow.org/v2beta1",
                "kind": "MPIJob",
                "name": "job",
                "uid": "u1",
                "controller": True,
            }
        ],
    )
    raw["spec"] = {"queueName": "user-queue", "podSets": [{"name": "launcher", "template": {"spec": {}}}] * 2}
    raw["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] = {"cpu": "500m"}
    slim = slim_workload(raw)
    assert "managedFields" not in slim["metadata"] and "podSets" not in slim["spec"]
    assert owner_job(slim, "MPIJob") == {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "name": "job",
        "uid": "u1",
    }
    seen = []
    for workload in (raw, slim):
        tracker = QueueTracker("job")
        tracker.observe(mpijob(True), PENDING_WL, at(2))
        seen.append(tracker.observe(mpijob(False), workload, at(76)))
    assert seen[0] == seen[1] and "flavor default-flavor after 1m15s" in seen[1][0][0]
