"""The training-operator's MPIJob (``kubeflow.org/v1``, training-operator v1.x; read against v1.9.4).

Its launcher is a bare Pod ``<name>-launcher`` (an attempt is a restart of its container), workers are pods
``<name>-worker-<i>`` reached through ``kubexec.sh`` (kubectl copied in by an init container, no SSH), and an invalid
spec is answered with a Warning event ``MPIJobFailedValidation``. Kueue's MPIJob integration does not queue it.
"""

from __future__ import annotations

from collections.abc import Mapping

from airflow_mpi.jobspec.kinds.kind import (
    ATTEMPT_IS_CONTAINER_RESTART,
    MPIJOB_REPLICAS,
    JobKind,
    PodLabels,
    RetriesMapping,
)
from airflow_mpi.jobspec.spec import CONFIG_MOUNT_PATH, CONFIG_VOLUME, HOSTFILE, INTEL, MPICH
from airflow_mpi.jobspec.vocabulary import (
    API_GROUP,
    JOB_NAME_LABEL,
    JOB_ROLE_LABEL,
    LAUNCHER,
    LAUNCHER_REPLICA,
    MPIJOB_KIND,
    MPIJOB_PLURAL,
    WORKER_REPLICA,
    JobCondition,
)

API_V1 = f"{API_GROUP}/v1"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"  # from 1.5 (incl. 1.8): LAUNCHER | WORKER
V1_LAUNCHER_ROLE = "master"  # the launcher's JOB_ROLE_LABEL value
LEGACY_JOB_NAME_LABEL = "mpi-job-name"  # <= 1.4, with LEGACY_ROLE_LABEL instead of REPLICA_TYPE_LABEL
LEGACY_ROLE_LABEL = "mpi-job-role"
# its Warning event for an invalid MPIJob: NewReason(MPIJobKind, JobFailedValidationReason) (pkg/util/status.go)
V1_INVALID_REASON = "MPIJobFailedValidation"
MAIN_CONTAINER = "mpi"  # the container name the training-operator's examples and defaults use


def _retries(retries: int) -> RetriesMapping:
    """One launcher run per job; Airflow's retries each submit a fresh job (``retries + 1`` jobs at most).

    The training-operator cannot run a launcher exactly ``retries + 1`` times in one job. A ``Never`` launcher that
    fails fails the job at once (pkg/controller.v1/mpi/mpijob_controller.go updateMPIJobStatus: backoffLimit is
    not read). An ``OnFailure`` one is restarted by the kubelet in the same pod, and pkg/core/job.go
    PastBackoffLimit fails the job once the restart counts of *Running* pods reach backoffLimit; a container's
    restart count grows when its next instance is created, so a limit of ``retries`` stops attempt
    ``retries + 1`` as it starts, and a limit of ``retries + 1`` lets attempt ``retries + 2`` start (a training
    program run once more than asked, until the controller deletes the pod). ExitCode restarts only the exit codes
    it deems retryable (signals), not a failing program. So the job gets a launcher ``Never`` and backoffLimit 0,
    and the task keeps its retries (the operator's unmapped path: a failed job of an earlier try is replaced)."""
    return RetriesMapping(backoff_limit=0, launcher_restart_policy="Never", mapped=False)


COUNTED_RESTART_POLICIES = ("OnFailure", "Always", "ExitCode")  # the ones PastBackoffLimit counts


def _attempts(backoff_limit: int, launcher_restart_policy: str | None) -> int | None:
    """A launcher that is not restarted (Never, the controller's default) runs once: its failure fails the job.
    One that is (a base manifest's OnFailure) is restarted until the restart counts reach the limit; the restart
    that reaches it starts one more container, which the controller then stops: ``backoffLimit + 1`` attempts
    begin (2 for a limit of 0, which fails at the first restart). None when the policy is not known."""
    if launcher_restart_policy is None:
        return None
    if launcher_restart_policy not in COUNTED_RESTART_POLICIES:
        return 1
    return max(backoff_limit, 1) + 1


HYDRA_HOSTFILE = "/tmp/airflow-mpi-hostfile"  # the controller's hostfile in Hydra's syntax (Intel MPI, MPICH)
KUBEXEC = CONFIG_MOUNT_PATH + "/kubexec.sh"  # the controller's: kubectl exec into a worker


def _launcher_command(implementation: str, argv: list[str]) -> list[str]:
    """Hydra's mpirun (Intel MPI, MPICH: ``program``) made to run under the training-operator, which writes an Open
    MPI hostfile and wires only Open MPI (``OMPI_MCA_plm_rsh_agent``) and Intel MPI (``I_MPI_HYDRA_BOOTSTRAP``) to
    its kubexec.sh.

    Seen on the real node with v1.9.4: Intel MPI 2021.16's mpirun refuses ``host slots=N`` ("token slots not
    supported at this time"), and Hydra's proxies, started in the workers through kubexec.sh, call mpirun back by
    the launcher's host name, which nothing resolves (v1 makes no Service: "unable to connect to server
    <job>-launcher"). So the hostfile is rewritten in Hydra's ``host:N`` syntax, the proxies are given the address
    of the pod's network interface (Intel: ``-iface eth0``, the interface every CNI gives a pod; MPICH: ``-localhost``
    its IP), and MPICH is told to start them through kubexec.sh as the controller does for Intel (hence
    ``hydra_address_wired``: a launch's own ``-localhost`` wrapper is taken off before)."""
    if implementation not in (INTEL, MPICH) or not argv:
        return argv
    mpirun, rest = argv[0], list(argv[1:])
    if HOSTFILE in rest:  # Intel's default flags name it: drop, it is given below
        at = rest.index(HOSTFILE)
        del rest[at - 1 : at + 1]
    if implementation == INTEL:
        flags = '-iface eth0 -hostfile "$h"'
    else:
        flags = f'-launcher rsh -launcher-exec {KUBEXEC} -f "$h" -localhost "$(hostname -i)"'
    script = f'h={HYDRA_HOSTFILE}; sed "s/ slots=/:/" {HOSTFILE} > "$h" && exec "$0" {flags} "$@"'
    return ["sh", "-c", script, mpirun, *rest]


def _injected(role: str, ssh_path: str) -> Mapping[str, str]:
    """The volumes the training-operator adds (name -> mount path in the first container): the ConfigMap
    (hostfile, kubexec.sh) to both roles, the delivered kubectl to the launcher."""
    return {
        CONFIG_VOLUME: CONFIG_MOUNT_PATH,
        **({"mpi-job-kubectl": "/opt/kube"} if role == LAUNCHER_REPLICA else {}),
    }


MPIJOB_V1 = JobKind(
    group=API_GROUP,
    version=API_V1.rpartition("/")[2],
    kind=MPIJOB_KIND,
    plural=MPIJOB_PLURAL,
    controller="training-operator",
    restart_policies=("Always", "OnFailure", "Never", "ExitCode"),  # ExitCode -> pod Never + retryable codes
    managed_by=("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"),
    container_names={LAUNCHER_REPLICA: MAIN_CONTAINER, WORKER_REPLICA: MAIN_CONTAINER},
    replica_layout=MPIJOB_REPLICAS,
    launcher_restart_policy="Never",  # MPIJobDefaultRestartPolicy (mpi_types.go)
    reads_v1_paths=True,
    main_container_field=True,
    retries_mapping=_retries,
    launcher_command=_launcher_command,
    hydra_address_wired=True,
    # the controller's ``sleep 365d`` (newWorker), ended by SIGTERM: jobspec/container_defaults.idle_workers
    idle_worker_command=("sh", "-c", 'trap "exit 0" TERM; sleep 365d & wait'),
    implementation_field=False,
    top_level_clean_pod_policy=True,
    injected_volumes=_injected,
    conditions=tuple(JobCondition),
    launcher_suffix="-launcher",  # the bare launcher Pod (mpijob_controller.go launcherSuffix)
    worker_infix="-worker-",
    launcher_owner=None,  # the MPIJob controls its launcher Pod itself
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
)
