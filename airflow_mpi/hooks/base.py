"""What the sync and the async MPIJob hook share, written once (mixed in before the cncf.kubernetes hook class)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from airflow_mpi.hooks.answers import sort_newest_first, sort_workers
from airflow_mpi.hooks.kubeconfig import IN_CLUSTER_NAMESPACE_FILE
from airflow_mpi.hooks.live_delete import live_delete
from airflow_mpi.hooks.ownership import owner_objects, role_pods
from airflow_mpi.hooks.requests import Call, Steps, delete_call, get_call, split_api_version
from airflow_mpi.hooks.retries import request_retrying
from airflow_mpi.jobspec.kinds import DEFAULT_KIND, JobKind, kind_or_default
from airflow_mpi.jobspec.vocabulary import LAUNCHER


class MPIJobHookBase:
    """The settings of both hooks, and the requests both send: plans that each hook's ``_run`` sends, so the methods
    here return their answer on the sync hook and an awaitable of it on the async hook."""

    conn_name_attr = "kubernetes_conn_id"
    default_conn_name = "kubernetes_default"
    conn_type = "kubernetes_mpijob"
    log: Any  # the hook's logger (LoggingMixin's: a standard or structlog logger by Airflow version)

    IN_CLUSTER_NAMESPACE_FILE = IN_CLUSTER_NAMESPACE_FILE

    #: sends of an idempotent request at most, and its backoff (hooks/retries.py)
    api_retries: int = 5
    api_retry_wait: float = 1.0
    api_retry_wait_max: float = 15.0
    #: default ``(connect, read-idle)`` timeout of log reads; a followed log quiet for longer raises
    #: (urllib3 ReadTimeoutError / aiohttp timeout) and the caller reconnects with ``since_time``.
    log_request_timeout: tuple[float, float] = (30.0, 300.0)

    def __init__(
        self,
        conn_id: str | None = default_conn_name,
        *,
        api_version: str = DEFAULT_KIND.api_version,
        **kwargs: Any,
    ):
        super().__init__(conn_id=conn_id, **kwargs)  # type: ignore[call-arg]
        self.group, self.version = split_api_version(api_version)
        self.api_version = api_version

    @property
    def job_kind(self) -> JobKind:
        """The kind of this hook's jobs (jobspec/kinds/; an api_version no kind has: the default kind's)."""
        return kind_or_default(self.api_version)

    def custom_object_args(self, namespace: str, **extra: Any) -> dict[str, Any]:
        """The CustomObjectsApi arguments naming this hook's MPIJobs in ``namespace``."""
        return {
            "group": self.group,
            "version": self.version,
            "namespace": namespace,
            "plural": self.job_kind.plural,
            **extra,
        }

    def _retrying(self) -> dict[str, Any]:
        return request_retrying(self.api_retries, self.api_retry_wait, self.api_retry_wait_max)

    def _run(self, namespace: str | None, plan: Callable[[str], Steps | Call]) -> Any:
        raise NotImplementedError  # each hook sends the plan its way

    def get_mpijob(self, name: str, namespace: str | None = None) -> Any:
        """The MPIJob, or None when it does not exist."""
        return self._run(namespace, lambda ns: get_call(self.custom_object_args(ns), name))

    def delete_mpijob(
        self,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: str | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> Any:
        """Delete the MPIJob; False when it was already gone (given ``uid``: or is another object of that name now).
        ``propagation_policy`` by default the kind's (``JobKind.delete_propagation``): the MPIJobs' Foreground keeps
        the job visible until the launcher and worker pods are gone."""
        return self._run(
            namespace,
            lambda ns: delete_call(
                self.custom_object_args(ns), name, propagation_policy, grace_period_seconds, uid, self.log
            ),
        )

    def delete_live_mpijob(self, name: str, namespace: str | None = None, *, uid: str | None = None) -> Any:
        """Delete the MPIJob only while it is live (hooks/live_delete.py); returns the outcome."""
        return self._run(namespace, lambda ns: live_delete(self.custom_object_args(ns), name, uid, self.log))

    def get_launcher_job(self, name: str, namespace: str | None = None) -> Any:
        """The objects between the job and its pods (hooks/ownership.owner_objects: v2beta1's batch/v1 Job
        ``<name>-launcher`` or None when absent or not readable; a TrainJob's JobSet and batch Jobs found): whose
        pods are the job's. A kind with no such object is never asked (ValueError)."""
        return self._run(namespace, lambda ns: owner_objects(ns, name, self.job_kind))

    def _role_pods(self, name: str, namespace: str | None, role: str) -> Any:
        """The ``role`` pods the MPIJob's controllers made (hooks/ownership.py): launchers newest first (one per
        attempt), workers by replica index. A pod that only carries its labels is named once in the log."""
        kind = self.job_kind
        sort = (
            sort_newest_first
            if role == LAUNCHER
            else partial(sort_workers, index_label=kind.pod_labels.index)
        )
        return self._run(
            namespace,
            lambda ns: role_pods(
                self.custom_object_args(ns),
                name,
                kind.pod_labels.selectors(name, role),
                sort,
                self._note_foreign,
                kind,
            ),
        )

    def _note_foreign(self, pods: list[Any]) -> None:
        noted: set[str] = self.__dict__.setdefault("_noted_foreign", set())
        for pod in pods:
            if pod.metadata.name not in noted:
                noted.add(pod.metadata.name)
                self.log.info(
                    "Ignoring pod %s: it carries the %s's labels, but the %s's controllers did not "
                    "make it (someone else's pod: not read, not counted)",
                    pod.metadata.name,
                    self.job_kind.kind,
                    self.job_kind.kind,
                )
