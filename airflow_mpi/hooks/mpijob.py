"""Synchronous hook: the Kubernetes API calls of the MPIJob operator, sensor, decorators and orphan sweep.

``MPIJobHook`` subclasses the cncf.kubernetes ``KubernetesHook``, so it reads the same connection and its extras
and uses its clients. Unlike the stock hook, it retries idempotent requests on transient errors only, never on 409
(hooks/retries.py), and never sends a create again blindly: it looks the job up first and adopts it when it belongs
to the same task instance (hooks/requests.py ``Create``), else raises ``MPIJobConflictError``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from functools import cached_property
from typing import TYPE_CHECKING, Any

import tenacity
from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook, _get_bool
from airflow.providers.common.compat.sdk import AirflowNotFoundException
from kubernetes.client.exceptions import ApiException
from kubernetes.config import incluster_config

from airflow_mpi.hooks.answers import MAX_LOG_LINE_BYTES, iter_lines, split_timestamp
from airflow_mpi.hooks.base import MPIJobHookBase
from airflow_mpi.hooks.errors import connection_errors, describe_error
from airflow_mpi.hooks.kubeconfig import in_cluster_namespace
from airflow_mpi.hooks.requests import (
    CORE_V1,
    Call,
    Create,
    LogRequest,
    Plan,
    Steps,
    adopt_or_raise,
    get_call,
    leftover_call,
    list_call,
    prepare_body,
)
from airflow_mpi.hooks.retries import backoff
from airflow_mpi.hooks.task_pod import being_deleted
from airflow_mpi.hooks.token_file import follow_token_file
from airflow_mpi.jobspec.kinds import kind_or_default
from airflow_mpi.jobspec.naming import LABEL_PREFIX
from airflow_mpi.jobspec.vocabulary import LAUNCHER, WORKER

if TYPE_CHECKING:
    from kubernetes.client.models import V1Pod


class MPIJobHook(MPIJobHookBase, KubernetesHook):
    """Create, find and delete Kubeflow MPIJobs, read their pods' logs, and create the Secrets they own;
    ``api_version``: a job kind's (jobspec/kinds/: the mpi-operator's by default, or the training-operator's)."""

    hook_name = "Kubernetes (Kubeflow MPIJob)"

    # ------------------------------------------------------------------------------- connection
    @cached_property
    def conn_extras(self) -> dict:
        """The connection's extras, ``in_cluster`` read as the boolean its text names: the UI stores "false",
        which the stock hook would take for true."""
        extras = dict(super().conn_extras)
        for key in ("in_cluster", "extra__kubernetes__in_cluster"):
            if isinstance(extras.get(key), str):
                extras[key] = _get_bool(extras[key])
        return extras

    def get_conn(self) -> Any:
        """The stock hook's client; in a pod, its token followed as kubelet rotates it (hooks/token_file.py)."""
        api_client = super().get_conn()
        if self._is_in_cluster:
            follow_token_file(api_client.configuration, incluster_config.SERVICE_TOKEN_FILENAME)
        return api_client

    def get_namespace(self) -> str:
        """Namespace of the connection, else of the pod this runs in, else ``default``."""
        return (
            super().get_namespace()
            or in_cluster_namespace(self.IN_CLUSTER_NAMESPACE_FILE)
            or self.DEFAULT_NAMESPACE
        )

    def configured_namespace(self) -> str | None:
        """The connection's namespace; None when it sets none or the connection does not exist (offline use)."""
        try:
            return super().get_namespace()
        except AirflowNotFoundException:
            return None

    def connection_extras(self) -> dict:
        """The connection's extras (the extra links' URL templates: operators/links.py); empty when the connection
        does not exist (in-cluster defaults), which is no error for what only adds links."""
        try:
            return dict(self.conn_extras)
        except AirflowNotFoundException:
            return {}

    def resolve_namespace(self, explicit: str | None = None) -> str:
        """``explicit`` > connection namespace > in-cluster namespace file > ``default``."""
        return explicit or self.get_namespace()

    def connection_settings(self) -> dict[str, Any]:
        """The constructor settings besides conn_id/api_version (JSON-serialisable, None left out): a trigger's
        async hook gets them to reach the cluster exactly as the task did."""
        names = (
            "config_file",
            "cluster_context",
            "in_cluster",
            "disable_verify_ssl",
            "disable_tcp_keepalive",
            "config_dict",
        )
        return {name: value for name in names if (value := getattr(self, name)) is not None}

    # ------------------------------------------------------------------------------- requests
    def _retry(self, fn, *args, **kwargs):
        """Call ``fn`` retrying transient failures (idempotent requests only)."""
        return tenacity.Retrying(**self._retrying())(fn, *args, **kwargs)

    def _send(self, call: Call) -> Any:
        client = self.core_v1_client if call.api == CORE_V1 else self.custom_object_client
        try:
            return call.on_result(self._retry(getattr(client, call.method), **call.kwargs))
        except ApiException as e:
            return call.on_error(e)

    def _run(self, namespace: str | None, plan: Callable[[str], Steps | Call]) -> Any:
        """Send the requests of ``plan`` in the resolved namespace, each answer to the next."""
        steps = Plan(plan(self.resolve_namespace(namespace)))
        while not steps.done:
            steps.answer(self._send(steps.request))
        return steps.result

    # ------------------------------------------------------------------------------- MPIJobs
    def create_mpijob(self, manifest: dict, namespace: str | None = None) -> dict:
        """Create the MPIJob (``metadata.name`` required; apiVersion/kind default to the hook's), or adopt the
        existing one of the same task instance; in ``namespace``, else the manifest's, else :meth:`resolve_namespace`.
        Raises MPIJobConflictError (the job of that name has another owner) or MPIJobAPIUnavailable."""
        ns = self.resolve_namespace(namespace or (manifest.get("metadata") or {}).get("namespace"))
        create = Create(prepare_body(manifest, ns, self.api_version), self.log)
        for attempt in itertools.count(1):
            try:
                obj = self.custom_object_client.create_namespaced_custom_object(
                    **create.where, body=create.body
                )
                return create.created(obj)
            except (ApiException, *connection_errors()) as e:
                create.failed(e)
                failure = e
            if (existing := self._send(get_call(create.where, create.name))) is not None:
                return adopt_or_raise(existing, create.body)
            if attempt >= self.api_retries:
                raise failure
            time.sleep(backoff(attempt, self.api_retry_wait, self.api_retry_wait_max))
        raise AssertionError("unreachable")  # pragma: no cover

    def list_mpijobs(self, namespace: str | None = None, label_selector: str | None = None) -> list[dict]:
        return self._run(
            namespace, lambda ns: list_call(self.custom_object_args(ns), label_selector, self.api_version)
        )

    def wait_for_deleted(
        self, name: str, namespace: str | None = None, timeout: float = 300, *, poll_interval: float = 2.0
    ) -> bool:
        """Poll until the MPIJob is gone (and what its kind's background deletion leaves for a while: a TrainJob's
        JobSet, ``requests.leftover_call``); False when either still exists after ``timeout`` seconds."""
        ns = self.resolve_namespace(namespace)
        end = time.monotonic() + timeout
        leftover = leftover_call(self.custom_object_args(ns), name)
        reads = [lambda: self.get_mpijob(name, ns)]
        if leftover is not None:
            reads.append(lambda: self._run(ns, lambda _: leftover))
        for read in reads:
            while read() is not None:
                if (remaining := end - time.monotonic()) <= 0:
                    return False
                time.sleep(min(poll_interval, remaining))
        return True

    def task_pod_deleting(self, namespace: str, name: str) -> bool:
        """Whether the cluster is deleting the task pod ``namespace/name`` (hooks/task_pod.py); False when it cannot
        be read (then the kill counts as Airflow's, and the job goes)."""
        try:
            pods = self._retry(
                self.core_v1_client.list_namespaced_pod, namespace, field_selector=f"metadata.name={name}"
            ).items
        except Exception as exc:  # noqa: BLE001 - any failure to read leaves the default: delete
            self.log.warning("Cannot read task pod %s/%s: %s", namespace, name, describe_error(exc))
            return False
        return being_deleted(pods)

    # ------------------------------------------------------------------------------- logs
    def _log_messages(self, pod: V1Pod, namespace: str, tail_lines: int | None = None) -> Iterator[str]:
        """The log of the pod's main (first) container, timestamps stripped, read as it is consumed (64 KiB
        reads; a line over ``MAX_LOG_LINE_BYTES`` in marked pieces: hooks/answers.py)."""
        containers = (pod.spec.containers if pod.spec is not None else None) or []
        container = containers[0].name if containers else None
        req = LogRequest(
            pod.metadata.name, namespace, self.log_request_timeout, container, tail_lines=tail_lines
        )
        try:
            resp = self._retry(self.api_client.call_api, *req.args, **req.kwargs)
        except ApiException as e:
            req.raise_error(e)
        try:
            for line in iter_lines(resp.stream(amt=64 * 1024, decode_content=True), MAX_LOG_LINE_BYTES):
                yield split_timestamp(line)[1]
        finally:
            resp.close()
            resp.release_conn()

    def worker_log_tails(
        self, name: str, namespace: str | None = None, tail_lines: int = 50
    ) -> dict[str, list[str]]:
        """The last ``tail_lines`` log lines (timestamps stripped) of each worker's main container; a pod whose log
        cannot be read gets one explanatory line instead."""
        ns = self.resolve_namespace(namespace)
        tails: dict[str, list[str]] = {}
        for pod in self._role_pods(name, ns, WORKER):
            try:
                tails[pod.metadata.name] = list(self._log_messages(pod, ns, tail_lines))
            except Exception as err:  # diagnostics only: never mask the failure being reported
                self.log.warning("Could not read the log of worker %s: %s", pod.metadata.name, err)
                tails[pod.metadata.name] = [f"(log unavailable: {err})"]
        return tails

    def launcher_log(self, name: str, namespace: str | None = None) -> Iterator[str]:
        """The newest launcher pod's log (its current container, timestamps stripped), line by line as it is read:
        what a result read after the fact needs (``@task.mpi``: rank 0's marker lines a resumed wait did not see).
        Empty without a pod."""
        ns = self.resolve_namespace(namespace)
        launchers = self._role_pods(name, ns, LAUNCHER)
        return self._log_messages(launchers[0], ns) if launchers else iter(())

    def create_owned_secret(
        self, name: str, namespace: str, string_data: dict[str, str], owner: dict
    ) -> dict:
        """Create a Secret owned by the MPIJob ``owner``: the garbage collector deletes it with the job. Not retried
        (a create is not idempotent); the caller decides what a failure means."""
        metadata = owner["metadata"]
        labels = {k: v for k, v in (metadata.get("labels") or {}).items() if k.startswith(LABEL_PREFIX)}
        api_version = owner.get("apiVersion") or self.api_version
        owner_ref = {
            "apiVersion": api_version,
            "kind": kind_or_default(api_version).kind,
            "name": metadata["name"],
            "uid": metadata["uid"],
        }
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [owner_ref],
            },
            "stringData": string_data,
        }
        return self.core_v1_client.create_namespaced_secret(namespace, body).to_dict()
