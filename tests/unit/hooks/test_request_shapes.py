"""The pure pieces both hooks share: line splitting, error classification, selectors, time formats, requests."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

import aiohttp
import pytest
from k8s_fakes import (
    NOT_FOUND_OBJECT,
    NOT_FOUND_URL,
    api_error,
    async_api_error,
    mpijob,
    split_bytes,
    watch_lines,
)
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError, ProtocolError

from airflow_mpi.hooks.answers import LineSplitter, WatchDecoder, aiter_lines, iter_lines
from airflow_mpi.hooks.errors import (
    MPIJobAPIUnavailable,
    WatchExpired,
    is_missing_resource_type,
    is_transient,
)
from airflow_mpi.hooks.kubeconfig import kubeconfig_uses_dynamic_auth
from airflow_mpi.hooks.requests import (
    LogRequest,
    format_since_time,
    pod_selectors,
    split_api_version,
    watch_request_timeout,
)
from localcluster.processes import child_env


def test_line_splitter_joins_across_chunks_and_flushes_the_rest():
    splitter = LineSplitter()
    assert splitter.feed(b"ab") == []
    assert splitter.feed(b"c\nde") == ["abc"]
    assert splitter.feed(b"f\n\ng") == ["def", ""]
    assert splitter.flush() == ["g"]
    assert splitter.flush() == []


def test_line_splitter_multibyte_character_split_between_chunks():
    data = "x€y\n".encode()
    assert list(iter_lines([data[:2], data[2:3], data[3:]])) == ["x€y"]


def test_iter_lines_no_trailing_partial_when_stream_ends_with_newline():
    assert list(iter_lines([b"a\n", b"b\r\n"])) == ["a", "b"]
    assert list(iter_lines([])) == []
    assert list(iter_lines(["str chunk\n"])) == ["str chunk"]


@pytest.mark.asyncio
async def test_aiter_lines_keeps_the_partial_last_line():
    async def chunks():
        for c in (b"one\ntw", b"o\nthr", b"ee"):
            yield c

    assert [line async for line in aiter_lines(chunks())] == ["one", "two", "three"]


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (api_error(429), True),
        (api_error(500), True),
        (api_error(502), True),
        (api_error(503), True),
        (api_error(504), True),
        (async_api_error(503), True),
        (api_error(409), False),  # the stock hook retries 409: a replayed create then never adopts
        (api_error(404), False),
        (api_error(403), False),
        (api_error(410), False),
        (ProtocolError("Connection aborted."), True),
        (MaxRetryError(None, "/api", "refused"), True),
        (ConnectionResetError(), True),
        (TimeoutError(), True),
        (aiohttp.ClientConnectionError(), True),
        (aiohttp.ServerDisconnectedError(), True),
        (ValueError("bad"), False),
    ],
)
def test_is_transient(exc, transient):
    assert is_transient(exc) is transient


def test_missing_resource_type_vs_missing_object():
    assert is_missing_resource_type(api_error(404, NOT_FOUND_URL)) is True
    assert is_missing_resource_type(async_api_error(404, NOT_FOUND_URL.encode())) is True
    assert is_missing_resource_type(api_error(404, NOT_FOUND_OBJECT)) is False
    assert is_missing_resource_type(api_error(500, NOT_FOUND_URL)) is False


def test_format_since_time():
    assert format_since_time(
        datetime(2026, 11, 22, 12, 0, 0, 999999, tzinfo=timezone(timedelta(hours=2)))
    ) == ("2026-11-22T10:00:00Z")
    assert format_since_time(datetime(2026, 11, 22, 10, 0, 0)) == "2026-11-22T10:00:00Z"  # naive = UTC
    assert format_since_time(" 2026-11-22T10:00:00Z ") == "2026-11-22T10:00:00Z"
    with pytest.raises(TypeError):
        format_since_time(1234567890)


def test_log_query_params_order_and_omissions():
    assert LogRequest("p", "ns", 1).query == [("timestamps", "true")]
    assert LogRequest("p", "ns", 1, container="c", tail_lines=0, limit_bytes=10).query == [
        ("container", "c"),
        ("timestamps", "true"),
        ("tailLines", "0"),
        ("limitBytes", "10"),
    ]


def test_log_request_path_query_and_transport():
    since = datetime(2026, 11, 22, 11, 0, 5, 900000, tzinfo=timezone(timedelta(hours=1)))
    req = LogRequest(
        "job-launcher-x",
        "ns",
        (30.0, 300.0),
        container="launcher",
        since_time=since,
        previous=True,
        follow=True,
        tail_lines=10,
    )
    assert req.args == ("/api/v1/namespaces/{namespace}/pods/{name}/log", "GET")
    kwargs = req.kwargs
    assert kwargs["path_params"] == {"namespace": "ns", "name": "job-launcher-x"}
    assert dict(kwargs["query_params"]) == {
        "container": "launcher",
        "timestamps": "true",
        "follow": "true",
        "previous": "true",
        "sinceTime": "2026-11-22T10:00:05Z",  # UTC, second precision, floored
        "tailLines": "10",
    }
    assert kwargs["_preload_content"] is False
    assert kwargs["auth_settings"] == ["BearerToken"]
    assert kwargs["_request_timeout"] == (30.0, 300.0)


def test_log_request_since_time_string_and_naive_datetime():
    assert (
        dict(LogRequest("p", "ns", 1, since_time="2026-11-22T10:00:00Z").query)["sinceTime"]
        == "2026-11-22T10:00:00Z"
    )
    naive = datetime(2026, 11, 22, 10, 0, 1, 999999)
    assert dict(LogRequest("p", "ns", 1, since_time=naive).query)["sinceTime"] == "2026-11-22T10:00:01Z"


# --------------------------------------------------------------------------- watches (answers.WatchDecoder)
def decode(decoder: WatchDecoder, *chunks: bytes) -> list[tuple[str, dict]]:
    return [event for line in iter_lines(chunks) if (event := decoder.decode(line)) is not None]


def test_watch_events_split_across_chunks_and_the_version_they_leave():
    stream = watch_lines(("MODIFIED", mpijob(rv="43")), ("MODIFIED", mpijob(rv="44")))
    decoder = WatchDecoder("job", "ns", "42", False, ApiException)
    events = decode(decoder, *split_bytes(stream, 10, 70, 1))
    assert [(t, o["metadata"]["resourceVersion"]) for t, o in events] == [
        ("MODIFIED", "43"),
        ("MODIFIED", "44"),
    ]
    assert decoder.last_rv == "44"
    assert watch_request_timeout(30) == (
        30.0,
        45.0,
    )  # idle limit past the server's 30 s, not the client's 60 s


def test_watch_410_error_event_raises_watch_expired_with_last_version():
    gone = {
        "kind": "Status",
        "code": 410,
        "reason": "Expired",
        "message": "too old resource version: 42 (50)",
    }
    decoder = WatchDecoder("job", "ns", "42", False, ApiException)
    seen = []
    with pytest.raises(WatchExpired) as info:
        for line in iter_lines([watch_lines(("MODIFIED", mpijob(rv="43")), ("ERROR", gone))]):
            seen.append(decoder.decode(line))
    assert len(seen) == 1
    assert info.value.resource_version == "43"
    assert "too old" in str(info.value)


def test_watch_request_errors():
    decoder = WatchDecoder("job", "ns", "7", False, ApiException)
    with pytest.raises(WatchExpired, match="too old") as info:
        decoder.raise_open_error(async_api_error(410, b'{"kind":"Status","code":410,"message":"too old"}'))
    assert info.value.resource_version == "7"
    with pytest.raises(MPIJobAPIUnavailable):
        decoder.raise_open_error(api_error(404, NOT_FOUND_URL))
    with pytest.raises(ApiException):
        decoder.raise_open_error(api_error(503))


def test_watch_other_error_event_raises_api_exception():
    with pytest.raises(ApiException) as info:
        decode(
            WatchDecoder("job", "ns", None, False, ApiException),
            watch_lines(("ERROR", {"code": 500, "reason": "InternalError", "message": "boom"})),
        )
    assert info.value.status == 500


def test_watch_bookmarks_only_when_asked():
    lines = watch_lines(("BOOKMARK", {"metadata": {"resourceVersion": "99"}}), ("MODIFIED", mpijob()))
    assert [t for t, _ in decode(WatchDecoder("job", "ns", None, False, ApiException), lines)] == ["MODIFIED"]
    bookmarked = WatchDecoder("job", "ns", None, True, ApiException)
    assert [t for t, _ in decode(bookmarked, lines)] == ["BOOKMARK", "MODIFIED"]


def test_pod_selectors_per_api_version():
    assert pod_selectors("kubeflow.org/v2beta1", "j", "launcher") == [
        "training.kubeflow.org/job-name=j,training.kubeflow.org/job-role=launcher"
    ]
    assert pod_selectors("kubeflow.org/v1", "j", "worker") == [
        "training.kubeflow.org/job-name=j,training.kubeflow.org/replica-type=worker",
        "mpi-job-name=j,mpi-job-role=worker",
    ]


def test_split_api_version():
    assert split_api_version("kubeflow.org/v2beta1") == ("kubeflow.org", "v2beta1")
    for bad in ("", "kubeflow.org", "kubeflow.org/", "example.org/v1"):
        with pytest.raises(ValueError):
            split_api_version(bad)


def _config(user: dict, context="main") -> dict:
    return {
        "current-context": context,
        "contexts": [{"name": "main", "context": {"user": "u"}}, {"name": "alt", "context": {"user": "x"}}],
        "users": [{"name": "u", "user": user}, {"name": "x", "user": {"token": "t"}}],
    }


def test_dynamic_auth_detection_follows_the_active_context():
    assert kubeconfig_uses_dynamic_auth(_config({"token": "t"})) is False
    assert kubeconfig_uses_dynamic_auth(_config({"exec": {"command": "aws"}})) is True
    assert kubeconfig_uses_dynamic_auth(_config({"auth-provider": {"name": "oidc"}})) is True
    assert kubeconfig_uses_dynamic_auth(_config({"exec": {"command": "aws"}}), context="alt") is False
    assert kubeconfig_uses_dynamic_auth(None) is True
    assert kubeconfig_uses_dynamic_auth(_config({"token": "t"}, context="missing")) is True


def test_hooks_package_and_errors_do_not_import_the_kubernetes_clients():
    code = (
        "import sys\n"
        "import airflow  # Airflow 2.11 itself loads the kubernetes client; only our additions count\n"
        "before = {m for m in ('kubernetes', 'kubernetes_asyncio') if m in sys.modules}\n"
        "import airflow_mpi.hooks\n"
        "from airflow_mpi.hooks import MPIJobConflictError, WatchExpired\n"
        "from airflow_mpi.hooks.errors import PodLogUnavailable\n"
        "loaded = [m for m in ('kubernetes', 'kubernetes_asyncio') if m in sys.modules and m not in before]\n"
        "assert not loaded, loaded\n"
        "from airflow_mpi.hooks import MPIJobHook, AsyncMPIJobHook\n"
        "assert 'kubernetes' in sys.modules and 'kubernetes_asyncio' in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=child_env()
    )
    assert result.returncode == 0, result.stderr[-2000:]
