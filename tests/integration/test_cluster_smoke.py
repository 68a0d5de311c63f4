"""Smoke tests of the test cluster itself: the real mpi-operator drives MPIJobs on it as on a real cluster.

Plain dict manifests and the kubernetes client only (no airflow_mpi code), so a failure here points at the
cluster, not at the provider.  Every wait is a watch (event driven), bounded by a deadline.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
from kubernetes import client, watch

from localcluster import behaviour as bh
from localcluster.waiting import wait_until

GROUP = "kubeflow.org"
PLURAL = "mpijobs"
JOB_NAME = "training.kubeflow.org/job-name"
JOB_ROLE = "training.kubeflow.org/job-role"
TIMEOUT = 120


def mpijob(
    name: str,
    *,
    workers: int = 2,
    launcher_meta: dict | None = None,
    launcher_resources: dict | None = None,
    restart_policy: str = "Never",
    backoff_limit: int | None = None,
) -> dict:
    run_policy: dict = {"cleanPodPolicy": "Running"}
    if backoff_limit is not None:
        run_policy["backoffLimit"] = backoff_limit
    launcher_container = {
        "name": "launcher",
        "image": "mpioperator/mpi-pi:openmpi",
        "command": ["mpirun", "-n", str(workers), "/home/mpiuser/pi"],
        "resources": launcher_resources or {"limits": {"cpu": "1", "memory": "1Gi"}},
    }
    return {
        "apiVersion": f"{GROUP}/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": run_policy,
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": restart_policy,
                    "template": {
                        "metadata": launcher_meta or {},
                        "spec": {"containers": [launcher_container]},
                    },
                },
                "Worker": {
                    "replicas": workers,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "worker",
                                    "image": "mpioperator/mpi-pi:openmpi",
                                    "resources": {
                                        "limits": {"cpu": "2", "memory": "4Gi", bh.GPU_RESOURCE: "1"}
                                    },
                                }
                            ]
                        }
                    },
                },
            },
        },
    }


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _true_conditions(obj: dict) -> set[str]:
    return {c["type"] for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}


def watch_mpijob(
    k8s,
    namespace: str,
    name: str,
    until,
    timeout: float = TIMEOUT,
    seen: list | None = None,
    version: str = "v2beta1",
) -> dict:
    """Watch one MPIJob (of API ``version``) until ``until(obj)``; ``seen`` collects every version observed."""
    co = client.CustomObjectsApi(k8s)
    deadline = time.monotonic() + timeout
    selector = f"metadata.name={name}"
    while True:
        lst = co.list_namespaced_custom_object(GROUP, version, namespace, PLURAL, field_selector=selector)
        for obj in lst["items"]:
            if seen is not None:
                seen.append(obj)
            if until(obj):
                return obj
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(
                f"MPIJob {namespace}/{name}: condition not reached; last={lst['items'][-1:]}"
            )
        w = watch.Watch()
        for ev in w.stream(
            co.list_namespaced_custom_object,
            GROUP,
            version,
            namespace,
            PLURAL,
            field_selector=selector,
            resource_version=lst["metadata"]["resourceVersion"],
            timeout_seconds=max(1, int(remaining)),
        ):
            obj = ev["object"]
            if ev["type"] == "ERROR":
                break  # e.g. 410 Gone: re-list
            if seen is not None:
                seen.append(obj)
            if until(obj):
                w.stop()
                return obj


def watch_pods(k8s, namespace: str, selector: str, until, timeout: float = TIMEOUT) -> list:
    """Watch the pods matching ``selector`` until ``until(pods_by_name)``; returns the pods."""
    core = client.CoreV1Api(k8s)
    deadline = time.monotonic() + timeout
    while True:
        lst = core.list_namespaced_pod(namespace, label_selector=selector)
        pods = {p.metadata.name: p for p in lst.items}
        if until(pods):
            return list(pods.values())
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"pods {selector}: condition not reached; have {_summary(pods)}")
        w = watch.Watch()
        for ev in w.stream(
            core.list_namespaced_pod,
            namespace,
            label_selector=selector,
            resource_version=lst.metadata.resource_version,
            timeout_seconds=max(1, int(remaining)),
        ):
            if ev["type"] == "ERROR":
                break
            pod = ev["object"]
            if ev["type"] == "DELETED":
                pods.pop(pod.metadata.name, None)
            else:
                pods[pod.metadata.name] = pod
            if until(pods):
                w.stop()
                return list(pods.values())


def read_log(core, pod: str, namespace: str, **kwargs) -> str:
    """pods/log as text.  (kubernetes client 36.x returns the repr of the bytes from read_namespaced_pod_log,
    kubernetes-client/python#2596, so read the raw response.)"""
    resp = core.read_namespaced_pod_log(pod, namespace, _preload_content=False, **kwargs)
    try:
        return resp.data.decode()
    finally:
        resp.release_conn()


def follow_log(core, pod: str, namespace: str, **kwargs):
    """Yield log lines with follow=true as they arrive (raw response; see read_log)."""
    resp = core.read_namespaced_pod_log(pod, namespace, follow=True, _preload_content=False, **kwargs)
    buf = b""
    try:
        for chunk in resp.stream(amt=None, decode_content=False):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield line.decode()
    finally:
        resp.release_conn()


def _summary(pods: dict) -> dict:
    return {n: p.status.phase for n, p in pods.items()}


def _running(p) -> bool:
    return p.status.phase == "Running" and p.metadata.deletion_timestamp is None


def test_mpijob_succeeds_with_launcher_logs(cluster, k8s, namespace):
    name = _name("ok")
    lines = [f"step {i}: rank 0 says hello" for i in range(5)]
    if cluster.simulated:
        cluster.set_launcher_logs(namespace, lines)
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        GROUP, "v2beta1", namespace, PLURAL, mpijob(name)
    )

    seen: list[dict] = []
    final = watch_mpijob(
        k8s, namespace, name, lambda o: {"Succeeded", "Failed"} & _true_conditions(o), seen=seen
    )
    assert "Succeeded" in _true_conditions(final), final.get("status")
    # Created, then Running, then Succeeded, each observed True at some point, in that order
    first_seen: dict[str, int] = {}
    for i, obj in enumerate(seen):
        for cond in _true_conditions(obj):
            first_seen.setdefault(cond, i)
    assert first_seen["Created"] <= first_seen["Running"] <= first_seen["Succeeded"], first_seen
    reasons = {c["type"]: c["reason"] for c in final["status"]["conditions"]}
    assert reasons["Succeeded"] == "MPIJobSucceeded"

    core = client.CoreV1Api(k8s)
    launchers = core.list_namespaced_pod(
        namespace, label_selector=f"{JOB_NAME}={name},{JOB_ROLE}=launcher"
    ).items
    assert len(launchers) == 1 and launchers[0].status.phase == "Succeeded"
    term = launchers[0].status.container_statuses[0].state.terminated
    assert term.exit_code == 0 and term.reason == "Completed"
    if cluster.simulated:
        text = read_log(core, launchers[0].metadata.name, namespace, container="launcher", timestamps=True)
        got = text.splitlines()
        assert [line.split(" ", 1)[1] for line in got] == lines
        assert all(line.split(" ", 1)[0].endswith("Z") for line in got)  # RFC 3339 timestamps
    # the launcher Job carries the Kubernetes Job controller's verdict
    job = client.BatchV1Api(k8s).read_namespaced_job(f"{name}-launcher", namespace)
    assert {c.type for c in job.status.conditions if c.status == "True"} >= {"SuccessCriteriaMet", "Complete"}


@pytest.mark.needs_simulation
def test_launcher_log_follow(cluster, k8s, namespace):
    name = _name("follow")
    cluster.set_launcher_logs(namespace, ["first", "second"], previous_lines=["old attempt"])
    manifest = mpijob(name, workers=1, launcher_meta=bh.pod_metadata(bh.RUN))  # launcher keeps running
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        GROUP, "v2beta1", namespace, PLURAL, manifest
    )
    sel = f"{JOB_NAME}={name},{JOB_ROLE}=launcher"
    pod = watch_pods(k8s, namespace, sel, lambda ps: any(_running(p) for p in ps.values()))[0]

    core = client.CoreV1Api(k8s)
    got = []
    stream = follow_log(
        core, pod.metadata.name, namespace, container="launcher", timestamps=True, _request_timeout=60
    )
    for line in stream:
        got.append(line.split(" ", 1)[1])
        if got == ["first", "second"]:
            cluster.append_launcher_logs(namespace, ["third"])  # written after the reader connected
        if len(got) == 3:
            break
    stream.close()
    assert got == ["first", "second", "third"]
    prev = read_log(core, pod.metadata.name, namespace, container="launcher", previous=True)
    assert prev.splitlines() == ["old attempt"]


@pytest.mark.needs_simulation
def test_failing_launcher_exhausts_backoff_limit(cluster, k8s, namespace):
    name = _name("fail")
    meta = bh.pod_metadata(bh.FAIL, exit_code=3, run_duration=0.2)
    manifest = mpijob(name, workers=1, launcher_meta=meta, restart_policy="Never", backoff_limit=2)
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        GROUP, "v2beta1", namespace, PLURAL, manifest
    )

    # the Job controller's pod-failure backoff (10 s, 20 s) is real: ~30 s
    final = watch_mpijob(k8s, namespace, name, lambda o: "Failed" in _true_conditions(o), timeout=180)
    failed = next(c for c in final["status"]["conditions"] if c["type"] == "Failed")
    assert "BackoffLimitExceeded" in failed["reason"], failed

    core = client.CoreV1Api(k8s)
    pods = core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME}={name},{JOB_ROLE}=launcher").items
    assert len(pods) == 3, _summary({p.metadata.name: p for p in pods})
    for p in pods:
        assert p.status.phase == "Failed"
        assert p.status.container_statuses[0].state.terminated.exit_code == 3
    job = client.BatchV1Api(k8s).read_namespaced_job(f"{name}-launcher", namespace)
    conds = {c.type: c for c in job.status.conditions if c.status == "True"}
    assert {"FailureTarget", "Failed"} <= set(conds) and conds["Failed"].reason == "BackoffLimitExceeded"
    assert job.status.failed == 3


@pytest.mark.needs_simulation
def test_onfailure_launcher_restarts_in_place(cluster, k8s, namespace):
    name = _name("restart")
    meta = bh.pod_metadata(bh.FAIL, exit_code=7, run_duration=0.3, succeed_after_restarts=2)
    manifest = mpijob(name, workers=1, launcher_meta=meta, restart_policy="OnFailure")
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        GROUP, "v2beta1", namespace, PLURAL, manifest
    )

    final = watch_mpijob(k8s, namespace, name, lambda o: {"Succeeded", "Failed"} & _true_conditions(o))
    assert "Succeeded" in _true_conditions(final), final.get("status")
    pods = client.CoreV1Api(k8s).list_namespaced_pod(
        namespace, label_selector=f"{JOB_NAME}={name},{JOB_ROLE}=launcher"
    )
    assert len(pods.items) == 1  # same pod, container restarted twice
    st = pods.items[0].status.container_statuses[0]
    assert st.restart_count == 2
    assert st.last_state.terminated.exit_code == 7
    assert st.state.terminated.exit_code == 0


@pytest.mark.needs_simulation
def test_deleting_mpijob_removes_its_pods(cluster, k8s, namespace):
    name = _name("del")
    manifest = mpijob(name, workers=2, launcher_meta=bh.pod_metadata(bh.RUN))
    co = client.CustomObjectsApi(k8s)
    co.create_namespaced_custom_object(GROUP, "v2beta1", namespace, PLURAL, manifest)
    sel = f"{JOB_NAME}={name}"
    watch_pods(k8s, namespace, sel, lambda ps: len([p for p in ps.values() if _running(p)]) == 3)
    watch_mpijob(k8s, namespace, name, lambda o: "Running" in _true_conditions(o))

    co.delete_namespaced_custom_object(GROUP, "v2beta1", namespace, PLURAL, name)
    watch_pods(k8s, namespace, sel, lambda ps: not ps)  # garbage collector + simulated kubelet
    assert not client.BatchV1Api(k8s).list_namespaced_job(namespace).items


@pytest.mark.needs_simulation
def test_launcher_requesting_too_many_gpus_stays_pending(cluster, k8s, namespace):
    name = _name("pending")
    manifest = mpijob(name, workers=1, launcher_resources=bh.unschedulable_gpu_request())
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        GROUP, "v2beta1", namespace, PLURAL, manifest
    )

    def unschedulable(ps):
        return any(
            c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
            for p in ps.values()
            for c in (p.status.conditions or [])
        )

    pods = watch_pods(k8s, namespace, f"{JOB_NAME}={name},{JOB_ROLE}=launcher", unschedulable)
    assert pods[0].status.phase == "Pending" and not pods[0].spec.node_name


@pytest.mark.needs_simulation
def test_a_controller_manager_gone_at_start_is_revived_and_new_nodes_become_ready(cluster, k8s):
    """kube-controller-manager exits when the API server is slow to start (a loaded CI machine): the cluster's
    start revives it, so a node created afterwards loses the API server's not-ready taint and becomes Ready."""
    from localcluster.cluster_objects import await_nodes_ready, node_manifest

    cluster.stop_component("kube-controller-manager", grace=0)
    assert cluster.component_pid("kube-controller-manager") is None
    cluster.revive_early_exits()
    assert cluster.component_pid("kube-controller-manager") is not None
    core = client.CoreV1Api(k8s)
    name = _name("revived-node")
    core.create_node(node_manifest(name))
    try:
        await_nodes_ready(core, [name], TIMEOUT)
    finally:
        core.delete_node(name)


@pytest.mark.needs_simulation
def test_a_scheduler_that_crashed_is_started_again_and_schedules_the_next_mpijob(cluster, k8s, namespace):
    """kube-scheduler ends itself when its cache disagrees with what the API says (an API server killed in the
    middle of a binding; run O4 of 2026-12-07: gone 7 s after the API server came back, and the next e2e test's
    pods were never scheduled). The cluster's component keeper starts it again, as a kubelet would."""
    crashed = cluster.component_pid("kube-scheduler")
    assert crashed is not None
    os.kill(crashed, signal.SIGKILL)
    wait_until(
        lambda: cluster.component_pid("kube-scheduler") not in (None, crashed),
        TIMEOUT,
        f"kube-scheduler to be started again (keeper log: {cluster.logs_dir / 'component-keeper.log'})",
    )
    name = _name("after-crash")
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        GROUP, "v2beta1", namespace, PLURAL, mpijob(name)
    )
    final = watch_mpijob(k8s, namespace, name, lambda o: {"Succeeded", "Failed"} & _true_conditions(o))
    assert "Succeeded" in _true_conditions(final), final.get("status")


@pytest.mark.needs_simulation
def test_a_stage_matched_on_a_deleted_pod_leaves_its_successor_of_the_same_name_alone(
    cluster, k8s, namespace
):
    """kwok keys its work by namespace/name and plays a stage on the snapshot it matched: a pod deleted and made
    again under the same name (an mpi-operator's worker after an eviction) got the old pod's termination, Failed 137
    without ever being deleted (CI 2026-12-07: the MPIJob then neither replaced its worker nor failed). kwok is
    paused while pod A is deleted and its successor B made, so that it matches A's termination only after B
    exists; B must then live its own life: Pending for its start delay, then Running."""
    core = client.CoreV1Api(k8s)
    name, label = _name("successor"), _name("case")

    def pod(start_delay: str | None = None) -> dict:
        annotations = {bh.START_DELAY: start_delay} if start_delay else {}
        return {
            "metadata": {
                "name": name,
                "labels": {"case": label, bh.LIFECYCLE: bh.RUN},
                "annotations": annotations,
            },
            "spec": {
                "nodeName": f"{bh.NODE_NAME_PREFIX}0",
                "containers": [{"name": "c", "image": "busybox"}],
            },
        }

    core.create_namespaced_pod(namespace, pod())
    watch_pods(k8s, namespace, f"case={label}", lambda pods: name in pods and _running(pods[name]))
    with cluster.frozen_component("kwok-controller"):
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=30)  # A terminating: kwok's to play
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)  # ... and gone before kwok looks
        successor = core.create_namespaced_pod(namespace, pod(start_delay="2s")).metadata.uid
    (b,) = watch_pods(
        k8s,
        namespace,
        f"case={label}",
        lambda pods: name in pods and pods[name].status.phase in ("Running", "Failed", "Succeeded"),
    )
    assert (b.metadata.uid, b.status.phase, b.metadata.deletion_timestamp) == (successor, "Running", None), (
        b.status
    )
    assert [(s.restart_count, s.state.terminated) for s in b.status.container_statuses] == [(0, None)], (
        b.status
    )
