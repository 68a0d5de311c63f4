"""hooks/token_file.py: an in-cluster configuration sends the token its file holds from the first request after the
file changed, with both Kubernetes clients' own in-cluster loaders (real ones, files in tmp_path); and both hooks'
configurations follow it (issue 36; on a real API server: tests/integration/test_rotating_token.py)."""

from __future__ import annotations

import asyncio
import inspect
import os
from pathlib import Path
from types import ModuleType

import pytest
from kubernetes import client as sync_client
from kubernetes.config import incluster_config as sync_incluster
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio.config import incluster_config as async_incluster

from airflow_mpi.hooks.async_mpijob import AsyncMPIJobHook
from airflow_mpi.hooks.mpijob import MPIJobHook
from airflow_mpi.hooks.token_file import follow_token_file

LIBRARIES = {"sync": (sync_incluster, sync_client), "async": (async_incluster, async_client)}


@pytest.fixture
def token_file(monkeypatch, tmp_path) -> Path:
    """A pod's token (``token-a``) and CA files where both libraries' loaders read them, and its environment."""
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("token-a")
    ca.write_text("not read: no request is sent")
    for library in (sync_incluster, async_incluster):
        monkeypatch.setattr(library, "SERVICE_TOKEN_FILENAME", str(token))
        monkeypatch.setattr(library, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    # the sync loader makes its configuration the process's default: the next tests get theirs back
    monkeypatch.setattr(sync_client.Configuration, "_default", sync_client.Configuration._default)
    return token


def rotate(path: Path, token: str) -> None:
    """As kubelet: a whole new file in the old one's place."""
    written = path.with_name(".new")
    written.write_text(token)
    os.replace(written, path)


def sent(configuration) -> str:
    """The token the configuration's next request carries (its scheme's case differs between the libraries)."""
    key = configuration.get_api_key_with_prefix("BearerToken")
    return (asyncio.run(key) if inspect.isawaitable(key) else key).split(" ", 1)[1]


def loaded(library: ModuleType, client_module: ModuleType, token_file: Path, refresh: bool = True):
    """A configuration the library's own in-cluster loader filled, followed."""
    configuration = client_module.Configuration()
    library.InClusterConfigLoader(
        token_filename=str(token_file), cert_filename=library.SERVICE_CERT_FILENAME, try_refresh_token=refresh
    ).load_and_set(configuration)
    follow_token_file(configuration, str(token_file))
    return configuration


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_replaced_token_is_sent_at_the_next_request_not_a_minute_later(token_file, library):
    configuration = loaded(*LIBRARIES[library], token_file)
    assert sent(configuration) == "token-a"
    rotate(token_file, "token-b")
    assert sent(configuration) == "token-b"
    assert sent(configuration) == "token-b"  # the sync library's hook put itself back in front: ours again
    rotate(token_file, "token-c")
    assert sent(configuration) == "token-c"


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_missing_or_empty_file_keeps_the_token_sent(token_file, library):
    configuration = loaded(*LIBRARIES[library], token_file)
    rotate(token_file, "token-b")
    assert sent(configuration) == "token-b"
    token_file.unlink()
    assert sent(configuration) == "token-b"
    token_file.write_text("")
    assert sent(configuration) == "token-b"


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_configuration_that_never_refreshes_is_left_alone(token_file, library):
    configuration = loaded(*LIBRARIES[library], token_file, refresh=False)
    assert configuration.refresh_api_key_hook is None
    rotate(token_file, "token-b")
    assert sent(configuration) == "token-a"


def test_following_twice_wraps_once(token_file):
    configuration = loaded(*LIBRARIES["async"], token_file)
    ours = configuration.refresh_api_key_hook
    follow_token_file(configuration, str(token_file))
    assert configuration.refresh_api_key_hook is ours


def test_the_sync_hooks_in_cluster_client_follows_the_file(token_file, connection):
    connection(in_cluster=True)
    configuration = MPIJobHook().api_client.configuration
    assert sent(configuration) == "token-a"
    rotate(token_file, "token-b")
    assert sent(configuration) == "token-b"


async def test_the_async_hooks_in_cluster_configuration_follows_the_file(token_file, connection):
    connection(in_cluster=True)
    hook = AsyncMPIJobHook()
    await hook._load_client_config()
    configuration = hook.client_configuration
    assert (await configuration.get_api_key_with_prefix("BearerToken")) == "Bearer token-a"
    rotate(token_file, "token-b")
    assert (await configuration.get_api_key_with_prefix("BearerToken")) == "Bearer token-b"
