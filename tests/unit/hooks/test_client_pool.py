"""One API client per (event loop, cluster identity): hooks of the same user share it, others never do."""

from __future__ import annotations

import asyncio

import yaml

from airflow_mpi.hooks import client_pool
from airflow_mpi.hooks.async_mpijob import AsyncMPIJobHook
from tests.unit.hooks.test_async_mpijob_hook import kubeconfig


def write(tmp_path, name: str, **kwargs) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(kubeconfig(**kwargs)))
    return str(path)


async def test_hooks_of_one_user_share_one_client_closed_by_the_last(tmp_path):
    path = write(tmp_path, "k")
    a, b = AsyncMPIJobHook(config_file=path), AsyncMPIJobHook(config_file=path)
    async with a:
        async with b:
            assert a._shared_client is b._shared_client and client_pool.shared_clients() == 1
            shared = a._shared_client
        assert not shared.rest_client.pool_manager.closed  # a still uses it
        async with a.get_conn() as client:
            assert client is shared
    assert shared.rest_client.pool_manager.closed and client_pool.shared_clients() == 0


async def test_other_clusters_users_or_api_versions_never_share(tmp_path):
    path = write(tmp_path, "k")
    hooks = [
        AsyncMPIJobHook(config_file=path),
        AsyncMPIJobHook(config_file=write(tmp_path, "other-token", token="another-user")),
        AsyncMPIJobHook(config_file=path, cluster_context="other"),
        AsyncMPIJobHook(config_file=path, api_version="kubeflow.org/v1"),
    ]
    for hook in hooks:
        await hook.__aenter__()
    try:
        assert len({id(h._shared_client) for h in hooks}) == len(hooks) == client_pool.shared_clients()
    finally:
        for hook in hooks:
            await hook.__aexit__(None, None, None)
    assert client_pool.shared_clients() == 0


async def test_short_lived_credentials_get_a_client_of_their_own(tmp_path):
    """exec plugins refresh tokens in the hook's own configuration: a client shared with it would go stale."""
    path = write(tmp_path, "exec", exec_auth=True)
    a, b = AsyncMPIJobHook(config_file=path), AsyncMPIJobHook(config_file=path)
    a._load_client_config = b._load_client_config = _no_exec  # no exec plugin (get-token) here
    async with a, b:
        assert a._shared_client is not b._shared_client and client_pool.shared_clients() == 0


async def _no_exec() -> None:
    return None


def test_each_event_loop_has_its_own_client(tmp_path):
    """aiohttp sessions belong to one loop: a loop that ended without its hooks leaving never lends its client."""
    path = write(tmp_path, "k")
    clients = []

    async def enter_and_never_leave():
        hook = AsyncMPIJobHook(config_file=path)
        await hook.__aenter__()
        clients.append(hook._shared_client)
        await hook._shared_client.close()  # closed, but still in the pool: as if the loop had just ended

    asyncio.run(enter_and_never_leave())
    asyncio.run(enter_and_never_leave())
    assert clients[0] is not clients[1]
