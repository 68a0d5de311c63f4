"""The training-operator's MPIJob (``kubeflow.org/v1``, training-operator v1.x; read against v1.9.4).

Its launcher is a bare Pod ``<name>-launcher`` (an attempt is a restart of its container), workers are pods
``<name>-worker-<i>`` reached through ``kubexec.sh`` (kubectl copied in by an init container, no SSH), and an invalid
spec is answered with a Warning event ``MPIJobFailedValidation``. Kueue's MPIJob integration does not queue it.
"""

from __future__ import annotations

from collections.abc import Mapping

from airflow_mpi.jobspec.kinds.kind import ATTEMPT_IS_CONTAINER_RESTART, JobKind, PodLabels, RetriesMapping
from airflow_mpi.jobspec.spec import CONFIG_MOUNT_PATH, CONFIG_VOLUME
from airflow_mpi.jobspec.vocabulary import (
    API_GROUP,
    JOB_NAME_LABEL,
    JOB_ROLE_LABEL,
    LAUNCHER,
    LAUNCHER_REPLICA,
    LEGACY_JOB_NAME_LABEL,
    LEGACY_ROLE_LABEL,
    MPIJOB_KIND,
    MPIJOB_PLURAL,
    REPLICA_TYPE_LABEL,
    V1_INVALID_REASON,
    V1_LAUNCHER_ROLE,
    WORKER_REPLICA,
    JobCondition,
)

MAIN_CONTAINER = "mpi"  # the container name the training-operator's examples and defaults use


def _retries(retries: int) -> RetriesMapping:
    """``retries + 1`` launcher attempts in one job, as the training-operator counts them.

    pkg/core/job.go PastBackoffLimit sums the container restarts of the *Running* pods of replicas whose
    restartPolicy is OnFailure, Always or ExitCode (a ``Never`` replica is "not counted in backoff limit"), and fails
    the job once the sum reaches backoffLimit; a launcher pod that fails fails the job at once
    (pkg/controller.v1/mpi/mpijob_controller.go updateMPIJobStatus). So a launcher ``Never`` runs once whatever the
    limit, and retries ride on ``OnFailure``: the kubelet restarts the failed container in the same pod, and the
    restart count reaches ``retries + 1`` only when a container starts after ``retries + 1`` failed attempts, which
    is when the controller fails the job (a limit of ``retries`` would fail it as attempt ``retries + 1`` starts).
    ExitCode is not used: it retries only exit codes the controller deems retryable (signals), not a failing
    program. With no retries the launcher stays ``Never`` and the limit 0: one attempt, failed at once."""
    if isinstance(retries, bool) or not isinstance(retries, int):  # left as given, for validation to name
        return RetriesMapping(backoff_limit=retries, launcher_restart_policy="OnFailure")
    if retries <= 0:
        return RetriesMapping(backoff_limit=0, launcher_restart_policy="Never")
    return RetriesMapping(backoff_limit=retries + 1, launcher_restart_policy="OnFailure")


COUNTED_RESTART_POLICIES = ("OnFailure", "Always", "ExitCode")  # the ones PastBackoffLimit counts


def _attempts(backoff_limit: int, launcher_restart_policy: str | None) -> int | None:
    """A launcher that is not restarted (Never, the controller's default) runs once: its failure fails the job.
    One that is makes attempts until its restarts reach the limit: ``backoffLimit`` of them (at least one: a limit
    of 0 fails the job at the first restart). None when the policy is not known."""
    if launcher_restart_policy is None:
        return None
    if launcher_restart_policy not in COUNTED_RESTART_POLICIES:
        return 1
    return max(backoff_limit, 1)


def _injected(role: str, ssh_path: str) -> Mapping[str, str]:
    """The volumes the training-operator adds (name -> mount path in the first container): the ConfigMap
    (hostfile, kubexec.sh) to both roles, the delivered kubectl to the launcher."""
    return {
        CONFIG_VOLUME: CONFIG_MOUNT_PATH,
        **({"mpi-job-kubectl": "/opt/kube"} if role == LAUNCHER_REPLICA else {}),
    }


MPIJOB_V1 = JobKind(
    group=API_GROUP,
    version="v1",
    kind=MPIJOB_KIND,
    plural=MPIJOB_PLURAL,
    controller="training-operator",
    restart_policies=("Always", "OnFailure", "Never", "ExitCode"),  # ExitCode -> pod Never + retryable codes
    managed_by=("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"),
    container_names={LAUNCHER_REPLICA: MAIN_CONTAINER, WORKER_REPLICA: MAIN_CONTAINER},
    launcher_restart_policy="Never",  # MPIJobDefaultRestartPolicy (mpi_types.go)
    reads_v1_paths=True,
    main_container_field=True,
    retries_mapping=_retries,
    implementation_field=False,
    top_level_clean_pod_policy=True,
    injected_volumes=_injected,
    conditions=tuple(JobCondition),
    invalid_reasons=(V1_INVALID_REASON,),
    pod_labels=PodLabels(
        JOB_NAME_LABEL,
        REPLICA_TYPE_LABEL,  # from training-operator 1.5; <= 1.4 labelled mpi-job-name + mpi-job-role
        role_values={V1_LAUNCHER_ROLE: LAUNCHER},  # the launcher's job-role is "master"
        fallbacks=((LEGACY_JOB_NAME_LABEL, LEGACY_ROLE_LABEL),),
        role_keys=(JOB_ROLE_LABEL, REPLICA_TYPE_LABEL),
    ),
    launcher_attempt=ATTEMPT_IS_CONTAINER_RESTART,
    attempts_allowed=_attempts,
    kueue=False,  # Kueue's kubeflow.org/mpijob integration speaks v2beta1 only
)
