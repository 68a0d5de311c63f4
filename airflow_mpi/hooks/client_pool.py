"""One Kubernetes API client per (event loop, cluster identity): what the waits of a triggerer share.

Every trigger's hook used to open an API client of its own inside ``async with``: an aiohttp session, a connection
pool, an SSL context with the cluster's CA and a TLS connection per wait. At hundreds of waits per triggerer that was
most of the memory a wait cost beyond the shared watch (issue 11: TLS handshakes and read buffers for 300
connections where 66 were needed). Hooks that reach the same cluster as the same user share one client, counted,
closed when the last one leaves; credentials that change under a client (exec plugins, auth providers) never are.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_mpi.hooks.loop_registry import live_key, of_running_loop

if TYPE_CHECKING:
    from airflow_mpi.hooks.async_mpijob import AsyncMPIJobHook


@dataclass
class _Shared:
    client: Any
    users: int


_POOL: dict[tuple, _Shared] = {}


def identity(hook: AsyncMPIJobHook) -> tuple:
    """Hooks with equal identities reach the same cluster as the same user (connection, config, extras)."""
    settings = (
        hook.config_file,
        hook.cluster_context,
        hook.in_cluster,
        hook.disable_verify_ssl,
        json.dumps(hook.config_dict, sort_keys=True, default=str),
        json.dumps(getattr(hook, "_extras", None), sort_keys=True, default=str),
    )
    return (hook.conn_id, hook.api_version, settings)


def acquire(key: Any, factory: Callable[[], Any]) -> Any:
    """The client shared under ``key`` in the running loop, made by ``factory`` if there is none."""
    pool_key = live_key(_POOL, key)
    shared = _POOL.get(pool_key)
    if shared is None:
        shared = _POOL[pool_key] = _Shared(factory(), 0)
    shared.users += 1
    return shared.client


async def release(key: Any, client: Any) -> None:
    """One user fewer; the last one closes the client."""
    pool_key = live_key(_POOL, key)
    shared = _POOL.get(pool_key)
    if shared is None or shared.client is not client:  # not pooled (or its loop's pool was dropped)
        await client.close()
        return
    shared.users -= 1
    if shared.users <= 0:
        del _POOL[pool_key]
        await client.close()


def shared_clients() -> int:
    """Clients open in the running loop (tests, benchmarks)."""
    return len(of_running_loop(_POOL))
