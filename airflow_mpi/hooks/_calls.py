"""What each call of MPIJobHook and AsyncMPIJobHook sends, and how it reads the answer.

The two hooks differ only in how they do I/O (kubernetes vs kubernetes_asyncio, blocking vs
awaited). Every request's arguments, the meaning of each error and response, and every decision
(retry budget, adopt or raise, when to stop polling) live here, free of I/O, so both hooks send
the same requests and behave the same way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import tenacity

from airflow_mpi.hooks.api_errors import (
    describe_error,
    error_message,
    is_api_exception,
    is_missing_resource_type,
    is_transient,
    log_before_retry,
)
from airflow_mpi.hooks.k8s_requests import (
    API_V2BETA1,
    MPIJOB_PLURAL,
    POD_LOG_PATH,
    adopt_or_raise,
    prepare_body,
    sort_events,
    split_api_version,
    watch_field_selector,
    watch_request_timeout,
)
from airflow_mpi.hooks.kubeconfig import IN_CLUSTER_NAMESPACE_FILE
from airflow_mpi.hooks.errors import MPIJobAPIUnavailable, PodLogUnavailable, WatchExpired
from airflow_mpi.wait.logs import split_timestamp

CUSTOM_OBJECTS = "CustomObjectsApi"
CORE_V1 = "CoreV1Api"


class MPIJobHookBase:
    """Class settings and helpers both hooks share (mixed in before the cncf.kubernetes hook class)."""

    conn_name_attr = "kubernetes_conn_id"
    default_conn_name = "kubernetes_default"
    conn_type = "kubernetes_mpijob"

    IN_CLUSTER_NAMESPACE_FILE = IN_CLUSTER_NAMESPACE_FILE

    #: retries of idempotent calls on transient errors (attempts in total) and their exponential backoff
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
        api_version: str = API_V2BETA1,
        **kwargs: Any,
    ) -> None:
        super().__init__(conn_id=conn_id, **kwargs)  # type: ignore[call-arg]
        self.group, self.version = split_api_version(api_version)
        self.api_version = api_version

    def _retry_policy(self) -> dict[str, Any]:
        """tenacity arguments: retry transient failures of idempotent requests."""
        return {
            "stop": tenacity.stop_after_attempt(max(1, self.api_retries)),
            "wait": tenacity.wait_exponential(multiplier=self.api_retry_wait, max=self.api_retry_wait_max),
            "retry": tenacity.retry_if_exception(is_transient),
            "reraise": True,
            "before_sleep": log_before_retry,
        }

    def _backoff(self, attempt: int) -> float:
        return min(self.api_retry_wait_max, self.api_retry_wait * 2 ** (attempt - 1))

    def _custom_object_args(self, namespace: str, **extra: Any) -> dict[str, Any]:
        return {"group": self.group, "version": self.version, "namespace": namespace, "plural": MPIJOB_PLURAL, **extra}


# --------------------------------------------------------------------------------------- one request
def _passthrough(value: Any) -> Any:
    return value


def _reraise(exc: BaseException) -> Any:
    raise exc


@dataclass(frozen=True)
class Call:
    """An idempotent request: ``<api>.<method>(**kwargs)``, retried on transient failures.

    ``on_error`` turns an ApiException into the call's answer (or raises), ``on_result`` the response.
    """

    api: str  # CUSTOM_OBJECTS | CORE_V1
    method: str
    kwargs: dict[str, Any]
    on_error: Callable[[BaseException], Any] = _reraise
    on_result: Callable[[Any], Any] = _passthrough


def _absent(value: Any) -> Callable[[BaseException], Any]:
    """Error reader: ``value`` for a 404 (the object does not exist), else raise."""

    def on_error(exc: BaseException) -> Any:
        if getattr(exc, "status", None) == 404:
            return value
        raise exc

    return on_error


def get_call(name: str, namespace: str, group: str, version: str) -> Call:
    """GET one MPIJob; None when it does not exist."""
    kwargs = {"group": group, "version": version, "namespace": namespace, "plural": MPIJOB_PLURAL, "name": name}
    return Call(CUSTOM_OBJECTS, "get_namespaced_custom_object", kwargs, on_error=_absent(None))


def delete_call(
    hook: MPIJobHookBase,
    name: str,
    namespace: str,
    propagation_policy: str | None,
    grace_period_seconds: int | None,
    log: logging.Logger,
    uid: str | None = None,
) -> Call:
    """DELETE one MPIJob; True when deleted, False when it was already gone (or, given ``uid``, is another object
    of the same name now: the API server checks the precondition and answers 409)."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if propagation_policy:
        body["propagationPolicy"] = propagation_policy
    if grace_period_seconds is not None:
        body["gracePeriodSeconds"] = grace_period_seconds
    if uid is not None:
        body["preconditions"] = {"uid": uid}

    def on_error(exc: BaseException) -> Any:
        if uid is not None and getattr(exc, "status", None) == 409:
            log.warning("Not deleting MPIJob %s/%s: it is another object now (not uid %s)", namespace, name, uid)
            return False
        return _absent(False)(exc)

    def deleted(_: Any) -> bool:
        log.info("Deleted MPIJob %s/%s (propagationPolicy=%s)", namespace, name, propagation_policy)
        return True

    kwargs = hook._custom_object_args(namespace, name=name, body=body)
    return Call(CUSTOM_OBJECTS, "delete_namespaced_custom_object", kwargs, on_error, deleted)


def list_call(hook: MPIJobHookBase, namespace: str, label_selector: str | None) -> Call:
    """LIST the MPIJobs of a namespace; a 404 means the API server does not serve MPIJobs."""
    kwargs = hook._custom_object_args(namespace, **({"label_selector": label_selector} if label_selector else {}))

    def on_error(exc: BaseException) -> Any:
        if getattr(exc, "status", None) == 404:
            raise MPIJobAPIUnavailable(hook.api_version, namespace, error_message(exc)) from exc
        raise exc

    return Call(CUSTOM_OBJECTS, "list_namespaced_custom_object", kwargs, on_error, items_of)


def items_of(result: Any) -> list:
    return list((result or {}).get("items") or [])


def pod_list_call(namespace: str, selector: str) -> Call:
    return Call(CORE_V1, "list_namespaced_pod", {"namespace": namespace, "label_selector": selector})


def events_of(data: bytes | str | None) -> list[dict]:
    """Items of an event list read as raw JSON (the generated models reject some events' fields)."""
    return items_of(json.loads(data or b"{}"))


# --------------------------------------------------------------------------------------- create
@dataclass
class CreateCall:
    """POST of an MPIJob, never replayed blindly: after a failure that may have reached the API server
    (409, transient error, broken connection) the job is looked up and adopted when it belongs to
    the same task instance; otherwise the create is retried up to the hook's retry budget."""

    hook: MPIJobHookBase
    manifest: dict
    namespace: str
    log: logging.Logger
    body: dict = field(init=False)
    group: str = field(init=False)
    version: str = field(init=False)
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.body = prepare_body(self.manifest, self.namespace, self.hook.api_version)
        self.group, self.version = split_api_version(self.body["apiVersion"])
        self.name = self.body["metadata"]["name"]

    @property
    def attempts(self) -> range:
        return range(1, max(1, self.hook.api_retries) + 1)

    @property
    def kwargs(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "version": self.version,
            "namespace": self.namespace,
            "plural": MPIJOB_PLURAL,
            "body": self.body,
        }

    def lookup(self) -> Call:
        return get_call(self.name, self.namespace, self.group, self.version)

    def created(self, obj: dict) -> dict:
        self.log.info("Created MPIJob %s/%s (%s)", self.namespace, self.name, self.body["apiVersion"])
        return obj

    def failed(self, exc: BaseException) -> BaseException:
        """The failure to look the job up after; raises what no lookup can mend."""
        if is_api_exception(exc):
            if exc.status == 404 and is_missing_resource_type(exc):  # type: ignore[attr-defined]
                raise MPIJobAPIUnavailable(self.body["apiVersion"], self.namespace, error_message(exc)) from exc
            if exc.status != 409 and not is_transient(exc):  # type: ignore[attr-defined]
                raise exc
        # 409: it exists. Otherwise the request may or may not have been applied. Look before creating again.
        self.log.warning(
            "Create of MPIJob %s/%s failed (%s); looking it up", self.namespace, self.name, describe_error(exc)
        )
        return exc

    def after_lookup(self, existing: dict | None, attempt: int, failure: BaseException) -> dict | None:
        """The adopted job; None: wait ``hook._backoff(attempt)`` and create again. Raises when out of attempts."""
        if existing is not None:
            return adopt_or_raise(existing, self.body)
        if attempt == self.attempts[-1]:
            raise failure
        return None


# --------------------------------------------------------------------------------------- watch
def watch_kwargs(
    hook: MPIJobHookBase,
    name: str,
    namespace: str,
    resource_version: str | None,
    timeout_seconds: int,
    allow_bookmarks: bool,
) -> dict[str, Any]:
    extra: dict[str, Any] = {
        "field_selector": watch_field_selector(name),
        "watch": True,
        "timeout_seconds": timeout_seconds,
        "_request_timeout": watch_request_timeout(timeout_seconds),
        "_preload_content": False,
    }
    if resource_version:
        extra["resource_version"] = resource_version
    if allow_bookmarks:
        extra["allow_watch_bookmarks"] = True
    return hook._custom_object_args(namespace, **extra)


@dataclass
class WatchDecoder:
    """Reads the lines of a watch of one MPIJob; remembers the last resourceVersion seen."""

    name: str
    namespace: str
    last_rv: str | None
    allow_bookmarks: bool
    api_exception: type[Exception]  # the client library's ApiException (sync or async)
    api_version: str = API_V2BETA1

    def raise_open_error(self, exc: BaseException) -> Any:
        """The watch request failed: 410 Gone -> WatchExpired, CRD not served -> MPIJobAPIUnavailable."""
        status = getattr(exc, "status", None)
        if status == 410:
            raise WatchExpired(self.name, self.namespace, self.last_rv, error_message(exc)) from exc
        if status == 404 and is_missing_resource_type(exc):
            raise MPIJobAPIUnavailable(self.api_version, self.namespace, error_message(exc)) from exc
        raise exc

    def decode(self, line: str) -> tuple[str, dict] | None:
        """``(event_type, object)`` to yield, or None (blank line, unrequested bookmark)."""
        if not line.strip():
            return None
        event = json.loads(line)
        event_type = event.get("type")
        obj = event.get("object") or {}
        if event_type == "ERROR":
            if obj.get("code") == 410:
                raise WatchExpired(self.name, self.namespace, self.last_rv, obj.get("message", ""))
            raise self.api_exception(status=obj.get("code"), reason=f"{obj.get('reason')}: {obj.get('message')}")
        self.last_rv = (obj.get("metadata") or {}).get("resourceVersion") or self.last_rv
        if event_type == "BOOKMARK" and not self.allow_bookmarks:
            return None
        return event_type, obj


# --------------------------------------------------------------------------------------- polling
class Deadline:
    """``timeout`` seconds from now on ``clock``; :meth:`next_wait` says how long to sleep, None when over."""

    def __init__(self, timeout: float, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._end = clock() + timeout

    def next_wait(self, poll_interval: float) -> float | None:
        remaining = self._end - self._clock()
        return None if remaining <= 0 else min(poll_interval, remaining)


# --------------------------------------------------------------------------------------- logs
def pod_ref(pod: Any, namespace: str | None) -> tuple[str, str | None]:
    """``(pod name, namespace to resolve)`` of a pod name or V1Pod (its own namespace unless one is given)."""
    if isinstance(pod, str):
        return pod, namespace
    return pod.metadata.name, namespace or pod.metadata.namespace


@dataclass(frozen=True)
class LogRequest:
    """``GET /api/v1/namespaces/{ns}/pods/{name}/log`` (timestamped lines) through ``ApiClient.call_api``."""

    pod: str
    namespace: str
    container: str | None
    query: list[tuple[str, str]]
    request_timeout: float | tuple[float, float]

    @classmethod
    def of(
        cls,
        hook: MPIJobHookBase,
        pod: str,
        namespace: str,
        container: str | None,
        query: list[tuple[str, str]],
        request_timeout: float | tuple[float, float] | None,
    ) -> LogRequest:
        """The request with the hook's default read timeout unless one is given."""
        timeout = request_timeout if request_timeout is not None else hook.log_request_timeout
        return cls(pod, namespace, container, query, timeout)

    @property
    def args(self) -> tuple[str, str]:
        return (POD_LOG_PATH, "GET")

    @property
    def kwargs(self) -> dict[str, Any]:
        return {
            "path_params": {"namespace": self.namespace, "name": self.pod},
            "query_params": self.query,
            "header_params": {"Accept": "*/*"},
            "response_types_map": {200: "str"},
            "auth_settings": ["BearerToken"],
            "_return_http_data_only": True,
            "_preload_content": False,
            "_request_timeout": self.request_timeout,
        }

    def raise_error(self, exc: BaseException) -> Any:
        """400 (container not started / no previous container), 404 (pod gone) -> PodLogUnavailable."""
        status = getattr(exc, "status", None)
        if status in (400, 404):
            raise PodLogUnavailable(self.pod, self.namespace, self.container, status, error_message(exc)) from exc
        raise exc


def main_container(pod: Any) -> str | None:
    """Name of the pod's first (main) container."""
    containers = (pod.spec.containers if pod.spec is not None else None) or []
    return containers[0].name if containers else None


def log_messages(lines: Iterable[str]) -> list[str]:
    """Log lines without their timestamps."""
    return [split_timestamp(line)[1] for line in lines]


def log_unavailable(pod: Any, err: BaseException, log: logging.Logger) -> list[str]:
    """The one line standing for a worker log that could not be read (diagnostics never mask the failure)."""
    log.warning("Could not read the log of worker %s: %s", pod.metadata.name, err)
    return [f"(log unavailable: {err})"]


# --------------------------------------------------------------------------------------- events
def pod_names_of(pods: str | Iterable[Any]) -> list[str]:
    """Pod names of one name, names, or V1Pods."""
    if isinstance(pods, str):
        return [pods]
    return [pod if isinstance(pod, str) else pod.metadata.name for pod in pods]


def merge_pod_events(events_by_pod: Iterable[tuple[str, list[dict]]]) -> list[dict]:
    """Events of several pods, each once (by uid), oldest first."""
    events: dict[str, dict] = {}
    for pod_name, pod_events in events_by_pod:
        for event in pod_events:
            meta = event.get("metadata") or {}
            events[meta.get("uid") or f"{pod_name}/{meta.get('name')}"] = event
    return sort_events(events.values())
