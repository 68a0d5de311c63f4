"""The KubernetesExecutor pod a task process runs in, and whether the cluster is deleting it.

The cluster ends a task pod (``kubectl delete pod``, a node drain, an eviction) with SIGTERM, as Airflow ends a task it
kills (marked failed or success); Airflow's task runner turns both into ``on_kill``. Only Airflow's kill ends the
task's work: a pod the cluster takes away is a try cut short, which Airflow retries, and its MPIJob is for that retry
to reattach to. The pod's ``deletionTimestamp``, set before the kubelet sends the signal, tells the two apart.
"""

from __future__ import annotations

import os
import socket

from airflow_mpi.hooks.kubeconfig import IN_CLUSTER_NAMESPACE_FILE, in_cluster_namespace

#: set in every task pod by the cncf.kubernetes provider's pod generator (``pod_generator.py``)
EXECUTOR_POD_ENV = "AIRFLOW_IS_K8S_EXECUTOR_POD"
#: the label the KubernetesExecutor puts on every pod it starts (its scheduler job's id)
EXECUTOR_POD_LABEL = "airflow-worker"
#: the pod's name, where the pod template passes it (the downward API's ``metadata.name``): exact even when the
#: template sets ``spec.hostname``, which the hostname then is
POD_NAME_ENV = "AIRFLOW_MPI_POD_NAME"


def own_pod(
    environ: dict[str, str] | None = None, namespace_file: str = IN_CLUSTER_NAMESPACE_FILE
) -> tuple[str, str] | None:
    """``(namespace, name)`` of the KubernetesExecutor pod this process runs in, None anywhere else. Its name is
    ``AIRFLOW_MPI_POD_NAME`` where the pod template sets it, else the hostname (a pod's name unless its template sets
    ``spec.hostname``: then the lookup finds no pod and the job is deleted as for a kill); its namespace is its
    service account's."""
    env = os.environ if environ is None else environ
    if env.get(EXECUTOR_POD_ENV) != "True":
        return None
    namespace = in_cluster_namespace(namespace_file)  # None without a mounted service account
    name = env.get(POD_NAME_ENV) or socket.gethostname()
    return (namespace, name) if namespace and name else None


def being_deleted(pods: list) -> bool:
    """Whether the listed pod (``V1Pod``s of a name's field selector) is an executor's pod the cluster is deleting."""
    return any(
        pod.metadata.deletion_timestamp is not None and EXECUTOR_POD_LABEL in (pod.metadata.labels or {})
        for pod in pods
    )
