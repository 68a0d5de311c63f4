"""A user's first hour with docker-compose.yaml: start it, trigger mpi_pi (REST and the UI form), read real MPI
ranks' output in the task log, kill a run, take it all down. Nothing in these paths is simulated."""

from __future__ import annotations

import math
import re
import subprocess
from urllib.parse import quote

import pytest

from airflowstack.browser import chromium, logged_in_page
from localcluster.processes import child_env

from .conftest import ARTIFACTS, NODE_KUBECONFIG, PROJECT, wait_for
from .kube_watch import KubeWatch, of_run

DAG = "mpi_pi"
RANK_LINE = re.compile(r"rank (\d+) of (\d+) on (\S+)")
PI_LINE = re.compile(r"pi is approximately (\d+\.\d+) \((\d+) ranks")
# every rank asleep 10 min after its first line (pi's hold): the job runs, using no CPU, until it is deleted
LONG_RUNNING = {"workers": 2, "hold_seconds": 600}


def ranks_and_pi(log: str) -> tuple[dict[int, str], list[tuple[float, int]]]:
    ranks = {int(m[1]): m[3] for m in RANK_LINE.finditer(log)}
    return ranks, [(float(m[1]), int(m[2])) for m in PI_LINE.finditer(log)]


def assert_real_pi_run(client, run_id: str, np: int) -> None:
    log = client.task_log(DAG, run_id, "pi")
    ranks, estimates = ranks_and_pi(log)
    assert sorted(ranks) == list(range(np)), log[-4000:]
    assert all(
        re.fullmatch(r".+-worker-\d+", host.split(".")[0]) for host in ranks.values()
    )  # ranks ran on workers
    ((pi, reported_ranks),) = estimates  # printed once, by rank 0
    assert reported_ranks == np and math.isclose(pi, math.pi, abs_tol=0.01)
    assert log.count("pi is approximately") == 1  # streamed exactly once


def test_up_wait_leaves_every_service_healthy(compose_stack):
    containers = {
        c.config.labels["com.docker.compose.service"]: c.state
        for c in compose_stack.docker.compose.ps(all=True)
    }
    one_shot = {"airflow-init", "mpi-image-openmpi", "mpi-image-mpich", "mpi-image-intel"}
    assert set(containers) == one_shot | {
        "postgres",
        "kube",
        "airflow-api-server",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
    }
    for name, state in containers.items():
        if name in one_shot:
            assert state.status == "exited" and state.exit_code == 0, name
        else:
            assert state.running and state.health.status == "healthy", name
    (node,) = compose_stack.kube_objects("nodes")
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    # a new stack's node imported every exported image (its containerd volume was empty)
    assert node_images(compose_stack) == {"imported": MPI_IMAGES, "kept": []}


MPI_IMAGES = ["airflow-mpi/mpi-pi:intel", "airflow-mpi/mpi-pi:mpich", "airflow-mpi/mpi-pi:openmpi"]
IMAGES_LINE = re.compile(r"\[localcluster\.serve\] (imported|kept) images[^:]*: (.+)")


def node_images(stack) -> dict[str, list[str]]:
    """What the kube service's node said it imported and kept at its start (localcluster/serve.py)."""
    said: dict[str, list[str]] = {"imported": [], "kept": []}
    for m in IMAGES_LINE.finditer(stack.docker.compose.logs(["kube"], no_log_prefix=True)):
        said[m[1]] += m[2].strip().split(", ")
    return said


@pytest.mark.parametrize(
    ("implementation", "image", "deferrable"),
    [
        ("OpenMPI", "airflow-mpi/mpi-pi:openmpi", False),
        ("Intel", "airflow-mpi/mpi-pi:intel", True),
        ("MPICH", "airflow-mpi/mpi-pi:mpich", False),
    ],
)
def test_mpi_pi_over_rest_prints_real_ranks(client, implementation, image, deferrable):
    conf = {
        "workers": 2,
        "slots_per_worker": 2,
        "mpi_implementation": implementation,
        "image": image,
        "deferrable": deferrable,
    }
    run_id = client.trigger(DAG, conf)["dag_run_id"]
    finished = client.wait_run(DAG, run_id, timeout=300)
    assert finished["state"] == "success", client.task_log(DAG, run_id, "pi")[-4000:]
    assert_real_pi_run(client, run_id, np=4)
    assert client.xcom(DAG, run_id, "pi")["launcher_attempts"] == 1


def test_mpi_pi_from_the_trigger_form(compose_stack, client):
    before = {r["dag_run_id"] for r in client.dag_runs(DAG)}
    with chromium() as browser, logged_in_page(browser, compose_stack.base_url, "admin", "admin") as page:
        page.goto(f"/dags/{DAG}")
        page.get_by_test_id("trigger-dag-button").click()
        form = page.get_by_role("dialog")
        form.get_by_text("Run Parameters").first.wait_for()
        assert form.locator("input[name=element_image]").input_value() == "airflow-mpi/mpi-pi:openmpi"
        page.get_by_test_id("trigger-dag-submit").click()
        run = wait_for(
            lambda: next((r for r in client.dag_runs(DAG) if r["dag_run_id"] not in before), None),
            60,
            "the run submitted through the form",
        )
        finished = client.wait_run(DAG, run["dag_run_id"], timeout=300)
        assert finished["state"] == "success", client.task_log(DAG, run["dag_run_id"], "pi")[-4000:]
        assert_real_pi_run(client, run["dag_run_id"], np=2)  # the form's defaults: 2 workers x 1 slot
        page.goto(f"/dags/{DAG}/runs/{quote(run['dag_run_id'], safe='')}/tasks/pi")
        page.get_by_text("pi is approximately").first.wait_for()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "ui-mpi_pi-real-ranks.png"), full_page=True)


def test_marking_a_running_task_failed_deletes_its_mpijob_and_pods(compose_stack, client):
    assert_marking_failed_deletes_the_job(client)


def assert_marking_failed_deletes_the_job(client) -> None:
    """A running ``pi`` marked failed over REST: its MPIJob and pods go, the run fails (seen by watches: a poll was
    two `docker compose exec kubectl` a second)."""
    with (
        KubeWatch(PROJECT, NODE_KUBECONFIG, "mpijobs.kubeflow.org") as jobs,
        KubeWatch(PROJECT, NODE_KUBECONFIG, "pods") as pods,
    ):
        run_id = client.trigger(DAG, LONG_RUNNING)["dag_run_id"]

        def running(event) -> bool:
            conditions = event["object"].get("status", {}).get("conditions", [])
            return (
                event["type"] != "DELETED"
                and of_run(run_id)(event["object"])
                and any(c["type"] == "Running" and c["status"] == "True" for c in conditions)
            )

        name = jobs.wait(running, 180, "the run's MPIJob to be Running")["object"]["metadata"]["name"]
        client.set_task_state(DAG, run_id, "pi", "failed")
        jobs.wait(
            lambda e: e["type"] == "DELETED" and e["object"]["metadata"]["name"] == name,
            120,
            f"MPIJob {name} deleted",
        )

        def pods_gone(events) -> bool:
            live: set[str] = set()
            for e in events:
                pod = e["object"]["metadata"]["name"]
                if pod.startswith(name):
                    (live.discard if e["type"] == "DELETED" else live.add)(pod)
            return not live

        pods.wait_until(pods_gone, 120, f"the pods of MPIJob {name} to be deleted")
    assert client.wait_run(DAG, run_id, timeout=60)["state"] == "failed"


def test_down_v_leaves_nothing_behind(compose_stack):
    """Last in this module: `docker compose down -v` removes every container, volume and network of the stack."""
    compose_stack.save_logs()
    compose_stack.docker.compose.down(volumes=True, remove_orphans=True, timeout=60)
    label = f"label=com.docker.compose.project={PROJECT}"
    for kind in ("container", "volume", "network"):
        listed = subprocess.run(
            ["docker", kind, "ls", *(["-a"] if kind == "container" else []), "-q", "--filter", label],
            capture_output=True,
            text=True,
            check=True,
            env=child_env(),
        ).stdout.split()
        assert listed == [], kind
