"""The pure pieces both hooks share: line splitting, error classification, selectors, time formats."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

import aiohttp
import pytest
from k8s_fakes import NOT_FOUND_OBJECT, NOT_FOUND_URL, api_error, async_api_error
from urllib3.exceptions import MaxRetryError, ProtocolError

from airflow_mpi.hooks.api_errors import is_missing_resource_type, is_transient
from airflow_mpi.hooks.k8s_requests import (
    LineSplitter,
    aiter_lines,
    format_since_time,
    iter_lines,
    log_query_params,
    pod_selectors,
    split_api_version,
)
from airflow_mpi.hooks.kubeconfig import kubeconfig_uses_dynamic_auth


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
    assert format_since_time(datetime(2026, 11, 22, 12, 0, 0, 999999, tzinfo=timezone(timedelta(hours=2)))) == (
        "2026-11-22T10:00:00Z"
    )
    assert format_since_time(datetime(2026, 11, 22, 10, 0, 0)) == "2026-11-22T10:00:00Z"  # naive = UTC
    assert format_since_time(" 2026-11-22T10:00:00Z ") == "2026-11-22T10:00:00Z"
    with pytest.raises(TypeError):
        format_since_time(1234567890)


def test_log_query_params_order_and_omissions():
    assert log_query_params() == [("timestamps", "true")]
    assert log_query_params(container="c", tail_lines=0, limit_bytes=10) == [
        ("container", "c"), ("timestamps", "true"), ("tailLines", "0"), ("limitBytes", "10")]


def test_pod_selectors_per_api_version():
    assert pod_selectors("kubeflow.org/v2beta1", "j", "launcher") == [
        "training.kubeflow.org/job-name=j,training.kubeflow.org/job-role=launcher"]
    assert pod_selectors("kubeflow.org/v1", "j", "worker") == [
        "training.kubeflow.org/job-name=j,training.kubeflow.org/replica-type=worker",
        "mpi-job-name=j,mpi-job-role=worker",
    ]


def test_split_api_version():
    assert split_api_version("kubeflow.org/v2beta1") == ("kubeflow.org", "v2beta1")
    for bad in ("", "kubeflow.org", "kubeflow.org/", "trainer.kubeflow.org/v1alpha1"):
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
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
