"""List and watch all MPIJobs (the hook's kind's: by its plural), MPIJob pods, MPIJob events or Kueue Workloads of a
namespace: the requests behind the watch hub, sent by :class:`~airflow_mpi.hooks.async_mpijob.AsyncMPIJobHook`'s
``list_objects`` and ``watch_objects``.

What comes back is what the hub keeps, hundreds of each per triggerer, so it is cut to what its readers read:
MPIJobs to their metadata and status (``summaries.slim_mpijob``, dicts as the hooks return them), pods to the
fields ``pod_summary`` reads (``summaries.slim_pod``, as ``V1Pod``), Workloads to what wait/queueing.py reads
(``summaries.slim_workload``); events stay dicts. Watches always ask for
bookmarks, so a renewal resumes from the latest version even when nothing of ours changed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, cast

from kubernetes_asyncio import client as async_client
from kubernetes_asyncio.client.exceptions import ApiException

from airflow_mpi.hooks.answers import WatchDecoder, aiter_lines
from airflow_mpi.hooks.requests import (
    EVENTS,
    KUEUE_GROUP,
    KUEUE_VERSIONS,
    PODS,
    WORKLOADS,
    watch_request_timeout,
)
from airflow_mpi.wait.summaries import slim_mpijob, slim_pod, slim_workload

if TYPE_CHECKING:
    from airflow_mpi.hooks.async_mpijob import AsyncMPIJobHook


class _Body:
    """What ``ApiClient.deserialize`` reads: JSON text in ``data``."""

    def __init__(self, data: str) -> None:
        self.data = data


def _request(
    hook: AsyncMPIJobHook,
    api_client: Any,
    kind: str,
    namespace: str,
    version: str | None = None,
    **kwargs: Any,
) -> tuple[Any, dict]:
    jobs = hook.job_kind.plural  # the hook's jobs
    if kind == jobs:
        api = async_client.CustomObjectsApi(api_client)
        return api.list_namespaced_custom_object, hook.custom_object_args(namespace, **kwargs)
    if kind == WORKLOADS:
        return async_client.CustomObjectsApi(api_client).list_namespaced_custom_object, {
            "group": KUEUE_GROUP,
            "version": version or KUEUE_VERSIONS[0],
            "namespace": namespace,
            "plural": WORKLOADS,
            **kwargs,
        }
    if kind == PODS:
        return async_client.CoreV1Api(api_client).list_namespaced_pod, {"namespace": namespace, **kwargs}
    if kind == EVENTS:
        return async_client.CoreV1Api(api_client).list_namespaced_event, {"namespace": namespace, **kwargs}
    raise ValueError(f"kind={kind!r}: expected {jobs!r}, {PODS!r}, {EVENTS!r} or {WORKLOADS!r}")


def _selectors(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    return {
        key: value
        for key, value in (("label_selector", label_selector), ("field_selector", field_selector))
        if value
    }


def _model(api_client: Any, kind: str, obj: dict, jobs: str) -> Any:
    if kind == PODS:
        return api_client.deserialize(_Body(json.dumps(slim_pod(obj))), "V1Pod")
    if kind == jobs:
        return slim_mpijob(obj)
    return slim_workload(obj) if kind == WORKLOADS else obj


async def list_objects(
    hook: AsyncMPIJobHook,
    kind: str,
    namespace: str,
    label_selector: str | None = None,
    field_selector: str | None = None,
    version: str | None = None,
) -> tuple[list, str]:
    async with hook.get_conn() as api_client:
        method, kwargs = _request(
            hook, api_client, kind, namespace, version, **_selectors(label_selector, field_selector)
        )
        data = await hook.read_json(await hook.open_stream(method, _preload_content=False, **kwargs))
        jobs = hook.job_kind.plural
        items = [_model(api_client, kind, obj, jobs) for obj in data.get("items") or []]
        return items, cast(str, (data.get("metadata") or {}).get("resourceVersion"))  # a list answer has one


async def watch_objects(
    hook: AsyncMPIJobHook,
    kind: str,
    namespace: str,
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
    resource_version: str | None = None,
    timeout_seconds: int = 290,
    version: str | None = None,
) -> AsyncIterator[tuple[str, Any, str | None]]:
    """``(event_type, object, resourceVersion)`` of a watch of the namespace; a BOOKMARK has no object, nor has
    the first item, ``OPEN``: the API server accepted the watch. 410 Gone raises WatchExpired (list again)."""
    extra: dict[str, Any] = {
        "watch": True,
        "allow_watch_bookmarks": True,
        "timeout_seconds": timeout_seconds,
        "_request_timeout": watch_request_timeout(timeout_seconds),
        "_preload_content": False,
        **_selectors(label_selector, field_selector),
    }
    if resource_version:
        extra["resource_version"] = resource_version
    decoder = WatchDecoder(f"({kind})", namespace, resource_version, True, ApiException, hook.api_version)
    async with hook.get_conn() as api_client:
        method, kwargs = _request(hook, api_client, kind, namespace, version, **extra)
        try:
            resp = await hook.open_stream(method, **kwargs)
        except ApiException as e:
            decoder.raise_open_error(e)
        try:
            yield "OPEN", None, resource_version
            async for line in aiter_lines(resp.content.iter_any()):
                if (event := decoder.decode(line)) is None:
                    continue
                event_type, obj = event
                yield (
                    event_type,
                    None if event_type == "BOOKMARK" else _model(api_client, kind, obj, hook.job_kind.plural),
                    decoder.last_rv,
                )
        finally:
            resp.close()
