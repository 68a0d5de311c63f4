"""Both hooks through the real kubernetes / kubernetes_asyncio clients against a local HTTP server.

The other hook tests stop at the client objects; these check what actually goes over the wire
(paths, query strings, chunked streaming, error statuses) with a kubeconfig from the connection.
"""

from __future__ import annotations

import asyncio
import json
import threading
from urllib.parse import parse_qs

import pytest
import yaml
from aiohttp import web
from k8s_fakes import labels_of, manifest, mpijob
from kubernetes import client as k8s
from kubernetes.client import V1ObjectMeta, V1Pod

from airflow_mpi.hooks import AsyncMPIJobHook, MPIJobHook, WatchExpired
from airflow_mpi.hooks.errors import PodLogUnavailable
from airflow_mpi.jobspec.kinds import DEFAULT_KIND
from airflow_mpi.wait.namespace_watch import watch_objects

LOG_CHUNKS = [
    b"2026-11-22T10:00:00.1Z one\n2026-11-22T10:00:01.2Z tw",
    b"o \xe2\x82",
    b"\xac\n2026-11-22T10:00:02Z last",
]
GONE = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 1 (9)"}


class FakeApiServer:
    def __init__(self):
        self.requests: list[tuple[str, str, dict, object]] = []
        self.loop = asyncio.new_event_loop()
        self.port = None
        self._ready = threading.Event()

    # ------------------------------------------------------------------ handlers
    async def _record(self, request):
        body = await request.read()
        self.requests.append(
            (request.method, request.path, parse_qs(request.query_string), json.loads(body) if body else None)
        )
        assert request.headers.get("Authorization") == "Bearer wire-token"

    async def pod_log(self, request):
        await self._record(request)
        if request.match_info["pod"] == "missing":
            return web.json_response(
                {"kind": "Status", "code": 404, "message": 'pods "missing" not found'}, status=404
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for chunk in LOG_CHUNKS:
            await resp.write(chunk)
            await asyncio.sleep(0.02)
        await resp.write_eof()
        return resp

    async def mpijobs(self, request):
        await self._record(request)
        query = request.query
        if request.method == "POST":
            return web.json_response(
                {"kind": "Status", "code": 409, "reason": "AlreadyExists", "message": "already exists"},
                status=409,
            )
        if query.get("watch") in ("true", "True", "1"):
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            if query.get("resourceVersion") == "1":
                events = [("ERROR", GONE)]
            else:
                events = [("MODIFIED", mpijob(rv="8")), ("MODIFIED", mpijob(rv="9"))]
            for etype, obj in events:
                data = json.dumps({"type": etype, "object": obj}).encode() + b"\n"
                await resp.write(data[:20])
                await asyncio.sleep(0.01)
                await resp.write(data[20:])
            await resp.write_eof()
            return resp
        return web.json_response({"kind": "MPIJobList", "items": [mpijob()]})

    async def mpijob(self, request):
        await self._record(request)
        if request.method == "DELETE":
            return web.json_response({"kind": "Status", "status": "Success"})
        job = mpijob(labels=labels_of(try_number=1))
        job["metadata"]["uid"] = "uid-job"
        return web.json_response(job)

    async def launcher_job(self, request):
        """mpi-operator v0.8.2's launcher Job of the MPIJob uid-job (hooks/ownership.py)."""
        await self._record(request)
        return web.json_response(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": request.match_info["name"],
                    "uid": "uid-job-launcher",
                    "ownerReferences": [
                        {
                            "apiVersion": "kubeflow.org/v2beta1",
                            "kind": "MPIJob",
                            "name": "job",
                            "uid": "uid-job",
                            "controller": True,
                        }
                    ],
                },
            }
        )

    async def pods(self, request):
        """Two launcher pods of the job's launcher Job, and a newer one with its labels that nothing controls."""
        await self._record(request)
        made = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": "job-launcher",
                "uid": "uid-job-launcher",
                "controller": True,
            }
        ]
        return web.json_response(
            {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {},
                "items": [
                    {
                        "metadata": {
                            "name": "job-launcher-a",
                            "creationTimestamp": "2026-11-22T10:00:00Z",
                            "ownerReferences": made,
                        }
                    },
                    {
                        "metadata": {
                            "name": "job-launcher-b",
                            "creationTimestamp": "2026-11-22T10:03:00Z",
                            "ownerReferences": made,
                        }
                    },
                    {
                        "metadata": {
                            "name": "job-launcher-forged",
                            "creationTimestamp": "2026-11-22T10:05:00Z",
                        }
                    },
                ],
            }
        )

    async def events(self, request):
        await self._record(request)
        return web.json_response(
            {
                "kind": "EventList",
                "items": [
                    {
                        "metadata": {"name": "e", "uid": "1"},
                        "reason": "Created",
                        "lastTimestamp": "2026-11-22T10:00:00Z",
                    }
                ],
            }
        )

    # ------------------------------------------------------------------ lifecycle
    def start(self):
        def run():
            asyncio.set_event_loop(self.loop)
            app = web.Application()
            app.router.add_get("/api/v1/namespaces/{ns}/pods/{pod}/log", self.pod_log)
            app.router.add_route("*", "/apis/kubeflow.org/{version}/namespaces/{ns}/mpijobs", self.mpijobs)
            app.router.add_route(
                "*", "/apis/kubeflow.org/{version}/namespaces/{ns}/mpijobs/{name}", self.mpijob
            )
            app.router.add_get("/api/v1/namespaces/{ns}/pods", self.pods)
            app.router.add_get("/apis/batch/v1/namespaces/{ns}/jobs/{name}", self.launcher_job)
            app.router.add_get("/api/v1/namespaces/{ns}/events", self.events)
            self.runner = web.AppRunner(app)
            self.loop.run_until_complete(self.runner.setup())
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            self.loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            self._ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert self._ready.wait(10)

    def stop(self):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def server():
    srv = FakeApiServer()
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def wire_connection(server, connection, tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "local",
                "clusters": [{"name": "local", "cluster": {"server": f"http://127.0.0.1:{server.port}"}}],
                "contexts": [{"name": "local", "context": {"cluster": "local", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "wire-token"}}],
            }
        )
    )
    connection(kube_config_path=str(path), namespace="ns")
    server.requests.clear()
    yield server
    k8s.Configuration.set_default(None)  # the stock sync hook loads into the global default


EXPECTED_LINES = ["2026-11-22T10:00:00.1Z one", "2026-11-22T10:00:01.2Z two €", "2026-11-22T10:00:02Z last"]


def test_sync_log_stream_over_the_wire(wire_connection):
    assert list(MPIJobHook().launcher_log("job")) == ["one", "two €", "last"]
    (_, job, _, _), (_, _, pods_query, _), (_, launcher_job, _, _), (method, path, query, _) = (
        wire_connection.requests[-4:]
    )
    assert pods_query["labelSelector"] == [
        "training.kubeflow.org/job-name=job,training.kubeflow.org/job-role=launcher"
    ]
    assert (job, launcher_job) == (
        "/apis/kubeflow.org/v2beta1/namespaces/ns/mpijobs/job",
        "/apis/batch/v1/namespaces/ns/jobs/job-launcher",
    )  # whose pods they are
    # the newest launcher the job's launcher Job made, not the newer pod that only carries its labels
    assert (method, path) == ("GET", "/api/v1/namespaces/ns/pods/job-launcher-b/log")
    assert query == {"timestamps": ["true"]}


def test_sync_log_of_a_missing_pod(wire_connection):
    with pytest.raises(PodLogUnavailable) as info:
        list(MPIJobHook()._log_messages(V1Pod(metadata=V1ObjectMeta(name="missing")), "ns"))
    assert info.value.status == 404 and "not found" in info.value.message


def test_sync_create_adopt_list_delete_over_the_wire(wire_connection):
    hook = MPIJobHook()
    adopted = hook.create_mpijob(manifest(labels=labels_of(try_number=2)))
    assert adopted["metadata"]["labels"] == labels_of(try_number=1)
    assert [r[0] for r in wire_connection.requests[-2:]] == ["POST", "GET"]
    assert wire_connection.requests[-2][3]["metadata"]["namespace"] == "ns"

    assert [j["metadata"]["name"] for j in hook.list_mpijobs()] == ["job"]
    assert hook.delete_mpijob("job") is True
    method, path, _, body = wire_connection.requests[-1]
    assert (method, path, body["propagationPolicy"]) == (
        "DELETE",
        "/apis/kubeflow.org/v2beta1/namespaces/ns/mpijobs/job",
        "Foreground",
    )


@pytest.mark.asyncio
async def test_async_hook_over_the_wire(wire_connection):
    async with AsyncMPIJobHook() as hook:
        lines = [
            line
            async for line in hook.read_pod_log(
                "job-launcher-a",
                container="launcher",
                follow=True,
                since_time="2026-11-22T10:00:00Z",
                tail_lines=3,
            )
        ]
        assert lines == EXPECTED_LINES
        _, path, query, _ = wire_connection.requests[-1]
        assert path == "/api/v1/namespaces/ns/pods/job-launcher-a/log"
        assert query == {
            "container": ["launcher"],
            "timestamps": ["true"],
            "follow": ["true"],
            "sinceTime": ["2026-11-22T10:00:00Z"],
            "tailLines": ["3"],
        }

        with pytest.raises(PodLogUnavailable):
            async for _ in hook.read_pod_log("missing"):
                pass

        events = [
            rv
            async for kind, _, rv in watch_objects(hook, DEFAULT_KIND.plural, "ns", resource_version="7")
            if kind != "OPEN"
        ]
        assert events == ["8", "9"]
        _, path, query, _ = wire_connection.requests[-1]
        assert path == "/apis/kubeflow.org/v2beta1/namespaces/ns/mpijobs" and query["resourceVersion"] == [
            "7"
        ]
        with pytest.raises(WatchExpired):
            async for _ in watch_objects(hook, DEFAULT_KIND.plural, "ns", resource_version="1"):
                pass

        assert await hook.delete_mpijob("job", propagation_policy="Background") is True
        assert wire_connection.requests[-1][3]["propagationPolicy"] == "Background"
        assert [p.metadata.name for p in await hook.launcher_pods("job")] == [
            "job-launcher-b",
            "job-launcher-a",
        ]
        assert [e["reason"] for e in await hook.job_events("job")] == ["Created"]
        assert wire_connection.requests[-1][2]["fieldSelector"] == [
            "involvedObject.kind=MPIJob,involvedObject.name=job"
        ]
