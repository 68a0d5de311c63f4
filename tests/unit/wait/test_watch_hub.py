"""The watch hub and the log pump on the scripted hook (tests/unit/fakes.py); the real API server's side is in
tests/integration/test_watch_hub_on_cluster.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime

from airflow_mpi.wait import log_pump, watch_hub
from airflow_mpi.wait.monitor import JobMonitor
from tests.unit.fakes import FakeAsyncHook, job, pod

NOW = datetime.now(UTC)


class SharedFake(FakeAsyncHook):
    """Several hook objects for one cluster (as every trigger builds its own hook)."""

    def watch_identity(self):
        return "one-cluster"


async def test_waits_of_one_cluster_and_namespace_share_one_hub_that_closes_with_the_last():
    hooks = [SharedFake(job_obj=job("a")) for _ in range(3)]
    async with contextlib.AsyncExitStack() as stack:
        subs = [await stack.enter_async_context(watch_hub.subscription(h, "ns", "a")) for h in hooks]
        other = await stack.enter_async_context(watch_hub.subscription(hooks[0], "other-ns", "a"))
        assert len({id(s.hub) for s in subs}) == 1 and other.hub is not subs[0].hub
        assert len(watch_hub.hubs()) == 2
        assert hooks[0].lists == ["mpijobs", "pods", "events"] * 2  # one list per kind and hub
        assert hooks[1].lists == [] and hooks[2].lists == []
    assert watch_hub.hubs() == []
    assert all(t.done() for t in subs[0].hub._tasks)


async def test_a_change_wakes_the_waits_of_that_job_only():
    hook = FakeAsyncHook(job_obj=job("a"), launchers=[pod("a-launcher", job="a", state="waiting")])
    async with watch_hub.subscription(hook, "ns", "a") as a, watch_hub.subscription(hook, "ns", "b") as b:
        seen_a, seen_b = a.version, b.version
        hook.launchers = [pod("a-launcher", job="a", state="running")]
        assert await a.wait_change(seen_a, 30) > seen_a
        assert b.version == seen_b
        assert [p.metadata.name for p in await a.launchers()] == ["a-launcher"] and await b.launchers() == []


async def test_an_error_answer_of_the_log_endpoint_is_reported_once_never_printed(monkeypatch, caplog):
    """A log server that cannot serve (kwok out of inotify watchers) answered its error text as the body."""
    monkeypatch.setattr(log_pump, "RETRY_DELAY", 0)
    done = job("job", "ns", ("Created", "x"), ("Succeeded", "x"))
    hook = FakeAsyncHook(
        job_obj=done,
        launchers=[pod("job-launcher-a", state="terminated")],
        logs={("job-launcher-a", False): ["failed to create fsnotify watcher: too many open files"]},
    )
    lines: list[str] = []
    with caplog.at_level(logging.WARNING, logger="airflow_mpi.wait.log_pump"):
        await JobMonitor(hook, "job", "ns", emit=lines.append, submitted_at=NOW, poll_interval=0.01).run()
    assert not any("fsnotify" in ln and not ln.startswith("(could not read") for ln in lines)
    assert lines[-1].startswith("(could not read the rest of the launcher log")
    assert len(hook.log_requests) == log_pump.FINAL_READ_RETRIES + 1  # retried, not forever
    assert len([r for r in caplog.records if "launcher log read failed" in r.getMessage()]) == 1


async def test_follow_streams_are_bounded_and_every_line_still_arrives_once(monkeypatch):
    monkeypatch.setattr(log_pump, "MAX_FOLLOW_STREAMS", 2)
    log_pump._SLOTS.clear()
    open_follows: list[int] = [0]
    peak: list[int] = [0]
    release = asyncio.Event()
    limit_reached = asyncio.Event()

    class Hook(FakeAsyncHook):
        async def read_pod_log(self, pod_name, namespace, *, follow=False, **kw):
            if follow:
                open_follows[0] += 1
                peak[0] = max(peak[0], open_follows[0])
                if open_follows[0] == 2:
                    limit_reached.set()
            try:
                async for line in super().read_pod_log(pod_name, namespace, follow=follow, **kw):
                    yield line
                if follow:
                    await release.wait()  # a running container: the stream stays open
            finally:
                if follow:
                    open_follows[0] -= 1

    names = [f"j{i}" for i in range(5)]
    hooks = {
        n: Hook(
            job_obj=job(n, "ns", ("Created", "x"), ("Running", "x")),
            launchers=[pod(f"{n}-launcher", job=n)],
            logs={(f"{n}-launcher", False): [f"2026-11-22T10:00:01Z {n} line"]},
        )
        for n in names
    }
    outputs = {n: [] for n in names}
    runs = [
        asyncio.create_task(
            JobMonitor(hooks[n], n, "ns", emit=outputs[n].append, submitted_at=NOW, poll_interval=5).run()
        )
        for n in names
    ]
    await asyncio.wait_for(limit_reached.wait(), 30)
    for n in names:  # the containers end, the jobs succeed
        hooks[n].launchers = [pod(f"{n}-launcher", job=n, state="terminated")]
        hooks[n].job_obj = job(n, "ns", ("Created", "x"), ("Succeeded", "x"), rv="2")
    release.set()
    results = await asyncio.wait_for(asyncio.gather(*runs), 30)
    assert all(r.outcome == "success" for r in results)
    assert peak[0] == 2
    assert {n: [ln for ln in out if not ln.startswith("=")] for n, out in outputs.items()} == {
        n: [f"{n} line"] for n in names
    }


def test_a_hub_its_closed_loop_left_behind_is_never_served_to_another_loop():
    """A loop that ended with a wait still subscribed (a cancelled task never awaited) leaves its hub in the
    registry; a later loop (which may get the dead loop's id()) must get a hub of its own, not the dead one."""
    hook = FakeAsyncHook(job_obj=job("a"))

    async def subscribe_and_never_leave():
        # kept (returned): a dropped one would leave the hub once collected
        entered = watch_hub.subscription(hook, "ns", "a")
        await entered.__aenter__()
        return entered, watch_hub.hubs()[0]

    # ends abruptly: no asyncio.run teardown that would close the subscription
    loop = asyncio.new_event_loop()
    _entered, stale = loop.run_until_complete(subscribe_and_never_leave())  # _entered: held to the end
    # the loop's tasks end with it (as asyncio.run cancels them); none is left pending
    for task in stale._tasks:
        task.cancel()
    loop.run_until_complete(asyncio.wait(stale._tasks))
    loop.close()
    assert stale in watch_hub._HUBS.values()

    async def wait_on_a_new_loop():
        async with watch_hub.subscription(hook, "ns", "a") as sub:
            return sub.hub, list(sub.hub.jobs.values())

    hub, listed = asyncio.run(asyncio.wait_for(wait_on_a_new_loop(), 30))
    assert hub is not stale and [j["metadata"]["name"] for j in listed] == [
        "a"
    ]  # a hub that listed the cluster
    assert stale not in watch_hub._HUBS.values()


async def test_the_cache_keeps_no_managed_fields_listed_or_watched():
    """managedFields are most of a pod or MPIJob kept per wait; nothing reads them."""

    def with_fields(obj):
        obj["metadata"]["managedFields"] = [{"manager": "mpi-operator", "fieldsV1": {"f:status": {}}}]
        return obj

    launcher = pod("a-launcher", job="a")
    launcher.metadata.managed_fields = [{"manager": "kubelet"}]
    hook = FakeAsyncHook(job_obj=with_fields(job("a")), launchers=[launcher])
    async with watch_hub.subscription(hook, "ns", "a") as sub:
        assert "managedFields" not in sub.job()["metadata"] and sub.job()["metadata"]["name"] == "a"
        assert (await sub.launchers())[0].metadata.managed_fields is None
        seen = sub.version
        hook.job_obj = with_fields(job("a", "ns", ("Created", "x"), rv="2"))
        await sub.wait_change(seen, 30)
        assert "managedFields" not in sub.job()["metadata"] and sub.job()["status"]["conditions"]


async def test_an_identity_that_may_not_watch_events_leaves_their_listing_to_the_waits(caplog):
    """A role from before the hub watched events grants `list` only: the hub says so once and keeps watching
    jobs and pods; the waits list events themselves (validation_events() is None)."""
    hook = FakeAsyncHook(job_obj=job("a"), events_watch_forbidden=True)
    with caplog.at_level(logging.WARNING, logger="airflow_mpi.wait.watch_hub"):
        async with watch_hub.subscription(hook, "ns", "a") as sub:
            await sub.hub.until(lambda hb: hb.stats["events_refused"] == 1)
            assert not sub.hub.watches_events and sub.validation_events() is None and sub.hub.error is None
            seen = sub.version
            hook.job_obj = job("a", "ns", ("Created", "x"), rv="2")
            await sub.wait_change(seen, 30)
            assert sub.job()["status"]["conditions"]
    assert sum("may not watch events" in r.getMessage() for r in caplog.records) == 1


async def test_validation_events_are_kept_per_job_and_dropped_when_deleted():
    hook = FakeAsyncHook(job_obj=job("a"))
    event = {
        "metadata": {"name": "a.1"},
        "type": "Warning",
        "reason": "ValidationError",
        "message": "bad",
        "involvedObject": {"name": "a", "uid": "u1"},
    }
    async with watch_hub.subscription(hook, "ns", "a") as a, watch_hub.subscription(hook, "ns", "b") as b:
        assert a.validation_events() == []
        seen_a, seen_b = a.version, b.version
        hook.add_event(event)
        await a.wait_change(seen_a, 30)
        assert a.validation_events() == [event] and a.validation_events("u1") == [event]
        assert a.validation_events("u2") == [] and b.validation_events() == [] and b.version == seen_b
        a.hub._apply(watch_hub.EVENTS, "DELETED", event)  # events expire (1 h)
        assert a.validation_events() == []
