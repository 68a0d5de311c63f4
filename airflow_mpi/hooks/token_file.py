"""A pod's service-account token, sent as its file holds it: read again at the first request after kubelet replaced
the file, not up to a minute later.

Both Kubernetes clients' in-cluster configuration reads the projected token file again once a minute
(``refresh_api_key_hook``, installed by ``load_incluster_config``). A token refused within that minute (revoked with
the object it is bound to, or a cluster that lets tokens expire close to their rotation) got 401 for the requests of
that minute, and a 401 is an answer, not retried (hooks/retries.py): a triggerer's watch hub renewing a watch then
failed every wait it served (issue 36; tests/integration/test_rotating_token.py). :func:`follow_token_file` wraps the
library's hook: one ``stat`` of the file per request, a read when it changed (kubelet swaps it atomically).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable
from typing import Any

_FOLLOWS = "_airflow_mpi_follows_token_file"  # marks a hook that is already ours


def _stamp(path: str) -> tuple[int, int, int] | None:
    """What changes when the file is replaced or rewritten; None while it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read() or None
    except OSError:
        return None


async def _then(first: Awaitable[Any], then: Callable[[Any], None], config: Any) -> None:
    await first
    then(config)


def follow_token_file(configuration: Any, path: str) -> None:
    """Have ``configuration`` (either client's, loaded in-cluster) send the token in ``path`` from the first request
    after the file changed. Nothing when it does not refresh its token at all (``try_refresh_token=False``)."""
    installed = configuration.refresh_api_key_hook
    if installed is None or getattr(installed, _FOLLOWS, False):
        return
    library: Callable[[Any], Any] = installed
    seen, token = _stamp(path), None

    def apply(config: Any) -> None:
        nonlocal library, seen, token
        # the sync client's hook installs itself again at each call: ours goes back in front of it
        if config.refresh_api_key_hook is not follow:
            library, config.refresh_api_key_hook = config.refresh_api_key_hook, follow
        stamp = _stamp(path)
        if stamp is not None and stamp != seen:
            seen, token = stamp, _read(path) or token
        if token is not None:  # the file changed since the configuration was loaded: its token
            config.api_key["BearerToken"] = f"Bearer {token}"

    def follow(config: Any) -> Any:
        result = library(config)  # the library's: the file read again once its minute passed
        if inspect.isawaitable(result):  # an async hook (kubernetes_asyncio awaits it): ours after it
            return _then(result, apply, config)
        apply(config)
        return None

    setattr(follow, _FOLLOWS, True)
    configuration.refresh_api_key_hook = follow
