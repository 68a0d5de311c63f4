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

import json
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

import tenacity
from kubernetes.client.exceptions import ApiException

from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook, _get_bool
from airflow_mpi.hooks._common import (
    API_V2BETA1,
    CONNECTION_ERRORS,
    IN_CLUSTER_NAMESPACE_FILE,
    LAUNCHER,
    MPIJOB_PLURAL,
    POD_LOG_PATH,
    WORKER,
    adopt_or_raise,
    describe_error,
    error_message,
    in_cluster_namespace,
    is_missing_resource_type,
    is_transient,
    iter_lines,
    job_event_selector,
    log_before_retry,
    log_query_params,
    pod_event_selector,
    pod_selectors,
    prepare_body,
    sort_events,
    sort_newest_first,
    sort_workers,
    split_api_version,
    watch_field_selector,
)
from airflow_mpi.hooks.errors import MPIJobAPIUnavailable, PodLogUnavailable, WatchExpired
from airflow_mpi.models.logs import split_timestamp

if TYPE_CHECKING:
    from kubernetes.client.models import V1Pod


class MPIJobHook(KubernetesHook):
    """Create, find, watch and delete Kubeflow MPIJobs and read their pods' logs and events.

    :param conn_id: Kubernetes connection id (same connection as cncf.kubernetes).
    :param api_version: ``kubeflow.org/v2beta1`` (mpi-operator) or ``kubeflow.org/v1`` (training-operator).
    :param kwargs: passed to ``KubernetesHook`` (config_file, cluster_context, in_cluster, ...).
    """

    conn_name_attr = "kubernetes_conn_id"
    default_conn_name = "kubernetes_default"
    conn_type = "kubernetes_mpijob"
    hook_name = "Kubernetes (Kubeflow MPIJob)"

    IN_CLUSTER_NAMESPACE_FILE = IN_CLUSTER_NAMESPACE_FILE

    #: retries of idempotent calls on transient errors (attempts in total) and their exponential backoff
    api_retries: int = 5
    api_retry_wait: float = 1.0
    api_retry_wait_max: float = 15.0
    #: default ``(connect, read-idle)`` timeout of log reads; a followed log quiet for longer raises
    #: (urllib3 ReadTimeoutError) and the caller reconnects with ``since_time``.
    log_request_timeout: tuple[float, float] = (30.0, 300.0)

    def __init__(
        self,
        conn_id: str | None = default_conn_name,
        *,
        api_version: str = API_V2BETA1,
        **kwargs: Any,
    ) -> None:
        super().__init__(conn_id=conn_id, **kwargs)
        self.group, self.version = split_api_version(api_version)
        self.api_version = api_version

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
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(max(1, self.api_retries)),
            wait=tenacity.wait_exponential(multiplier=self.api_retry_wait, max=self.api_retry_wait_max),
            retry=tenacity.retry_if_exception(is_transient),
            reraise=True,
            before_sleep=log_before_retry,
        )
        return retrying(fn, *args, **kwargs)

    def _backoff(self, attempt: int) -> float:
        return min(self.api_retry_wait_max, self.api_retry_wait * 2 ** (attempt - 1))

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
        body = prepare_body(manifest, ns, self.api_version)
        group, version = split_api_version(body["apiVersion"])
        name = body["metadata"]["name"]
        attempts = max(1, self.api_retries)
        for attempt in range(1, attempts + 1):
            try:
                created = self.custom_object_client.create_namespaced_custom_object(
                    group=group, version=version, namespace=ns, plural=MPIJOB_PLURAL, body=body
                )
                self.log.info("Created MPIJob %s/%s (%s)", ns, name, body["apiVersion"])
                return created
            except ApiException as e:
                if e.status == 404 and is_missing_resource_type(e):
                    raise MPIJobAPIUnavailable(body["apiVersion"], ns, error_message(e)) from e
                if e.status != 409 and not is_transient(e):
                    raise
                failure: BaseException = e
            except CONNECTION_ERRORS as e:
                failure = e
            # 409: it exists. Otherwise the request may or may not have been applied. Look before creating again.
            self.log.warning(
                "Create of MPIJob %s/%s failed (%s); looking it up", ns, name, describe_error(failure)
            )
            existing = self._get(name, ns, group, version)
            if existing is not None:
                return adopt_or_raise(existing, body)
            if attempt == attempts:
                raise failure
            time.sleep(self._backoff(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _get(self, name: str, namespace: str, group: str, version: str) -> dict | None:
        try:
            return self._retry(
                self.custom_object_client.get_namespaced_custom_object,
                group=group,
                version=version,
                namespace=namespace,
                plural=MPIJOB_PLURAL,
                name=name,
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def get_mpijob(self, name: str, namespace: str | None = None) -> dict | None:
        """The MPIJob, or None when it does not exist."""
        return self._get(name, self.resolve_namespace(namespace), self.group, self.version)

    def delete_mpijob(
        self,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: str | None = "Foreground",
        grace_period_seconds: int | None = None,
    ) -> bool:
        """Delete the MPIJob; False when it was already gone.

        ``Foreground`` (default) keeps the MPIJob visible until the launcher and worker pods are gone.
        """
        ns = self.resolve_namespace(namespace)
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        try:
            self._retry(
                self.custom_object_client.delete_namespaced_custom_object,
                group=self.group,
                version=self.version,
                namespace=ns,
                plural=MPIJOB_PLURAL,
                name=name,
                body=body,
            )
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        self.log.info("Deleted MPIJob %s/%s (propagationPolicy=%s)", ns, name, propagation_policy)
        return True

    def list_mpijobs(self, namespace: str | None = None, label_selector: str | None = None) -> list[dict]:
        """MPIJobs of the namespace (optionally filtered by a label selector)."""
        ns = self.resolve_namespace(namespace)
        kwargs: dict[str, Any] = {}
        if label_selector:
            kwargs["label_selector"] = label_selector
        try:
            result = self._retry(
                self.custom_object_client.list_namespaced_custom_object,
                group=self.group,
                version=self.version,
                namespace=ns,
                plural=MPIJOB_PLURAL,
                **kwargs,
            )
        except ApiException as e:
            if e.status == 404:
                raise MPIJobAPIUnavailable(self.api_version, ns, error_message(e)) from e
            raise
        return list((result or {}).get("items") or [])

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
        kwargs: dict[str, Any] = {
            "field_selector": watch_field_selector(name),
            "watch": True,
            "timeout_seconds": timeout_seconds,
            "_preload_content": False,
        }
        if resource_version:
            kwargs["resource_version"] = resource_version
        if allow_bookmarks:
            kwargs["allow_watch_bookmarks"] = True
        try:
            resp = self._retry(
                self.custom_object_client.list_namespaced_custom_object,
                group=self.group,
                version=self.version,
                namespace=ns,
                plural=MPIJOB_PLURAL,
                **kwargs,
            )
        except ApiException as e:
            if e.status == 410:
                raise WatchExpired(name, ns, resource_version, error_message(e)) from e
            if e.status == 404 and is_missing_resource_type(e):
                raise MPIJobAPIUnavailable(self.api_version, ns, error_message(e)) from e
            raise
        last_rv = resource_version
        try:
            for line in iter_lines(resp.stream(amt=None, decode_content=True)):
                if not line.strip():
                    continue
                event = json.loads(line)
                event_type = event.get("type")
                obj = event.get("object") or {}
                if event_type == "ERROR":
                    if obj.get("code") == 410:
                        raise WatchExpired(name, ns, last_rv, obj.get("message", ""))
                    raise ApiException(status=obj.get("code"), reason=f"{obj.get('reason')}: {obj.get('message')}")
                last_rv = (obj.get("metadata") or {}).get("resourceVersion") or last_rv
                if event_type == "BOOKMARK" and not allow_bookmarks:
                    continue
                yield event_type, obj
        finally:
            resp.close()
            resp.release_conn()

    def wait_for_deleted(
        self, name: str, namespace: str | None = None, timeout: float = 300, *, poll_interval: float = 2.0
    ) -> bool:
        """Poll until the MPIJob is gone; False when it still exists after ``timeout`` seconds."""
        ns = self.resolve_namespace(namespace)
        deadline = time.monotonic() + timeout
        while True:
            if self.get_mpijob(name, ns) is None:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(poll_interval, remaining))

    # ------------------------------------------------------------------------------- pods
    def _role_pods(self, name: str, namespace: str | None, role: str) -> list[V1Pod]:
        ns = self.resolve_namespace(namespace)
        for selector in pod_selectors(self.api_version, name, role):
            pods = self._retry(self.core_v1_client.list_namespaced_pod, namespace=ns, label_selector=selector)
            if pods.items:
                return list(pods.items)
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
        if isinstance(pod, str):
            pod_name, ns = pod, self.resolve_namespace(namespace)
        else:
            pod_name, ns = pod.metadata.name, self.resolve_namespace(namespace or pod.metadata.namespace)
        query = log_query_params(
            container=container,
            since_time=since_time,
            previous=previous,
            follow=follow,
            tail_lines=tail_lines,
            limit_bytes=limit_bytes,
        )
        try:
            resp = self._retry(
                self.api_client.call_api,
                POD_LOG_PATH,
                "GET",
                path_params={"namespace": ns, "name": pod_name},
                query_params=query,
                header_params={"Accept": "*/*"},
                response_types_map={200: "str"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=False,
                _request_timeout=request_timeout if request_timeout is not None else self.log_request_timeout,
            )
        except ApiException as e:
            if e.status in (400, 404):
                raise PodLogUnavailable(pod_name, ns, container, e.status, error_message(e)) from e
            raise
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
            containers = (pod.spec.containers if pod.spec is not None else None) or []
            container = containers[0].name if containers else None
            try:
                tails[pod.metadata.name] = [
                    split_timestamp(line)[1]
                    for line in self.read_pod_log(pod, ns, container=container, tail_lines=tail_lines)
                ]
            except Exception as err:  # diagnostics only: never mask the failure being reported
                self.log.warning("Could not read the log of worker %s: %s", pod.metadata.name, err)
                tails[pod.metadata.name] = [f"(log unavailable: {err})"]
        return tails

    # ------------------------------------------------------------------------------- events
    def _events(self, namespace: str, field_selector: str) -> list[dict]:
        resp = self._retry(
            self.core_v1_client.list_namespaced_event,
            namespace=namespace,
            field_selector=field_selector,
            _preload_content=False,
        )
        data = resp.data
        return list(json.loads(data or b"{}").get("items") or [])

    def job_events(self, name: str, namespace: str | None = None) -> list[dict]:
        """Events of the MPIJob (involvedObject kind MPIJob), oldest first, as API dicts."""
        return sort_events(self._events(self.resolve_namespace(namespace), job_event_selector(name)))

    def pod_events(self, pod_names: str | Iterable[str | V1Pod], namespace: str | None = None) -> list[dict]:
        """Events of the given pods, merged, oldest first, as API dicts."""
        ns = self.resolve_namespace(namespace)
        if isinstance(pod_names, str):
            pod_names = [pod_names]
        events: dict[str, dict] = {}
        for pod in pod_names:
            pod_name = pod if isinstance(pod, str) else pod.metadata.name
            for event in self._events(ns, pod_event_selector(pod_name)):
                meta = event.get("metadata") or {}
                events[meta.get("uid") or f"{pod_name}/{meta.get('name')}"] = event
        return sort_events(events.values())



__all__ = ["MPIJobHook"]
