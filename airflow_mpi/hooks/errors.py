"""The request layer's errors: those the hooks raise, and what an error of the Kubernetes API says. No Kubernetes
client imports, so operators and triggers can catch these without pulling in the clients."""

from __future__ import annotations

import asyncio
import functools
import json

from airflow.providers.common.compat.sdk import AirflowException

from airflow_mpi.jobspec.naming import LABEL_PREFIX, RAW_IDENTITY_KEYS, TRY_NUMBER_LABEL

# identity keys of an MPIJob's owner: labels hold label-safe values, annotations the raw ones (jobspec/naming.py)
_OWNER_KEYS = ("dag-id", "task-id", "run-id", "map-index", "try-number")

TRANSIENT_HTTP_STATUSES = frozenset({429, 500, 502, 503, 504})


def describe_owner(labels: dict | None, annotations: dict | None = None) -> str:
    """``dag_id=..., task_id=..., run_id=..., map_index=..., try_number=...`` of an object, raw values preferred."""
    labels, annotations = labels or {}, annotations or {}
    parts = []
    for key in _OWNER_KEYS:
        value = annotations.get(LABEL_PREFIX + key, labels.get(LABEL_PREFIX + key))
        if value is not None:
            parts.append(f"{key.replace('-', '_')}={value}")
    return ", ".join(parts) if parts else "no airflow-mpi.io identity labels"


class MPIJobHookError(AirflowException):
    """Base class of the errors raised by :mod:`airflow_mpi.hooks`."""


class MPIJobConflictError(MPIJobHookError):
    """An MPIJob of the same name exists and does not belong to the task instance creating it."""

    def __init__(
        self,
        name: str | None,
        namespace: str | None,
        existing_labels: dict | None = None,
        desired_labels: dict | None = None,
        existing_annotations: dict | None = None,
        desired_annotations: dict | None = None,
    ) -> None:
        self.name, self.namespace = name, namespace
        self.existing_labels = dict(existing_labels or {})
        self.desired_labels = dict(desired_labels or {})
        self.existing_annotations = dict(existing_annotations or {})
        self.desired_annotations = dict(desired_annotations or {})
        keys = sorted(
            k
            for k in set(self.existing_labels) | set(self.desired_labels)
            if k.startswith(LABEL_PREFIX) and k != TRY_NUMBER_LABEL
        )
        #: identity label (or, where the sanitised labels agree, raw identity annotation) -> (value on the existing
        #: object, value this task would set)
        self.differences: dict[str, tuple[str | None, str | None]] = {
            k: (self.existing_labels.get(k), self.desired_labels.get(k))
            for k in keys
            if self.existing_labels.get(k) != self.desired_labels.get(k)
        }
        if not self.differences:
            self.differences = {
                f"annotation {k}": (self.existing_annotations.get(k), self.desired_annotations.get(k))
                for k in RAW_IDENTITY_KEYS
                if self.existing_annotations.get(k) != self.desired_annotations.get(k)
            }
        self.existing_owner = describe_owner(self.existing_labels, self.existing_annotations)
        if not any(k.startswith(LABEL_PREFIX) for k in self.desired_labels):
            why = "the MPIJob to create carries no airflow-mpi.io identity labels, so ownership cannot be established"
        else:
            why = "; ".join(
                f"{k}: existing {old!r} != this task {new!r}" for k, (old, new) in self.differences.items()
            )
        super().__init__(
            f"MPIJob {namespace}/{name} already exists and belongs to a different owner "
            f"({self.existing_owner}); refusing to adopt it: {why}. "
            "Delete it, or choose another name for this task's MPIJob."
        )

    def __reduce__(self):
        return type(self), (
            self.name,
            self.namespace,
            self.existing_labels,
            self.desired_labels,
            self.existing_annotations,
            self.desired_annotations,
        )


class WatchExpired(MPIJobHookError):
    """The watch's resourceVersion is too old (HTTP 410 Gone): re-list (get) and watch again from there."""

    def __init__(
        self, name: str, namespace: str, resource_version: str | None = None, message: str = ""
    ) -> None:
        self.name, self.namespace, self.resource_version, self.message = (
            name,
            namespace,
            resource_version,
            message,
        )
        super().__init__(
            f"Watch of MPIJob {namespace}/{name} expired at resourceVersion {resource_version!r}"
            + (f": {message}" if message else "")
        )

    def __reduce__(self):
        return (type(self), (self.name, self.namespace, self.resource_version, self.message))


class MPIJobAPIUnavailable(MPIJobHookError):
    """The API server does not serve MPIJobs of this API version (CRD / mpi-operator missing)."""

    def __init__(self, api_version: str, namespace: str | None = None, detail: str = "") -> None:
        self.api_version, self.namespace, self.detail = api_version, namespace, detail
        super().__init__(
            f"The Kubernetes API does not serve mpijobs.{api_version.split('/')[0]} version {api_version!r}: "
            "is the MPI operator (v2beta1: kubeflow/mpi-operator, v1: kubeflow/training-operator) installed, "
            "and does api_version match the installed CRD?" + (f" ({detail})" if detail else "")
        )

    def __reduce__(self):
        return (type(self), (self.api_version, self.namespace, self.detail))


class PodLogUnavailable(MPIJobHookError):
    """The log of a container cannot be read (yet or any more): ``status`` 404, pod gone; 400, container not started
    or no previous terminated container. ``message``: the API server's explanation."""

    def __init__(
        self, pod: str, namespace: str, container: str | None, status: int | None, message: str = ""
    ) -> None:
        self.pod, self.namespace, self.container, self.status, self.message = (
            pod,
            namespace,
            container,
            status,
            message,
        )
        where = f"{namespace}/{pod}" + (f" container {container}" if container else "")
        super().__init__(f"Cannot read the log of {where} (HTTP {status}): {message}")

    def __reduce__(self):
        return (type(self), (self.pod, self.namespace, self.container, self.status, self.message))


# --------------------------------------------------------------------------------------- what an API error says
def _error_body(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, (bytes, bytearray)):
        return bytes(body).decode("utf-8", errors="replace")
    return body or ""


def _status_of(body: str) -> dict | None:
    """The API server's Status object in an error body, if it is one."""
    try:
        status = json.loads(body)
    except ValueError:
        return None
    return status if isinstance(status, dict) else None


def error_message(exc: BaseException, *, causes: bool = False) -> str:
    """The ``message`` of the API server's Status in an ApiException, or its reason; ``causes``: the fields it names
    as the causes (``field: message``, a rejected spec), when it names any."""
    body = _error_body(exc)
    status = _status_of(body) or {}
    named = (status.get("details") or {}).get("causes") or [] if causes else []
    if named:
        return "; ".join(f"{c.get('field')}: {c.get('message')}" for c in named)
    if status.get("message"):
        return str(status["message"])
    return body.strip() or str(getattr(exc, "reason", "") or exc)


def is_missing_resource_type(exc: BaseException) -> bool:
    """A 404 whose body is not a Status object: the URL itself is unknown (CRD/version not served)."""
    if getattr(exc, "status", None) != 404:
        return False
    status = _status_of(_error_body(exc)) or {}
    return not (status.get("kind") == "Status" and status.get("details"))


@functools.cache
def connection_errors() -> tuple[type[BaseException], ...]:
    """Failures of the connection itself (urllib3 for kubernetes, aiohttp for kubernetes_asyncio), imported on
    first use to keep this module light."""
    from aiohttp import ClientConnectionError, ClientPayloadError
    from urllib3.exceptions import HTTPError

    return (
        ConnectionError,
        TimeoutError,
        asyncio.TimeoutError,
        HTTPError,
        ClientConnectionError,
        ClientPayloadError,
    )


def is_api_exception(exc: BaseException) -> bool:
    from kubernetes.client.exceptions import ApiException
    from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

    return isinstance(exc, (ApiException, AsyncApiException))


def is_transient(exc: BaseException) -> bool:
    """Worth retrying an idempotent request: 429, 5xx gateway/server errors, connection-level failures; never 409
    (unlike the stock hook): a conflict on create is a decision, not a blip."""
    if is_api_exception(exc):
        return getattr(exc, "status", None) in TRANSIENT_HTTP_STATUSES
    return isinstance(exc, connection_errors())


def describe_error(exc: BaseException | None) -> str:
    if exc is None:
        return "no error"
    status = getattr(exc, "status", None)
    if status is not None and is_api_exception(exc):
        return f"HTTP {status} {getattr(exc, 'reason', '') or ''}".strip()
    return f"{type(exc).__name__}: {exc}"
