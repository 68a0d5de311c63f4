"""Kubernetes request shapes of the MPIJob hooks: API versions, bodies, adoption, selectors, log queries,
and how their answers are read (ordering, line splitting).

Free of I/O, so the sync and async hooks send exactly the same requests.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from datetime import datetime, timezone
from typing import Any

from airflow_mpi.hooks.errors import MPIJobConflictError
from airflow_mpi.jobspec.naming import LABEL_PREFIX, TRY_NUMBER_LABEL, same_task
from airflow_mpi.jobspec.spec import API_V2BETA1

log = logging.getLogger(__name__)

API_GROUP = "kubeflow.org"
MPIJOB_PLURAL = "mpijobs"
MPIJOB_KIND = "MPIJob"
# the kinds the watch hub lists and watches per namespace (wait/watch_hub.py, wait/namespace_watch.py)
MPIJOBS, PODS, EVENTS = MPIJOB_PLURAL, "pods", "events"

# Pod labels set by the operators.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"  # v2beta1: launcher|worker; v1: "master" on the launcher
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"  # v1 (training-operator >= 1.5): launcher|worker
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
LEGACY_JOB_NAME_LABEL = "mpi-job-name"  # training-operator <= 1.4 (kubeflow.org/v1)
LEGACY_ROLE_LABEL = "mpi-job-role"

LAUNCHER = "launcher"
WORKER = "worker"

POD_LOG_PATH = "/api/v1/namespaces/{namespace}/pods/{name}/log"

# --------------------------------------------------------------------------------------- api version
def split_api_version(api_version: str) -> tuple[str, str]:
    """``"kubeflow.org/v2beta1"`` -> ``("kubeflow.org", "v2beta1")``; only the kubeflow.org group serves MPIJobs."""
    group, sep, version = (api_version or "").partition("/")
    if not sep or not version or group != API_GROUP:
        raise ValueError(f"api_version={api_version!r}: expected '{API_GROUP}/<version>' (e.g. {API_V2BETA1!r})")
    return group, version


def is_v1(api_version: str) -> bool:
    return split_api_version(api_version)[1] == "v1"


# --------------------------------------------------------------------------------------- manifest / adoption
def prepare_body(manifest: dict, namespace: str, api_version: str) -> dict:
    """A copy of ``manifest`` ready to POST: apiVersion/kind filled in, metadata.namespace = namespace."""
    if not isinstance(manifest, dict):
        raise TypeError(f"manifest must be a dict, got {type(manifest).__name__}")
    body = copy.deepcopy(manifest)
    body.setdefault("apiVersion", api_version)
    body.setdefault("kind", MPIJOB_KIND)
    split_api_version(body["apiVersion"])
    metadata = body.setdefault("metadata", {})
    if not metadata.get("name"):
        raise ValueError("manifest metadata.name is required (generateName is not supported: jobs must be re-findable)")
    metadata["namespace"] = namespace
    return body


def identity(labels: dict | None) -> dict[str, str]:
    """The identity labels of an object (``airflow-mpi.io/*`` without the try number)."""
    return {k: v for k, v in (labels or {}).items() if k.startswith(LABEL_PREFIX) and k != TRY_NUMBER_LABEL}


def adopt_or_raise(existing: dict, desired: dict) -> dict:
    """Return ``existing`` when it belongs to the same task instance as ``desired``, else raise."""
    meta = existing.get("metadata") or {}
    desired_meta = desired.get("metadata") or {}
    name = desired_meta.get("name") or meta.get("name")
    namespace = desired_meta.get("namespace") or meta.get("namespace")
    if same_task(meta.get("labels"), desired_meta.get("labels")):
        log.info(
            "MPIJob %s/%s already exists and belongs to this task instance (try %s); adopting it",
            namespace,
            name,
            (meta.get("labels") or {}).get(TRY_NUMBER_LABEL, "?"),
        )
        if meta.get("deletionTimestamp"):
            log.warning("The adopted MPIJob %s/%s is being deleted (deletionTimestamp set)", namespace, name)
        return existing
    raise MPIJobConflictError(
        name=name,
        namespace=namespace,
        existing_labels=meta.get("labels"),
        desired_labels=desired_meta.get("labels"),
        existing_annotations=meta.get("annotations"),
    )


# --------------------------------------------------------------------------------------- selectors
def pod_selectors(api_version: str, name: str, role: str) -> list[str]:
    """Label selectors of the ``role`` pods of an MPIJob, in the order to try them.

    v2beta1 (mpi-operator): ``training.kubeflow.org/job-name`` + ``training.kubeflow.org/job-role``.
    v1 (training-operator >= 1.5, incl. 1.8): ``training.kubeflow.org/job-name`` +
    ``training.kubeflow.org/replica-type`` (lowercase ``launcher``/``worker``); older v1 operators
    (<= 1.4) used ``mpi-job-name`` + ``mpi-job-role``, tried only when the first finds nothing.
    """
    if is_v1(api_version):
        return [
            f"{JOB_NAME_LABEL}={name},{REPLICA_TYPE_LABEL}={role}",
            f"{LEGACY_JOB_NAME_LABEL}={name},{LEGACY_ROLE_LABEL}={role}",
        ]
    return [f"{JOB_NAME_LABEL}={name},{JOB_ROLE_LABEL}={role}"]


def job_event_selector(name: str) -> str:
    return f"involvedObject.kind={MPIJOB_KIND},involvedObject.name={name}"


def pod_event_selector(pod: str) -> str:
    return f"involvedObject.kind=Pod,involvedObject.name={pod}"


#: how long a watch may stay silent beyond the server's own end of it (``timeout_seconds``) before the client gives up
WATCH_CLIENT_GRACE = 15.0
WATCH_CONNECT_TIMEOUT = 30.0


def watch_request_timeout(timeout_seconds: int) -> tuple[float, float]:
    """``_request_timeout`` of a watch: ``(connect, read-idle)``, the idle limit past the server's timeout.

    cncf.kubernetes' API clients default every request to 60 s in all unless the call passes ``timeout_seconds``
    as an argument of ``call_api``; the generated list methods pass it as a query parameter instead, so without
    this each longer watch was cut at 60 s by a client TimeoutError (a warning and a resumption every minute).
    """
    return (WATCH_CONNECT_TIMEOUT, timeout_seconds + WATCH_CLIENT_GRACE)


def watch_field_selector(name: str) -> str:
    return f"metadata.name={name}"


# --------------------------------------------------------------------------------------- ordering
_EPOCH = datetime.min.replace(tzinfo=timezone.utc)


def _as_utc(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, str) and value:
        try:
            return _as_utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return _EPOCH
    return _EPOCH


_TERMINAL_PHASES = ("Succeeded", "Failed")


def sort_newest_first(pods: Iterable[Any]) -> list[Any]:
    """Pods by creationTimestamp, newest first; ties (second precision): active before finished, then name desc."""

    def key(pod):
        meta = pod.metadata
        phase = getattr(pod.status, "phase", None) if pod.status is not None else None
        return (_as_utc(meta.creation_timestamp), phase not in _TERMINAL_PHASES, meta.name or "")

    return sorted(pods, key=key, reverse=True)


def sort_workers(pods: Iterable[Any]) -> list[Any]:
    """Worker pods by replica index (then name)."""

    def key(pod):
        labels = pod.metadata.labels or {}
        try:
            index = int(labels.get(REPLICA_INDEX_LABEL, ""))
        except ValueError:
            index = 1 << 30
        return (index, pod.metadata.name or "")

    return sorted(pods, key=key)


def event_time(event: dict) -> datetime:
    meta = event.get("metadata") or {}
    series = event.get("series") or {}
    for value in (
        series.get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        meta.get("creationTimestamp"),
    ):
        if value:
            return _as_utc(value)
    return _EPOCH


def sort_events(events: Iterable[dict]) -> list[dict]:
    """Events oldest first."""
    return sorted(events, key=lambda e: (event_time(e), (e.get("metadata") or {}).get("name", "")))


# --------------------------------------------------------------------------------------- logs
def format_since_time(value: datetime | str) -> str:
    """RFC 3339 UTC with second precision (what ``sinceTime`` carries on the wire); floors sub-seconds.

    Naive datetimes are taken as UTC; strings are passed through unchanged.
    """
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    raise TypeError(f"since_time must be a datetime or an RFC 3339 string, got {type(value).__name__}")


def log_query_params(
    container: str | None = None,
    since_time: datetime | str | None = None,
    previous: bool = False,
    follow: bool = False,
    tail_lines: int | None = None,
    limit_bytes: int | None = None,
) -> list[tuple[str, str]]:
    """Query of ``GET /api/v1/namespaces/{ns}/pods/{name}/log``; always ``timestamps=true``.

    Built by hand because the generated clients have no ``sinceTime`` parameter.
    """
    query: list[tuple[str, str]] = []
    if container:
        query.append(("container", container))
    query.append(("timestamps", "true"))
    if follow:
        query.append(("follow", "true"))
    if previous:
        query.append(("previous", "true"))
    if since_time is not None:
        query.append(("sinceTime", format_since_time(since_time)))
    if tail_lines is not None:
        query.append(("tailLines", str(int(tail_lines))))
    if limit_bytes is not None:
        query.append(("limitBytes", str(int(limit_bytes))))
    return query


class LineSplitter:
    """Bytes chunks in, complete decoded lines out; a line split across chunks is joined first.

    Decoding happens per complete line (a newline byte never occurs inside a UTF-8 multi-byte
    sequence), invalid UTF-8 becomes U+FFFD. ``flush()`` returns the unterminated last line.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes | str) -> list[str]:
        if isinstance(chunk, str):
            chunk = chunk.encode("utf-8")
        self._buffer.extend(chunk)
        lines = []
        start = 0
        while (end := self._buffer.find(b"\n", start)) != -1:
            lines.append(_decode(self._buffer[start:end]))
            start = end + 1
        if start:
            del self._buffer[:start]
        return lines

    def flush(self) -> list[str]:
        if not self._buffer:
            return []
        rest = _decode(self._buffer)
        self._buffer.clear()
        return [rest]


def _decode(raw: bytes | bytearray) -> str:
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    return bytes(raw).decode("utf-8", errors="replace")


def iter_lines(chunks: Iterable[bytes | str]) -> Iterator[str]:
    """Lines of a byte stream; the last line is yielded even without a trailing newline (clean EOF only)."""
    splitter = LineSplitter()
    for chunk in chunks:
        yield from splitter.feed(chunk)
    yield from splitter.flush()


async def aiter_lines(chunks: AsyncIterable[bytes | str]) -> AsyncIterator[str]:
    """Async :func:`iter_lines`."""
    splitter = LineSplitter()
    async for chunk in chunks:
        for line in splitter.feed(chunk):
            yield line
    for line in splitter.flush():
        yield line
