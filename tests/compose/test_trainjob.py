"""Kubeflow Trainer in the users' stack: `trainjob_pi`, triggered over REST, runs pi as a TrainJob of the runtime
the kube service applied (deploy/trainjob-mpi-runtime.yaml) on Trainer v2.3.0 and JobSet v0.12.0 in the stack's
cluster; real ranks on the node pods, their lines in the task log once; the TrainJob carries the task instance's
identity and is deleted when the task succeeded (on_finish_action's default). The TrainJob is followed by a watch
in the kube service (it lives only as long as the run), never by polling."""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest

from airflow_mpi.jobspec.naming import sanitize_label_value

from .conftest import ARTIFACTS, NODE_KUBECONFIG, PROJECT, wait_for
from .kube_watch import Event, KubeWatch, event_of_run

DAG = "trainjob_pi"
WORKERS, SLOTS = 2, 2  # node pods x ranks per node pod
RANK_LINE = re.compile(r"rank (\d+) of (\d+) on (\S+)")
PI_LINE = re.compile(r"pi is approximately (\d+\.\d+) \((\d+) ranks")


class TrainJobRun:
    """One run of trainjob_pi over REST (deferred: the triggerer streams the launcher's log) and the watch events
    of its TrainJob, from its creation to its deletion."""

    def __init__(self, client, watch: KubeWatch) -> None:
        conf = {"workers": WORKERS, "slots_per_worker": SLOTS, "deferrable": True}
        self.run_id: str = client.trigger(DAG, conf)["dag_run_id"]
        self.state: str = client.wait_run(DAG, self.run_id, timeout=300)["state"]
        self.log: str = client.task_log(DAG, self.run_id, "pi")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / f"{DAG}-pi.log").write_text(self.log)
        self.xcom: dict = client.xcom(DAG, self.run_id, "pi") if self.state == "success" else {}
        self.deployment: str | None = client.variable("airflow_mpi_deployment_id")
        created = watch.wait(self._ours, 30, f"the TrainJob of run {self.run_id}")
        self.name: str = created["object"]["metadata"]["name"]
        self.created: dict = created["object"]
        if self.state == "success":
            watch.wait(
                lambda e: e["type"] == "DELETED" and self._ours(e), 120, f"TrainJob {self.name} deleted"
            )
        self.events: list[Event] = [e for e in watch.events if self._ours(e)]

    def _ours(self, event: Event) -> bool:
        return event_of_run(self.run_id)(event)

    def last_state(self) -> dict:
        """The TrainJob as it was when deleted (the DELETED event carries its last state)."""
        return self.events[-1]["object"]


@pytest.fixture(scope="module")
def trainjob_run(compose_stack, client) -> TrainJobRun:
    with KubeWatch(PROJECT, NODE_KUBECONFIG, "trainjobs.trainer.kubeflow.org") as watch:
        return TrainJobRun(client, watch)


def test_trainjob_pi_over_rest_prints_real_ranks_once(trainjob_run):
    run, np = trainjob_run, WORKERS * SLOTS
    assert run.state == "success", run.log[-4000:]
    assert run.xcom["name"] == run.name and run.xcom["condition"] == "Complete", run.xcom
    ranks = Counter(int(m[1]) for m in RANK_LINE.finditer(run.log))
    assert ranks == Counter(range(np)), run.log[-4000:]  # every rank's line, each exactly once
    hosts = Counter(m[3].split(".")[0] for m in RANK_LINE.finditer(run.log))
    # the ranks ran on the TrainJob's node pods, SLOTS on each (the hostfile of the Trainer's MPI plugin)
    assert hosts == Counter({f"{run.name}-node-0-{i}": SLOTS for i in range(WORKERS)}), run.log[-4000:]
    ((pi, reported),) = [
        (float(m[1]), int(m[2])) for m in PI_LINE.finditer(run.log)
    ]  # printed once, by rank 0
    assert reported == np and math.isclose(pi, math.pi, abs_tol=0.01)


def test_the_trainjob_carries_the_task_instance_s_identity_and_the_dag_s_settings(trainjob_run):
    job = trainjob_run.created
    assert job["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and job["metadata"]["namespace"] == "default"
    assert trainjob_run.deployment  # made by the stack's first server component
    labels = job["metadata"]["labels"]
    assert {k: v for k, v in labels.items() if k.startswith("airflow-mpi.io/") or "managed-by" in k} == {
        "app.kubernetes.io/managed-by": "airflow-mpi",
        "airflow-mpi.io/dag-id": DAG,
        "airflow-mpi.io/task-id": "pi",
        "airflow-mpi.io/run-id": sanitize_label_value(trainjob_run.run_id),
        "airflow-mpi.io/map-index": "none",
        "airflow-mpi.io/try-number": "1",
        "airflow-mpi.io/deployment": sanitize_label_value(trainjob_run.deployment),
    }
    assert job["spec"]["runtimeRef"]["name"] == "openmpi-mpiuser"
    trainer = job["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (WORKERS, SLOTS)


def test_the_succeeded_trainjob_is_deleted_with_its_jobset_and_pods(compose_stack, trainjob_run):
    run = trainjob_run
    assert run.state == "success", run.log[-4000:]
    kinds = [e["type"] for e in run.events]
    assert kinds[0] == "ADDED" and kinds[-1] == "DELETED" and kinds.count("DELETED") == 1, kinds
    conditions = {c["type"]: c["status"] for c in run.last_state().get("status", {}).get("conditions", [])}
    assert conditions.get("Complete") == "True", conditions  # deleted after it completed, not before

    def gone() -> bool:
        jobsets = [j for j in compose_stack.kube_objects("jobsets") if j["metadata"]["name"] == run.name]
        pods = [
            p for p in compose_stack.kube_objects("pods") if p["metadata"]["name"].startswith(f"{run.name}-")
        ]
        return not jobsets and not pods

    wait_for(gone, 120, f"the JobSet and pods of TrainJob {run.name} to be deleted")
