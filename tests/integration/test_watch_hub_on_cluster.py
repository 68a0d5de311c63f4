"""The watch hub (wait/watch_hub.py) against a real API server: sharing, 410 re-list, bookmark resume,
and a log endpoint that answers with an error while the launcher runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from datetime import UTC, datetime

import pytest
from kubernetes import client, watch

from airflow_mpi.hooks import AsyncMPIJobHook
from airflow_mpi.jobspec.kinds import DEFAULT_KIND
from airflow_mpi.wait import namespace_watch, watch_hub
from airflow_mpi.wait.monitor import JobMonitor
from localcluster import behaviour as bh
from localcluster.waiting import wait_until
from tests.integration.least_privilege import (
    apply_role,
    bound_service_account_kubeconfig,
    role_without,
    use_as_kubernetes_default,
)

MPIJOBS = ("kubeflow.org", "v2beta1")


def suspended_job(name: str) -> dict:
    """An MPIJob the operator never starts (no pods): cheap to have a hundred of."""
    container = {"image": "mpioperator/mpi-pi:openmpi", "command": ["true"]}
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"suspend": True},
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {"spec": {"containers": [{"name": "launcher", **container}]}},
                },
                "Worker": {
                    "replicas": 1,
                    "template": {"spec": {"containers": [{"name": "worker", **container}]}},
                },
            },
        },
    }


def invalid_job(name: str) -> dict:
    """An MPIJob the API server accepts and the mpi-operator rejects with a ValidationError event."""
    bad = suspended_job(name)
    bad["spec"]["runPolicy"] = {}
    bad["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2  # only the controller rejects this
    return bad


def first_validation_error(k8s, namespace: str, name: str) -> None:
    """Return once the mpi-operator has recorded a ValidationError on the job (awaited by a watch)."""
    selector = f"involvedObject.kind=MPIJob,involvedObject.name={name},reason=ValidationError"
    stream = watch.Watch().stream(
        client.CoreV1Api(k8s).list_namespaced_event, namespace, field_selector=selector, timeout_seconds=120
    )
    for _ in stream:  # the listing's existing events come first, as ADDED
        return
    raise AssertionError(f"no ValidationError event for {name} in 120 s")


class CountingHook(AsyncMPIJobHook):
    """Records each listing of a job's events."""

    listed: list[str]

    async def job_events(self, name, namespace=None):
        self.listed.append(name)
        return await super().job_events(name, namespace)


def counting_monitor(name: str, namespace: str, listed: list[str]) -> JobMonitor:
    counting = CountingHook(conn_id="kubernetes_default")
    counting.listed = listed
    return JobMonitor(
        counting,
        name,
        namespace,
        emit=print,
        submitted_at=datetime.now(UTC),
        get_logs=False,
        poll_interval=30,
    )


def create_jobs(k8s, namespace: str, names: list[str]) -> None:
    api = client.CustomObjectsApi(k8s)
    for name in names:
        api.create_namespaced_custom_object(*MPIJOBS, namespace, "mpijobs", suspended_job(name))


def namespaced_watches(k8s) -> dict[str, float]:
    """The API server's own count of open namespace-scoped watches, by resource (its /metrics)."""
    text = k8s.call_api(
        "/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False
    ).data.decode()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if (
            line.startswith("apiserver_longrunning_requests{")
            and 'scope="namespace"' in line
            and 'verb="WATCH"' in line
        ):
            resource = line.split('resource="', 1)[1].split('"', 1)[0]
            counts[resource] = counts.get(resource, 0) + float(line.rsplit(" ", 1)[1])
    return counts


def hook() -> AsyncMPIJobHook:
    return AsyncMPIJobHook(conn_id="kubernetes_default")


class RecordingHook(AsyncMPIJobHook):
    """Records the resourceVersion each watch starts from."""

    watch_starts: list[tuple[str, str | None]]

    async def list_objects(self, kind, namespace, label_selector=None, field_selector=None):
        return await namespace_watch.list_objects(self, kind, namespace, label_selector, field_selector)

    def watch_objects(self, kind, namespace, **kwargs):
        self.watch_starts.append((kind, kwargs.get("resource_version")))
        return namespace_watch.watch_objects(self, kind, namespace, **kwargs)


def recording_hook() -> RecordingHook:
    h = RecordingHook(conn_id="kubernetes_default")
    h.watch_starts = []
    return h


def all_suspended(k8s, namespace: str, names: list[str]) -> None:
    """Return once the mpi-operator has marked every job Suspended (awaited by a watch): its status updates,
    about one job a second, no longer land while a test compares the waits' change counters."""
    pending = set(names)
    stream = watch.Watch().stream(
        client.CustomObjectsApi(k8s).list_namespaced_custom_object,
        *MPIJOBS,
        namespace,
        "mpijobs",
        timeout_seconds=300,
    )
    for event in stream:  # the listing's jobs first, as ADDED, then each change
        job = event["object"]
        conditions = (job.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Suspended" and c.get("status") == "True" for c in conditions):
            pending.discard(job["metadata"]["name"])
        if not pending:
            return
    raise AssertionError(
        f"the mpi-operator did not mark {len(pending)} jobs Suspended in 300 s: {sorted(pending)[:5]}"
    )


def cached_resource_version(sub: watch_hub.Subscription) -> str | None:
    job = sub.job()
    return job["metadata"].get("resourceVersion") if job else None


def test_a_hundred_waits_share_three_watches(k8s, namespace, kubernetes_default_conn):
    names = [f"hub-{i:03d}" for i in range(100)]
    create_jobs(k8s, namespace, names)
    # The operator reconciles new jobs at about one a second: until it is done, its status updates would wake
    # waits inside the window below for a reason of their own (the race this test once lost on a cold CI run).
    all_suspended(k8s, namespace, names)

    async def body():
        async with contextlib.AsyncExitStack() as stack:
            # one hook per wait, as every trigger has its own: same connection -> same hub
            subs = [
                await stack.enter_async_context(watch_hub.subscription(hook(), namespace, n)) for n in names
            ]
            assert len(watch_hub.hubs()) == 1
            hub = watch_hub.hubs()[0]
            assert all(sub.job() is not None for sub in subs)
            assert {k: v for k, v in hub.stats.items() if k.endswith(("_lists", "_watches"))} == {
                "mpijobs_lists": 1,
                "pods_lists": 1,
                "events_lists": 1,
                "mpijobs_watches": 1,
                "pods_watches": 1,
                "events_watches": 1,
            }
            await hub.until(
                lambda hb: all(hb.stats[f"{kind}_opened"] for kind in watch_hub.watched(DEFAULT_KIND))
            )
            watches = await asyncio.to_thread(namespaced_watches, k8s)
            assert watches.get("mpijobs") == 1 and watches.get("pods") == 1 and watches.get("events") == 1
            assert hub.watches_events  # the shipped role grants it (the connection is its service account)

            # a change of one job wakes its wait only: any other wait woken in the window must have seen its own
            # job change (a late status update of the operator's), never job 42's
            versions = [sub.version for sub in subs]
            seen = [cached_resource_version(sub) for sub in subs]
            await asyncio.to_thread(
                client.CustomObjectsApi(k8s).patch_namespaced_custom_object,
                *MPIJOBS,
                namespace,
                "mpijobs",
                names[42],
                {"metadata": {"labels": {"touched": "yes"}}},
            )
            await subs[42].wait_change(versions[42], 60)
            assert subs[42].job()["metadata"]["labels"]["touched"] == "yes"
            woken = {names[i] for i, sub in enumerate(subs) if i != 42 and sub.version != versions[i]}
            changed = {
                names[i] for i, sub in enumerate(subs) if i != 42 and cached_resource_version(sub) != seen[i]
            }
            assert woken <= changed, f"woken by another job's change: {sorted(woken - changed)}"
            assert len(changed) < 10, f"the operator was still busy with {sorted(changed)}: nothing was shown"
        assert watch_hub.hubs() == []  # the last subscriber left: watches closed

    asyncio.run(body())
    # the API server ends a watch's request when it sees the client gone, after the client's close: run R8 (96 %
    # busy) read the MPIJob watch still open right after; a watch the hub did not close never ends (the wait fails)
    wait_until(
        lambda: namespaced_watches(k8s).get("mpijobs", 0) == 0,
        30,
        "the API server to end the hub's MPIJob watch",
    )


def test_410_gone_is_one_relist_for_every_subscriber(k8s, namespace, kubernetes_default_conn):
    create_jobs(k8s, namespace, ["expired"])

    async def body():
        h = recording_hook()
        hub = watch_hub.WatchHub(h, namespace)
        subs = [hub.subscribe("expired") for _ in range(3)]
        # older than the watch cache of the MPIJobs: 410 Gone. Only that kind: a pod or event watch from "1" falls
        # through to etcd, which serves it until it compacts (5 min into a cluster's life), so it would hang there
        # (the test passed only when run late in the session)
        hub.resource_versions[DEFAULT_KIND.plural] = "1"
        await hub.start()
        try:
            await hub.ready()
            assert hub.stats["mpijobs_relists"] == 1 and hub.stats["mpijobs_lists"] == 1
            assert all(sub.job()["metadata"]["name"] == "expired" and sub.version >= 1 for sub in subs)
            # after the re-list, the next watch starts from the list's version, not the expired one
            await hub.until(lambda hb: hb.stats["mpijobs_watches"] >= 2)
            starts = [rv for kind, rv in h.watch_starts if kind == "mpijobs"]
            assert starts[0] == "1" and starts[1] not in (None, "1")
        finally:
            await hub.close()

    asyncio.run(body())


def test_the_mpi_operators_validation_error_reaches_the_wait_through_the_hubs_event_watch(
    k8s, namespace, kubernetes_default_conn
):
    """The field selector (involvedObject.kind=MPIJob, reason=ValidationError) on the real API server, the event from
    the real mpi-operator: it arrives by the hub's watch, and a wait on the job ends as invalid after one event
    listing (for the verdict's message) instead of listing while it waits."""
    bad = invalid_job("hub-invalid")
    listed: list[str] = []

    async def body():
        async with watch_hub.subscription(
            hook(), namespace, "hub-invalid"
        ) as sub:  # the hub is up, no job yet
            assert sub.validation_events() == []
            await asyncio.to_thread(
                client.CustomObjectsApi(k8s).create_namespaced_custom_object,
                *MPIJOBS,
                namespace,
                "mpijobs",
                bad,
            )
            await asyncio.wait_for(sub.hub.until(lambda hb: bool(sub.validation_events())), 120)
            assert sub.hub.stats["events_lists"] == 1 and sub.hub.stats["events_events"] >= 1
            return await asyncio.wait_for(counting_monitor("hub-invalid", namespace, listed).run(), 60)

    result = asyncio.run(body())
    assert result.outcome == "invalid" and "replicas" in result.message.lower(), result
    assert listed == ["hub-invalid"]


def test_an_identity_refused_the_event_watch_lists_the_validation_error_instead(
    k8s, kubeconfig, namespace, tmp_path, monkeypatch, caplog
):
    """A role of an earlier release (events: list, no watch), refused by the real API server's RBAC: the hub warns
    once and keeps its two other watches; a wait on an invalid job finds the ValidationError by listing."""
    role = apply_role(k8s, role_without("watch", "events", "airflow-mpi-no-event-watch"))
    config = bound_service_account_kubeconfig(k8s, kubeconfig, namespace, role, tmp_path / "kubeconfig")
    use_as_kubernetes_default(monkeypatch, config, namespace)
    listed: list[str] = []

    async def body():
        async with watch_hub.subscription(hook(), namespace, "refused-invalid") as sub:
            await sub.hub.until(
                lambda hb: hb.stats["events_refused"] == 1
            )  # the list is allowed, the watch not
            await sub.hub.ready()
            assert sub.validation_events() is None and not sub.hub.watches_events
            assert sub.hub.stats["events_lists"] == 1 and sub.hub.stats["events_opened"] == 0
            await asyncio.to_thread(
                client.CustomObjectsApi(k8s).create_namespaced_custom_object,
                *MPIJOBS,
                namespace,
                "mpijobs",
                invalid_job("refused-invalid"),
            )
            await asyncio.to_thread(first_validation_error, k8s, namespace, "refused-invalid")
            result = await asyncio.wait_for(counting_monitor("refused-invalid", namespace, listed).run(), 60)
            assert sub.hub.error is None and sub.hub.stats["mpijobs_opened"] >= 1
            return result

    with caplog.at_level(logging.WARNING, logger=watch_hub.__name__):
        result = asyncio.run(body())
    assert result.outcome == "invalid" and "replicas" in result.message.lower(), result
    assert listed == ["refused-invalid"]  # the one listing at the wait's first check found it
    refusals = [r for r in caplog.records if "may not watch events" in r.getMessage()]
    assert len(refusals) == 1 and "403" in refusals[0].getMessage(), [r.getMessage() for r in caplog.records]


def test_a_renewed_watch_resumes_from_the_bookmark_without_listing(
    k8s, namespace, kubernetes_default_conn, monkeypatch
):
    # the API server sends a bookmark 2 s before a watch's timeout; a short watch makes one arrive soon
    monkeypatch.setattr(watch_hub, "WATCH_SECONDS", 6)
    core = client.CoreV1Api(k8s)
    elsewhere = {
        "metadata": {"generateName": "hub-bookmark-", "labels": {"training.kubeflow.org/job-name": "x"}},
        "spec": {"containers": [{"name": "c", "image": "x"}], "tolerations": [{"operator": "Exists"}]},
    }
    created: list[str] = []

    async def body():
        h = recording_hook()
        async with watch_hub.subscription(h, namespace, "none") as sub:
            hub = sub.hub
            await hub.until(lambda hb: hb.stats["pods_opened"] >= 1)
            # a pod in another namespace moves the API server's pod version; this namespace's watch sees only
            # a bookmark carrying it
            pod = await asyncio.to_thread(core.create_namespaced_pod, "default", elsewhere)
            created.append(pod.metadata.name)
            await hub.until(lambda hb: hb.stats["pods_bookmarks"] >= 1 and hb.stats["pods_watches"] >= 2)
            starts = [rv for kind, rv in h.watch_starts if kind == "pods"]
            assert (
                hub.stats["pods_lists"] == 1
                and hub.stats["pods_relists"] == 0
                and hub.stats["pods_events"] == 0
            )
            assert (
                int(starts[1]) >= int(pod.metadata.resource_version) > int(starts[0])
            )  # resumed from the bookmark

    try:
        asyncio.run(body())
    finally:
        for name in created:
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_a_watch_lasts_until_the_api_server_ends_it_not_the_clients_default_timeout(
    namespace, kubernetes_default_conn, monkeypatch, caplog
):
    """cncf.kubernetes' API clients end any request after API_TIMEOUT (60 s) unless the call says otherwise; the
    hub's watches say so, so each lasts its timeout_seconds on the API server and is renewed without a warning.
    (Both timeouts shortened here; before the fix every watch of a real triggerer was cut each minute.)"""
    from airflow.providers.cncf.kubernetes import kube_client

    monkeypatch.setattr(kube_client, "API_TIMEOUT", 2)
    monkeypatch.setattr(watch_hub, "WATCH_SECONDS", 5)

    async def body():
        async with watch_hub.subscription(hook(), namespace, "none") as sub:
            await sub.hub.until(
                lambda hb: all(hb.stats[f"{kind}_watches"] >= 3 for kind in watch_hub.watched(DEFAULT_KIND))
            )
            return dict(sub.hub.stats)

    with caplog.at_level(logging.INFO, logger=watch_hub.__name__):
        stats = asyncio.run(body())
    assert [r.getMessage() for r in caplog.records] == []  # no interruption, no re-list
    assert all(
        stats[f"{kind}_lists"] == 1 and stats[f"{kind}_opened"] >= 2
        for kind in watch_hub.watched(DEFAULT_KIND)
    ), stats


@pytest.mark.needs_simulation
def test_a_log_endpoint_error_is_reported_once_and_never_printed_as_launcher_output(
    cluster, k8s, namespace, kubernetes_default_conn, caplog
):
    """The kwok log server answers 400 for a log file it cannot open (as a kubelet for a missing log)."""
    co = client.CustomObjectsApi(cluster.api_client())
    co.create_cluster_custom_object(
        "kwok.x-k8s.io",
        "v1alpha1",
        "clusterlogs",
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterLogs",
            "metadata": {"name": f"logs-{namespace}"},
            "spec": {
                "selector": {"matchNamespaces": [namespace]},
                "logs": [{"containers": ["launcher"], "logsFile": f"/nonexistent/{uuid.uuid4().hex}.log"}],
            },
        },
    )
    job = suspended_job("logerr")
    job["spec"]["runPolicy"] = {}
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"] = {
        "annotations": {bh.RUN_DURATION: "4s"}
    }
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(*MPIJOBS, namespace, "mpijobs", job)
    lines: list[str] = []

    async def body():
        return await JobMonitor(
            hook(), "logerr", namespace, emit=lines.append, submitted_at=datetime.now(UTC), poll_interval=2
        ).run()

    try:
        with caplog.at_level(logging.WARNING, logger="airflow_mpi.wait.log_pump"):
            result = asyncio.run(asyncio.wait_for(body(), 120))
    finally:
        co.delete_cluster_custom_object("kwok.x-k8s.io", "v1alpha1", "clusterlogs", f"logs-{namespace}")
    assert result.outcome == "success"
    launcher_output = [ln for ln in lines if not ln.startswith(("==========", "(could not read"))]
    assert launcher_output == []
    reports = [r for r in caplog.records if "launcher log read failed" in r.getMessage()]
    assert len(reports) == 1, [r.getMessage() for r in reports]
