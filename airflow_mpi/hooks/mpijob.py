"""Synchronous hook: every Kubernetes API call the MPIJob operator and sensor make.

``MPIJobHook`` subclasses the cncf.kubernetes ``KubernetesHook``, so it reads the same connection
(``kubernetes_default`` and its extras: in_cluster, kube_config_path, kube_config, namespace,
cluster_context, disable_verify_ssl, disable_tcp_keepalive) and uses its clients
(``api_client``, ``core_v1_client``, ``custom_object_client``).

What it does differently from the stock hook:

* idempotent reads, lists and deletes are retried on transient errors only (429, 5xx,
  connection failures) -- never on 409;
* create is never replayed blindly: after a failure that may have reached the API server the hook
  looks the job up first and adopts it when it belongs to the same task instance;
* 409 on create adopts the existing MPIJob of the same task instance (identity labels, try number
  ignored) and otherwise raises :class:`~airflow_mpi.hooks.errors.MPIJobConflictError`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

import tenacity
from kubernetes.client.exceptions import ApiException

from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook, _get_bool
from airflow.providers.common.compat.sdk import AirflowNotFoundException
from airflow_mpi.hooks import _calls as calls, live_delete
from airflow_mpi.hooks.api_errors import CONNECTION_ERRORS
from airflow_mpi.hooks.k8s_requests import (
    LAUNCHER,
    WORKER,
    iter_lines,
    job_event_selector,
    log_query_params,
    pod_event_selector,
    pod_selectors,
    sort_events,
    sort_newest_first,
    sort_workers,
)
from airflow_mpi.hooks.kubeconfig import in_cluster_namespace
from airflow_mpi.jobspec.naming import LABEL_PREFIX

if TYPE_CHECKING:
    from kubernetes.client.models import V1Pod


class MPIJobHook(calls.MPIJobHookBase, KubernetesHook):
    """Create, find, watch and delete Kubeflow MPIJobs and read their pods' logs and events.

    :param conn_id: Kubernetes connection id (same connection as cncf.kubernetes).
    :param api_version: ``kubeflow.org/v2beta1`` (mpi-operator) or ``kubeflow.org/v1`` (training-operator).
    :param kwargs: passed to ``KubernetesHook`` (config_file, cluster_context, in_cluster, ...).
    """

    hook_name = "Kubernetes (Kubeflow MPIJob)"

    # ------------------------------------------------------------------------------- connection
    def _get_field(self, field_name):
        value = super()._get_field(field_name)
        if field_name == "in_cluster" and isinstance(value, str):
            return _get_bool(value)
        return value

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

    def resolve_namespace(self, explicit: str | None = None) -> str:
        """``explicit`` > connection namespace > in-cluster namespace file > ``default``."""
        return explicit or self.get_namespace()

    def connection_settings(self) -> dict[str, Any]:
        """The constructor settings besides conn_id/api_version (JSON-serialisable, None left out).

        A trigger passes them to :class:`~airflow_mpi.hooks.async_mpijob.AsyncMPIJobHook` so it
        reaches the cluster exactly as the task did.
        """
        settings = {
            "config_file": self.config_file,
            "cluster_context": self.cluster_context,
            "in_cluster": self.in_cluster,
            "disable_verify_ssl": self.disable_verify_ssl,
            "disable_tcp_keepalive": self.disable_tcp_keepalive,
            "config_dict": self.config_dict,
        }
        return {k: v for k, v in settings.items() if v is not None}

    def _retry(self, fn, *args, **kwargs):
        """Call ``fn`` retrying transient failures (idempotent requests only)."""
        return tenacity.Retrying(**self._retry_policy())(fn, *args, **kwargs)

    def _send(self, call: calls.Call) -> Any:
        """Send an idempotent request (retried on transient failures) and read its answer."""
        client = self.core_v1_client if call.api == calls.CORE_V1 else self.custom_object_client
        try:
            result = self._retry(getattr(client, call.method), **call.kwargs)
        except ApiException as e:
            return call.on_error(e)
        return call.on_result(result)

    # ------------------------------------------------------------------------------- MPIJobs
    def create_mpijob(self, manifest: dict, namespace: str | None = None) -> dict:
        """Create the MPIJob, or adopt the existing one of the same task instance.

        :param manifest: the MPIJob (``metadata.name`` required; apiVersion/kind default to the hook's).
        :param namespace: target namespace (default: manifest namespace, then :meth:`resolve_namespace`).
        :return: the created (or adopted) object.
        :raises MPIJobConflictError: an MPIJob of that name exists and belongs to another owner.
        :raises MPIJobAPIUnavailable: the API server does not serve this MPIJob version.
        """
        ns = self.resolve_namespace(namespace or (manifest.get("metadata") or {}).get("namespace"))
        create = calls.CreateCall(self, manifest, ns, self.log)
        for attempt in create.attempts:
            try:
                return create.created(self.custom_object_client.create_namespaced_custom_object(**create.kwargs))
            except (ApiException, *CONNECTION_ERRORS) as e:
                failure = create.failed(e)
            if (adopted := create.after_lookup(self._send(create.lookup()), attempt, failure)) is not None:
                return adopted
            time.sleep(self._backoff(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def get_mpijob(self, name: str, namespace: str | None = None) -> dict | None:
        """The MPIJob, or None when it does not exist."""
        return self._send(calls.get_call(name, self.resolve_namespace(namespace), self.group, self.version))

    def delete_mpijob(
        self,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: str | None = "Foreground",
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> bool:
        """Delete the MPIJob; False when it was already gone.

        ``Foreground`` (default) keeps the MPIJob visible until the launcher and worker pods are gone.
        """
        ns = self.resolve_namespace(namespace)
        return self._send(calls.delete_call(self, name, ns, propagation_policy, grace_period_seconds, self.log, uid))

    def list_mpijobs(self, namespace: str | None = None, label_selector: str | None = None) -> list[dict]:
        """MPIJobs of the namespace (optionally filtered by a label selector)."""
        return self._send(calls.list_call(self, self.resolve_namespace(namespace), label_selector))

    def delete_live_mpijob(self, name: str, namespace: str | None = None, *, uid: str | None = None) -> str:
        """Delete the MPIJob only while it is live (see hooks/live_delete.py); returns the outcome."""
        ns = self.resolve_namespace(namespace)
        outcome = live_delete.CHANGED
        for _ in range(live_delete.ROUNDS):
            obj = self.get_mpijob(name, ns)
            if (outcome := live_delete.keep_reason(obj, uid)) is None:
                outcome = self._send(live_delete.live_delete_call(self, obj, self.log))
            if outcome != live_delete.CHANGED:
                break
        return outcome

    def watch_mpijob(
        self,
        name: str,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int = 60,
        allow_bookmarks: bool = False,
    ) -> Iterator[tuple[str, dict]]:
        """Yield ``(event_type, object)`` for one MPIJob until the server ends the watch.

        Without ``resource_version`` the first event is a synthetic ADDED with the current state.
        Resume by passing the ``metadata.resourceVersion`` of the last object seen.
        With ``allow_bookmarks`` the server may send ``("BOOKMARK", {metadata: {resourceVersion}})``.

        :raises WatchExpired: the resourceVersion is too old (410 Gone): get the job and watch from its version.
        """
        ns = self.resolve_namespace(namespace)
        kwargs = calls.watch_kwargs(self, name, ns, resource_version, timeout_seconds, allow_bookmarks)
        watch = calls.WatchDecoder(name, ns, resource_version, allow_bookmarks, ApiException, self.api_version)
        try:
            resp = self._retry(self.custom_object_client.list_namespaced_custom_object, **kwargs)
        except ApiException as e:
            watch.raise_open_error(e)
        try:
            for line in iter_lines(resp.stream(amt=None, decode_content=True)):
                if (event := watch.decode(line)) is not None:
                    yield event
        finally:
            resp.close()
            resp.release_conn()

    def wait_for_deleted(
        self, name: str, namespace: str | None = None, timeout: float = 300, *, poll_interval: float = 2.0
    ) -> bool:
        """Poll until the MPIJob is gone; False when it still exists after ``timeout`` seconds."""
        ns = self.resolve_namespace(namespace)
        deadline = calls.Deadline(timeout, time.monotonic)
        while self.get_mpijob(name, ns) is not None:
            if (wait := deadline.next_wait(poll_interval)) is None:
                return False
            time.sleep(wait)
        return True

    # ------------------------------------------------------------------------------- pods
    def _role_pods(self, name: str, namespace: str | None, role: str) -> list[V1Pod]:
        ns = self.resolve_namespace(namespace)
        for selector in pod_selectors(self.api_version, name, role):
            if pods := self._send(calls.pod_list_call(ns, selector)).items:
                return list(pods)
        return []

    def launcher_pods(self, name: str, namespace: str | None = None) -> list[V1Pod]:
        """Launcher pods of the MPIJob, newest first (one per launcher attempt with restartPolicy Never)."""
        return sort_newest_first(self._role_pods(name, namespace, LAUNCHER))

    def worker_pods(self, name: str, namespace: str | None = None) -> list[V1Pod]:
        """Worker pods of the MPIJob, by replica index."""
        return sort_workers(self._role_pods(name, namespace, WORKER))

    # ------------------------------------------------------------------------------- logs
    def read_pod_log(
        self,
        pod: str | V1Pod,
        namespace: str | None = None,
        *,
        container: str | None = None,
        since_time: datetime | str | None = None,
        previous: bool = False,
        follow: bool = False,
        tail_lines: int | None = None,
        limit_bytes: int | None = None,
        request_timeout: float | tuple[float, float] | None = None,
    ) -> Iterator[str]:
        """Yield the container's log lines, each prefixed with its RFC 3339 timestamp (``timestamps=true``).

        Lines are decoded (invalid UTF-8 replaced) without their newline; a last line without a
        newline is yielded when the stream ends cleanly. A broken stream raises instead, and its
        unfinished line is dropped: reconnect with ``since_time`` to read it again.
        The request is sent on the first ``next()``.

        :param since_time: datetime or RFC 3339 string; sent with second precision (floored).
        :param previous: the previous (restarted) container instance.
        :raises PodLogUnavailable: 404 (pod gone) or 400 (container not started / no previous container).
        """
        pod_name, ns = calls.pod_ref(pod, namespace)
        ns = self.resolve_namespace(ns)
        query = log_query_params(container, since_time, previous, follow, tail_lines, limit_bytes)
        req = calls.LogRequest.of(self, pod_name, ns, container, query, request_timeout)
        try:
            resp = self._retry(self.api_client.call_api, *req.args, **req.kwargs)
        except ApiException as e:
            req.raise_error(e)
        try:
            yield from iter_lines(resp.stream(amt=None, decode_content=True))
        finally:
            resp.close()
            resp.release_conn()

    def worker_log_tails(self, name: str, namespace: str | None = None, tail_lines: int = 50) -> dict[str, list[str]]:
        """The last ``tail_lines`` log lines (timestamps stripped) of each worker's main container.

        For failure reports: a pod whose log cannot be read gets one explanatory line instead.
        """
        ns = self.resolve_namespace(namespace)
        tails: dict[str, list[str]] = {}
        for pod in self.worker_pods(name, ns):
            try:
                tails[pod.metadata.name] = calls.log_messages(
                    self.read_pod_log(pod, ns, container=calls.main_container(pod), tail_lines=tail_lines)
                )
            except Exception as err:  # diagnostics only: never mask the failure being reported
                tails[pod.metadata.name] = calls.log_unavailable(pod, err, self.log)
        return tails

    def launcher_log(self, name: str, namespace: str | None = None) -> list[str]:
        """The newest launcher pod's log (its current container, timestamps stripped): what a result read after
        the fact needs (``@task.mpi``: rank 0's marker lines a resumed wait did not see). Empty without a pod."""
        launchers = self.launcher_pods(name, namespace)
        if not launchers:
            return []
        pod = launchers[0]
        return calls.log_messages(self.read_pod_log(pod, namespace, container=calls.main_container(pod)))

    # ------------------------------------------------------------------------------- secrets
    def create_owned_secret(self, name: str, namespace: str, string_data: dict[str, str], owner: dict) -> dict:
        """Create a Secret owned by the MPIJob ``owner``: the garbage collector deletes it with the job.

        Not retried (a create is not idempotent); the caller decides what a failure means.
        """
        metadata = owner["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {k: v for k, v in (metadata.get("labels") or {}).items() if k.startswith(LABEL_PREFIX)},
                "ownerReferences": [{"apiVersion": owner.get("apiVersion") or self.api_version, "kind": "MPIJob",
                                     "name": metadata["name"], "uid": metadata["uid"]}],
            },
            "stringData": string_data,
        }
        return self.core_v1_client.create_namespaced_secret(namespace, body).to_dict()

    # ------------------------------------------------------------------------------- events
    def _events(self, namespace: str, field_selector: str) -> list[dict]:
        kwargs = {"namespace": namespace, "field_selector": field_selector, "_preload_content": False}
        return calls.events_of(self._retry(self.core_v1_client.list_namespaced_event, **kwargs).data)

    def job_events(self, name: str, namespace: str | None = None) -> list[dict]:
        """Events of the MPIJob (involvedObject kind MPIJob), oldest first, as API dicts."""
        return sort_events(self._events(self.resolve_namespace(namespace), job_event_selector(name)))

    def pod_events(self, pod_names: str | Iterable[str | V1Pod], namespace: str | None = None) -> list[dict]:
        """Events of the given pods, merged, oldest first, as API dicts."""
        ns = self.resolve_namespace(namespace)
        return calls.merge_pod_events([(p, self._events(ns, pod_event_selector(p))) for p in calls.pod_names_of(pod_names)])


__all__ = ["MPIJobHook"]
