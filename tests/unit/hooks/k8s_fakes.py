"""Builders for what the Kubernetes client boundary returns (objects, errors, streaming responses)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace

from kubernetes.client import (
    V1Container,
    V1ObjectMeta,
    V1OwnerReference,
    V1Pod,
    V1PodList,
    V1PodSpec,
    V1PodStatus,
)
from kubernetes.client.exceptions import ApiException
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from airflow_mpi.jobspec.naming import identity_annotations, identity_labels

NOT_FOUND_OBJECT = json.dumps(
    {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": "NotFound",
        "code": 404,
        "message": 'mpijobs.kubeflow.org "job" not found',
        "details": {"name": "job", "group": "kubeflow.org", "kind": "mpijobs"},
    }
)
NOT_FOUND_URL = "404 page not found\n"


def api_error(status: int, body: str | dict | None = None, reason: str = "", cls=ApiException):
    exc = cls(status=status, reason=reason or f"HTTP {status}")
    if isinstance(body, dict):
        body = json.dumps(body)
    exc.body = body
    return exc


def async_api_error(status: int, body=None, reason: str = ""):
    return api_error(status, body, reason, cls=AsyncApiException)


def labels_of(dag="dag", task="train", run="manual__2026-11-22T10:00:00+00:00", map_index=-1, try_number=1):
    return identity_labels(dag, task, run, map_index, try_number)


def annotations_of(
    dag="dag", task="train", run="manual__2026-11-22T10:00:00+00:00", map_index=-1, try_number=1
):
    """The raw identity annotations (the default task instance's unless told otherwise)."""
    return identity_annotations(dag, task, run, map_index, try_number)


def mpijob(
    name="job", namespace="ns", labels=None, rv="7", api_version="kubeflow.org/v2beta1", annotations=None
):
    return {
        "apiVersion": api_version,
        "kind": "MPIJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": rv,
            "labels": labels or {},
            "annotations": annotations if annotations is not None else annotations_of(),
        },
        "spec": {"slotsPerWorker": 1},
    }


def manifest(name="job", labels=None, namespace=None, annotations=None):
    meta = {
        "name": name,
        "labels": labels if labels is not None else labels_of(try_number=2),
        "annotations": annotations if annotations is not None else annotations_of(try_number=2),
    }
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": meta,
        "spec": {"slotsPerWorker": 1},
    }


def controlled_by(kind="MPIJob", name="job", uid="uid-job"):
    """A controller reference (hooks/ownership.py): by default the MPIJob ``job``'s (uid ``uid-job``)."""
    return V1OwnerReference(
        api_version="kubeflow.org/v2beta1" if kind == "MPIJob" else "batch/v1",
        kind=kind,
        name=name,
        uid=uid,
        controller=True,
    )


def pod(
    name, created, *, labels=None, phase="Running", containers=("launcher",), namespace="ns", owner="job"
):
    """A pod; ``owner``: the MPIJob controlling it (uid ``uid-<owner>``), a V1OwnerReference, or None (nobody)."""
    ref = controlled_by(name=owner, uid=f"uid-{owner}") if isinstance(owner, str) else owner
    return V1Pod(
        metadata=V1ObjectMeta(
            name=name,
            namespace=namespace,
            labels=labels or {},
            creation_timestamp=datetime.fromisoformat(created).replace(tzinfo=UTC),
            owner_references=[ref] if ref else None,
        ),
        spec=V1PodSpec(containers=[V1Container(name=c) for c in containers]),
        status=V1PodStatus(phase=phase),
    )


def pod_list(*pods):
    return V1PodList(items=list(pods))


def event(name, *, last=None, first=None, event_time=None, kind="Pod", obj="p", uid=None, reason="Scheduled"):
    return {
        "metadata": {
            "name": name,
            "uid": uid or f"uid-{name}",
            "creationTimestamp": first or last or event_time,
        },
        "involvedObject": {"kind": kind, "name": obj},
        "reason": reason,
        "lastTimestamp": last,
        "firstTimestamp": first,
        "eventTime": event_time,
    }


def watch_lines(*events) -> bytes:
    return b"".join(json.dumps({"type": t, "object": o}).encode() + b"\n" for t, o in events)


def split_bytes(data: bytes, *sizes: int) -> list[bytes]:
    """Cut ``data`` into chunks of the given sizes (rest in the last chunk)."""
    chunks, pos = [], 0
    for size in sizes:
        chunks.append(data[pos : pos + size])
        pos += size
    chunks.append(data[pos:])
    return [c for c in chunks if c]


class FakeResponse:
    """urllib3.HTTPResponse as returned with ``_preload_content=False``."""

    def __init__(self, chunks=(), data: bytes = b""):
        self.chunks = list(chunks)
        self.data = data
        self.closed = False
        self.released = False
        self.stream_args = None

    def stream(self, amt=None, decode_content=None):
        self.stream_args = (amt, decode_content)
        yield from self.chunks

    def close(self):
        self.closed = True

    def release_conn(self):
        self.released = True


class FakeAioResponse:
    """aiohttp.ClientResponse as returned by kubernetes_asyncio with ``_preload_content=False``."""

    def __init__(self, chunks=(), status: int = 200, body: bytes = b"", reason: str = "OK"):
        self.status = status
        self.reason = reason
        self.headers = {}
        self._chunks = list(chunks)
        self._body = body
        self.closed = False
        self.released = False
        self.content = SimpleNamespace(iter_any=self._iter_any)

    async def _iter_any(self):
        for chunk in self._chunks:
            yield chunk

    async def read(self):
        return self._body

    def release(self):
        self.released = True

    def close(self):
        self.closed = True
