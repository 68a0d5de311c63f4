"""The mpi-operator's MPIJob (``kubeflow.org/v2beta1``, mpi-operator >= 0.4; the local cluster runs v0.8.2).

Its launcher is a batch Job ``<name>-launcher`` whose pods are the attempts (``runPolicy.backoffLimit`` is that
Job's), workers are pods ``<name>-worker-<i>`` reached over SSH, and an invalid spec is answered only with a
Warning event ``ValidationError`` (pkg/apis/kubeflow/validation/validation.go). Kueue's MPIJob integration queues it.
"""

from __future__ import annotations

from collections.abc import Mapping

from airflow_mpi.jobspec.kinds.kind import (
    ATTEMPT_IS_POD,
    MPIJOB_REPLICAS,
    JobKind,
    LauncherOwner,
    PodLabels,
    RetriesMapping,
)
from airflow_mpi.jobspec.spec import CONFIG_MOUNT_PATH, CONFIG_VOLUME, WAIT_FOR_WORKERS_READY
from airflow_mpi.jobspec.vocabulary import (
    API_GROUP,
    JOB_NAME_LABEL,
    JOB_ROLE_LABEL,
    LAUNCHER,
    LAUNCHER_REPLICA,
    MPIJOB_KIND,
    MPIJOB_PLURAL,
    WORKER,
    WORKER_REPLICA,
    JobCondition,
)

API_V2BETA1 = f"{API_GROUP}/v2beta1"  # a role's pods: JOB_NAME_LABEL + JOB_ROLE_LABEL
V2BETA1_INVALID_REASON = "ValidationError"  # its Warning event for an MPIJob it will never create
# the launcher's batch/v1 Job <name>-launcher (newLauncherJob), the controller of the launcher pods
LAUNCHER_JOB = LauncherOwner(kind="Job", group="batch", version="v1", plural="jobs")


def _retries(retries: int) -> RetriesMapping:
    """Each launcher attempt is a pod of the launcher Job: the Job's backoffLimit counts the failed ones, and
    ``Never`` keeps a failed pod failed (OnFailure would restart its container, attempts the Job does not count)."""
    return RetriesMapping(backoff_limit=retries, launcher_restart_policy="Never")


def _attempts(backoff_limit: int, launcher_restart_policy: str | None) -> int:
    """The launcher Job makes backoffLimit + 1 attempts (a failed pod each), whatever the restart policy."""
    return backoff_limit + 1


def _injected(role: str, ssh_path: str) -> Mapping[str, str]:
    """The volumes the mpi-operator adds (name -> mount path in the first container): the SSH keys to both roles,
    the hostfile's ConfigMap to the launcher."""
    return {"ssh-auth": ssh_path, **({CONFIG_VOLUME: CONFIG_MOUNT_PATH} if role == LAUNCHER_REPLICA else {})}


MPIJOB_V2BETA1 = JobKind(
    group=API_GROUP,
    version=API_V2BETA1.rpartition("/")[2],
    kind=MPIJOB_KIND,
    plural=MPIJOB_PLURAL,
    controller="mpi-operator",
    restart_policies=("Never", "OnFailure"),  # validation.go accepts only these two
    managed_by=("kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue"),
    container_names={LAUNCHER_REPLICA: LAUNCHER, WORKER_REPLICA: WORKER},  # each named after its role
    replica_layout=MPIJOB_REPLICAS,
    launcher_restart_policy="OnFailure",  # v2beta1 DefaultLauncherRestartPolicy (constants.go)
    launcher_command_in_args=True,
    retries_mapping=_retries,
    launcher_creation_policy=WAIT_FOR_WORKERS_READY,
    mpiuser_convention=True,
    container_defaults=True,
    launcher_dns_search=True,
    launcher_ttl_at_least_one=True,
    creation_policy_needs_probe=True,
    injected_volumes=_injected,
    conditions=tuple(JobCondition),
    launcher_suffix="-launcher",  # launcherSuffix (v0.8.2)
    worker_infix="-worker-",
    launcher_owner=LAUNCHER_JOB,
    invalid_reasons=(V2BETA1_INVALID_REASON,),
    pod_labels=PodLabels(JOB_NAME_LABEL, JOB_ROLE_LABEL),
    launcher_attempt=ATTEMPT_IS_POD,
    attempts_allowed=_attempts,
)
