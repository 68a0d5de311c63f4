"""Airflow on Kubernetes (docker-compose.kubernetes.yaml): the users' stack switched to the KubernetesExecutor, every
task try in a pod on the stack's node and the triggerer a pod there too, both with the service account of
deploy/kubernetes-executor/ and ``kubernetes_default`` in_cluster.

Runs on the package's stack after its other tests (conftest orders it): the switch is ``docker compose up --wait``
with both files, as README's "Airflow on Kubernetes" says, which recreates what the overlay changes (the node, which
then imports the Airflow image; the scheduler and the API server) and keeps the images and the database.
Pods and MPIJobs are followed by watches in the kube service (kube_watch.py), never polled.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter

import pytest
import yaml

from airflowstack import heartbeat_age
from localcluster.node_image_store import images, normalized

from .conftest import ARTIFACTS, NODE_KUBECONFIG, PROJECT, REPO, ComposeStack, wait_for
from .kube_watch import Event, KubeWatch, event_of_run
from .test_stack import (
    DAG,
    MPI_IMAGES,
    PI_LINE,
    RANK_LINE,
    assert_marking_failed_deletes_the_job,
    assert_real_pi_run,
    node_images,
)

FILES = [REPO / "docker-compose.yaml", REPO / "docker-compose.kubernetes.yaml"]
SERVICE_ACCOUNT = "airflow-worker"
REPEAT = int(
    os.environ.get("AIRFLOW_MPI_FAULT_REPEAT", "1")
)  # the two pod-deletion scenarios (docs/faults.md)
LIVE_HEARTBEAT = 30  # s: Airflow's triggerer_health_check_threshold
# the job runs on 40 s after its ranks' first lines, asleep (pi's hold: no CPU used), while a pod is deleted and its
# successor takes over (a triggerer's after Airflow's 30 s health check threshold)
SLOW = {"workers": 2, "hold_seconds": 40}


def node_image_digests(stack: ComposeStack) -> dict[str, str]:
    """Image name -> manifest digest in the node's containerd (its own listing). An import writes a new image
    config (its creation time), so an image imported again has a new digest."""
    return images(stack.docker.compose.execute("kube", ["ctr", "-n", "k8s.io", "images", "ls"], tty=False))


@pytest.fixture(scope="module")
def digests_before_switch(compose_stack) -> dict[str, str]:
    return node_image_digests(compose_stack)


@pytest.fixture(scope="module")
def on_kubernetes(compose_stack, digests_before_switch):
    from python_on_whales import DockerClient

    docker = DockerClient(compose_files=FILES, compose_project_name=PROJECT)
    docker.compose.rm(["airflow-triggerer"], stop=True)  # the README's step from a running stack
    t0 = time.monotonic()
    docker.compose.up(detach=True, wait=True)
    print(f"switched to the KubernetesExecutor in {time.monotonic() - t0:.0f} s")
    stack = ComposeStack(docker, compose_stack.port)
    client = stack.client()
    client.wait_for_dags([DAG, "mpi_function"], timeout=180)
    yield stack, client
    client.close()


@pytest.fixture
def pods(on_kubernetes):
    with KubeWatch(PROJECT, NODE_KUBECONFIG, "pods") as watch:
        yield watch


@pytest.fixture
def mpijobs(on_kubernetes):
    with KubeWatch(PROJECT, NODE_KUBECONFIG, "mpijobs.kubeflow.org") as watch:
        yield watch


def task_pod(pods: KubeWatch, name: str) -> dict:
    return pods.wait(lambda e: e["object"]["metadata"]["name"] == name, 30, f"task pod {name}")["object"]


def assert_in_cluster_worker(pod: dict) -> None:
    """A pod of the executor from the README's template: the service account, in_cluster, no kubeconfig."""
    assert "airflow-worker" in pod["metadata"]["labels"]  # the KubernetesExecutor's
    assert pod["spec"]["serviceAccountName"] == SERVICE_ACCOUNT
    (base,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in base.get("env", [])}
    assert yaml.safe_load(env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])["extra"]["in_cluster"] is True
    assert all("kube" not in v["name"] for v in pod["spec"]["volumes"] if "hostPath" in v), pod["spec"][
        "volumes"
    ]


def test_the_switch_imports_the_airflow_image_and_keeps_the_mpi_images(on_kubernetes, digests_before_switch):
    """The node was made anew with the containerd volume it had: the MPI images, exported again in new
    containers, are the ones it holds (same content), so only the Airflow image is imported. The pods that run
    them below are the proof that the kept images work."""
    stack, _ = on_kubernetes
    assert node_images(stack) == {"imported": ["airflow-mpi/airflow:local"], "kept": MPI_IMAGES}
    # containerd's own listing, not the node's word: the MPI images are the very ones imported before the switch
    after = node_image_digests(stack)
    for ref in MPI_IMAGES:
        assert after[normalized(ref)] == digests_before_switch[normalized(ref)], ref
    assert normalized("airflow-mpi/airflow:local") in after


def test_mpi_pi_sync_and_deferrable_from_task_pods_and_the_in_cluster_triggerer(on_kubernetes, pods):
    stack, client = on_kubernetes
    runs = {
        deferrable: client.trigger(DAG, {"workers": 2, "deferrable": deferrable})["dag_run_id"]
        for deferrable in (False, True)
    }
    for run_id in runs.values():
        finished = client.wait_run(DAG, run_id, timeout=300)
        assert finished["state"] == "success", client.task_log(DAG, run_id, "pi")[-4000:]
        assert_real_pi_run(client, run_id, np=2)
        ti = client.task_instance(DAG, run_id, "pi")
        assert_in_cluster_worker(task_pod(pods, ti["hostname"]))
    deferred_log = client.task_log(DAG, runs[True], "pi")
    assert "trigger completed" in deferred_log  # the wait ran in a trigger
    # the compose triggerer is gone (its last job may still read "running" when its stop ended in a SIGKILL): every
    # live triggerer is a pod of the Deployment
    assert not [
        c
        for c in stack.docker.compose.ps()
        if c.config.labels["com.docker.compose.service"] == "airflow-triggerer"
    ]
    alive = {j["hostname"] for j in client.jobs("TriggererJob") if heartbeat_age(j) < LIVE_HEARTBEAT}
    assert alive and all(h.startswith("airflow-triggerer-") for h in alive), client.jobs("TriggererJob")


def test_mpi_function_from_task_pods(on_kubernetes, pods):
    _, client = on_kubernetes
    run_id = client.trigger("mpi_function", {})["dag_run_id"]
    finished = client.wait_run("mpi_function", run_id, timeout=300)
    assert finished["state"] == "success", client.task_log("mpi_function", run_id, "sum_of_squares")[-4000:]
    ti = client.task_instance("mpi_function", run_id, "sum_of_squares")
    assert_in_cluster_worker(task_pod(pods, ti["hostname"]))


def _allowed(stack: ComposeStack, user: str, namespace: str = "default") -> set[tuple[str, ...]]:
    """What the API server lets ``user`` do to resources in ``namespace``, one (API group, resource, name, verb) per
    atom: a SelfSubjectRulesReview made as that user through the admin's impersonation, which gives a service account
    its groups (``system:serviceaccounts``, ``system:serviceaccounts:<namespace>``) and any user
    ``system:authenticated``."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace},
    }
    out = stack.docker.compose.execute(
        "kube",
        [
            "sh",
            "-c",
            f"echo '{json.dumps(review)}' | kubectl --kubeconfig={NODE_KUBECONFIG} --as={user} "
            "create --raw /apis/authorization.k8s.io/v1/selfsubjectrulesreviews -f -",
        ],
        tty=False,
    )
    status = json.loads(out)["status"]
    assert not status.get("incomplete"), status.get("evaluationError")
    return _atoms(status["resourceRules"])


def _atoms(rules: list[dict]) -> set[tuple[str, ...]]:
    return {
        (group, resource, name, verb)
        for rule in rules
        for group in rule.get("apiGroups") or [""]
        for resource in rule["resources"]
        for name in rule.get("resourceNames") or [""]
        for verb in rule["verbs"]
    }


def test_the_pods_hold_the_readmes_role_and_nothing_more(on_kubernetes):
    """The pods' service account may do to resources in its namespace what deploy/rbac.yaml's ``airflow-mpi`` grants
    and what any signed-in user may (self-reviews), no more: read from the API server's authorizer, so a binding of any
    kind, to the account or to a group it is in, shows. (Non-resource URLs, the discovery paths every account may
    read, are not compared.)"""
    stack, _ = on_kubernetes
    shipped = next(
        d
        for d in yaml.safe_load_all((REPO / "deploy/rbac.yaml").read_text())
        if d["metadata"]["name"] == "airflow-mpi"
    )
    anyone = _allowed(stack, "airflow-mpi-unbound-user")
    granted = _allowed(stack, f"system:serviceaccount:default:{SERVICE_ACCOUNT}") - anyone
    assert granted == _atoms(shipped["rules"]) - anyone


def test_mark_failed_deletes_the_job_of_a_task_pod(on_kubernetes):
    assert_marking_failed_deletes_the_job(on_kubernetes[1])


@pytest.fixture(params=range(REPEAT), ids=lambda i: f"run{i + 1}")
def repeat(request) -> int:
    return request.param


def assert_one_job_and_no_orphan(mpijobs: KubeWatch, run_id: str, scenario: str, log: str) -> None:
    """One MPIJob for the task instance, deleted once the task succeeded (no orphan); every rank's line and the
    estimate once in ``log``. The row goes to .artifacts/compose/kubernetes-faults.jsonl (docs/faults.md)."""
    created = [
        e["object"]["metadata"]["name"]
        for e in mpijobs.events
        if e["type"] == "ADDED" and event_of_run(run_id)(e)
    ]
    assert len(created) == 1, created
    mpijobs.wait(
        lambda e: e["type"] == "DELETED" and event_of_run(run_id)(e), 60, f"MPIJob {created[0]} deleted"
    )
    counts = Counter(line for line in log.splitlines() if RANK_LINE.search(line) or PI_LINE.search(line))
    lost = 3 - len(counts)  # 2 ranks' lines and the estimate
    doubled = sum(n - 1 for n in counts.values())
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with (ARTIFACTS / "kubernetes-faults.jsonl").open("a") as out:
        row = {"scenario": scenario, "mpijobs": len(created), "orphans": 0, "lost": lost, "doubled": doubled}
        out.write(json.dumps(row) + "\n")
    assert lost == 0 and doubled == 0, counts


def test_a_task_pod_deleted_mid_run_leaves_its_job_to_the_retry(on_kubernetes, pods, mpijobs, repeat):
    """The cluster deletes try 1's pod while its MPIJob runs (as a drain would): the job stays, try 1 ends at once
    (retryable), try 2 runs in a new pod, reattaches to it and prints its whole log once."""
    stack, client = on_kubernetes
    run_id = client.trigger(DAG, SLOW)["dag_run_id"]
    client.wait_task(DAG, run_id, "pi", {"running"}, timeout=120)
    mpijobs.wait(event_of_run(run_id), 120, f"the MPIJob of {run_id}")
    first = client.task_instance(DAG, run_id, "pi")["hostname"]
    wait_for(lambda: "rank 1 of 2" in client.task_log(DAG, run_id, "pi", 1), 120, "the ranks' first lines")
    stack.kubectl("delete", "pod", first, "--wait=false")
    ti = client.wait_task(DAG, run_id, "pi", {"success", "failed"}, timeout=420)
    assert ti["state"] == "success" and ti["try_number"] == 2, client.task_log(DAG, run_id, "pi", 2)[-4000:]
    assert ti["hostname"] != first
    assert_in_cluster_worker(task_pod(pods, ti["hostname"]))
    cut_short = client.task_log(DAG, run_id, "pi", 1)
    assert "MPIJobTaskPodDeletedError" in cut_short and "kept for the retry" in cut_short, cut_short[-4000:]
    log = client.task_log(DAG, run_id, "pi", 2)
    assert_one_job_and_no_orphan(mpijobs, run_id, "KubernetesExecutor: task pod deleted mid-run (sync)", log)


def test_a_triggerer_pod_deleted_mid_wait_hands_over_to_its_successor(on_kubernetes, pods, mpijobs, repeat):
    stack, client = on_kubernetes
    run_id = client.trigger(DAG, {**SLOW, "deferrable": True})["dag_run_id"]
    client.wait_task(DAG, run_id, "pi", {"deferred"}, timeout=120)
    wait_for(lambda: "rank 1 of 2" in client.task_log(DAG, run_id, "pi"), 120, "the ranks' first lines")
    (old,) = [
        e["object"]["metadata"]["name"] for e in pods.events if is_triggerer(e) and e["type"] == "ADDED"
    ]
    stack.kubectl("delete", "pod", old, "--wait=false")
    successor = pods.wait(
        lambda e: is_triggerer(e) and e["object"]["metadata"]["name"] != old, 60, "a new triggerer pod"
    )
    finished = client.wait_run(DAG, run_id, timeout=420)
    log = client.task_log(DAG, run_id, "pi")
    assert finished["state"] == "success", log[-4000:]
    assert successor["object"]["metadata"]["name"] in {j["hostname"] for j in client.jobs("TriggererJob")}
    assert_one_job_and_no_orphan(
        mpijobs, run_id, "KubernetesExecutor: triggerer pod deleted mid-wait (deferrable)", log
    )


def is_triggerer(event: Event) -> bool:
    return (event["object"]["metadata"].get("labels") or {}).get(
        "app.kubernetes.io/name"
    ) == "airflow-triggerer"
