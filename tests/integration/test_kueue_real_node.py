"""Kueue on the real node: a queued MPIJob is suspended by Kueue's webhook, admitted, and its MPI program runs for
real (launcher and workers are containers, mpirun reaches the workers over SSH), then its Workload is Finished; and
the same through the operator, whose task log says why the job waited and when it was admitted.

The same code path as the kwok cluster's Kueue (localcluster/kueue.py), inside the node container. Plain manifests
and the kubernetes client only; the job is written after upstream's v2beta1 pi example (examples/v2beta1/pi/pi.yaml)
with small requests so that it fits the ClusterQueue's quota (cpu 2) and the 2-core node, on this project's
look-alike of upstream's Open MPI image (``openmpi-upstream``: images/mpi/Dockerfile, its own pi program).
"""

from __future__ import annotations

import re
import threading
import uuid
from datetime import datetime

import pytest
from kubernetes import client
from kubernetes import config as kconfig

from airflow_mpi.operators import MPIJobOperator
from localcluster import kueue as lk
from localcluster.mpi_images import UPSTREAM_IMAGES
from tests.integration.kueue_history import WorkloadHistory, assert_told_as_workloads, kueue_lines
from tests.integration.test_kueue_cluster import Jobs, _admitted, _true
from tests.integration.test_operator import Background, Recorder, ctx

pytestmark = pytest.mark.real_node
PI_LINE = re.compile(r"^pi is approximately \d+\.\d+ \(2 ranks")


def pi_job(name: str) -> dict:
    image = UPSTREAM_IMAGES["openmpi-upstream"]
    requests = {"requests": {"cpu": "500m", "memory": "256Mi"}}

    def template(container: dict) -> dict:
        return {"spec": {"containers": [{"image": image, "imagePullPolicy": "IfNotPresent",
                                         "securityContext": {"runAsUser": 1000},
                                         "resources": requests, **container}]}}  # fmt: skip

    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "labels": {lk.QUEUE_LABEL: lk.LOCAL_QUEUE}},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "sshAuthMountPath": "/home/mpiuser/.ssh",
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": template(
                        {
                            "name": "mpi-launcher",
                            "command": ["mpirun"],
                            "args": ["-n", "2", "/home/mpiuser/pi"],
                        }
                    ),
                },
                "Worker": {
                    "replicas": 2,
                    "template": template(
                        {
                            "name": "mpi-worker",
                            "command": ["/usr/sbin/sshd"],
                            "args": ["-De", "-f", "/home/mpiuser/.sshd_config"],
                        }
                    ),
                },
            },
        },
    }


def test_a_queued_mpijob_runs_real_mpi_once_kueue_admits_it(kueue_real_node):
    api = kconfig.new_client_from_config(config_file=str(kueue_real_node.kubeconfig_path))
    core = client.CoreV1Api(api)
    ns = f"it-kueue-real-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    try:
        lk.create_local_queue(api, ns)
        jobs = Jobs(api, ns)
        created = jobs.create(pi_job("pi"))
        assert created["spec"]["runPolicy"]["suspend"] is True  # Kueue's webhook, at creation

        wl = jobs.workload("pi", _admitted, "Admitted")
        assert wl["status"]["admission"]["clusterQueue"] == lk.CLUSTER_QUEUE
        job = jobs.mpijob("pi", lambda j: _true(j, "Succeeded") or _true(j, "Failed"), "finished")
        assert _true(job, "Succeeded"), job["status"]
        # the mpi-operator writes Suspended only if it saw the job before Kueue admitted it (a race on a loaded
        # machine: CI's run saw none); when written, it must say resumed
        suspended = lk.condition(job, "Suspended")
        assert suspended is None or (suspended["status"], suspended["reason"]) == (
            "False",
            "MPIJobResumed",
        ), job

        pods = core.list_namespaced_pod(ns, label_selector="training.kubeflow.org/job-role=launcher").items
        (launcher,) = [p for p in pods if p.status.phase == "Succeeded"]
        assert launcher.spec.node_name == "real-node-0"
        # held until admitted, whoever saw what first: the launcher pod came no earlier than Kueue's admission
        admitted_at = datetime.fromisoformat(
            lk.condition(wl, "Admitted")["lastTransitionTime"].replace("Z", "+00:00")
        )
        assert launcher.metadata.creation_timestamp >= admitted_at, (launcher.metadata.creation_timestamp, wl)
        log = core.read_namespaced_pod_log(launcher.metadata.name, ns, _preload_content=False).data.decode()
        assert any(PI_LINE.match(line) for line in log.splitlines()), log

        finished = jobs.workload("pi", lambda w: _true(w, "Finished"), "Finished")
        assert lk.condition(finished, "Finished")["reason"] == "Succeeded"
    finally:
        core.delete_namespace(ns)


class LineSignal(Recorder):
    """A Recorder that sets ``seen`` once a line containing ``text`` is logged."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text, self.seen = text, threading.Event()

    def __getattr__(self, level):
        record = super().__getattr__(level)

        def signal(msg, *args, **kwargs):
            record(msg, *args, **kwargs)
            if self.text in self.lines[-1]:
                self.seen.set()

        return signal


def test_the_operator_says_why_a_job_waits_then_runs_it_for_real_once_admitted(
    kueue_real_node, monkeypatch, tmp_path
):
    """The LocalQueue does not exist yet when the task submits: Kueue holds the job (Inadmissible) and the task log says
    so; once the queue exists the job is admitted and real ranks run, every launcher line once in the task log. The
    task log's Kueue lines are checked against the Workload's versions, watched from before the job exists."""
    from tests.integration.least_privilege import (
        apply_role,
        bound_service_account_kubeconfig,
        use_as_kubernetes_default,
    )

    api = kconfig.new_client_from_config(config_file=str(kueue_real_node.kubeconfig_path))
    core = client.CoreV1Api(api)
    ns = f"it-kueue-op-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    try:
        with WorkloadHistory(api, ns) as history:  # from before the job exists
            config = bound_service_account_kubeconfig(
                api, str(kueue_real_node.kubeconfig_path), ns, apply_role(api), tmp_path / "sa-kubeconfig"
            )
            use_as_kubernetes_default(monkeypatch, config, ns)
            log = LineSignal(
                f"is queued by Kueue in LocalQueue {lk.LOCAL_QUEUE}: "
                f"LocalQueue {lk.LOCAL_QUEUE} doesn't exist"
            )
            monkeypatch.setattr(MPIJobOperator, "log", property(lambda self: log))
            requests = {"requests": {"cpu": "300m", "memory": "128Mi"}}
            op = MPIJobOperator(
                task_id="queued_pi",
                namespace=ns,
                image=UPSTREAM_IMAGES["openmpi-upstream"],
                program=["/home/mpiuser/pi"],
                workers=2,
                queue_name=lk.LOCAL_QUEUE,
                poll_interval=2,
                launcher_resources=requests,
                worker_resources=requests,
                on_finish_action="keep",
            )
            task = Background(op.execute, ctx("queued_pi"))
            assert log.seen.wait(120), log.lines
            lk.create_local_queue(api, ns)
            xcom = task.result(300)
            assert isinstance(xcom, dict) and xcom["condition"] == "Succeeded", (xcom, log.lines[-40:])

            admitted = [
                ln for ln in log.lines if "was admitted by Kueue: ClusterQueue " + lk.CLUSTER_QUEUE in ln
            ]
            assert len(admitted) == 1 and log.lines.index(admitted[0]) > log.lines.index(
                next(ln for ln in log.lines if log.text in ln)
            )
            (launcher,) = core.list_namespaced_pod(
                ns, label_selector="training.kubeflow.org/job-role=launcher"
            ).items
            real = (
                core.read_namespaced_pod_log(launcher.metadata.name, ns, _preload_content=False)
                .data.decode()
                .splitlines()
            )
            assert any(PI_LINE.match(line) for line in real), real
            assert [ln for ln in log.lines if ln in set(real)] == real  # each launcher line once, in order
            assert_told_as_workloads(kueue_lines(log), history)
    finally:
        core.delete_namespace(ns)
