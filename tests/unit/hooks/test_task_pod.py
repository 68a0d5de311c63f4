"""A KubernetesExecutor task pod knows itself, and tells the cluster's deletion of it from anything else
(hooks/task_pod.py)."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

from k8s_fakes import api_error
from kubernetes.client import V1ObjectMeta, V1Pod, V1PodList

from airflow_mpi.hooks import MPIJobHook
from airflow_mpi.hooks.task_pod import (
    EXECUTOR_POD_ENV,
    EXECUTOR_POD_LABEL,
    POD_NAME_ENV,
    being_deleted,
    own_pod,
)

IN_POD = {EXECUTOR_POD_ENV: "True"}


def pod(deleting: bool, labels: dict | None = None) -> V1Pod:
    return V1Pod(
        metadata=V1ObjectMeta(
            name="task-pod",
            labels={EXECUTOR_POD_LABEL: "7"} if labels is None else labels,
            deletion_timestamp=datetime(2026, 12, 5, tzinfo=UTC) if deleting else None,
        )
    )


def test_own_pod_is_the_hostname_in_the_service_accounts_namespace(tmp_path):
    ns = tmp_path / "namespace"
    ns.write_text("airflow\n")
    assert own_pod(IN_POD, str(ns)) == ("airflow", socket.gethostname())
    assert own_pod({}, str(ns)) is None  # not an executor's pod (LocalExecutor, Celery, a test)
    assert own_pod(IN_POD, str(tmp_path / "missing")) is None  # no service account mounted


def test_the_pod_name_the_template_passes_wins_over_a_hostname_it_set(tmp_path):
    """A template with ``spec.hostname`` makes the hostname other than the pod's name; the downward API's name is
    exact (deploy/kubernetes-executor/pod-template.yaml passes it)."""
    ns = tmp_path / "namespace"
    ns.write_text("airflow\n")
    assert own_pod({**IN_POD, POD_NAME_ENV: "mpi-task-abc"}, str(ns)) == ("airflow", "mpi-task-abc")
    assert own_pod({**IN_POD, POD_NAME_ENV: ""}, str(ns)) == ("airflow", socket.gethostname())


def test_only_an_executor_pod_with_a_deletion_timestamp_is_being_deleted():
    assert being_deleted([pod(deleting=True)])
    assert not being_deleted([pod(deleting=False)])  # Airflow's own kill (marked failed)
    assert not being_deleted(
        [pod(deleting=True, labels={"app": "other"})]
    )  # a pod the executor did not start
    assert not being_deleted([])  # gone already, or another name


class Pods:
    def __init__(self, answer):
        self.answer, self.asked = answer, []

    def list_namespaced_pod(self, namespace, **kwargs):
        self.asked.append((namespace, kwargs))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def hook_with(pods: Pods) -> MPIJobHook:
    hook = MPIJobHook()
    hook.__dict__["core_v1_client"] = pods
    hook._retrying = lambda: {"stop": lambda state: True, "reraise": True}  # one request, its own error
    return hook


def test_the_hook_reads_the_pod_by_name_and_counts_an_unreadable_pod_as_not_deleted():
    pods = Pods(V1PodList(items=[pod(deleting=True)]))
    assert hook_with(pods).task_pod_deleting("airflow", "task-pod")
    assert pods.asked == [("airflow", {"field_selector": "metadata.name=task-pod"})]
    assert not hook_with(Pods(api_error(403))).task_pod_deleting(
        "airflow", "task-pod"
    )  # no `list pods` there
