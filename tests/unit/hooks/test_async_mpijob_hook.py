"""AsyncMPIJobHook: client configuration from the connection (real kubernetes_asyncio loading, no network)
and the request logic with the API classes replaced at the client boundary."""

from __future__ import annotations

import contextlib
import json
from unittest import mock

import aiohttp
import pytest
import yaml
from airflow.providers.common.compat.sdk import AirflowException
from k8s_fakes import (
    NOT_FOUND_OBJECT,
    FakeAioResponse,
    async_api_error,
    event,
    pod,
    pod_list,
    split_bytes,
)
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio import config as async_config
from kubernetes_asyncio.client.exceptions import ApiException

from airflow_mpi.hooks import AsyncMPIJobHook, MPIJobHook
from airflow_mpi.hooks.errors import PodLogUnavailable
from airflow_mpi.jobspec.vocabulary import WORKER

pytestmark = pytest.mark.asyncio

GVP = {"group": "kubeflow.org", "version": "v2beta1", "plural": "mpijobs"}


def kubeconfig(server="https://from-file:6443", token="file-token", exec_auth=False) -> dict:
    user = {"token": token}
    if exec_auth:
        user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "get-token"}}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "main",
        "clusters": [
            {"name": "c-main", "cluster": {"server": server}},
            {"name": "c-other", "cluster": {"server": "https://other-context:6443"}},
        ],
        "contexts": [
            {"name": "main", "context": {"cluster": "c-main", "user": "u"}},
            {"name": "other", "context": {"cluster": "c-other", "user": "u"}},
        ],
        "users": [{"name": "u", "user": user}],
    }


@pytest.fixture
def kubeconfig_file(tmp_path):
    def write(name="kubeconfig", **kwargs):
        path = tmp_path / name
        path.write_text(yaml.safe_dump(kubeconfig(**kwargs)))
        return str(path)

    return write


async def loaded(hook: AsyncMPIJobHook) -> async_client.Configuration:
    await hook._load_client_config()
    return hook.client_configuration


# --------------------------------------------------------------------------- client configuration
async def test_kube_config_path_from_connection(connection, kubeconfig_file):
    connection(kube_config_path=kubeconfig_file())
    cfg = await loaded(AsyncMPIJobHook())
    assert cfg.host == "https://from-file:6443"
    assert cfg.api_key["BearerToken"] == "Bearer file-token"


async def test_config_file_argument_is_honoured(kubeconfig_file):
    cfg = await loaded(AsyncMPIJobHook(config_file=kubeconfig_file(server="https://from-arg:6443")))
    assert cfg.host == "https://from-arg:6443"


async def test_config_file_argument_wins_over_the_connection_path(connection, kubeconfig_file):
    connection(kube_config_path=kubeconfig_file("a", server="https://from-conn:6443"))
    cfg = await loaded(AsyncMPIJobHook(config_file=kubeconfig_file("b", server="https://from-arg:6443")))
    assert cfg.host == "https://from-arg:6443"


@pytest.mark.parametrize("form", ["yaml", "json", "dict"])
async def test_inline_kube_config(connection, form):
    data = kubeconfig(server="https://inline:6443")
    value = {"yaml": yaml.safe_dump(data), "json": json.dumps(data), "dict": data}[form]
    connection(kube_config=value)
    cfg = await loaded(AsyncMPIJobHook())
    assert cfg.host == "https://inline:6443"


async def test_invalid_inline_kube_config_does_not_echo_it(connection):
    connection(kube_config="token: secret-value: [unclosed")
    with pytest.raises(ValueError) as info:
        await loaded(AsyncMPIJobHook())
    assert "secret-value" not in str(info.value)


async def test_cluster_context_from_connection_and_argument(connection, kubeconfig_file):
    connection(kube_config_path=kubeconfig_file(), cluster_context="other")
    assert (await loaded(AsyncMPIJobHook())).host == "https://other-context:6443"
    connection(kube_config_path=kubeconfig_file())
    assert (await loaded(AsyncMPIJobHook(cluster_context="other"))).host == "https://other-context:6443"


@pytest.mark.parametrize("flag", [True, "true"])
async def test_disable_verify_ssl_from_connection(connection, kubeconfig_file, flag):
    connection(kube_config_path=kubeconfig_file(), disable_verify_ssl=flag)
    assert (await loaded(AsyncMPIJobHook())).verify_ssl is False


async def test_disable_verify_ssl_argument(kubeconfig_file):
    assert (
        await loaded(AsyncMPIJobHook(config_file=kubeconfig_file(), disable_verify_ssl=True))
    ).verify_ssl is False
    assert (await loaded(AsyncMPIJobHook(config_file=kubeconfig_file()))).verify_ssl is True


async def test_empty_string_extras_are_unset(connection):
    data = kubeconfig(server="https://inline:6443")
    connection(
        kube_config_path="", kube_config=json.dumps(data), cluster_context="", in_cluster=False, namespace=""
    )
    assert (await loaded(AsyncMPIJobHook())).host == "https://inline:6443"


async def test_config_sources_are_mutually_exclusive(connection, kubeconfig_file):
    connection(kube_config_path=kubeconfig_file(), kube_config=json.dumps(kubeconfig()))
    with pytest.raises(AirflowException, match="mutually exclusive"):
        await loaded(AsyncMPIJobHook())


async def test_connection_extras_shipped_to_a_trigger_need_no_lookup(monkeypatch, kubeconfig_file):
    monkeypatch.delenv("AIRFLOW_CONN_KUBERNETES_DEFAULT")
    hook = AsyncMPIJobHook(
        conn_id="not_defined_anywhere", connection_extras={"kube_config_path": kubeconfig_file()}
    )
    assert (await loaded(hook)).host == "https://from-file:6443"


async def test_in_cluster_extra(connection, monkeypatch):
    calls = []

    def fake_incluster(client_configuration=None, **kwargs):
        calls.append(client_configuration)
        client_configuration.host = "https://10.0.0.1:443"

    monkeypatch.setattr(async_config, "load_incluster_config", fake_incluster)
    connection(in_cluster=True)
    hook = AsyncMPIJobHook()
    assert (await loaded(hook)).host == "https://10.0.0.1:443"
    assert calls == [hook.client_configuration]


async def test_no_config_tries_in_cluster_first(monkeypatch):
    monkeypatch.setattr(
        async_config,
        "load_incluster_config",
        lambda client_configuration=None, **kw: setattr(client_configuration, "host", "https://in-pod:443"),
    )
    default = mock.AsyncMock()
    monkeypatch.setattr(async_config, "load_kube_config", default)
    hook = AsyncMPIJobHook()
    assert (await loaded(hook)).host == "https://in-pod:443"
    default.assert_not_called()


async def test_no_config_outside_a_pod_uses_the_default_kubeconfig(monkeypatch):
    def not_in_pod(**kwargs):
        raise async_config.ConfigException("Service host/port is not set.")

    monkeypatch.setattr(async_config, "load_incluster_config", not_in_pod)
    default = mock.AsyncMock()
    monkeypatch.setattr(async_config, "load_kube_config", default)
    hook = AsyncMPIJobHook(cluster_context="ctx")
    await loaded(hook)
    default.assert_awaited_once_with(context="ctx", client_configuration=hook.client_configuration)


@pytest.mark.parametrize(("exec_auth", "loads"), [(False, 1), (True, 3)])
async def test_static_credentials_load_once_exec_credentials_every_call(
    kubeconfig_file, monkeypatch, exec_auth, loads
):
    real = async_config.load_kube_config

    async def load(**kwargs):
        if not exec_auth:  # an exec plugin would run a command: only count those loads
            await real(**kwargs)

    counted = mock.AsyncMock(side_effect=load)
    monkeypatch.setattr(async_config, "load_kube_config", counted)
    hook = AsyncMPIJobHook(config_file=kubeconfig_file(exec_auth=exec_auth))
    for _ in range(3):
        await hook._load_client_config()
    assert counted.await_count == loads


async def test_get_conn_builds_a_client_from_the_connection_and_closes_it(connection, kubeconfig_file):
    connection(kube_config_path=kubeconfig_file())
    hook = AsyncMPIJobHook()
    async with hook.get_conn() as api_client:
        assert api_client.configuration.host == "https://from-file:6443"
        session = api_client.rest_client.pool_manager
        assert not session.closed
    assert session.closed


async def test_async_with_shares_one_client_and_closes_it(kubeconfig_file):
    hook = AsyncMPIJobHook(config_file=kubeconfig_file())
    async with hook as same:
        assert same is hook
        async with hook.get_conn() as first, hook.get_conn() as second:
            assert first is second
        session = first.rest_client.pool_manager
        assert not session.closed
    assert session.closed
    async with hook.get_conn() as own:
        assert own is not first


async def test_from_sync_reaches_the_cluster_like_the_sync_hook(connection, kubeconfig_file):
    connection(kube_config_path=kubeconfig_file(), namespace="conn-ns")
    sync = MPIJobHook(api_version="kubeflow.org/v1", cluster_context="other", disable_verify_ssl=True)
    hook = AsyncMPIJobHook.from_sync(sync)
    assert (hook.conn_id, hook.api_version, hook.version) == ("kubernetes_default", "kubeflow.org/v1", "v1")
    assert hook._extras == {"kube_config_path": kubeconfig_file(), "namespace": "conn-ns"}
    cfg = await loaded(hook)
    assert cfg.host == "https://other-context:6443"
    assert cfg.verify_ssl is False


async def test_namespace_precedence(connection, in_cluster_namespace):
    connection(namespace="conn-ns")
    hook = AsyncMPIJobHook()
    assert await hook.resolve_namespace("explicit") == "explicit"
    assert await hook.resolve_namespace(None) == "conn-ns"
    connection(namespace="")
    assert await AsyncMPIJobHook().resolve_namespace() == "pod-ns"


async def test_namespace_default_outside_a_pod():
    assert await AsyncMPIJobHook().get_namespace() == "default"


# --------------------------------------------------------------------------- requests
class Boundary:
    """The kubernetes_asyncio API objects the hook creates, replaced by AsyncMocks."""

    def __init__(self):
        self.api_client = mock.MagicMock(name="ApiClient")
        self.api_client.call_api = mock.AsyncMock()
        self.custom = mock.MagicMock(name="CustomObjectsApi")
        for name in (
            "create_namespaced_custom_object",
            "get_namespaced_custom_object",
            "delete_namespaced_custom_object",
            "list_namespaced_custom_object",
        ):
            setattr(self.custom, name, mock.AsyncMock(name=name))
        # the MPIJob whose pods (k8s_fakes.pod: controlled by uid-job) the pod listings keep (hooks/ownership.py)
        self.custom.get_namespaced_custom_object.return_value = {
            "metadata": {"name": "job", "uid": "uid-job"}
        }
        self.core = mock.MagicMock(name="CoreV1Api")
        self.core.list_namespaced_pod = mock.AsyncMock()
        self.core.list_namespaced_event = mock.AsyncMock()
        self.connections = 0


@pytest.fixture
def boundary(monkeypatch):
    b = Boundary()
    monkeypatch.setattr(async_client, "CustomObjectsApi", lambda api_client: b.custom)
    monkeypatch.setattr(async_client, "CoreV1Api", lambda api_client: b.core)
    return b


def make_hook(boundary, api_version="kubeflow.org/v2beta1") -> AsyncMPIJobHook:
    hook = AsyncMPIJobHook(api_version=api_version)

    @contextlib.asynccontextmanager
    async def fake_conn():
        boundary.connections += 1
        yield boundary.api_client

    hook.get_conn = fake_conn
    return hook


@pytest.fixture
def hook(boundary):
    return make_hook(boundary)


async def test_get_missing_is_none_and_transient_errors_are_retried(hook, boundary):
    boundary.custom.get_namespaced_custom_object.side_effect = [
        async_api_error(503),
        aiohttp.ClientConnectionError(),
        async_api_error(404, NOT_FOUND_OBJECT),
    ]
    assert await hook.get_mpijob("job", "ns") is None
    assert boundary.custom.get_namespaced_custom_object.await_count == 3
    assert boundary.connections == 3  # each attempt on a fresh client


async def test_a_wait_reads_the_real_hook_through_an_outage(hook, boundary, monkeypatch):
    """The waits call the hook's shared reads (plain methods returning an awaitable) through ``through_outage``:
    the job comes back as a dict, after an outage longer than one call's own retries."""
    from airflow_mpi.hooks import retries

    monkeypatch.setattr(retries, "OUTAGE_RETRY_DELAY", 0)
    job = {"metadata": {"name": "job", "uid": "u1"}}
    boundary.custom.get_namespaced_custom_object.side_effect = [aiohttp.ClientConnectionError()] * 6 + [job]
    assert await retries.through_outage(hook.get_mpijob, "job", "ns") == job
    assert boundary.custom.get_namespaced_custom_object.await_count == 7


async def test_get_does_not_retry_forbidden(hook, boundary):
    boundary.custom.get_namespaced_custom_object.side_effect = async_api_error(403)
    with pytest.raises(ApiException):
        await hook.get_mpijob("job", "ns")
    boundary.custom.get_namespaced_custom_object.assert_awaited_once()


async def test_delete_propagation_policy_and_missing(hook, boundary):
    assert await hook.delete_mpijob("job", "ns", propagation_policy="Background") is True
    kwargs = boundary.custom.delete_namespaced_custom_object.await_args.kwargs
    assert kwargs["body"]["propagationPolicy"] == "Background"
    assert (kwargs["namespace"], kwargs["name"], kwargs["plural"]) == ("ns", "job", "mpijobs")
    boundary.custom.delete_namespaced_custom_object.side_effect = async_api_error(404, NOT_FOUND_OBJECT)
    assert await hook.delete_mpijob("job", "ns") is False


async def test_launcher_pods_selectors_and_order(boundary):
    hook = make_hook(boundary)
    boundary.core.list_namespaced_pod.return_value = pod_list(
        pod("l-old", "2026-11-22T10:00:00"), pod("l-new", "2026-11-22T10:01:00")
    )
    assert [p.metadata.name for p in await hook.launcher_pods("job", "ns")] == ["l-new", "l-old"]
    boundary.core.list_namespaced_pod.assert_awaited_once_with(
        namespace="ns",
        label_selector="training.kubeflow.org/job-name=job,training.kubeflow.org/job-role=launcher",
    )

    v1 = make_hook(boundary, "kubeflow.org/v1")
    boundary.core.list_namespaced_pod.reset_mock()
    boundary.core.list_namespaced_pod.return_value = pod_list()
    assert await v1._role_pods("job", "ns", WORKER) == []
    assert [c.kwargs["label_selector"] for c in boundary.core.list_namespaced_pod.await_args_list] == [
        "training.kubeflow.org/job-name=job,training.kubeflow.org/replica-type=worker",
        "mpi-job-name=job,mpi-job-role=worker",
    ]


async def test_read_pod_log_request_and_lines(hook, boundary):
    body = "2026-11-22T10:00:00Z a\n2026-11-22T10:00:01Z ß-split\n2026-11-22T10:00:02Z tail".encode()
    resp = FakeAioResponse(split_bytes(body, 25, 20, 1))
    boundary.api_client.call_api.return_value = resp

    lines = [
        line
        async for line in hook.read_pod_log(
            "p", "ns", container="launcher", since_time="2026-11-22T10:00:00Z", previous=True, follow=True
        )
    ]

    assert lines == ["2026-11-22T10:00:00Z a", "2026-11-22T10:00:01Z ß-split", "2026-11-22T10:00:02Z tail"]
    args, kwargs = boundary.api_client.call_api.await_args
    assert args == ("/api/v1/namespaces/{namespace}/pods/{name}/log", "GET")
    assert kwargs["path_params"] == {"namespace": "ns", "name": "p"}
    assert dict(kwargs["query_params"]) == {
        "container": "launcher",
        "timestamps": "true",
        "follow": "true",
        "previous": "true",
        "sinceTime": "2026-11-22T10:00:00Z",
    }
    assert kwargs["_preload_content"] is False
    assert kwargs["_request_timeout"] == hook.log_request_timeout
    assert resp.closed


async def test_read_pod_log_broken_stream_raises_and_drops_the_unfinished_line(hook, boundary):
    resp = FakeAioResponse([b"2026-11-22T10:00:00Z complete\n2026-11-22T10:00:01Z unfin"])

    async def broken():
        for chunk in resp._chunks:
            yield chunk
        raise aiohttp.ClientPayloadError("Response payload is not completed")

    resp.content.iter_any = broken
    boundary.api_client.call_api.return_value = resp
    seen = []
    with pytest.raises(aiohttp.ClientPayloadError):
        async for line in hook.read_pod_log("p", "ns", follow=True):
            seen.append(line)
    assert seen == ["2026-11-22T10:00:00Z complete"]
    assert resp.closed


async def test_read_pod_log_closes_the_response_when_abandoned(hook, boundary):
    resp = FakeAioResponse([b"2026-11-22T10:00:00Z one\n2026-11-22T10:00:01Z two\n"])
    boundary.api_client.call_api.return_value = resp
    lines = hook.read_pod_log("p", "ns")
    assert await anext(lines) == "2026-11-22T10:00:00Z one"
    await lines.aclose()
    assert resp.closed


async def test_a_stream_error_status_is_raised_and_retried_when_transient(hook, monkeypatch):
    from airflow_mpi.hooks import retries

    ok = FakeAioResponse([b"x"])
    failing = FakeAioResponse(status=503, body=b"unavailable")
    request = mock.AsyncMock(side_effect=[failing, ok])
    assert await hook.open_stream(request, "/path", _preload_content=False) is ok
    assert failing.released and request.await_count == 2
    request = mock.AsyncMock(return_value=FakeAioResponse(status=403, body=b"forbidden"))
    with pytest.raises(ApiException) as info:  # just after the 503: an API server back, its RBAC not synced
        await hook.open_stream(request)
    assert info.value.status == 403 and request.await_count == hook.api_retries
    monkeypatch.setattr(retries._Recent, "last", None)  # no failure seen lately: a 403 is the answer
    request = mock.AsyncMock(return_value=FakeAioResponse(status=403, body=b"forbidden"))
    with pytest.raises(ApiException) as info:
        await hook.open_stream(request)
    assert info.value.status == 403 and request.await_count == 1


@pytest.mark.parametrize("status", [400, 404])
async def test_read_pod_log_unavailable(hook, boundary, status):
    boundary.api_client.call_api.return_value = FakeAioResponse(
        status=status,
        body=json.dumps({"kind": "Status", "message": "previous terminated container not found"}).encode(),
    )
    with pytest.raises(PodLogUnavailable, match="previous terminated container") as info:
        async for _ in hook.read_pod_log("p", "ns", previous=True):
            pass
    assert info.value.status == status


async def test_events_as_dicts_oldest_first(hook, boundary):
    payload = {
        "items": [
            event("late", last="2026-11-22T10:00:09Z", kind="MPIJob", obj="job"),
            event("early", last="2026-11-22T10:00:01Z", kind="MPIJob", obj="job"),
        ]
    }
    boundary.core.list_namespaced_event.return_value = FakeAioResponse(body=json.dumps(payload).encode())
    assert [e["metadata"]["name"] for e in await hook.job_events("job", "ns")] == ["early", "late"]
    boundary.core.list_namespaced_event.assert_awaited_once_with(
        namespace="ns",
        field_selector="involvedObject.kind=MPIJob,involvedObject.name=job",
        _preload_content=False,
    )

    boundary.core.list_namespaced_event.reset_mock()
    boundary.core.list_namespaced_event.side_effect = lambda **kw: FakeAioResponse(body=b'{"items": []}')
    assert await hook.pod_events(["p1", "p2"], "ns") == []
    assert [c.kwargs["field_selector"] for c in boundary.core.list_namespaced_event.await_args_list] == [
        "involvedObject.kind=Pod,involvedObject.name=p1",
        "involvedObject.kind=Pod,involvedObject.name=p2",
    ]


async def test_pod_events_per_pod_merged_and_sorted(hook, boundary):
    pages = {
        "involvedObject.kind=Pod,involvedObject.name=p1": [event("a", last="2026-11-22T10:00:03Z", obj="p1")],
        "involvedObject.kind=Pod,involvedObject.name=p2": [
            event("b", first="2026-11-22T10:00:01Z", obj="p2"),
            event("a", last="2026-11-22T10:00:03Z", obj="p1"),
        ],
    }
    boundary.core.list_namespaced_event.side_effect = lambda **kw: FakeAioResponse(
        body=json.dumps({"items": pages[kw["field_selector"]]}).encode()
    )
    assert [e["metadata"]["name"] for e in await hook.pod_events(["p1", "p2"], "ns")] == ["b", "a"]
