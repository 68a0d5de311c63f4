"""One wait's view of the shared watches (wait/watch_hub.py): its job, its pods, and a change counter to await.

Read from the hub's caches, never from the API: a wait costs no request of its own while it waits. Its pods are the
ones the job's controllers made (hooks/ownership.py), whatever reads them (the log pump, the verdict, the failure's
report): a pod that only carries the job's labels is named once (``on_ignored``) and otherwise left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from airflow_mpi.hooks.answers import sort_newest_first, sort_workers
from airflow_mpi.hooks.ownership import Owner
from airflow_mpi.jobspec.vocabulary import LAUNCHER, WORKER
from airflow_mpi.wait.summaries import disruption, involved_object, object_meta, pod_role

if TYPE_CHECKING:
    from airflow_mpi.wait.watch_hub import WatchHub


class Subscription:
    """One wait's view of the hub: its job, its pods, and a change counter to await."""

    def __init__(self, hub: WatchHub, name: str) -> None:
        self.hub, self.name = hub, name
        self.version = 0
        self.deleted_uids: set[str] = set()
        # deleted pods of the job as last seen: a failed try's cause may show only there (wait/failure_causes.py)
        self.gone_pods: dict[str, Any] = {}
        # pods last seen with a DisruptionTarget (evicted, preempted...): the mpi-operator recreates a worker under
        # the same name, and the disrupted one is often the cause of the failure that follows
        self.disrupted_pods: dict[str, Any] = {}
        # the incarnation followed (the monitor's; else the cached job's), and who hears of a pod not its job's
        self.uid: str | None = None
        self.on_ignored: Callable[[str], None] | None = None
        self.ignored: set[str] = set()
        self._event = asyncio.Event()

    def observe_pod(self, pod: Any, deleted: bool) -> None:
        """Keep what a failure's cause may need of a pod of the job: its last state once deleted, or disrupted."""
        if deleted:
            self.gone_pods[pod.metadata.name] = pod
        if disruption(pod):
            self.disrupted_pods[pod.metadata.name] = pod

    def notify(self) -> None:
        self.version += 1
        self._event.set()
        self._event = asyncio.Event()

    async def wait_change(self, seen: int, timeout: float) -> int:
        """The change counter once it differs from ``seen`` (or after ``timeout`` seconds); raises the hub's error
        once it gave up watching (not transient, or an outage too long)."""
        if self.hub.error is not None:
            raise self.hub.error
        if self.version == seen:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._event.wait(), timeout)
        if self.hub.error is not None:
            raise self.hub.error
        return self.version

    def job(self, uid: str | None = None) -> dict | None:
        """The cached MPIJob (only the incarnation ``uid`` when given)."""
        obj = self.hub.jobs.get(self.name)
        if obj is not None and uid and object_meta(obj)[1] != uid:
            return None
        return obj

    def owner(self) -> Owner:
        """The followed incarnation, as far as its pods' controllers are known."""
        return self.hub.owner(self.name, self.uid or object_meta(self.job() or {})[1])

    def _owned(self, pods: Iterable[Any]) -> list[Any]:
        """THE filter: the pods the job's controllers made. A pod naming a Job of the launcher Job's name waits for
        one GET of that Job (the hub's; the wait is told); the others are named once and left alone."""
        owner = self.owner()
        owned, foreign, undecided = owner.split(pods)
        self.hub.check_launcher_job(owner, owner.unchecked(undecided))
        for pod in foreign:
            if pod.metadata.name not in self.ignored:
                self.ignored.add(pod.metadata.name)
                if self.on_ignored is not None:
                    self.on_ignored(pod.metadata.name)
        return owned

    async def settle(self) -> None:
        """Until the controllers of the job's pods are known: a pod naming a Job as its controller waits for the
        hub's GET of the launcher Job. Readers await this before they read (the verdict, the failure's report,
        the log pump), so a launcher pod counts from the change that brought it."""
        self.pods()
        if (check := self.hub.launcher_job_check(self.owner())) is not None:
            await asyncio.shield(check)

    def pods(self) -> list[Any]:
        return self._owned(
            self.hub.pods[p] for p in self.hub.pods_by_job.get(self.name, ()) if p in self.hub.pods
        )

    def disrupted(self) -> list[Any]:
        """The job's pods last seen disrupted (:attr:`disrupted_pods`)."""
        return self._owned(self.disrupted_pods.values())

    def launcher_pods(self) -> list[Any]:
        return sort_newest_first(p for p in self.pods() if pod_role(p) == LAUNCHER)

    async def launchers(self) -> list[Any]:
        """:meth:`launcher_pods` for the log pump (wait/log_pump.py ``PodSource``), once settled."""
        await self.settle()
        return self.launcher_pods()

    def worker_pods(self, *, with_gone: bool = False) -> list[Any]:
        """Worker pods by index; ``with_gone``: also the ones deleted while subscribed (their last state)."""
        live = self.pods()
        names = {p.metadata.name for p in live}
        gone = self._owned(p for name, p in self.gone_pods.items() if name not in names) if with_gone else []
        index = self.hub.job_kind.pod_labels.index
        return sort_workers((p for p in live + gone if pod_role(p) == WORKER), index)

    async def watch_workloads(self) -> bool:
        """Have the hub watch Kueue Workloads (once listed, or refused); whether it does."""
        return await self.hub.watch_workloads()

    def workload(self, uid: str | None) -> dict | None:
        """The Workload Kueue made for the job incarnation ``uid``."""
        return self.hub.workloads.get(self.hub.workload_of.get(uid or "", ""))

    def validation_events(self, uid: str | None = None) -> list[dict] | None:
        """The job's ValidationError events (of the incarnation ``uid`` when given), oldest first; None when the
        hub does not watch events (the caller lists them)."""
        if not self.hub.watches_events:
            return None
        events = self.hub.invalid_events.get(self.name, {}).values()
        return sorted(
            (e for e in events if not uid or involved_object(e).get("uid") in (None, uid)),
            key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""),
        )
