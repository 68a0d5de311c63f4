"""The real hooks and the tests' doubles fill the Protocols their callers are typed with (hooks/protocols.py):
by name (``isinstance`` on the runtime-checkable Protocols) and by parameters (every parameter a caller may
pass by name is one the real method takes)."""

from __future__ import annotations

import inspect

import pytest

from airflow_mpi.hooks import AsyncMPIJobHook, MPIJobHook
from airflow_mpi.hooks.orphan_sweep import BudgetedMPIJobHook
from airflow_mpi.hooks.protocols import (
    JobReads,
    MPIJobRequests,
    PlanSender,
    PodLogReader,
    WaitHook,
    WatchRequests,
)
from tests.unit.fakes import FakeAsyncHook, FakeSyncHook

SYNC = (MPIJobRequests, PlanSender)
ASYNC = (PodLogReader, JobReads, WatchRequests, WaitHook)


def members(protocol: type) -> dict[str, inspect.Signature]:
    """The methods a Protocol asks for (its own and its bases'), with their signatures."""
    found = {}
    for base in reversed(protocol.__mro__):
        if getattr(base, "_is_protocol", False) and base is not protocol.__mro__[-1]:
            for name, value in vars(base).items():
                dunder = name.startswith("__") and name not in ("__aenter__", "__aexit__")
                if inspect.isfunction(value) and not dunder:
                    found[name] = inspect.signature(value)
    return found


def accepts(real: inspect.Signature, wanted: inspect.Signature) -> list[str]:
    """The parameters of ``wanted`` that ``real`` does not take (by name, or through ``**``/``*``)."""
    params = real.parameters
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in params.values())
    missing = []
    for name, p in wanted.parameters.items():
        if name == "self":
            continue
        if p.kind is p.VAR_KEYWORD and not var_kw:
            missing.append(f"**{name}")
        elif p.kind is p.VAR_POSITIONAL and not var_pos:
            missing.append(f"*{name}")
        elif p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and name not in params and not var_kw:
            missing.append(name)
    return missing


@pytest.mark.parametrize("protocol", SYNC)
def test_the_sync_hooks_fill_the_sync_protocols(protocol):
    for hook in (MPIJobHook(), BudgetedMPIJobHook(deadline=0.0)):
        assert isinstance(hook, protocol)
        for name, wanted in members(protocol).items():
            assert accepts(inspect.signature(getattr(type(hook), name)), wanted) == [], (type(hook), name)


@pytest.mark.parametrize("protocol", ASYNC)
def test_the_async_hook_fills_the_wait_protocols(protocol):
    hook = AsyncMPIJobHook()
    assert isinstance(hook, protocol)
    for name, wanted in members(protocol).items():
        assert accepts(inspect.signature(getattr(AsyncMPIJobHook, name)), wanted) == [], name


def test_the_doubles_fill_the_protocols_their_callers_are_typed_with():
    assert isinstance(FakeSyncHook(), MPIJobRequests) and isinstance(FakeSyncHook(), PlanSender)
    assert all(isinstance(FakeAsyncHook(job_obj=None), protocol) for protocol in ASYNC)


def test_a_hook_without_the_hubs_requests_is_not_a_wait_hook():
    class ReadsOnly:
        async def get_mpijob(self, name, namespace=None): ...
        async def launcher_pods(self, name, namespace=None): ...
        async def job_events(self, name, namespace=None): ...
        async def pod_events(self, pod_names, namespace=None): ...
        async def delete_mpijob(self, name, namespace=None, *, uid=None): ...
        async def delete_live_mpijob(self, name, namespace=None, *, uid=None): ...
        def read_pod_log(self, pod, namespace=None, **query): ...

    assert isinstance(ReadsOnly(), JobReads)
    assert not isinstance(ReadsOnly(), WatchRequests) and not isinstance(ReadsOnly(), WaitHook)
    one_parameter = inspect.signature(lambda self, name: None)
    assert accepts(one_parameter, members(JobReads)["get_mpijob"]) == ["namespace"]
