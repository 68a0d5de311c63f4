"""Asynchronous hook of the waits (triggers; the sync operator and sensor in ``asyncio.run``), on kubernetes_asyncio.

It subclasses the cncf.kubernetes ``AsyncKubernetesHook`` for the connection and the request timeouts, but loads the
client configuration itself (hooks/kubeconfig.py): the stock hook ignores the ``config_file`` argument,
``disable_verify_ssl`` and extras the UI stores as empty strings, and does not try in-cluster first, so a trigger
would reach another cluster than the task. Inside ``async with hook:`` all calls share one API client
(hooks/client_pool.py); a stream holds its response while it is iterated (stop early with ``aclose()``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import tenacity
from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, _get_bool
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.client.rest import RESTResponse

try:
    from airflow.providers.cncf.kubernetes.kube_client import _TimeoutAsyncK8sApiClient
except ImportError:  # pragma: no cover - older cncf.kubernetes: no default request timeout
    _TimeoutAsyncK8sApiClient = async_client.ApiClient  # type: ignore[misc,assignment]
from airflow_mpi.hooks import client_pool
from airflow_mpi.hooks.answers import MAX_LOG_LINE_BYTES, aiter_lines, merge_pod_events, sort_events
from airflow_mpi.hooks.base import MPIJobHookBase
from airflow_mpi.hooks.kubeconfig import in_cluster_namespace, load_client_config
from airflow_mpi.hooks.requests import (
    Call,
    LogRequest,
    Plan,
    Steps,
    items_of,
    pod_event_selector,
)
from airflow_mpi.jobspec.vocabulary import LAUNCHER

if TYPE_CHECKING:
    from kubernetes_asyncio.client.models import V1Pod

    from airflow_mpi.hooks.mpijob import MPIJobHook


_BOOL_FIELDS = frozenset({"in_cluster", "disable_verify_ssl", "disable_tcp_keepalive"})


async def _raise_for_status(resp: Any) -> None:
    """kubernetes_asyncio does not check the status of ``_preload_content=False`` responses."""
    if 200 <= resp.status <= 299:
        return
    try:
        data = await resp.read()
    finally:
        resp.release()
    raise ApiException(http_resp=RESTResponse(resp, data))  # type: ignore[arg-type]  # as its own client does


class AsyncMPIJobHook(MPIJobHookBase, AsyncKubernetesHook):
    """Async counterpart of :class:`~airflow_mpi.hooks.mpijob.MPIJobHook` (same connection, same requests);
    ``kwargs`` as the stock hook's, ``connection_extras`` being the extras shipped to a trigger."""

    hook_name = "Kubernetes (Kubeflow MPIJob, async)"

    # per instance once set: the client shared inside ``async with``, its nesting depth, config cached
    _shared_client: async_client.ApiClient | None = None
    _shared_depth: int = 0
    _pool_key: tuple | None = None
    _config_loaded: bool = False

    @classmethod
    def from_sync(cls, hook: MPIJobHook) -> AsyncMPIJobHook:
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
        if self._shared_depth == 0:
            await self._load_client_config()
            self._pool_key = (
                client_pool.identity(self) if self._config_loaded else None
            )  # static credentials only
            factory = partial(_TimeoutAsyncK8sApiClient, configuration=self.client_configuration)
            self._shared_client = (
                client_pool.acquire(self._pool_key, factory) if self._pool_key else factory()
            )
        self._shared_depth += 1
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self._shared_depth -= 1
        if self._shared_depth == 0:
            shared, self._shared_client = self._shared_client, None
            shared = cast(Any, shared)  # set while a block shares it
            await (client_pool.release(self._pool_key, shared) if self._pool_key else shared.close())

    @contextlib.asynccontextmanager
    async def get_conn(self) -> AsyncIterator[async_client.ApiClient]:
        """The shared client inside ``async with hook``, else a client of its own, closed on exit."""
        await self._load_client_config()  # cached but for exec auth: refreshes short-lived tokens in place
        if self._shared_client is not None:
            yield self._shared_client
            return
        api_client = _TimeoutAsyncK8sApiClient(configuration=self.client_configuration)
        try:
            yield api_client
        finally:
            await api_client.close()

    # ------------------------------------------------------------------------------- connection
    async def _connection_field(self, field_name: str) -> Any:
        """A connection extra as the sync hook reads it: a boolean from its text, an empty string (what the UI
        stores for a field left blank) as not set."""
        value = await self._get_field(field_name)
        if field_name in _BOOL_FIELDS and isinstance(value, str):
            return _get_bool(value)
        return None if value == "" else value

    # the sync hook's sources in its order; cached but for short-lived tokens (not the stock _load_config)
    _load_client_config = load_client_config

    async def get_namespace(self) -> str:  # type: ignore[override]
        namespace = await self._connection_field("namespace")
        return namespace or in_cluster_namespace(self.IN_CLUSTER_NAMESPACE_FILE) or self.DEFAULT_NAMESPACE

    async def resolve_namespace(self, explicit: str | None = None) -> str:
        return explicit or await self.get_namespace()

    # ------------------------------------------------------------------------------- requests
    async def _retry(self, fn, *args, **kwargs):
        return await tenacity.AsyncRetrying(**self._retrying())(fn, *args, **kwargs)

    async def _call(self, api_cls, method: str, **kwargs):
        async with self.get_conn() as api_client:
            return await getattr(api_cls(api_client), method)(**kwargs)

    @staticmethod
    async def read_json(resp: Any) -> dict:
        """The JSON body of a raw (``_preload_content=False``) response, released; an error status raises."""
        await _raise_for_status(resp)
        try:
            return json.loads(await resp.read() or b"{}")
        finally:
            resp.release()

    async def _call_raw_json(self, api_cls, method: str, **kwargs) -> dict:
        async with self.get_conn() as api_client:
            return await self.read_json(
                await getattr(api_cls(api_client), method)(_preload_content=False, **kwargs)
            )

    async def _send(self, call: Call) -> Any:
        try:
            return call.on_result(
                await self._retry(self._call, getattr(async_client, call.api), call.method, **call.kwargs)
            )
        except ApiException as e:
            return call.on_error(e)

    async def _run(self, namespace: str | None, plan: Callable[[str], Steps | Call]) -> Any:
        steps = Plan(plan(await self.resolve_namespace(namespace)))
        while not steps.done:
            steps.answer(await self._send(steps.request))
        return steps.result

    async def open_stream(self, request: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        """The response of a streaming request (``_preload_content=False``), sent again on transient failures; an
        error status raises ApiException. The caller reads and closes it."""

        async def opened() -> Any:
            resp = await request(*args, **kwargs)
            await _raise_for_status(resp)
            return resp

        return await self._retry(opened)

    # ------------------------------------------------------------------------------- pods
    async def launcher_pods(self, name: str, namespace: str | None = None) -> list[V1Pod]:
        return await self._role_pods(name, namespace, LAUNCHER)

    async def read_pod_log(
        self,
        pod: str,
        namespace: str | None = None,
        *,
        request_timeout: float | tuple[float, float] | None = None,
        **query: Any,
    ) -> AsyncGenerator[str, None]:
        """The container's log lines, each prefixed with its RFC 3339 timestamp; ``query``: the fields of
        hooks/requests.py ``LogRequest``. A broken stream raises and its unfinished line is dropped (a clean end
        yields it): reconnect with ``since_time``. A line over ``MAX_LOG_LINE_BYTES`` comes in marked pieces
        (hooks/answers.py). Sent on the first ``__anext__()``."""
        timeout = self.log_request_timeout if request_timeout is None else request_timeout
        req = LogRequest(pod, await self.resolve_namespace(namespace), timeout, **query)
        async with self.get_conn() as api_client:
            try:
                resp = await self.open_stream(api_client.call_api, *req.args, **req.kwargs)
            except ApiException as e:
                req.raise_error(e)
            try:
                async for line in aiter_lines(resp.content.iter_any(), MAX_LOG_LINE_BYTES):
                    yield line
            finally:
                resp.close()

    # ------------------------------------------------------------------------------- the watch hub's requests
    def watch_identity(self) -> tuple:
        """Equal for hooks that reach the same cluster as the same user: their waits share one watch hub."""
        return client_pool.identity(self)

    async def list_objects(self, kind: str, namespace: str, **selectors: Any) -> tuple[list, str | None]:
        """All objects of ``kind`` in the namespace, as the watch hub keeps them, and the list's
        resourceVersion (wait/namespace_watch.py: the kinds and how they are cut down)."""
        from airflow_mpi.wait import namespace_watch  # what the hub keeps of an object is the wait's

        return await namespace_watch.list_objects(self, kind, namespace, **selectors)

    def watch_objects(
        self, kind: str, namespace: str, **options: Any
    ) -> AsyncIterator[tuple[str, Any, str | None]]:
        """``(event_type, object, resourceVersion)`` of a watch of ``kind`` in the namespace
        (wait/namespace_watch.py)."""
        from airflow_mpi.wait import namespace_watch

        return namespace_watch.watch_objects(self, kind, namespace, **options)

    # ------------------------------------------------------------------------------- events
    async def _events(self, namespace: str, field_selector: str) -> list[dict]:
        """Events read as raw JSON: the generated models reject some events' fields."""
        result = await self._retry(
            self._call_raw_json,
            async_client.CoreV1Api,
            "list_namespaced_event",
            namespace=namespace,
            field_selector=field_selector,
        )
        return items_of(result)

    async def job_events(self, name: str, namespace: str | None = None) -> list[dict]:
        """Events of the MPIJob, oldest first, as API dicts (as are :meth:`pod_events`', merged)."""
        return sort_events(
            await self._events(
                await self.resolve_namespace(namespace),
                self.job_kind.event_selector(name),
            )
        )

    async def pod_events(self, pod_names: Iterable[str], namespace: str | None = None) -> list[dict]:
        ns = await self.resolve_namespace(namespace)
        return merge_pod_events([(pod, await self._events(ns, pod_event_selector(pod))) for pod in pod_names])
