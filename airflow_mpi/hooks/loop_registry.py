"""Registries of objects that belong to one event loop (watch hubs, API clients): keyed by the loop itself.

aiohttp sessions and asyncio tasks cannot cross loops, and a loop that ended (``asyncio.run`` torn down, a
test's loop) may leave its entries behind. Keying by the loop object, never by ``id(loop)`` (a dead loop's
id() comes back), and dropping the entries of closed loops on every lookup keeps each loop to its own.
"""

from __future__ import annotations

import asyncio
from typing import Any


def live_key(registry: dict, *rest: Any) -> tuple:
    """``(running loop, *rest)``, after removing the entries of ``registry`` whose loop is closed."""
    for stale in [k for k in registry if k[0].is_closed()]:
        del registry[stale]
    return (asyncio.get_running_loop(), *rest)


def of_running_loop(registry: dict) -> list:
    loop = asyncio.get_running_loop()
    return [value for key, value in registry.items() if key[0] is loop]
