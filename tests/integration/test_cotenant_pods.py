"""Pods a co-tenant gives a job's labels (issue 32, item 3), against the real API server and the real mpi-operator.

Someone who may only create pods in the namespace (a service account bound to nothing else) makes, before the job
runs, (a) a pod with its launcher's labels that prints lines of its own (on today's code: a launcher attempt whose
output enters the task log, a ``@task.mpi`` result with it) and (b) a pod with a worker's labels that fails before the
launcher exists (on today's code: ``worker_failed``, and the task deletes the real MPIJob). The task's wait follows
only the pods the job's controllers made (hooks/ownership.py): the job is not deleted, the outcome and the task log
are the real launcher's, and each foreign pod is named once.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from kubernetes import client, config

from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.version_compat import TaskDeferred
from localcluster import behaviour as bh
from localcluster.cluster_objects import KWOK_GROUP, KWOK_VERSION
from localcluster.pod_logs import cri_lines
from tests.integration.least_privilege import apply_role, bound_service_account_kubeconfig
from tests.integration.test_cluster_smoke import watch_pods
from tests.integration.test_operator import LINES, Recorder, ctx, mpijobs, operator, run_trigger

FORGED = ["FORGED rank 0 result: 666", "FORGED second line"]
FORGED_CONTAINER = "intruder"
HOLD = "airflow-mpi.io/test-hold"  # a scheduling gate: the job's worker waits until the test lifts it
HELD_WORKER = {
    "spec": {"mpiReplicaSpecs": {"Worker": {"template": {"spec": {"schedulingGates": [{"name": HOLD}]}}}}}
}
POD_CREATOR = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "airflow-mpi-test-pod-creator"},
    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}],
}


def foreign_pod(job: str, name: str, role: str, behaviour: dict) -> dict:
    """A pod with the labels the mpi-operator gives the ``role`` pods of the MPIJob ``job``, made by someone else."""
    labels = {
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/job-role": role,
        "training.kubeflow.org/operator-name": "mpi-operator",
        **behaviour["labels"],
    }
    return {
        "metadata": {"name": name, "labels": labels, "annotations": behaviour["annotations"]},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": FORGED_CONTAINER, "image": "busybox"}],
            "tolerations": [{"operator": "Exists"}],
        },
    }


def serve_forged_lines(cluster, namespace: str) -> None:
    """The foreign pods' container prints FORGED; the job's launcher prints LINES (kwok's ClusterLogs)."""
    cluster.set_launcher_logs(namespace, LINES)
    forged = cluster.pod_logs_dir / namespace / "forged.log"
    forged.write_text("".join(f"{line}\n" for line in cri_lines(FORGED)))
    co = client.CustomObjectsApi(cluster.api_client())
    logs = co.get_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "clusterlogs", f"logs-{namespace}")
    logs["spec"]["logs"].append({"containers": [FORGED_CONTAINER], "logsFile": str(forged)})
    co.replace_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "clusterlogs", f"logs-{namespace}", logs)


def cotenant(k8s, kubeconfig: str, namespace: str, dest: Path) -> client.CoreV1Api:
    """The co-tenant: a service account of the namespace that may create pods, nothing else."""
    role = apply_role(k8s, POD_CREATOR)
    path = bound_service_account_kubeconfig(
        k8s, kubeconfig, namespace, role, dest, service_account="cotenant"
    )
    return client.CoreV1Api(config.new_client_from_config(config_file=str(path)))


class NotingRecorder(Recorder):
    """The task's log; ``noted`` is set once it names an ignored pod (or :meth:`done` says the wait is over)."""

    def __init__(self) -> None:
        super().__init__()
        self.noted = threading.Event()

    def __getattr__(self, level):
        record = super().__getattr__(level)

        def noting(msg, *args, **kwargs):
            record(msg, *args, **kwargs)
            if str(msg).startswith("(ignoring pod"):
                self.noted.set()

        return noting

    def done(self) -> None:
        self.noted.set()


@pytest.fixture
def record(monkeypatch):
    from airflow_mpi.operators import MPIJobOperator

    rec = NotingRecorder()
    for cls in (MPIJobOperator, MPIJobTrigger):
        monkeypatch.setattr(cls, "log", property(lambda self: rec))
    return rec


def check_outcome(k8s, namespace: str, record: Recorder, xcom: dict, job_name: str, foreign: str) -> None:
    """The job is not deleted; its outcome, attempts and log lines are its launcher's; the foreign pod named once."""
    (job,) = mpijobs(k8s, namespace)
    assert job["metadata"]["name"] == xcom["name"] == job_name
    assert not job["metadata"].get("deletionTimestamp") and xcom["condition"] == "Succeeded"
    assert record.payload_lines() == LINES
    assert [ln for ln in record.lines if "FORGED" in ln] == []
    launchers = xcom["launcher_pods"]
    assert (
        xcom["launcher_attempts"] == 1
        and len(launchers) == 1
        and launchers[0].startswith(f"{job_name}-launcher-")
    )
    assert launchers != [foreign]
    notes = [ln.split(":")[0] for ln in record.lines if ln.startswith("(ignoring pod")]
    assert notes == [f"(ignoring pod {foreign}"], record.lines


@pytest.mark.needs_simulation
def test_a_cotenants_pod_with_the_launchers_labels_is_no_attempt_and_none_of_its_lines_reach_the_task_log(
    cluster, k8s, kubeconfig, namespace, kubernetes_default_conn, record, tmp_path
):
    serve_forged_lines(cluster, namespace)
    op = operator("cotenant", namespace, workers=1, on_finish_action="keep")
    job_name = op.build_manifest(ctx("cotenant"))["metadata"]["name"]  # a co-tenant can tell it from the DAG
    foreign = f"{job_name}-launcher-x"
    cotenant(k8s, kubeconfig, namespace, tmp_path / "cotenant").create_namespaced_pod(
        namespace, foreign_pod(job_name, foreign, "launcher", bh.pod_metadata(run_duration=2))
    )
    xcom = op.execute(ctx("cotenant"))
    check_outcome(k8s, namespace, record, xcom, job_name, foreign)


@pytest.mark.needs_simulation
def test_a_cotenants_failed_pod_with_a_workers_labels_before_the_launcher_neither_ends_the_wait_nor_deletes_the_job(
    cluster, k8s, kubeconfig, namespace, kubernetes_default_conn, record, tmp_path
):
    """The job's worker is held (a scheduling gate) so that its launcher cannot come before the deferred wait has
    seen the job Created with the foreign Failed pod and no launcher: on today's code the wait ends there
    (``worker_failed``, then the task deletes the job); here it names the pod, the test lifts the hold and the wait
    goes on to the launcher's outcome."""
    serve_forged_lines(cluster, namespace)
    op = operator(
        "cotenant",
        namespace,
        workers=1,
        on_finish_action="keep",
        deferrable=True,
        launcher_creation_policy="WaitForWorkersReady",
        base_manifest=HELD_WORKER,
    )
    job_name = op.build_manifest(ctx("cotenant"))["metadata"]["name"]
    foreign = f"{job_name}-worker-x"
    cotenant(k8s, kubeconfig, namespace, tmp_path / "cotenant").create_namespaced_pod(
        namespace, foreign_pod(job_name, foreign, "worker", bh.pod_metadata(bh.FAIL, run_duration=0.5))
    )
    watch_pods(
        k8s,
        namespace,
        f"training.kubeflow.org/job-name={job_name}",
        lambda found: foreign in found and found[foreign].status.phase == "Failed",
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx("cotenant"))
    trigger = MPIJobTrigger(**deferred.value.trigger.serialize()[1])  # as the triggerer rebuilds it
    event: dict = {}

    def wait() -> None:
        try:
            event.update(run_trigger(trigger))
        finally:
            record.done()

    waiting = threading.Thread(target=wait, daemon=True)
    waiting.start()
    assert record.noted.wait(120)
    assert waiting.is_alive(), (
        f"the wait ended on a pod that is not the job's: {event.get('status')}: {event}"
    )
    # the wait may note the foreign pod before the mpi-operator created the held worker (a loaded CI run: 404)
    worker = f"{job_name}-worker-0"
    watch_pods(k8s, namespace, f"training.kubeflow.org/job-name={job_name}", lambda found: worker in found)
    client.CoreV1Api(k8s).patch_namespaced_pod(
        worker, namespace, [{"op": "remove", "path": "/spec/schedulingGates"}]
    )
    waiting.join(120)
    assert event.get("status") == "success", event
    check_outcome(k8s, namespace, record, op.execute_complete(ctx("cotenant"), event), job_name, foreign)
