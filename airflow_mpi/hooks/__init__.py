"""The Kubernetes request layer: all cluster I/O of the provider. Requests and answers are free of I/O
(requests.py, answers.py, live_delete.py); the two hooks only do the I/O, blocking or awaited. They import the
Kubernetes clients, so they are loaded lazily: importing this package or its errors does not import ``kubernetes``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from airflow_mpi.hooks.errors import (
    MPIJobAPIUnavailable,
    MPIJobConflictError,
    MPIJobHookError,
    PodLogUnavailable,
    WatchExpired,
)

if TYPE_CHECKING:
    from airflow_mpi.hooks.async_mpijob import AsyncMPIJobHook
    from airflow_mpi.hooks.mpijob import MPIJobHook

_LAZY = {"MPIJobHook": "airflow_mpi.hooks.mpijob", "AsyncMPIJobHook": "airflow_mpi.hooks.async_mpijob"}

__all__ = [
    "AsyncMPIJobHook",
    "MPIJobAPIUnavailable",
    "MPIJobConflictError",
    "MPIJobHook",
    "MPIJobHookError",
    "PodLogUnavailable",
    "WatchExpired",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
