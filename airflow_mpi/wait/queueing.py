"""What the task log says about a job (an MPIJob, a TrainJob) waiting in a Kueue queue, and when the wait gives up on
it (pure). The lines name the job's kind and its controller (``QueueTracker.kind``, ``controller``).

Kueue's webhook stores a job that has the ``kueue.x-k8s.io/queue-name`` label suspended; the mpi-operator then
reports it Created and Suspended and makes no pods, until Kueue admits its Workload (``status.admission``: the
ClusterQueue and the flavors) and resumes it. Kueue may later evict it (``Evicted``: preempted, its flavor gone, ...):
the job is suspended again, the mpi-operator deletes its launcher and workers (a TrainJob: the Trainer suspends its
JobSet, whose Jobs delete the launcher and node pods; ``JobKind.on_suspend`` says it), and once re-admitted the program
starts over (a launcher attempt that ``backoffLimit`` does not count).

The startup and schedule timeouts never see that time: the job is Created while queued, and its pods only exist once
admitted. ``queue_timeout`` bounds each stretch of queueing on its own; ``execution_timeout`` bounds everything.
The Workload is the one the watch hub keeps (wait/watch_hub.py); without it (no ``watch`` on workloads, or no Kueue)
the lines say what the MPIJob alone tells.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from airflow_mpi.hooks.answers import parse_api_time
from airflow_mpi.jobspec.kinds import DEFAULT_KIND, JobKind
from airflow_mpi.jobspec.spec import KUEUE_QUEUE_LABEL
from airflow_mpi.jobspec.vocabulary import MPIJOB_KIND, JobCondition
from airflow_mpi.wait.contract import Outcome
from airflow_mpi.wait.progress import Verdict

_PREVIOUSLY = "Previously: "  # Kueue's prefix of an Evicted condition it reset on re-admission


def _condition(obj: dict | None, kind: str) -> dict:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def _true(condition: dict) -> bool:
    return str(condition.get("status")) == "True"


def _seconds(seconds: float) -> str:
    if seconds < 1:
        return "less than 1s"  # the API's timestamps are to the second
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def flavors(workload: dict | None) -> str:
    """The flavors of the admission: ``default-flavor``, or per pod set and resource where they differ."""
    assignments = (((workload or {}).get("status") or {}).get("admission") or {}).get(
        "podSetAssignments"
    ) or []
    per_set = {a.get("name"): a.get("flavors") or {} for a in assignments}
    names = {name for assigned in per_set.values() for name in assigned.values()}
    if len(names) <= 1:
        return next(iter(names), "none")
    return "; ".join(
        f"{pod_set}: " + ", ".join(f"{res}={name}" for res, name in sorted(assigned.items()))
        for pod_set, assigned in per_set.items()
    )


@dataclass
class QueueTracker:
    """Follows one job's queueing; :meth:`observe` returns the lines to log and, past ``queue_timeout``, a verdict."""

    name: str
    queue_timeout: float | None = None
    kind: str = MPIJOB_KIND  # the job's kind, and the controller that stops its pods on an eviction (of_kind)
    controller: str = "mpi-operator"
    suspend_field: str = "runPolicy.suspend"  # where the job says it is suspended (the kind's field)
    on_suspend: str = (
        DEFAULT_KIND.on_suspend
    )  # what the controller does to the pods of a job evicted while it runs
    queued_since: datetime | None = None  # the start of the current stretch in the queue (None: not queued)
    evictions: int = 0
    queued_before: float = 0.0  # seconds of the stretches in the queue that an admission ended
    kueue: bool = False  # the job has a LocalQueue: Kueue queues it
    _said: tuple | None = field(default=None, init=False)  # the last queued line's content
    _admitted_at: str | None = field(default=None, init=False)  # QuotaReserved's transition last reported
    _evicted_at: str | None = field(default=None, init=False)  # Evicted's transition last seen
    _requeued: bool = field(default=False, init=False)  # an eviction was reported since the last admission
    _evicted_messages: set = field(default_factory=set, init=False)
    _suspended_said: bool = field(default=False, init=False)

    @classmethod
    def of_kind(cls, kind: JobKind, name: str, queue_timeout: float | None = None) -> QueueTracker:
        """A tracker whose lines name ``kind``, its controller and its suspend field."""
        suspend = (kind.field_paths or {}).get("run_policy.suspend")
        return cls(
            name,
            queue_timeout,
            kind=kind.kind,
            controller=kind.controller,
            suspend_field=".".join(suspend) if suspend else cls.suspend_field,
            on_suspend=kind.on_suspend,
        )

    def observe(
        self, job: dict, workload: dict | None, now: datetime, *, visible: bool = True
    ) -> tuple[list[str], Verdict | None]:
        """``visible``: the Workloads of the namespace are watched (else ``workload`` is always None)."""
        labels = (job.get("metadata") or {}).get("labels") or {}
        local_queue = labels.get(KUEUE_QUEUE_LABEL)
        self.kueue = self.kueue or local_queue is not None
        suspended = _true(_condition(job, JobCondition.SUSPENDED))
        if local_queue is None:
            if suspended and not self._suspended_said:
                self._suspended_said = True
                return [
                    f"{self.kind} {self.name} is suspended ({self.suspend_field} is true): waiting until it is "
                    "resumed"
                ], None
            return [], None
        lines = self._eviction(workload)
        if suspended:
            lines += self._queued(job, workload, local_queue, visible)
            return lines, self._timeout(workload, local_queue, now)
        if _true(_condition(workload, "QuotaReserved")) or (
            workload is None and self.queued_since is not None
        ):
            lines += self._admission(job, workload, now)
        return lines, None

    def seconds_queued(self, now: datetime) -> float | None:
        """Seconds the job spent in the queue, every stretch (the current one until ``now``); None: Kueue does not
        queue it (the metrics' time queued)."""
        if not self.kueue:
            return None
        current = (now - self.queued_since).total_seconds() if self.queued_since is not None else 0.0
        return self.queued_before + max(current, 0.0)

    # ------------------------------------------------------------------ transitions
    def _eviction(self, workload: dict | None) -> list[str]:
        """An eviction not reported yet: Evicted is True, or was reset by a re-admission after an eviction the wait
        did not see (both can happen between two looks at the cache)."""
        evicted = _condition(workload, "Evicted")
        stamp = evicted.get("lastTransitionTime")
        if not stamp or stamp == self._evicted_at:
            return []
        self._evicted_at = stamp
        message = str(evicted.get("message") or "")
        if not _true(evicted):  # reset at a re-admission
            if self._admitted_at is None or self._requeued or not message.startswith(_PREVIOUSLY):
                return []  # reported already, or nothing was running to evict
            message = message[len(_PREVIOUSLY) :]
        self.evictions += 1
        self._evicted_messages = {evicted.get("message"), message}
        self.queued_since = parse_api_time(stamp) if _true(evicted) else None
        self._said, self._requeued = None, True
        reason = evicted.get("reason") if _true(evicted) else "Evicted"
        return [
            f"{self.kind} {self.name} was evicted by Kueue ({reason}: {message or 'no detail'}); the {self.controller} "
            f"{self.on_suspend}, and the program starts over once Kueue admits the job again"
        ]

    def _queued(self, job: dict, workload: dict | None, local_queue: str, visible: bool) -> list[str]:
        if self.queued_since is None:
            self.queued_since = parse_api_time((job.get("metadata") or {}).get("creationTimestamp"))
        reserved = _condition(workload, "QuotaReserved")
        if _true(reserved):
            return []  # admitted: about to be resumed
        why = reserved.get(
            "message"
        )  # (no ClusterQueue to name: Kueue clears the admission while not reserved)
        if self._requeued and why in self._evicted_messages:
            why = "waiting to be admitted again"  # the eviction's own message, just said
        why = why or (
            "waiting for Kueue to admit it"
            if visible
            else "waiting to be resumed (its Kueue Workload is not visible: grant list and watch on "
            "workloads.kueue.x-k8s.io, deploy/rbac.yaml, to see why)"
        )
        if (local_queue, why) == self._said:
            return []
        self._said = (local_queue, why)
        return [f"{self.kind} {self.name} is queued by Kueue in LocalQueue {local_queue}: {why}"]

    def _admission(self, job: dict, workload: dict | None, now: datetime) -> list[str]:
        reserved = _condition(workload, "QuotaReserved")
        stamp = reserved.get("lastTransitionTime") or "unknown"
        if stamp == self._admitted_at:
            return []
        since = self.queued_since  # unknown after an eviction the wait did not see
        if since is None and self._admitted_at is None:
            since = parse_api_time((job.get("metadata") or {}).get("creationTimestamp"))
        at = parse_api_time(reserved.get("lastTransitionTime")) or now
        self._admitted_at, self.queued_since, self._said, self._requeued = stamp, None, None, False
        stretch = max((at - since).total_seconds(), 0.0) if since else 0.0
        self.queued_before += stretch
        queued = f" after {_seconds(stretch)} in the queue" if since else ""
        if workload is None:
            return [f"{self.kind} {self.name} was admitted (resumed){queued}"]
        cluster_queue = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue") or "?"
        return [
            f"{self.kind} {self.name} was admitted by Kueue: ClusterQueue {cluster_queue}, flavor "
            f"{flavors(workload)}{queued}"
        ]

    def _timeout(self, workload: dict | None, local_queue: str, now: datetime) -> Verdict | None:
        if (
            self.queue_timeout is None
            or self.queued_since is None
            or _true(_condition(workload, "QuotaReserved"))
        ):
            return None
        if (now - self.queued_since).total_seconds() < self.queue_timeout:
            return None
        why = (self._said or (None, "not admitted"))[1]
        message = (
            f"{self.kind} {self.name} was not admitted by Kueue within "
            f"queue_timeout={self.queue_timeout:g}s (LocalQueue {local_queue}: {why}); it is deleted"
        )
        return Verdict(Outcome.QUEUE_TIMEOUT, message)
