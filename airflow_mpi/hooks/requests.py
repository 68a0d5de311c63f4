"""What each request of the hooks sends, and what its answer means, free of I/O: the two hooks differ only in how
they do I/O (blocking or awaited), so both send the same requests and behave the same way.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_mpi.hooks.errors import (
    MPIJobAPIUnavailable,
    MPIJobConflictError,
    PodLogUnavailable,
    describe_error,
    error_message,
    is_api_exception,
    is_missing_resource_type,
    is_transient,
)
from airflow_mpi.jobspec.kinds import DEFAULT_KIND, JobKind, kind_for, kind_or_default
from airflow_mpi.jobspec.naming import TRY_NUMBER_LABEL, same_task
from airflow_mpi.jobspec.vocabulary import API_GROUP

log = logging.getLogger(__name__)

# what the watch hub lists and watches per namespace besides its jobs, which go by their kind's plural
# (wait/watch_hub.py, wait/namespace_watch.py)
PODS, EVENTS = "pods", "events"
# Kueue's Workloads (one per queued job), watched only where a job carries Kueue's queue label; v1beta2 is served
# from Kueue v0.15, v1beta1 by the releases before it
WORKLOADS, KUEUE_GROUP, KUEUE_VERSIONS = "workloads", "kueue.x-k8s.io", ("v1beta2", "v1beta1")
CUSTOM_OBJECTS, CORE_V1 = "CustomObjectsApi", "CoreV1Api"  # the client API classes a request goes to

#: how long a watch may stay silent beyond the server's own end of it (``timeout_seconds``) before the client gives up
WATCH_CLIENT_GRACE = 15.0
WATCH_CONNECT_TIMEOUT = 30.0


# --------------------------------------------------------------------------------------- shapes
def split_api_version(api_version: str) -> tuple[str, str]:
    """``"<group>/<version>"`` -> ``(group, version)``: a registered kind's group and version, else
    any version of the kubeflow.org group (it serves the MPIJobs of both built-in kinds)."""
    if (kind := kind_for(api_version)) is not None:
        return kind.group, kind.version
    group, sep, version = (api_version or "").partition("/")
    if not sep or not version or group != API_GROUP:
        raise ValueError(
            f"api_version={api_version!r}: expected '{API_GROUP}/<version>' (e.g. {DEFAULT_KIND.api_version!r})"
        )
    return group, version


def prepare_body(manifest: dict, namespace: str, api_version: str) -> dict:
    """A copy of ``manifest`` ready to POST: apiVersion/kind filled in, metadata.namespace = namespace."""
    if not isinstance(manifest, dict):
        raise TypeError(f"manifest must be a dict, got {type(manifest).__name__}")
    body = copy.deepcopy(manifest)
    body.setdefault("apiVersion", api_version)
    body.setdefault("kind", kind_or_default(body["apiVersion"]).kind)
    split_api_version(body["apiVersion"])
    metadata = body.setdefault("metadata", {})
    if not metadata.get("name"):
        raise ValueError(
            "manifest metadata.name is required (generateName is not supported: jobs must be re-findable)"
        )
    metadata["namespace"] = namespace
    return body


def adopt_or_raise(existing: dict, desired: dict) -> dict:
    meta, desired_meta = existing.get("metadata") or {}, desired.get("metadata") or {}
    name = desired_meta.get("name") or meta.get("name")
    namespace = desired_meta.get("namespace") or meta.get("namespace")
    if not same_task(meta, desired_meta):
        raise MPIJobConflictError(
            name,
            namespace,
            meta.get("labels"),
            desired_meta.get("labels"),
            meta.get("annotations"),
            desired_meta.get("annotations"),
        )
    kind = kind_or_default(existing.get("apiVersion")).kind
    log.info(
        "%s %s/%s already exists and belongs to this task instance (try %s); adopting it",
        kind,
        namespace,
        name,
        (meta.get("labels") or {}).get(TRY_NUMBER_LABEL, "?"),
    )
    if meta.get("deletionTimestamp"):
        log.warning("The adopted %s %s/%s is being deleted (deletionTimestamp set)", kind, namespace, name)
    return existing


def pod_selectors(api_version: str, name: str, role: str) -> list[str]:
    """Label selectors of the ``role`` pods of a job, in the order to try them (the next only when the one before
    finds nothing): its kind's (kinds/ PodLabels; v1 also tries the labels of training-operator <= 1.4)."""
    split_api_version(api_version)
    return kind_or_default(api_version).pod_labels.selectors(name, role)


def pod_event_selector(pod: str) -> str:
    return f"involvedObject.kind=Pod,involvedObject.name={pod}"


def watch_request_timeout(timeout_seconds: int) -> tuple[float, float]:
    """``_request_timeout`` of a watch: ``(connect, read-idle)``, the idle limit past the server's timeout.
    cncf.kubernetes' API clients default every request to 60 s in all unless the call passes ``timeout_seconds``
    as an argument of ``call_api``; the generated list methods pass it as a query parameter instead, so without
    this each longer watch was cut at 60 s by a client TimeoutError (a warning and a resumption every minute)."""
    return (WATCH_CONNECT_TIMEOUT, timeout_seconds + WATCH_CLIENT_GRACE)


# --------------------------------------------------------------------------------------- requests and plans
def _passthrough(value: Any) -> Any:
    return value


def _reraise(exc: BaseException) -> Any:
    raise exc


@dataclass(frozen=True)
class Call:
    """An idempotent request: ``<api>.<method>(**kwargs)``, retried on transient failures; ``on_error`` turns an
    ApiException into the call's answer (or raises), ``on_result`` the response."""

    api: str  # CUSTOM_OBJECTS | CORE_V1
    method: str
    kwargs: dict[str, Any]
    on_error: Callable[[BaseException], Any] = _reraise
    on_result: Callable[[Any], Any] = _passthrough


Steps = Generator[Call, Any, Any]


class Plan:
    """Requests sent one after the other, each answer choosing the next (a generator of :class:`Call`, or one):
    written once here, sent by either hook's ``_run``, blocking or awaited."""

    def __init__(self, steps: Steps | Call) -> None:
        self._steps = steps if isinstance(steps, Generator) else _single(steps)
        self.done, self.result = False, None
        self.request: Call = next(self._steps)

    def answer(self, value: Any) -> None:
        try:
            self.request = self._steps.send(value)
        except StopIteration as end:
            self.done, self.result = True, end.value


def _single(call: Call) -> Steps:
    return (yield call)


def _absent(value: Any) -> Callable[[BaseException], Any]:
    """Error reader: ``value`` for a 404 (the object does not exist), else raise."""

    def on_error(exc: BaseException) -> Any:
        if getattr(exc, "status", None) == 404:
            return value
        raise exc

    return on_error


def get_call(where: dict[str, Any], name: str) -> Call:
    """GET one MPIJob (``where``: group, version, namespace, plural); None when it does not exist."""
    return Call(
        CUSTOM_OBJECTS, "get_namespaced_custom_object", {**where, "name": name}, on_error=_absent(None)
    )


def kind_of(where: dict[str, Any]) -> str:
    """The kind of the jobs ``where`` names (by group, version), as messages spell it (``MPIJob``, ``TrainJob``)."""
    return job_kind_at(where).kind


def job_kind_at(where: dict[str, Any]) -> JobKind:
    """The JobKind of the jobs ``where`` names (by group, version)."""
    return kind_or_default(f"{where.get('group')}/{where.get('version')}")


def leftover_call(where: dict[str, Any], name: str) -> Call | None:
    """GET what may outlive the job ``name`` once it is deleted (its kind's ``owner_parent``, named as the job, when
    the kind deletes in the background: a TrainJob's JobSet) as a dict, None when gone; None: nothing to wait for."""
    kind = job_kind_at(where)
    parent = kind.owner_parent
    if parent is None or kind.delete_propagation != "Background":
        return None
    return get_call(
        {**where, "group": parent.group, "version": parent.version, "plural": parent.plural}, name
    )


def delete_call(
    where: dict[str, Any],
    name: str,
    propagation_policy: str | None,
    grace_period_seconds: int | None,
    uid: str | None,
    hook_log: logging.Logger,
) -> Call:
    """DELETE one MPIJob; True when deleted, False when it was already gone (or, given ``uid``, is another object
    of the same name now: the API server checks the precondition and answers 409)."""
    propagation_policy = propagation_policy or job_kind_at(where).delete_propagation
    options = {
        "propagationPolicy": propagation_policy,
        "gracePeriodSeconds": grace_period_seconds,
        "preconditions": None if uid is None else {"uid": uid},
    }
    body = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        **{k: v for k, v in options.items() if v is not None},
    }
    namespace = where["namespace"]

    def on_error(exc: BaseException) -> Any:
        if uid is not None and getattr(exc, "status", None) == 409:
            hook_log.warning(
                "Not deleting %s %s/%s: it is another object now (not uid %s)",
                kind_of(where),
                namespace,
                name,
                uid,
            )
            return False
        return _absent(False)(exc)

    def deleted(_: Any) -> bool:
        hook_log.info(
            "Deleted %s %s/%s (propagationPolicy=%s)", kind_of(where), namespace, name, propagation_policy
        )
        return True

    kwargs = {**where, "name": name, "body": body}
    return Call(CUSTOM_OBJECTS, "delete_namespaced_custom_object", kwargs, on_error, deleted)


def list_call(where: dict[str, Any], label_selector: str | None, api_version: str) -> Call:
    """LIST the MPIJobs of a namespace; a 404 means the API server does not serve MPIJobs."""
    kwargs = {**where, **({"label_selector": label_selector} if label_selector else {})}

    def on_error(exc: BaseException) -> Any:
        if getattr(exc, "status", None) == 404:
            raise MPIJobAPIUnavailable(api_version, where["namespace"], error_message(exc)) from exc
        raise exc

    return Call(CUSTOM_OBJECTS, "list_namespaced_custom_object", kwargs, on_error, items_of)


def items_of(result: Any) -> list:
    return list((result or {}).get("items") or [])


# --------------------------------------------------------------------------------------- create
class Create:
    """The POST of an MPIJob, never replayed blindly: after a failure that may have reached the API server (409, a
    transient error, a broken connection) the job is looked up, adopted if it is this task's, else sent again."""

    def __init__(self, body: dict, hook_log: logging.Logger) -> None:
        self.body, self.log = body, hook_log
        self.name, self.namespace = body["metadata"]["name"], body["metadata"]["namespace"]
        group, version = split_api_version(body["apiVersion"])
        self.where = {
            "group": group,
            "version": version,
            "namespace": self.namespace,
            "plural": kind_or_default(body["apiVersion"]).plural,
        }
        self.kind = kind_or_default(body["apiVersion"]).kind

    def created(self, obj: dict) -> dict:
        self.log.info("Created %s %s/%s (%s)", self.kind, self.namespace, self.name, self.body["apiVersion"])
        return obj

    def failed(self, exc: BaseException) -> None:
        """Raises what no lookup can mend; otherwise the job may or may not exist (409: it does): look first."""
        if is_api_exception(exc):
            if is_missing_resource_type(exc):
                raise MPIJobAPIUnavailable(
                    self.body["apiVersion"], self.namespace, error_message(exc)
                ) from exc
            if exc.status != 409 and not is_transient(exc):  # type: ignore[attr-defined]
                raise exc
        self.log.warning(
            "Create of %s %s/%s failed (%s); looking it up",
            self.kind,
            self.namespace,
            self.name,
            describe_error(exc),
        )


# --------------------------------------------------------------------------------------- logs
def format_since_time(value: datetime | str) -> str:
    """RFC 3339 UTC with second precision (what ``sinceTime`` carries on the wire), sub-seconds floored; a naive
    datetime is taken as UTC, a string passed through."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    raise TypeError(f"since_time must be a datetime or an RFC 3339 string, got {type(value).__name__}")


@dataclass(frozen=True)
class LogRequest:
    """``GET /api/v1/namespaces/{ns}/pods/{name}/log`` through ``ApiClient.call_api``, always ``timestamps=true``
    (built by hand: the generated clients have no ``sinceTime`` parameter); timeout: ``log_request_timeout``."""

    pod: str
    namespace: str
    request_timeout: float | tuple[float, float]
    container: str | None = None
    since_time: datetime | str | None = None
    previous: bool = False
    follow: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None

    @property
    def query(self) -> list[tuple[str, str]]:
        query = [("container", self.container)] if self.container else []
        query.append(("timestamps", "true"))
        query += [(key, "true") for key, on in (("follow", self.follow), ("previous", self.previous)) if on]
        if self.since_time is not None:
            query.append(("sinceTime", format_since_time(self.since_time)))
        numbers = (("tailLines", self.tail_lines), ("limitBytes", self.limit_bytes))
        return query + [(key, str(int(number))) for key, number in numbers if number is not None]

    @property
    def args(self) -> tuple[str, str]:
        return ("/api/v1/namespaces/{namespace}/pods/{name}/log", "GET")

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
            raise PodLogUnavailable(
                self.pod, self.namespace, self.container, status, error_message(exc)
            ) from exc
        raise exc
