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
from functools import partial
from typing import TYPE_CHECKING, Any

import tenacity
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.client.rest import RESTResponse

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, _get_bool

try:
    from airflow.providers.cncf.kubernetes.kube_client import _TimeoutAsyncK8sApiClient
except ImportError:  # pragma: no cover - older cncf.kubernetes: no default request timeout
    _TimeoutAsyncK8sApiClient = async_client.ApiClient
from airflow_mpi.hooks import _calls as calls, client_pool, live_delete
from airflow_mpi.hooks.async_client_config import load_client_config
from airflow_mpi.hooks.api_errors import CONNECTION_ERRORS
from airflow_mpi.hooks.k8s_requests import (
    LAUNCHER,
    WORKER,
    aiter_lines,
    job_event_selector,
    log_query_params,
    pod_event_selector,
    pod_selectors,
    sort_events,
    sort_newest_first,
    sort_workers,
)
from airflow_mpi.hooks.kubeconfig import in_cluster_namespace

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


class AsyncMPIJobHook(calls.MPIJobHookBase, AsyncKubernetesHook):
    """Async counterpart of :class:`~airflow_mpi.hooks.mpijob.MPIJobHook` (same connection, same requests).

    :param conn_id: Kubernetes connection id.
    :param api_version: ``kubeflow.org/v2beta1`` or ``kubeflow.org/v1``.
    :param kwargs: ``config_file``, ``cluster_context``, ``in_cluster``, ``disable_verify_ssl``,
        ``config_dict``, ``connection_extras`` (extras shipped to a trigger), ``client_configuration``.
    """

    hook_name = "Kubernetes (Kubeflow MPIJob, async)"

    # per instance once set: the client shared inside ``async with``, its nesting depth, config cached
    _shared_client: async_client.ApiClient | None = None
    _shared_depth: int = 0
    _pool_key: tuple | None = None
    _config_loaded: bool = False

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
        """Share one API client (aiohttp session) across the calls made inside ``async with``: the client of
        every hook of this event loop reaching the cluster as the same user (wait/client_pool.py)."""
        if self._shared_depth == 0:
            await self._load_config()
            self._pool_key = client_pool.identity(self) if self._config_loaded else None  # static credentials only
            factory = partial(_TimeoutAsyncK8sApiClient, configuration=self.client_configuration)
            self._shared_client = client_pool.acquire(self._pool_key, factory) if self._pool_key else factory()
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
        if shared is not None and self._pool_key is not None:
            await client_pool.release(self._pool_key, shared)
        elif shared is not None:
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
        """The client configuration, from the sync hook's sources in its order (hooks/async_client_config.py);
        loaded once, except for exec/auth-provider credentials (short-lived tokens): reloaded on every call."""
        await load_client_config(self)

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
        """Await ``fn`` retrying transient failures (idempotent requests only)."""
        return await tenacity.AsyncRetrying(**self._retry_policy())(fn, *args, **kwargs)

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

    async def _send(self, call: calls.Call) -> Any:
        """Send an idempotent request (retried on transient failures) and read its answer."""
        try:
            result = await self._retry(self._call, getattr(async_client, call.api), call.method, **call.kwargs)
        except ApiException as e:
            return call.on_error(e)
        return call.on_result(result)

    # ------------------------------------------------------------------------------- MPIJobs
    async def create_mpijob(self, manifest: dict, namespace: str | None = None) -> dict:
        """Create the MPIJob, or adopt the existing one of the same task instance (see the sync hook)."""
        ns = await self.resolve_namespace(namespace or (manifest.get("metadata") or {}).get("namespace"))
        create = calls.CreateCall(self, manifest, ns, self.log)
        for attempt in create.attempts:
            try:
                return create.created(
                    await self._call(async_client.CustomObjectsApi, "create_namespaced_custom_object", **create.kwargs)
                )
            except (ApiException, *CONNECTION_ERRORS) as e:
                failure = create.failed(e)
            if (adopted := create.after_lookup(await self._send(create.lookup()), attempt, failure)) is not None:
                return adopted
            await asyncio.sleep(self._backoff(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    async def get_mpijob(self, name: str, namespace: str | None = None) -> dict | None:
        """The MPIJob, or None when it does not exist."""
        ns = await self.resolve_namespace(namespace)
        return await self._send(calls.get_call(name, ns, self.group, self.version))

    async def delete_mpijob(
        self,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: str | None = "Foreground",
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> bool:
        """Delete the MPIJob; False when it was already gone."""
        ns = await self.resolve_namespace(namespace)
        return await self._send(calls.delete_call(self, name, ns, propagation_policy, grace_period_seconds, self.log, uid))

    async def list_mpijobs(self, namespace: str | None = None, label_selector: str | None = None) -> list[dict]:
        """MPIJobs of the namespace (optionally filtered by a label selector)."""
        return await self._send(calls.list_call(self, await self.resolve_namespace(namespace), label_selector))

    async def delete_live_mpijob(self, name: str, namespace: str | None = None, *, uid: str | None = None) -> str:
        """Delete the MPIJob only while it is live (see the sync hook); returns the outcome."""
        ns = await self.resolve_namespace(namespace)
        outcome = live_delete.CHANGED
        for _ in range(live_delete.ROUNDS):
            obj = await self.get_mpijob(name, ns)
            if (outcome := live_delete.keep_reason(obj, uid)) is None:
                outcome = await self._send(live_delete.live_delete_call(self, obj, self.log))
            if outcome != live_delete.CHANGED:
                break
        return outcome

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
        kwargs = calls.watch_kwargs(self, name, ns, resource_version, timeout_seconds, allow_bookmarks)
        watch = calls.WatchDecoder(name, ns, resource_version, allow_bookmarks, ApiException, self.api_version)
        async with self.get_conn() as api_client:
            api = async_client.CustomObjectsApi(api_client)
            try:
                resp = await self._retry(self._open_stream, api.list_namespaced_custom_object, **kwargs)
            except ApiException as e:
                watch.raise_open_error(e)
            try:
                async for line in aiter_lines(resp.content.iter_any()):
                    if (event := watch.decode(line)) is not None:
                        yield event
            finally:
                resp.close()

    async def wait_for_deleted(
        self, name: str, namespace: str | None = None, timeout: float = 300, *, poll_interval: float = 2.0
    ) -> bool:
        """Poll until the MPIJob is gone; False when it still exists after ``timeout`` seconds."""
        ns = await self.resolve_namespace(namespace)
        deadline = calls.Deadline(timeout, asyncio.get_running_loop().time)
        while await self.get_mpijob(name, ns) is not None:
            if (wait := deadline.next_wait(poll_interval)) is None:
                return False
            await asyncio.sleep(wait)
        return True

    # ------------------------------------------------------------------------------- pods
    async def _role_pods(self, name: str, namespace: str | None, role: str) -> list[V1Pod]:
        ns = await self.resolve_namespace(namespace)
        for selector in pod_selectors(self.api_version, name, role):
            if pods := (await self._send(calls.pod_list_call(ns, selector))).items:
                return list(pods)
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
        pod_name, ns = calls.pod_ref(pod, namespace)
        ns = await self.resolve_namespace(ns)
        query = log_query_params(container, since_time, previous, follow, tail_lines, limit_bytes)
        req = calls.LogRequest.of(self, pod_name, ns, container, query, request_timeout)
        async with self.get_conn() as api_client:
            try:
                resp = await self._retry(self._open_stream, api_client.call_api, *req.args, **req.kwargs)
            except ApiException as e:
                req.raise_error(e)
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
            try:
                lines = self.read_pod_log(pod, ns, container=calls.main_container(pod), tail_lines=tail_lines)
                tails[pod.metadata.name] = calls.log_messages([line async for line in lines])
            except Exception as err:  # diagnostics only: never mask the failure being reported
                tails[pod.metadata.name] = calls.log_unavailable(pod, err, self.log)
        return tails

    # ------------------------------------------------------------------------------- events
    async def _events(self, namespace: str, field_selector: str) -> list[dict]:
        kwargs = {"namespace": namespace, "field_selector": field_selector}
        result = await self._retry(self._call_raw_json, async_client.CoreV1Api, "list_namespaced_event", **kwargs)
        return calls.items_of(result)

    async def job_events(self, name: str, namespace: str | None = None) -> list[dict]:
        """Events of the MPIJob, oldest first, as API dicts."""
        return sort_events(await self._events(await self.resolve_namespace(namespace), job_event_selector(name)))

    async def pod_events(self, pod_names: str | Iterable[str | V1Pod], namespace: str | None = None) -> list[dict]:
        """Events of the given pods, merged, oldest first, as API dicts."""
        ns = await self.resolve_namespace(namespace)
        return calls.merge_pod_events([(p, await self._events(ns, pod_event_selector(p))) for p in calls.pod_names_of(pod_names)])


__all__ = ["AsyncMPIJobHook"]
