"""One shared watch of MPIJobs and one of their pods per (connection, namespace) and event loop.

A triggerer runs hundreds of waits in one event loop; a watch and pod listings per wait cost connections and API
requests in proportion (issue 11). The hub is an informer: it lists each kind once, then watches from the list's
resourceVersion with bookmarks (a renewal resumes without a re-list), re-lists once for everybody after 410 Gone, and
resumes after a dropped connection. Every wait subscribes to its job's name and awaits changes of that job or its pods;
nobody polls. The hub closes its watches when the last subscriber leaves.

A hub follows one kind's jobs (jobspec/kinds/: by its plural), unfiltered (a sensor may wait for a job this provider
did not create), pods by the existence of the kind's job-name label (the pods of any MPIJob, v2beta1 and v1 from
training-operator 1.5, not every pod of the namespace; a label is anyone's to set, so a wait counts only those its
job's controllers made: hooks/ownership.py, the launcher Job behind a v2beta1 launcher pod read once per job, by the
hub, for all its waits), events by field selector: only the kind's invalid events (ValidationError), the one event
that ends a wait before its job is Created (1,000 jobs queued for the mpi-operator would otherwise each list their
events). Where the identity may not watch events (RBAC of an older release), that watch stops and the waits list
events themselves. Kueue's Workloads are watched once a wait's job carries Kueue's queue label (wait/queueing.py);
where they may not be (RBAC, no Kueue), that watch stops and the waits go on without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

from airflow_mpi.hooks.errors import WatchExpired, describe_error
from airflow_mpi.hooks.loop_registry import live_key, of_running_loop
from airflow_mpi.hooks.ownership import Owner
from airflow_mpi.hooks.protocols import WatchRequests
from airflow_mpi.hooks.requests import EVENTS, KUEUE_VERSIONS, PODS, WORKLOADS
from airflow_mpi.hooks.retries import Outage, through_outage
from airflow_mpi.jobspec.kinds import JobKind, kind_or_default
from airflow_mpi.wait.subscription import Subscription
from airflow_mpi.wait.summaries import (
    involved_object,
    job_of_pod,
    object_meta,
    owner_job,
    without_managed_fields,
)

log = logging.getLogger(__name__)


def watched(job_kind: JobKind) -> tuple[str, str, str]:
    """What a hub lists and watches from its start: the kind's jobs (its plural), pods, events (Workloads: later)."""
    return (job_kind.plural, PODS, EVENTS)


def watch_selector(kind: str, job_kind: JobKind) -> dict[str, str]:
    """The list/watch selector of ``kind``: a job kind's pods (its job-name label exists), or its events that say
    a job is invalid (a field selector cannot OR: the kind's first reason, the only one of each built-in kind)."""
    if kind == EVENTS:  # a kind with no invalid reason (TrainJob): all its jobs' events (few: its warnings)
        reasons = "".join(f",reason={r}" for r in job_kind.invalid_reasons[:1])
        return {"field_selector": f"involvedObject.kind={job_kind.kind}{reasons}"}
    if kind == PODS:
        return {"label_selector": job_kind.pod_labels.job_name}  # the label exists
    return {}


WATCH_SECONDS = 290  # one watch request's lifetime; renewed from the last resourceVersion (no re-list)


class WatchHub:
    """The informer of one (connection, namespace): caches, the watch loops, the subscribers."""

    def __init__(self, hook: WatchRequests, namespace: str) -> None:
        self.hook = hook
        self.namespace = namespace
        self.job_kind = kind_or_default(getattr(hook, "api_version", None))  # whose jobs, pods, events
        self.kinds = watched(self.job_kind)
        self.jobs: dict[str, dict] = {}
        self.pods: dict[str, Any] = {}
        self.pods_by_job: dict[str, set[str]] = {}
        self.invalid_events: dict[
            str, dict[str, dict]
        ] = {}  # job name -> event name -> ValidationError event
        self.watches_events = True  # False once the identity was refused a watch of events
        self.workloads: dict[
            str, dict
        ] = {}  # Kueue Workloads of MPIJobs by name; workload_of: job uid -> name
        self.workload_of: dict[str, str] = {}
        self.watches_workloads: bool | None = None  # None: not asked yet; False: refused, or no Kueue
        self.workload_version = KUEUE_VERSIONS[0]
        self.subscribers: dict[str, set[Subscription]] = {}
        # whose pods are whose (hooks/ownership.py), by MPIJob uid: what GETs of launcher Jobs told, the GETs under way
        self.owners: dict[str, Owner] = {}
        self._checks: dict[str, asyncio.Task] = {}
        self.error: BaseException | None = None
        self.stats: Counter = Counter()  # lists, watches, relists (410), bookmarks, events per kind
        self.synced = {kind: asyncio.Event() for kind in (*self.kinds, WORKLOADS)}
        self.resource_versions: dict[str, str | None] = dict.fromkeys((*self.kinds, WORKLOADS))
        self._ready = asyncio.Event()
        self._tick = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._entered = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        await self.hook.__aenter__()  # keep the hook's API client (one session) while the hub lives
        self._entered = True
        self._tasks = [asyncio.create_task(self._run(kind), name=f"watch-hub-{kind}") for kind in self.kinds]

    async def close(self) -> None:
        tasks = [*self._tasks, *self._checks.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._entered:
            await self.hook.__aexit__(None, None, None)

    async def ready(self) -> None:
        """Every kind listed once (or the hub failed: raised)."""
        await self._ready.wait()
        if self.error is not None:
            raise self.error

    def _check_ready(self) -> None:
        if self.error is not None or all(self.synced[kind].is_set() for kind in self.kinds):
            self._ready.set()

    def _bump(self, key: str) -> None:
        self.stats[key] += 1
        self._tick.set()
        self._tick = asyncio.Event()

    async def until(self, predicate: Callable[[WatchHub], bool]) -> None:
        """Until ``predicate(hub)`` holds, checked after every list, watch, event and bookmark (tests, benchmarks)."""
        while not predicate(self):
            if self.error is not None:
                raise self.error
            await self._tick.wait()

    async def watch_workloads(self) -> bool:
        """Start the Workloads' watch on first use and wait for its first list (or its refusal)."""
        if self.watches_workloads is None:
            self.watches_workloads = True
            self._tasks.append(asyncio.create_task(self._run(WORKLOADS), name=f"watch-hub-{WORKLOADS}"))
        await self.synced[WORKLOADS].wait()
        if self.error is not None:
            raise self.error
        return bool(self.watches_workloads)

    def subscribe(self, name: str) -> Subscription:
        sub = Subscription(self, name)
        self.subscribers.setdefault(name, set()).add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> int:
        """How many subscribers are left."""
        subs = self.subscribers.get(sub.name, set())
        subs.discard(sub)
        if not subs:
            self.subscribers.pop(sub.name, None)
        return sum(len(s) for s in self.subscribers.values())

    # ------------------------------------------------------------------ whose pods
    def owner(self, name: str, uid: str | None) -> Owner:
        """What is known of the MPIJob ``name`` (incarnation ``uid``) and its launcher Job."""
        return self.owners.get(uid or "") or Owner(name, uid, job_kind=self.job_kind)

    def check_launcher_job(self, owner: Owner, uids: set[str]) -> None:
        """Have GETs of the objects between ``owner`` and its pods tell whether the uids ``uids`` pods name as their
        controller lead to it (hooks/ownership.owner_objects: one check at a time per job; its waits are told)."""
        if owner.uid and uids and owner.uid not in self._checks:
            self._checks[owner.uid] = asyncio.create_task(
                self._check_launcher_job(owner.name, owner.uid, uids), name=f"launcher-job-{owner.name}"
            )

    def launcher_job_check(self, owner: Owner) -> asyncio.Task | None:
        """The GET of ``owner``'s launcher Job under way, if any."""
        return self._checks.get(owner.uid or "")

    async def _check_launcher_job(self, name: str, uid: str, uids: set[str]) -> None:
        try:
            job = await through_outage(self.hook.get_launcher_job, name, self.namespace)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # an outage too long: those pods are not followed (a later pod asks again)
            log.warning(
                "could not read the owners of %s's pods (%s): the pods naming them are not followed",
                f"{self.job_kind.kind} {self.namespace}/{name}",
                describe_error(err),
            )
            job = None
        finally:
            self._checks.pop(uid, None)
        self.owners[uid] = self.owner(name, uid).learn(job, uids)
        self._bump("launcher_job_checks")
        self._notify(name)

    # ------------------------------------------------------------------ cache
    def _notify(self, job_name: str | None) -> None:
        for sub in list(self.subscribers.get(job_name or "", ())):
            sub.notify()

    def _notify_all(self) -> None:
        for name in list(self.subscribers):
            self._notify(name)

    def _apply(self, kind: str, event_type: str, obj: Any) -> None:
        """One watched or listed object into the cache; the waits on its job are told."""
        obj = without_managed_fields(obj)
        name, uid, _ = object_meta(obj)
        name = cast(str, name)  # every object a watch reports has one
        deleted = event_type == "DELETED"
        if kind == EVENTS:
            job = involved_object(obj).get("name") or ""
            if deleted:
                self.invalid_events.get(job, {}).pop(name, None)
            else:
                self.invalid_events.setdefault(job, {})[name] = obj
        elif kind == WORKLOADS:
            owner = owner_job(obj if not deleted else self.workloads.get(name), self.job_kind.kind)
            job = owner.get("name")
            if deleted:
                self.workloads.pop(name, None)
                self.workload_of.pop(owner.get("uid") or "", None)
            elif owner:
                self.workloads[name] = obj
                self.workload_of[owner.get("uid") or ""] = name
        elif kind == self.job_kind.plural:
            job = name
            if not deleted:
                self.jobs[name] = obj
            else:
                if self.jobs.get(name) is not None and object_meta(self.jobs[name])[1] == uid:
                    del self.jobs[name]
                self.owners.pop(uid or "", None)
                for sub in self.subscribers.get(name or "", ()):
                    sub.deleted_uids.add(uid or "")
        else:
            label = self.job_kind.pod_labels.job_name
            job = job_of_pod(obj, label) or job_of_pod(self.pods.get(name), label)
            for sub in self.subscribers.get(job or "", ()):  # kept while the wait lasts
                sub.observe_pod(obj, deleted)
            if not deleted:
                self.pods[name] = obj
                if job:
                    self.pods_by_job.setdefault(job, set()).add(name)
            else:
                self.pods.pop(name, None)
                self.pods_by_job.get(job or "", set()).discard(name)
        self._notify(job)

    def _replace(self, kind: str, items: list) -> None:
        """A (re-)list: what it no longer holds was deleted meanwhile, the rest is as listed."""
        if kind == EVENTS:
            cached = {name: e for events in self.invalid_events.values() for name, e in events.items()}
        elif kind == WORKLOADS:
            cached = dict(self.workloads)
        else:
            cached = dict(self.jobs if kind == self.job_kind.plural else self.pods)
        listed = {object_meta(obj)[0] for obj in items}
        for name, obj in cached.items():
            if name not in listed:
                self._apply(kind, "DELETED", obj)
        for obj in items:
            self._apply(kind, "ADDED", obj)

    def _stop_watching_events(self, err: BaseException) -> None:
        """The identity may list but not watch events (a role from before the hub watched them)."""
        log.warning(
            "may not watch events in %s (%s): each wait lists its job's events instead; grant `watch` on "
            "events (deploy/rbac.yaml) to spare the API server",
            self.namespace,
            describe_error(err),
        )
        self.watches_events = False
        self.invalid_events = {}
        self._bump("events_refused")
        self.synced[EVENTS].set()
        self._check_ready()
        self._notify_all()

    def _stop_watching_workloads(self, err: BaseException) -> None:
        """No Workloads to watch (no Kueue: 404) or not allowed to (403): the waits go on without them."""
        log.warning(
            "cannot watch Kueue Workloads in %s (%s): the task log says when a job is queued, not why; grant "
            "list and watch on workloads.kueue.x-k8s.io (deploy/rbac.yaml)",
            self.namespace,
            describe_error(err),
        )
        self.watches_workloads = False
        self.workloads, self.workload_of = {}, {}
        self._bump("workloads_refused")
        self.synced[WORKLOADS].set()
        self._notify_all()

    def _fail(self, err: BaseException) -> None:
        self.error = err
        self._ready.set()
        self.synced[WORKLOADS].set()
        self._tick.set()
        self._notify_all()

    # ------------------------------------------------------------------ list + watch
    async def _run(self, kind: str) -> None:
        selector: dict[str, str] = watch_selector(kind, self.job_kind)
        outage: Outage | None = None  # failures in a row since the last event (hooks/retries.py)
        while True:
            try:
                if kind == WORKLOADS:
                    selector = {"version": self.workload_version}
                if self.resource_versions[kind] is None:
                    items, rv = await self.hook.list_objects(kind, self.namespace, **selector)
                    self._bump(f"{kind}_lists")
                    self._replace(kind, items)
                    self.resource_versions[kind] = rv
                    self.synced[kind].set()
                    self._check_ready()
                self._bump(f"{kind}_watches")
                async for event_type, obj, rv in self.hook.watch_objects(
                    kind,
                    self.namespace,
                    **selector,
                    resource_version=self.resource_versions[kind],
                    timeout_seconds=WATCH_SECONDS,
                ):
                    self.resource_versions[kind] = rv or self.resource_versions[kind]
                    outage = None
                    if event_type in ("OPEN", "BOOKMARK"):  # accepted; a bookmark: the version to resume from
                        self._bump(f"{kind}_{'opened' if event_type == 'OPEN' else 'bookmarks'}")
                        continue
                    self._bump(f"{kind}_events")
                    self._apply(kind, event_type, obj)
                outage = None
            except WatchExpired:
                log.info("watch of %s in %s expired (410 Gone): listing again", kind, self.namespace)
                self._bump(f"{kind}_relists")
                self.resource_versions[kind] = None
            except asyncio.CancelledError:
                raise
            except Exception as err:  # API unreachable, restarting, 5xx: resume from the last version
                status = getattr(err, "status", None)
                if kind == EVENTS and outage is None and status == 403:
                    self._stop_watching_events(err)
                    return
                if kind == WORKLOADS and status == 404 and self.workload_version != KUEUE_VERSIONS[-1]:
                    self.workload_version = KUEUE_VERSIONS[KUEUE_VERSIONS.index(self.workload_version) + 1]
                    continue  # an older Kueue
                if kind == WORKLOADS and outage is None and status in (403, 404):
                    self._stop_watching_workloads(err)
                    return
                outage = outage or Outage()
                if (delay := outage.next_delay(err)) is None:
                    if kind == WORKLOADS:  # never worth failing the waits for
                        self._stop_watching_workloads(err)
                    else:
                        self._fail(err)
                    return
                if outage.failures == 1:
                    log.warning(
                        "watch of %s in %s interrupted (%s): resuming",
                        kind,
                        self.namespace,
                        describe_error(err),
                    )
                await asyncio.sleep(delay)


# ---------------------------------------------------------------------- the hubs of this process
_HUBS: dict[tuple, WatchHub] = {}


def hubs() -> list[WatchHub]:
    """The hubs of the running event loop (benchmarks, tests)."""
    return of_running_loop(_HUBS)


@contextlib.asynccontextmanager
async def subscription(hook: WatchRequests, namespace: str, name: str) -> AsyncIterator[Subscription]:
    """Subscribe to ``name`` on the hub of (``hook``'s cluster, ``namespace``), starting the hub if needed. Hooks
    reaching the same cluster as the same identity (``watch_identity``) share a hub, within one event loop."""
    key = live_key(_HUBS, hook.watch_identity(), namespace, getattr(hook, "api_version", None))
    hub = _HUBS.get(key)
    if hub is None or hub.error is not None:
        hub = _HUBS[key] = WatchHub(hook, namespace)
        try:
            await hub.start()
        except BaseException as err:  # e.g. no client configuration: every waiter of this hub gets the error
            hub._fail(err)
            if _HUBS.get(key) is hub:
                del _HUBS[key]
            raise
    sub = hub.subscribe(name)
    try:
        await hub.ready()
        yield sub
    finally:
        if hub.unsubscribe(sub) == 0:
            if _HUBS.get(key) is hub:
                del _HUBS[key]
            await hub.close()
