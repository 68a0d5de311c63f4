"""Gathering why a wait ended "failed": the pods' last states and the failed pods' last log lines.

Run by the monitor on the wait's own subscription to the watch hub (no listing, no polling); wait/failure_causes.py
names the causes, this module only observes, at the right moments:

* at the verdict, the log tails of the failed workers, of the workers the ``cleanPodPolicy`` is about to delete
  (once deleted, a pod's log is gone: kubeflow/mpi-operator#461) and of the failed launcher;
* then, on the hub's change notifications, the ends of those workers (an OOM kill on cgroup v1 shows only then:
  wait/failure_causes.py), within the pods' grace period and the wait's deadline.

Diagnostics never mask the failure: every read is bounded in time and its error becomes a note.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from airflow_mpi.hooks.answers import log_messages
from airflow_mpi.hooks.protocols import PodLogReader
from airflow_mpi.jobspec.vocabulary import LAUNCHER, WORKER
from airflow_mpi.wait import failure_causes as fc
from airflow_mpi.wait import watch_hub
from airflow_mpi.wait.mpirun_report import rank_ends
from airflow_mpi.wait.progress import PodSummary
from airflow_mpi.wait.summaries import pod_summary

log = logging.getLogger(__name__)

TAIL_READ_TIMEOUT = 15.0  # seconds one log tail may take (a kubelet that does not answer)
READ_LIMIT_BYTES = 256 * 1024  # what one tail request may return at most (bound_tail keeps TAIL_BYTES of it)


async def _read_tail(hook: PodLogReader, namespace: str, pod: PodSummary, tail_lines: int) -> dict:
    """The last lines of ``pod``'s main container (its previous instance's when it restarted and runs again)."""
    try:

        async def lines() -> list[str]:
            stream = hook.read_pod_log(
                pod.name,
                namespace,
                container=pod.container,
                previous=fc.reads_previous(pod),
                tail_lines=min(tail_lines, fc.MAX_TAIL_LINES),
                limit_bytes=READ_LIMIT_BYTES,
            )
            return [line async for line in stream]

        raw = await asyncio.wait_for(lines(), TAIL_READ_TIMEOUT)
        return fc.tail_entry(pod, fc.bound_tail(log_messages(raw), tail_lines))
    except asyncio.CancelledError:
        raise
    except Exception as err:  # a deleted pod, an unreachable kubelet: said, never raised
        log.info("could not read the log of %s: %s", pod.name, err)
        return fc.tail_entry(pod, None, f"unavailable ({type(err).__name__}: {err})")


class FailureReport:
    """One failed wait's report; see the module docstring."""

    def __init__(
        self,
        hook: PodLogReader,
        namespace: str,
        sub: watch_hub.Subscription,
        *,
        clean_pod_policy: str | None,
        tail_lines: int,
        now: Callable[[], datetime],
        deadline: datetime | None = None,
    ) -> None:
        self.hook, self.namespace, self.sub = hook, namespace, sub
        self.clean_pod_policy = clean_pod_policy
        self.tail_lines = max(int(tail_lines or 0), 0)
        self.now, self.deadline = now, deadline
        self._reads: dict[str, asyncio.Task] = {}
        self._roles: dict[str, str] = {}

    def _read(self, pod: PodSummary) -> None:
        """Start reading ``pod``'s tail (once; MAX_WORKER_TAILS workers and a launcher at most)."""
        if not self.tail_lines or pod.name in self._reads:
            return
        if pod.role == WORKER and sum(role == WORKER for role in self._roles.values()) >= fc.MAX_WORKER_TAILS:
            return
        self._roles[pod.name] = pod.role
        self._reads[pod.name] = asyncio.create_task(
            _read_tail(self.hook, self.namespace, pod, self.tail_lines)
        )

    def _workers(self) -> list[PodSummary]:
        return [pod_summary(p) for p in self.sub.worker_pods(with_gone=True)]

    async def _settle(self, verdict_at: datetime) -> list[PodSummary]:
        """The workers once every awaited end was seen (or its time was up)."""
        seen = self.sub.version
        while True:
            await self.sub.settle()
            workers = self._workers()
            for pod in workers:
                if fc.pod_cause(pod):  # failed since the verdict (an OOM kill shows at its end): read it now
                    self._read(pod)
            live = {p.metadata.name for p in self.sub.pods()}
            until = fc.settle_deadline(
                [p for p in fc.awaited_workers(workers, self.clean_pod_policy) if p.name in live], verdict_at
            )
            if until is not None and self.deadline is not None:
                until = min(until, self.deadline)
            left = (until - self.now()).total_seconds() if until is not None else 0.0
            if left <= 0:
                return workers
            try:
                seen = await self.sub.wait_change(seen, left)
            except Exception as err:  # the hub gave up watching: report what was seen
                log.info("stopped awaiting the workers' ends: %s", err)
                return workers

    async def gather(self) -> dict:
        """Causes and tails (plain, bounded JSON: failure_causes.report)."""
        verdict_at = self.now()
        await self.sub.settle()
        at_verdict = self._workers()
        launchers = [pod_summary(p) for p in self.sub.launcher_pods()]
        try:
            for pod in fc.tail_candidates(at_verdict, self.clean_pod_policy) + fc.failed_pods(launchers):
                self._read(pod)
            pods = fc.merge_observations(at_verdict, await self._settle(verdict_at)) + launchers
            tails = [await self._reads[p.name] for p in fc.failed_pods(pods) if p.name in self._reads]
            disrupted = [pod_summary(p) for p in self.sub.disrupted()]
            ranks = rank_ends([ln for tail in tails if tail["role"] == LAUNCHER for ln in tail["lines"]])
            return fc.report(fc.causes(pods, disrupted, ranks), tails, fc.failure_kind(pods, disrupted))
        finally:
            for task in self._reads.values():  # the reads of pods that did not fail (or all, when cancelled)
                task.cancel()
