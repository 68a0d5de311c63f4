"""The calls the hooks send are exactly ``WORKER_CALLS``, the literal the shipped role is held to.

tests/integration/test_least_privilege.py asks the API server that the role grants ``WORKER_CALLS`` and nothing more;
this sends every request method of both hooks and of the watch hub over HTTP to a recording server and reads each
request as the API server's authorizer does (verb from method, path and ``watch``), so the literal cannot drift from
the code. A new public hook method fails here until it is sent below or listed as sending nothing.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from k8s_fakes import manifest, mpijob

from airflow_mpi.hooks import AsyncMPIJobHook, MPIJobHook, identity_claims
from airflow_mpi.hooks.base import MPIJobHookBase
from airflow_mpi.hooks.requests import WORKLOADS
from airflow_mpi.jobspec.kinds import DEFAULT_KIND
from airflow_mpi.jobspec.kinds.trainjob import TRAINJOB
from airflow_mpi.wait import watch_hub
from tests.integration.least_privilege import WORKER_CALLS
from tests.unit.hooks.test_async_mpijob_hook import kubeconfig

#: /api/v1/namespaces/{ns}/{resource}[/{name}[/{subresource}]], or /apis/{group}/{version}/namespaces/...
RESOURCE_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)/namespaces/[^/]+/(?P<resource>[^/]+)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)
POD = {
    "metadata": {"name": "job-launcher", "creationTimestamp": "2026-11-22T10:00:00Z"},
    "spec": {"containers": [{"name": "launcher"}]},
}
#: public methods of the hooks that send nothing to the API server
SEND_NOTHING = {
    "custom_object_args",
    "get_namespace",
    "configured_namespace",
    "resolve_namespace",
    "connection_settings",
    "connection_extras",  # the links' URL templates: the connection, no API call
    "from_sync",
    "get_conn",
    "read_json",
    "open_stream",
    "watch_identity",
}


def authorizer_call(method: str, path: str, query: dict) -> tuple[str, str, str]:
    """(apiGroup, resource, verb) of a request, as the API server's RequestInfo makes them."""
    match = RESOURCE_PATH.match(path)
    assert match, path
    group, resource, name, sub = match.group("group", "resource", "name", "sub")
    if method == "GET":
        verb = "get" if name else "watch" if query.get("watch", [""])[0].lower() in ("true", "1") else "list"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method) or (
            "delete" if name else "deletecollection"
        )
    return group or "", f"{resource}/{sub}" if sub else resource, verb


class Recorder(BaseHTTPRequestHandler):
    """Answers any namespaced request with a small valid body; records (method, path, query)."""

    protocol_version = "HTTP/1.1"
    calls: list[tuple[str, str, dict]]

    def _answer(self) -> None:
        url = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.calls.append((self.command, url.path, parse_qs(url.query)))
        match = RESOURCE_PATH.match(url.path)
        resource, name, sub = match.group("resource", "name", "sub") if match else ("", None, None)
        if sub == "log":
            self._send(b"2026-11-22T10:00:00Z one\n", "text/plain")
        elif self.command == "POST":
            obj = json.loads(body)
            obj["metadata"].update(uid="uid-1", resourceVersion="1")
            self._send(json.dumps(obj).encode(), status=201)
        elif self.command == "DELETE":
            self._send(json.dumps({"kind": "Status", "status": "Success"}).encode())
        elif name:
            self._send(json.dumps({**mpijob(), "status": {}}).encode())
        elif "watch" in parse_qs(url.query):
            self._send(b"")  # a watch the server ended at once
        else:
            items = [POD] if resource == "pods" else []
            self._send(
                json.dumps({"kind": "List", "metadata": {"resourceVersion": "1"}, "items": items}).encode()
            )

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _answer

    def _send(self, data: bytes, content_type: str = "application/json", status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def recorded(connection, tmp_path):
    """The (method, path, query) of every request sent, through a kubeconfig ``kubernetes_default`` points at."""
    calls: list[tuple[str, str, dict]] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (Recorder,), {"calls": calls}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig(server=f"http://127.0.0.1:{server.server_address[1]}")))
    connection(kube_config_path=str(path), namespace="ns")
    yield calls
    server.shutdown()
    server.server_close()


def send_all_sync() -> set[str]:
    hook = MPIJobHook()
    identity_claims.create_claim(
        hook, "ns", "tests", "installation"
    )  # the claims' requests (not hook methods)
    identity_claims.get_claim(hook, "ns", "tests")
    identity_claims.list_claims(hook, "ns", "installation")
    hook.create_mpijob(manifest())
    hook.get_mpijob("job")
    hook.list_mpijobs()
    hook.wait_for_deleted("job", timeout=0)
    hook.delete_mpijob("job")
    hook.delete_live_mpijob("job")
    hook.get_launcher_job("job")
    hook.launcher_log("job")
    hook.worker_log_tails("job")
    hook.task_pod_deleting("ns", "task-pod")  # a KubernetesExecutor pod's own deletion (on_kill)
    hook.create_owned_secret(
        "job-function", "ns", {"call": "x"}, mpijob() | {"metadata": {"name": "job", "uid": "u"}}
    )
    train = MPIJobHook(
        api_version=TRAINJOB.api_version
    )  # a TrainJob's: the same calls on trainjobs, + its JobSet
    train.create_mpijob({"kind": TRAINJOB.kind, "metadata": {"name": "job"}})
    train.get_mpijob("job")
    train.list_mpijobs()
    train.delete_mpijob("job")
    train.get_launcher_job("job")
    return {
        "create_mpijob",
        "get_mpijob",
        "list_mpijobs",
        "wait_for_deleted",
        "delete_mpijob",
        "delete_live_mpijob",
        "get_launcher_job",
        "launcher_log",
        "worker_log_tails",
        "task_pod_deleting",
        "create_owned_secret",
    }


async def send_all_async() -> set[str]:
    async with AsyncMPIJobHook() as hook:
        await hook.get_mpijob("job")
        await hook.delete_mpijob("job")
        await hook.delete_live_mpijob("job")
        await hook.launcher_pods("job")
        _ = [line async for line in hook.read_pod_log("job-launcher", container="launcher", follow=True)]
        await hook.job_events("job")
        await hook.pod_events(["job-launcher"])
        await hook.get_launcher_job("job", "ns")
        for kind in (*watch_hub.watched(DEFAULT_KIND), WORKLOADS):  # the watch hub's requests
            await hook.list_objects(kind, "ns")
            _ = [event async for event in hook.watch_objects(kind, "ns", resource_version="1")]
    async with AsyncMPIJobHook(api_version=TRAINJOB.api_version) as train:  # a TrainJob hub's
        await train.list_objects(TRAINJOB.plural, "ns")
        _ = [event async for event in train.watch_objects(TRAINJOB.plural, "ns", resource_version="1")]
    return {
        "get_mpijob",
        "delete_mpijob",
        "delete_live_mpijob",
        "launcher_pods",
        "read_pod_log",
        "job_events",
        "pod_events",
        "list_objects",
        "watch_objects",
        "get_launcher_job",
    }


def public_methods(*classes: type) -> set[str]:
    return {
        name
        for cls in classes
        for name, value in vars(cls).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod)))
    }


def test_the_hooks_send_exactly_the_calls_the_role_is_held_to(recorded):
    sent = send_all_sync() | asyncio.run(send_all_async())
    assert public_methods(MPIJobHookBase, MPIJobHook, AsyncMPIJobHook) == sent | SEND_NOTHING
    calls = {authorizer_call(*call) for call in recorded}
    assert calls == WORKER_CALLS, (
        f"sent, not in WORKER_CALLS: {sorted(calls - WORKER_CALLS)}; "
        f"in WORKER_CALLS, never sent: {sorted(WORKER_CALLS - calls)}"
    )
