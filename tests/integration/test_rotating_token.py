"""Issue 36, "tokens that rotate": the provider in a pod (connection ``kubernetes_default``, ``in_cluster``) keeps
working when kubelet replaces its projected service-account token and the old one stops being accepted.

A triggerer holds its watches for hours, across rotations. Here the token file is replaced by a new token and the
old one revoked at once (its bound Secret deleted: the real API server answers 401) while a wait follows a job
through the real mpi-operator; the waits' watches are renewed every 2 s, so every one opens again after the
revocation, and the sync hook made before the rotation is used after it. What carries them over is the clients'
refresh hook (``refresh_api_key_hook``, installed by both libraries' ``load_incluster_config``), kept by every client
the provider makes (the async hook's configuration, the client pool's shared client, the hub's renewed watches, the
sync hook's copied default configuration) and made prompt by the provider (hooks/token_file.py): the libraries read
the file again only once a minute, and a watch renewed within that minute got 401 and failed every wait of its hub.
Without the refresh (``refresh=False``) the same scenario fails with 401: the test sees what it claims to.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from kubernetes import client
from kubernetes_asyncio.client.exceptions import ApiException

from airflow_mpi.hooks import AsyncMPIJobHook, MPIJobHook
from airflow_mpi.jobspec.kinds import DEFAULT_KIND
from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.wait import watch_hub
from airflow_mpi.wait.contract import WaitOptions
from localcluster import behaviour as bh
from tests.integration.pod_credentials import PodCredentials, run_in_cluster
from tests.integration.test_operator import LINES, Recorder
from tests.integration.test_watch_hub_on_cluster import MPIJOBS, suspended_job

pytestmark = pytest.mark.needs_simulation  # the launcher's run is kwok's


@pytest.fixture(params=[True], ids=["refreshed"])
def pod(request, monkeypatch, k8s, namespace, provider_role, tmp_path) -> PodCredentials:
    """This process as a pod of the test's namespace (tests/integration/pod_credentials.py), token A issued (read
    by the clients less than a minute before the rotation: their own refresh is not due); the waits' watches renewed
    every 2 s; no earlier test's outage makes a 401 look like one (hooks/retries.py)."""
    from airflow_mpi.hooks import retries

    creds = run_in_cluster(monkeypatch, k8s, namespace, provider_role, tmp_path / "sa", refresh=request.param)
    monkeypatch.setattr(watch_hub, "WATCH_SECONDS", 2)
    monkeypatch.setattr(retries._Recent, "last", None)
    creds.issue("token-a")
    return creds


def rotate(pod: PodCredentials) -> None:
    """Token B into the file, token A revoked: returns once the API server refuses A."""
    pod.issue("token-b")
    pod.revoke("token-a")


def start_job(sync: MPIJobHook, name: str) -> str:
    """A suspended MPIJob (its launcher succeeds 1 s after it starts), created by the sync hook in the namespace of
    its namespace file; its uid."""
    manifest = suspended_job(name)
    launcher = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    launcher["metadata"] = {"annotations": {bh.RUN_DURATION: "1s"}}
    return sync.create_mpijob(manifest)["metadata"]["uid"]


def resume(k8s, namespace: str, name: str) -> None:
    client.CustomObjectsApi(k8s).patch_namespaced_custom_object(
        *MPIJOBS, namespace, "mpijobs", name, {"spec": {"runPolicy": {"suspend": False}}}
    )


async def first_event(trigger: MPIJobTrigger) -> dict:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("the trigger ended without an event")


def all_opened(hub: watch_hub.WatchHub, more_than: dict[str, int]) -> bool:
    return all(
        hub.stats[f"{kind}_opened"] > more_than.get(kind, 0) for kind in watch_hub.watched(DEFAULT_KIND)
    )


def job_trigger(namespace: str, name: str, uid: str) -> MPIJobTrigger:
    """The trigger a deferred task of job ``name`` runs (polling every 2 s), through ``kubernetes_default``."""
    return MPIJobTrigger(
        name=name,
        namespace=namespace,
        uid=uid,
        submitted_at=datetime.now(UTC).isoformat(),
        options=WaitOptions(poll_interval=2),
    )


async def wait_across_the_rotation(pod: PodCredentials, k8s, name: str, uid: str) -> dict:
    """The triggerer's wait on the job from token A to its end: the hub starts with A (the test's subscription,
    shared by the trigger's: same connection), A is replaced and revoked, every watch opens again (as B), then
    the job runs; the trigger's event."""
    trigger = job_trigger(pod.namespace, name, uid)
    async with watch_hub.subscription(AsyncMPIJobHook(), pod.namespace, name) as sub:
        hub = sub.hub
        await hub.until(lambda h: all_opened(h, {}))  # as A
        wait = asyncio.create_task(first_event(trigger))
        await asyncio.to_thread(rotate, pod)
        before = {kind: hub.stats[f"{kind}_opened"] for kind in watch_hub.watched(DEFAULT_KIND)}
        await asyncio.wait_for(hub.until(lambda h: all_opened(h, before)), 30)  # A refused: as B (or 401)
        await asyncio.to_thread(resume, k8s, pod.namespace, name)
        event = await asyncio.wait_for(wait, 120)
        assert hub.error is None and len(watch_hub.hubs()) == 1  # one hub throughout, never failed
        return event


def recorded_job(cluster, namespace: str, monkeypatch, name: str) -> tuple[Recorder, MPIJobHook, str]:
    """The launcher's lines set, the trigger's log recorded, and job ``name`` started as the first token by a sync
    hook (kubernetes_default: in_cluster) made before any rotation: (the record, that hook, the job's uid)."""
    cluster.set_launcher_logs(namespace, LINES)
    logged = Recorder()
    monkeypatch.setattr(MPIJobTrigger, "log", property(lambda self: logged))
    sync = MPIJobHook()
    return logged, sync, start_job(sync, name)


def assert_outlived(event: dict, logged: Recorder, sync: MPIJobHook, name: str, uid: str) -> None:
    """The wait succeeded with the launcher's log (followed as the new token: the launcher started after the
    rotation), and the sync hook made before the rotation reads and deletes the job (its token read again)."""
    assert event["status"] == "success", event
    assert logged.payload_lines() == LINES
    assert sync.get_mpijob(name)["metadata"]["uid"] == uid
    assert sync.delete_mpijob(name, uid=uid) is True


def test_a_wait_and_the_sync_hook_outlive_their_token(pod, cluster, k8s, monkeypatch):
    logged, sync, uid = recorded_job(cluster, pod.namespace, monkeypatch, "rotated")  # as A
    event = asyncio.run(wait_across_the_rotation(pod, k8s, "rotated", uid))
    assert_outlived(event, logged, sync, "rotated", uid)


@pytest.mark.parametrize("pod", [False], ids=["never-refreshed"], indirect=True)
def test_without_the_refresh_the_same_wait_fails_with_401(pod, k8s):
    """The scenario's control: clients that keep the token they started with (``try_refresh_token=False``)."""
    sync = MPIJobHook()
    uid = start_job(sync, "stale")

    with pytest.raises(ApiException) as refused:
        asyncio.run(wait_across_the_rotation(pod, k8s, "stale", uid))
    assert refused.value.status == 401  # the hub's renewed watch, refused
    with pytest.raises(client.exceptions.ApiException) as refused_sync:
        sync.get_mpijob("stale")
    assert refused_sync.value.status == 401
