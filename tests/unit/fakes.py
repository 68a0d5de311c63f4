"""In-memory stand-ins for the provider's own hook interface (not for the Kubernetes API).

Unit tests of the operator, trigger and monitor use these to script what the cluster reports;
the real hooks are tested against the client boundary in tests/unit/hooks and against a real
API server in tests/integration.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace as NS

from kubernetes_asyncio.client.exceptions import ApiException

from airflow_mpi.hooks.live_delete import DELETED, keep_reason


def pod(
    name,
    *,
    role="launcher",
    created="2026-11-22T10:00:00",
    phase="Running",
    state="running",
    restart_count=0,
    scheduled=True,
    waiting_reason=None,
    exit_code=None,
    container="launcher",
    job="job",
    reason=None,
    memory_limit=None,
    deletion=None,
    pod_reason=None,
    pod_message=None,
    last_terminated=None,
    grace=None,
    disruption=None,
    uid=None,
    owner="made",
):
    """A V1Pod as the hooks read it. ``reason``: the terminated state's; ``deletion``: the deletionTimestamp
    (datetime); ``last_terminated``: (reason, exit code) of the previous container instance; ``disruption``:
    (reason, message) of a DisruptionTarget condition; ``owner``: its controller reference, ``"made"`` the one the
    mpi-operator's controllers give a pod of ``job`` (:func:`controller_ref`), None none."""
    container_state = NS(running=None, terminated=None, waiting=None)
    if state == "running":
        container_state.running = NS()
    elif state == "terminated":
        container_state.terminated = NS(exit_code=exit_code or 0, reason=reason, signal=None, message=None)
    elif state == "waiting":
        container_state.waiting = NS(reason=waiting_reason, message="")
    last = NS(
        terminated=NS(reason=last_terminated[0], exit_code=last_terminated[1]) if last_terminated else None
    )
    limits = {"memory": memory_limit} if memory_limit else None
    return NS(
        metadata=NS(
            name=name,
            labels={"training.kubeflow.org/job-role": role, "training.kubeflow.org/job-name": job},
            creation_timestamp=datetime.fromisoformat(created).replace(tzinfo=UTC),
            deletion_timestamp=deletion,
            uid=uid or f"uid-{name}",
            owner_references=[controller_ref(job, role)] if owner == "made" else [owner] if owner else None,
        ),
        spec=NS(
            containers=[NS(name=container, resources=NS(limits=limits))],
            termination_grace_period_seconds=grace,
        ),
        status=NS(
            phase=phase,
            conditions=[
                NS(type="PodScheduled", status="True" if scheduled else "False"),
                *(
                    [NS(type="DisruptionTarget", status="True", reason=disruption[0], message=disruption[1])]
                    if disruption
                    else []
                ),
            ],
            reason=pod_reason,
            message=pod_message,
            container_statuses=[
                NS(name=container, restart_count=restart_count, state=container_state, last_state=last)
            ]
            if state
            else None,
        ),
    )


def controller_ref(job="job", role="worker"):
    """The controller reference mpi-operator v0.8.2 gives a pod of the MPIJob ``job`` (uid ``uid-<job>``): a
    worker's is the MPIJob, a launcher's its launcher Job (uid ``uid-<job>-launcher``, :meth:`FakeAsyncHook.
    get_launcher_job`)."""
    if role == "worker":
        return NS(
            api_version="kubeflow.org/v2beta1", kind="MPIJob", name=job, uid=f"uid-{job}", controller=True
        )
    return NS(
        api_version="batch/v1", kind="Job", name=f"{job}-launcher", uid=f"uid-{job}-launcher", controller=True
    )


def job(name="job", namespace="ns", *conditions, rv="1", labels=None):
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": rv,
            "labels": labels or {},
            "creationTimestamp": "2026-11-22T10:00:00Z",
            "uid": f"uid-{name}",
        },
        "status": {"conditions": [{"type": c, "status": "True", "reason": r} for c, r in conditions]},
    }


@dataclass
class FakeAsyncHook:
    """Scripted cluster: ``watch_script`` is a list of watch rounds, each a list of (type, obj) or
    an exception to raise; ``logs`` maps (pod, previous) to CRI-less ``timestamps=True`` lines."""

    job_obj: dict | None
    watch_script: list = field(default_factory=list)
    launchers: list = field(default_factory=list)
    workers: list = field(default_factory=list)
    logs: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    log_failures: dict = field(default_factory=dict)  # pod -> lines after which one read breaks
    deleted: list = field(default_factory=list)
    log_requests: list = field(default_factory=list)
    log_probes: list = field(
        default_factory=list
    )  # reads of the current file's first bytes (limit_bytes alone)
    watch_versions: list = field(default_factory=list)
    lists: list = field(default_factory=list)  # kinds listed by the watch hub, in order
    events_watch_forbidden: bool = False  # the identity may list events but not watch them (an older role)
    workloads: list = field(default_factory=list)  # Kueue Workloads of the namespace
    workloads_refused: dict = field(default_factory=dict)  # Kueue API version -> the status its requests get
    workload_versions: list = field(default_factory=list)  # the version of each Workload list, in order

    # The watch hub's view: assigning job_obj / launchers / workers is a change its watches report.
    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name in ("job_obj", "launchers", "workers", "workloads"):
            kind = {"job_obj": "mpijobs", "workloads": "workloads"}.get(name, "pods")
            for event in self.__dict__.get("_watchers", {}).get(kind, []):
                event.set()

    async def _changed(self, kind):
        event = asyncio.Event()
        self.__dict__.setdefault("_watchers", {}).setdefault(kind, []).append(event)
        try:
            await event.wait()
        finally:
            self.__dict__["_watchers"][kind].remove(event)

    def _pods(self):
        return list(self.launchers) + list(self.workers)

    def add_event(self, event):
        """An event the cluster records from now on (the hub's event watch reports it)."""
        self.events.append(event)
        for waiter in self.__dict__.get("_watchers", {}).get("events", []):
            waiter.set()

    def _validation_events(self):
        return [
            e
            for e in self.events
            if e.get("reason") == "ValidationError" and e["involvedObject"].get("kind", "MPIJob") == "MPIJob"
        ]

    # the watch hub's requests (hooks/protocols.py WatchRequests): one cluster per fake unless a test says so
    def watch_identity(self):
        return ("fake", id(self))

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info):
        return None

    async def list_objects(self, kind, namespace, label_selector=None, field_selector=None, version=None):
        self.lists.append(kind)
        if kind == "workloads":
            self.workload_versions.append(version)
            if version in self.workloads_refused:
                raise ApiException(status=self.workloads_refused[version], reason="refused")
            return list(self.workloads), "1"
        if kind == "pods":
            return self._pods(), "1"
        if kind == "events":
            return self._validation_events(), "1"
        return ([self.job_obj] if self.job_obj else []), (self.job_obj or {}).get("metadata", {}).get(
            "resourceVersion", "1"
        )

    async def watch_objects(
        self,
        kind,
        namespace,
        *,
        label_selector=None,
        field_selector=None,
        resource_version=None,
        timeout_seconds=60,
        version=None,
    ):
        if kind == "workloads":
            await self._changed("workloads")
            for workload in self.workloads:
                yield "MODIFIED", workload, "1"
            return
        if kind == "events":
            if self.events_watch_forbidden:
                raise ApiException(status=403, reason="Forbidden")
            await self._changed("events")
            for event in self._validation_events():
                yield "MODIFIED", event, "1"
            return
        if kind == "pods":
            before = {p.metadata.name: p for p in self._pods()}
            await self._changed("pods")
            for p in self._pods():
                yield "MODIFIED", p, "1"
            for name in set(before) - {p.metadata.name for p in self._pods()}:
                yield "DELETED", before[name], "1"  # as Kubernetes: the object's last state
            return
        self.watch_versions.append(resource_version)
        if not self.watch_script:
            await self._changed("mpijobs")
            if self.job_obj is not None:
                yield "MODIFIED", self.job_obj, self.job_obj["metadata"]["resourceVersion"]
            return
        round_ = self.watch_script.pop(0)
        if isinstance(round_, BaseException):
            raise round_
        for event_type, obj in round_:
            rv = obj["metadata"]["resourceVersion"]
            if event_type == "BOOKMARK":
                yield event_type, None, rv
                continue
            self.__dict__["job_obj"] = obj  # the watch reports it itself
            yield event_type, obj, rv

    async def get_mpijob(self, name, namespace):
        return self.job_obj

    async def get_launcher_job(self, name, namespace):
        """The launcher Job of ``job_obj``, whose uid the launchers of :func:`pod` name as their controller's."""
        self.__dict__.setdefault("launcher_job_gets", []).append(name)
        owner = {
            "kind": "MPIJob",
            "name": name,
            "uid": (self.job_obj or {}).get("metadata", {}).get("uid"),
            "controller": True,
        }
        return {
            "metadata": {
                "name": f"{name}-launcher",
                "uid": f"uid-{name}-launcher",
                "ownerReferences": [owner],
            }
        }

    async def launcher_pods(self, name, namespace):
        return list(reversed(self.launchers))  # newest first, like the real hook

    async def worker_pods(self, name, namespace):
        return list(self.workers)

    async def job_events(self, name, namespace):
        return [e for e in self.events if e["involvedObject"]["name"] == name]

    async def pod_events(self, pod_names, namespace):
        return [e for e in self.events if e["involvedObject"]["name"] in pod_names]

    async def delete_mpijob(self, name, namespace, **kwargs):
        self.deleted.append((name, namespace))
        return True

    async def delete_live_mpijob(self, name, namespace, uid=None):
        outcome = keep_reason(self.job_obj, uid)
        if outcome is not None:
            return outcome
        self.deleted.append((name, namespace))
        return DELETED

    async def read_pod_log(
        self,
        pod,
        namespace,
        *,
        container=None,
        since_time=None,
        previous=False,
        follow=False,
        tail_lines=None,
        limit_bytes=None,
    ):
        lines = self.logs.get((pod, previous), [])
        if limit_bytes is not None and tail_lines is None and not (since_time or follow):
            self.log_probes.append(pod)
            text = "".join(f"{line}\n" for line in lines)[:limit_bytes]
            for line in text.splitlines():
                yield line
            return
        self.log_requests.append((pod, since_time, previous, follow))
        if since_time:
            lines = [ln for ln in lines if ln[:19] >= since_time[:19]]
        breaks_after = self.log_failures.pop(pod, None)
        for i, line in enumerate(lines):
            if breaks_after is not None and i == breaks_after:
                raise ConnectionError("stream cut")
            yield line


@dataclass
class FakeSyncHook:
    """The sync hook's interface over a dict of MPIJobs keyed by (namespace, name)."""

    jobs: dict = field(default_factory=dict)
    namespace: str = "default"
    created: list = field(default_factory=list)
    deleted: list = field(default_factory=list)
    create_error: BaseException | None = None
    secrets: dict = field(default_factory=dict)  # (namespace, name) -> (stringData, owner uid)
    secret_error: BaseException | None = None
    launcher_lines: list = field(default_factory=list)  # launcher_log(): the newest launcher's whole log
    claims: dict = field(default_factory=dict)  # (namespace, name) -> the Lease (hooks/identity_claims.py)
    api_version: str = "kubeflow.org/v2beta1"
    extras: dict = field(default_factory=dict)  # the connection's extras (the links' URL templates)

    def connection_extras(self) -> dict:
        return self.extras

    def _run(self, namespace, plan):
        """The claim requests (hooks/identity_claims.py: CustomObjectsApi calls on Leases) over ``claims``."""
        call = plan(self.resolve_namespace(namespace))
        kwargs, ns = call.kwargs, call.kwargs["namespace"]
        if call.method == "list_namespaced_custom_object":
            wanted = dict(p.split("=", 1) for p in kwargs["label_selector"].split(","))
            return call.on_result(
                {
                    "items": [
                        c
                        for (n, _), c in self.claims.items()
                        if n == ns and all(c["metadata"]["labels"].get(k) == v for k, v in wanted.items())
                    ]
                }
            )
        name = kwargs["name"] if "name" in kwargs else kwargs["body"]["metadata"]["name"]
        if call.method == "create_namespaced_custom_object":
            if (ns, name) in self.claims:
                return call.on_error(NS(status=409))
            self.claims[(ns, name)] = kwargs["body"]
            return call.on_result(kwargs["body"])
        return (
            call.on_result(self.claims[(ns, name)])
            if (ns, name) in self.claims
            else call.on_error(NS(status=404))
        )

    def create_owned_secret(self, name, namespace, string_data, owner):
        if self.secret_error is not None:
            raise self.secret_error
        if (namespace, name) in self.secrets:
            raise ApiException(status=409, reason="AlreadyExists")
        self.secrets[(namespace, name)] = (string_data, owner["metadata"].get("uid"))
        return {"metadata": {"name": name, "namespace": namespace}}

    def launcher_log(self, name, namespace):
        return list(self.launcher_lines)

    def resolve_namespace(self, explicit=None):
        return explicit or self.namespace

    def configured_namespace(self):
        return self.namespace

    def get_mpijob(self, name, namespace):
        return self.jobs.get((namespace, name))

    def list_mpijobs(self, namespace, label_selector=None):
        wanted = dict(p.split("=", 1) for p in label_selector.split(",")) if label_selector else {}
        return [
            j
            for (ns, _), j in self.jobs.items()
            if ns == namespace and all(j["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
        ]

    def create_mpijob(self, manifest, namespace):
        if self.create_error is not None:
            raise self.create_error
        obj = {
            **manifest,
            "metadata": {
                **manifest["metadata"],
                "creationTimestamp": "2026-11-22T10:00:00Z",
                "uid": f"uid-{len(self.created)}",
            },
        }
        self.jobs[(namespace, manifest["metadata"]["name"])] = obj
        self.created.append(obj)
        return obj

    def delete_mpijob(self, name, namespace, uid=None, **kwargs):
        job = self.jobs.get((namespace, name))
        if uid is not None and job is not None and job["metadata"].get("uid") != uid:
            return False  # the API server's uid precondition
        self.deleted.append((name, namespace))
        return self.jobs.pop((namespace, name), None) is not None

    def delete_live_mpijob(self, name, namespace, uid=None):
        outcome = keep_reason(self.jobs.get((namespace, name)), uid)
        if outcome is not None:
            return outcome
        self.delete_mpijob(name, namespace)
        return DELETED

    def wait_for_deleted(self, name, namespace, timeout=60):
        return (namespace, name) not in self.jobs

    def connection_settings(self):
        return {"kube_config_path": "/tmp/kubeconfig"}

    def worker_log_tails(self, name, namespace, lines):
        return {f"{name}-worker-0": ["worker said goodbye"]}
