"""Asynchronous hook for triggers: the :class:`~airflow_mpi.hooks.mpijob.MPIJobHook` API on kubernetes_asyncio.

Subclasses the cncf.kubernetes ``AsyncKubernetesHook`` for the connection (lookup from the
triggerer, ``connection_extras`` shipped by the task, legacy ``extra__kubernetes__`` keys) and the
request timeouts, but loads the client configuration itself, because the stock hook ignores part
of the connection, so a trigger would reach a different cluster than the task:

* the ``config_file`` argument (the stock hook only reads the ``kube_config_path`` extra);
* ``disable_verify_ssl`` (param or extra);
* extras stored as empty strings by the UI (``"kube_config_path": ""`` is "unset", not a path);
* no explicit config: in-cluster first, then the default kubeconfig (the sync hook's order).

Inside ``async with hook:`` all calls share one API client (aiohttp session), closed on exit;
outside, each call opens its own and closes it. Watches and log reads hold their response open
while they are iterated (stop early with ``aclose()`` / ``contextlib.aclosing``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import tenacity
from kubernetes_asyncio import client as async_client, config as async_config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.client.rest import RESTResponse

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, _get_bool
from airflow.providers.common.compat.sdk import AirflowException

try:
    from airflow.providers.cncf.kubernetes.kube_client import _TimeoutAsyncK8sApiClient
except ImportError:  # pragma: no cover - older cncf.kubernetes: no default request timeout
    _TimeoutAsyncK8sApiClient = async_client.ApiClient
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
    aiter_lines,
    error_message,
    in_cluster_namespace,
    is_missing_resource_type,
    is_transient,
    job_event_selector,
    log_before_retry,
    kubeconfig_uses_dynamic_auth,
    log_query_params,
    parse_kubeconfig,
    pod_event_selector,
    pod_selectors,
    prepare_body,
    read_kubeconfig,
    sort_events,
    sort_newest_first,
    sort_workers,
    split_api_version,
    watch_field_selector,
)
from airflow_mpi.hooks.errors import MPIJobAPIUnavailable, PodLogUnavailable, WatchExpired
from airflow_mpi.models.logs import split_timestamp

if TYPE_CHECKING:
    from kubernetes_asyncio.client.models import V1Pod


_BOOL_FIELDS = frozenset({"in_cluster", "disable_verify_ssl", "disable_tcp_keepalive"})


async def _raise_for_status(resp: Any) -> None:
    """kubernetes_asyncio does not check the status of ``_preload_content=False`` responses."""
    if 200 <= resp.status <= 299:
        return
    try:
        data = await resp.read()
    finally:
        resp.release()
    raise ApiException(http_resp=RESTResponse(resp, data))


class AsyncMPIJobHook(AsyncKubernetesHook):
    """Async counterpart of :class:`~airflow_mpi.hooks.mpijob.MPIJobHook` (same connection, same requests).

    :param conn_id: Kubernetes connection id.
    :param api_version: ``kubeflow.org/v2beta1`` or ``kubeflow.org/v1``.
    :param kwargs: ``config_file``, ``cluster_context``, ``in_cluster``, ``disable_verify_ssl``,
        ``config_dict``, ``connection_extras`` (extras shipped to a trigger), ``client_configuration``.
    """

    conn_name_attr = "kubernetes_conn_id"
    default_conn_name = "kubernetes_default"
    conn_type = "kubernetes_mpijob"
    hook_name = "Kubernetes (Kubeflow MPIJob, async)"

    IN_CLUSTER_NAMESPACE_FILE = IN_CLUSTER_NAMESPACE_FILE

    api_retries: int = 5
    api_retry_wait: float = 1.0
    api_retry_wait_max: float = 15.0
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
        self._shared_client: async_client.ApiClient | None = None
        self._shared_depth = 0
        self._config_loaded = False

    @classmethod
    def from_sync(cls, hook: Any) -> AsyncMPIJobHook:
        """An async hook reaching the cluster exactly as the sync ``hook`` does (its connection extras included,
        so no second connection lookup happens from the event loop)."""
        extras = dict(hook.conn_extras) if hook.conn_id else {}
        return cls(
            conn_id=hook.conn_id,
            api_version=hook.api_version,
            connection_extras=extras,
            **hook.connection_settings(),
        )

    # ------------------------------------------------------------------------------- session
    async def __aenter__(self) -> AsyncMPIJobHook:
        """Share one API client (aiohttp session) across the calls made inside ``async with``."""
        if self._shared_depth == 0:
            await self._load_config()
            self._shared_client = _TimeoutAsyncK8sApiClient(configuration=self.client_configuration)
        self._shared_depth += 1
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self._shared_depth -= 1
        if self._shared_depth == 0:
            await self.close()

    async def close(self) -> None:
        """Close the shared API client, if any."""
        shared, self._shared_client = self._shared_client, None
        self._shared_depth = 0
        if shared is not None:
            await shared.close()

    @contextlib.asynccontextmanager
    async def get_conn(self) -> AsyncIterator[async_client.ApiClient]:
        """The shared client inside ``async with hook``, else a client of its own, closed on exit."""
        await self._load_config()  # cached, except for exec auth: refreshes short-lived tokens in place
        if self._shared_client is not None:
            yield self._shared_client
            return
        api_client = _TimeoutAsyncK8sApiClient(configuration=self.client_configuration)
        try:
            yield api_client
        finally:
            await api_client.close()

    # ------------------------------------------------------------------------------- connection
    async def _get_field(self, field_name):
        value = await super()._get_field(field_name)
        if field_name in _BOOL_FIELDS and isinstance(value, str):
            return _get_bool(value)
        return None if value == "" else value

    async def _load_config(self) -> None:
        """Load the client configuration from the same sources, in the same order, as the sync hook.

        in_cluster | config_file argument or kube_config_path extra | kube_config extra (YAML/JSON
        text or dict) | config_dict argument -- mutually exclusive; none: in-cluster when running in
        a pod, else the default kubeconfig. cluster_context selects the context, disable_verify_ssl
        turns certificate checks off. Loaded once, except for exec/auth-provider credentials
        (short-lived tokens), which are reloaded on every call.
        """
        if self.client_configuration is None:
            self.client_configuration = async_client.Configuration()
        if self._config_loaded:
            return
        cfg = self.client_configuration
        in_cluster = self._coalesce_param(self.in_cluster, await self._get_field("in_cluster"))
        cluster_context = self._coalesce_param(self.cluster_context, await self._get_field("cluster_context"))
        kubeconfig_path = self._coalesce_param(self.config_file or None, await self._get_field("kube_config_path"))
        kubeconfig = await self._get_field("kube_config")
        if sum(1 for o in (in_cluster, kubeconfig, kubeconfig_path, self.config_dict) if o) > 1:
            raise AirflowException(
                "Invalid connection configuration. Options kube_config_path (or config_file), kube_config, "
                "in_cluster and config_dict are mutually exclusive. You can only use one option at a time."
            )
        dynamic = False
        if in_cluster:
            self.log.debug("loading kube_config from: in_cluster configuration")
            async_config.load_incluster_config(client_configuration=cfg)
            self._is_in_cluster = True
        elif kubeconfig_path:
            self.log.debug("loading kube_config from: %s", kubeconfig_path)
            await async_config.load_kube_config(
                config_file=kubeconfig_path, context=cluster_context, client_configuration=cfg
            )
            data = await asyncio.to_thread(read_kubeconfig, kubeconfig_path)
            dynamic = kubeconfig_uses_dynamic_auth(data, cluster_context)
            self._is_in_cluster = False
        elif kubeconfig:
            self.log.debug("loading kube_config from: connection kube_config")
            data = kubeconfig if isinstance(kubeconfig, dict) else parse_kubeconfig(kubeconfig)
            await async_config.load_kube_config_from_dict(data, context=cluster_context, client_configuration=cfg)
            dynamic = kubeconfig_uses_dynamic_auth(data, cluster_context)
            self._is_in_cluster = False
        elif self.config_dict:
            self.log.debug("loading kube_config from: config dictionary")
            await async_config.load_kube_config_from_dict(
                self.config_dict, context=cluster_context, client_configuration=cfg
            )
            dynamic = kubeconfig_uses_dynamic_auth(self.config_dict, cluster_context)
            self._is_in_cluster = False
        else:
            try:
                async_config.load_incluster_config(client_configuration=cfg)
                self._is_in_cluster = True
            except async_config.ConfigException:
                self.log.debug("loading kube_config from: default file")
                await async_config.load_kube_config(context=cluster_context, client_configuration=cfg)
                data = await asyncio.to_thread(read_kubeconfig, async_config.KUBE_CONFIG_DEFAULT_LOCATION)
                dynamic = kubeconfig_uses_dynamic_auth(data, cluster_context)
                self._is_in_cluster = False
        if self._coalesce_param(self.disable_verify_ssl, await self._get_field("disable_verify_ssl")):
            cfg.verify_ssl = False
        self._config_loaded = not dynamic

    async def get_namespace(self) -> str:  # type: ignore[override]
        """Namespace of the connection, else of the pod this runs in, else ``default``."""
        return (
            await self._get_field("namespace")
            or in_cluster_namespace(self.IN_CLUSTER_NAMESPACE_FILE)
            or self.DEFAULT_NAMESPACE
        )

    async def resolve_namespace(self, explicit: str | None = None) -> str:
        """``explicit`` > connection namespace > in-cluster namespace file > ``default``."""
        return explicit or await self.get_namespace()

    async def _retry(self, fn, *args, **kwargs):
        retrying = tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(max(1, self.api_retries)),
            wait=tenacity.wait_exponential(multiplier=self.api_retry_wait, max=self.api_retry_wait_max),
            retry=tenacity.retry_if_exception(is_transient),
            reraise=True,
            before_sleep=log_before_retry,
        )
        return await retrying(fn, *args, **kwargs)

    def _backoff(self, attempt: int) -> float:
        return min(self.api_retry_wait_max, self.api_retry_wait * 2 ** (attempt - 1))

    async def _call(self, api_cls, method: str, **kwargs):
        """One request on a fresh session (retried as a whole on transient failures by the callers)."""
        async with self.get_conn() as api_client:
            return await getattr(api_cls(api_client), method)(**kwargs)

    async def _call_raw_json(self, api_cls, method: str, **kwargs) -> dict:
        async with self.get_conn() as api_client:
            resp = await getattr(api_cls(api_client), method)(_preload_content=False, **kwargs)
            await _raise_for_status(resp)
            try:
                return json.loads(await resp.read() or b"{}")
            finally:
                resp.release()

    # ------------------------------------------------------------------------------- MPIJobs
    async def create_mpijob(self, manifest: dict, namespace: str | None = None) -> dict:
        """Create the MPIJob, or adopt the existing one of the same task instance (see the sync hook)."""
        ns = await self.resolve_namespace(namespace or (manifest.get("metadata") or {}).get("namespace"))
        body = prepare_body(manifest, ns, self.api_version)
        group, version = split_api_version(body["apiVersion"])
        name = body["metadata"]["name"]
        attempts = max(1, self.api_retries)
        for attempt in range(1, attempts + 1):
            try:
                created = await self._call(
                    async_client.CustomObjectsApi,
                    "create_namespaced_custom_object",
                    group=group,
                    version=version,
                    namespace=ns,
                    plural=MPIJOB_PLURAL,
                    body=body,
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
            self.log.warning(
                "Create of MPIJob %s/%s failed (%s); looking it up", ns, name, describe_error(failure)
            )
            existing = await self._get(name, ns, group, version)
            if existing is not None:
                return adopt_or_raise(existing, body)
            if attempt == attempts:
                raise failure
            await asyncio.sleep(self._backoff(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _get(self, name: str, namespace: str, group: str, version: str) -> dict | None:
        try:
            return await self._retry(
                self._call,
                async_client.CustomObjectsApi,
                "get_namespaced_custom_object",
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

    async def get_mpijob(self, name: str, namespace: str | None = None) -> dict | None:
        """The MPIJob, or None when it does not exist."""
        return await self._get(name, await self.resolve_namespace(namespace), self.group, self.version)

    async def delete_mpijob(
        self,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: str | None = "Foreground",
        grace_period_seconds: int | None = None,
    ) -> bool:
        """Delete the MPIJob; False when it was already gone."""
        ns = await self.resolve_namespace(namespace)
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        try:
            await self._retry(
                self._call,
                async_client.CustomObjectsApi,
                "delete_namespaced_custom_object",
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

    async def list_mpijobs(self, namespace: str | None = None, label_selector: str | None = None) -> list[dict]:
        """MPIJobs of the namespace (optionally filtered by a label selector)."""
        ns = await self.resolve_namespace(namespace)
        kwargs: dict[str, Any] = {}
        if label_selector:
            kwargs["label_selector"] = label_selector
        try:
            result = await self._retry(
                self._call,
                async_client.CustomObjectsApi,
                "list_namespaced_custom_object",
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

    @staticmethod
    async def _open_stream(call, *args, **kwargs):
        """Send a streaming request; error statuses raise ApiException (retried when transient)."""
        resp = await call(*args, **kwargs)
        await _raise_for_status(resp)
        return resp

    async def watch_mpijob(
        self,
        name: str,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int = 60,
        allow_bookmarks: bool = False,
    ) -> AsyncIterator[tuple[str, dict]]:
        """Async iterator of ``(event_type, object)`` for one MPIJob (see the sync hook).

        :raises WatchExpired: resourceVersion too old (410 Gone): get the job and watch from its version.
        """
        ns = await self.resolve_namespace(namespace)
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
        async with self.get_conn() as api_client:
            api = async_client.CustomObjectsApi(api_client)
            try:
                resp = await self._retry(
                    self._open_stream,
                    api.list_namespaced_custom_object,
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
                async for line in aiter_lines(resp.content.iter_any()):
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

    async def wait_for_deleted(
        self, name: str, namespace: str | None = None, timeout: float = 300, *, poll_interval: float = 2.0
    ) -> bool:
        """Poll until the MPIJob is gone; False when it still exists after ``timeout`` seconds."""
        ns = await self.resolve_namespace(namespace)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if await self.get_mpijob(name, ns) is None:
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await asyncio.sleep(min(poll_interval, remaining))

    # ------------------------------------------------------------------------------- pods
    async def _role_pods(self, name: str, namespace: str | None, role: str) -> list[V1Pod]:
        ns = await self.resolve_namespace(namespace)
        for selector in pod_selectors(self.api_version, name, role):
            pods = await self._retry(
                self._call, async_client.CoreV1Api, "list_namespaced_pod", namespace=ns, label_selector=selector
            )
            if pods.items:
                return list(pods.items)
        return []

    async def launcher_pods(self, name: str, namespace: str | None = None) -> list[V1Pod]:
        """Launcher pods of the MPIJob, newest first."""
        return sort_newest_first(await self._role_pods(name, namespace, LAUNCHER))

    async def worker_pods(self, name: str, namespace: str | None = None) -> list[V1Pod]:
        """Worker pods of the MPIJob, by replica index."""
        return sort_workers(await self._role_pods(name, namespace, WORKER))

    # ------------------------------------------------------------------------------- logs
    async def read_pod_log(
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
    ) -> AsyncIterator[str]:
        """Async iterator of timestamped log lines (see the sync hook for the line contract).

        :raises PodLogUnavailable: 404 (pod gone) or 400 (container not started / no previous container).
        """
        if isinstance(pod, str):
            pod_name, ns = pod, await self.resolve_namespace(namespace)
        else:
            pod_name, ns = pod.metadata.name, await self.resolve_namespace(namespace or pod.metadata.namespace)
        query = log_query_params(
            container=container,
            since_time=since_time,
            previous=previous,
            follow=follow,
            tail_lines=tail_lines,
            limit_bytes=limit_bytes,
        )
        async with self.get_conn() as api_client:
            try:
                resp = await self._retry(
                    self._open_stream,
                    api_client.call_api,
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
                async for line in aiter_lines(resp.content.iter_any()):
                    yield line
            finally:
                resp.close()

    async def worker_log_tails(
        self, name: str, namespace: str | None = None, tail_lines: int = 50
    ) -> dict[str, list[str]]:
        """The last ``tail_lines`` log lines (timestamps stripped) of each worker's main container."""
        ns = await self.resolve_namespace(namespace)
        tails: dict[str, list[str]] = {}
        for pod in await self.worker_pods(name, ns):
            containers = (pod.spec.containers if pod.spec is not None else None) or []
            container = containers[0].name if containers else None
            try:
                tails[pod.metadata.name] = [
                    split_timestamp(line)[1]
                    async for line in self.read_pod_log(pod, ns, container=container, tail_lines=tail_lines)
                ]
            except Exception as err:  # diagnostics only: never mask the failure being reported
                self.log.warning("Could not read the log of worker %s: %s", pod.metadata.name, err)
                tails[pod.metadata.name] = [f"(log unavailable: {err})"]
        return tails

    # ------------------------------------------------------------------------------- events
    async def _events(self, namespace: str, field_selector: str) -> list[dict]:
        result = await self._retry(
            self._call_raw_json,
            async_client.CoreV1Api,
            "list_namespaced_event",
            namespace=namespace,
            field_selector=field_selector,
        )
        return list(result.get("items") or [])

    async def job_events(self, name: str, namespace: str | None = None) -> list[dict]:
        """Events of the MPIJob, oldest first, as API dicts."""
        return sort_events(await self._events(await self.resolve_namespace(namespace), job_event_selector(name)))

    async def pod_events(self, pod_names: str | Iterable[str | V1Pod], namespace: str | None = None) -> list[dict]:
        """Events of the given pods, merged, oldest first, as API dicts."""
        ns = await self.resolve_namespace(namespace)
        if isinstance(pod_names, str):
            pod_names = [pod_names]
        events: dict[str, dict] = {}
        for pod in pod_names:
            pod_name = pod if isinstance(pod, str) else pod.metadata.name
            for event in await self._events(ns, pod_event_selector(pod_name)):
                meta = event.get("metadata") or {}
                events[meta.get("uid") or f"{pod_name}/{meta.get('name')}"] = event
        return sort_events(events.values())


__all__ = ["AsyncMPIJobHook"]
