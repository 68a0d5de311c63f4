"""Kubeflow Trainer v2's TrainJob (``trainer.kubeflow.org/v1alpha1``; read against Trainer v2.3.0 and JobSet v0.12.0).

A TrainJob names a runtime (``spec.runtimeRef``: a ClusterTrainingRuntime or TrainingRuntime with ``mlPolicy.mpi``)
and gives its ``trainer`` (image, command, args, env, numNodes, numProcPerNode, resourcesPerNode). The Trainer makes
a JobSet of the TrainJob's name from the runtime's template; the JobSet makes one batch Job per replicated job
(``<job>-launcher-0``, ``<job>-node-0``), whose pods are ``<job>-launcher-0-0-<x>`` and ``<job>-node-0-<i>-<x>``
(host names ``<job>-launcher-0-0``, ``<job>-node-0-<i>`` in the JobSet's headless Service ``<job>``), labelled
``jobset.sigs.k8s.io/jobset-name`` and ``jobset.sigs.k8s.io/replicatedjob-name`` (``launcher``, ``node``). Its
status has the conditions ``Suspended``, ``Complete`` and ``Failed`` only (no Created or Running: those are derived
from ``status.jobsStatus`` and the pods) and ``jobsStatus`` (per replicated job: ready, succeeded, failed, active,
suspended). Open MPI only (v2.3.0's CRD refuses Intel and MPICH). Kueue queues it (``trainer.kubeflow.org/trainjob``).
"""

from __future__ import annotations

from airflow_mpi.jobspec.kinds.kind import (
    ATTEMPT_IS_POD,
    NO_REPLICAS,
    JobKind,
    LauncherOwner,
    PodLabels,
    RankPodsPatch,
    RetriesMapping,
    StateReading,
)
from airflow_mpi.jobspec.rules import INT64_MAX, integer, one_of
from airflow_mpi.jobspec.spec import (
    CLEAN_RUNNING,
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    OPENMPI,
)
from airflow_mpi.jobspec.vocabulary import LAUNCHER, LAUNCHER_REPLICA, WORKER, WORKER_REPLICA, JobCondition

TRAINER_GROUP = "trainer.kubeflow.org"
API_TRAINJOB = f"{TRAINER_GROUP}/v1alpha1"
TRAINJOB_KIND, TRAINJOB_PLURAL = "TrainJob", "trainjobs"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # on the JobSet's Jobs and pods: the TrainJob's name
# the replicated job of a Job or pod: LAUNCHER_JOB_NAME, NODE_JOB_NAME
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOBS_STATUS = "jobsStatus"  # status.jobsStatus: the JobSet's replicated jobs, once the Trainer made it
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"  # a node pod's index in its indexed Job
# the MPI plugin's replicated jobs (constants.Launcher, Node)
LAUNCHER_JOB_NAME, NODE_JOB_NAME = LAUNCHER, "node"
NODE_CONTAINER = "node"  # the container the MPI plugin mounts the SSH keys and hostfile into
# the JobSet between the TrainJob and its batch Jobs (the Trainer's jobset plugin builds it, named as the TrainJob)
JOBSET = LauncherOwner(kind="JobSet", group="jobset.x-k8s.io", version="v1alpha2", plural="jobsets")
# the batch Job of each replicated job (<job>-<replicatedjob>-<index>), the controller of that job's pods
BATCH_JOB = LauncherOwner(kind="Job", group="batch", version="v1", plural="jobs")


CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME = "ClusterTrainingRuntime", "TrainingRuntime"  # runtimeRef.kind
TRAINING_RUNTIMES = (CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME)  # the runtime kinds v2.3.0 registers
DEFAULT_RUNTIME = "openmpi-mpiuser"  # the ClusterTrainingRuntime deploy/trainjob-mpi-runtime.yaml installs

_TRAINER = ("spec", "trainer")
_RESOURCES = (*_TRAINER, "resourcesPerNode")
# The rows a TrainJob has and where (trainjob_types.go), in its manifest's key order. ``image`` and ``env`` set both
# roles' (one trainer: the same path); v2.3.0 applies trainer image, command, args, env and resourcesPerNode to the
# `node` container of the runtime's replicated job labelled trainjob-ancestor-step: trainer (the launcher, in a
# runtime with runLauncherAsNode false: jobset/builder.go Trainer, core/trainingruntime.go), numNodes to the `node`
# replicated job's pod count and numProcPerNode to the hostfile's slots (mpi/mpi.go).
FIELD_PATHS = {
    "name": ("metadata", "name"),
    "namespace": ("metadata", "namespace"),
    "labels": ("metadata", "labels"),
    "queue_name": ("metadata", "labels", KUEUE_QUEUE_LABEL),
    "workload_priority_class": ("metadata", "labels", KUEUE_PRIORITY_LABEL),
    "annotations": ("metadata", "annotations"),
    "runtime": ("spec", "runtimeRef", "name"),
    "runtime_kind": ("spec", "runtimeRef", "kind"),
    "runtime_api_group": ("spec", "runtimeRef", "apiGroup"),
    "launcher.image": (*_TRAINER, "image"),
    "worker.image": (*_TRAINER, "image"),
    "launcher.command": (*_TRAINER, "command"),
    "launcher.args": (*_TRAINER, "args"),
    "launcher.env": (*_TRAINER, "env"),
    "worker.env": (*_TRAINER, "env"),
    "worker.replicas": (*_TRAINER, "numNodes"),
    "slots_per_worker": (*_TRAINER, "numProcPerNode"),
    "resources_per_node": _RESOURCES,
    "run_policy.suspend": ("spec", "suspend"),
    "run_policy.active_deadline_seconds": ("spec", "activeDeadlineSeconds"),
    "run_policy.managed_by": ("spec", "managedBy"),
}
INSTEAD = (
    "its pods come from the runtime it names (`runtime`): set this in that runtime's pod templates, or for one "
    "job in `runtimePatches` of a base manifest"
)

# Trainer v2.3.0 gives resourcesPerNode to the trainer step's pods, and to the node pods only with runLauncherAsNode
RESOURCES_INSTEAD = (
    "a TrainJob sizes pods by `resources_per_node` (spec.trainer.resourcesPerNode), which the Trainer gives the "
    "trainer step (the launcher of a runtime whose launcher is no node, as `openmpi-mpiuser`) and the node pods only "
    "where the runtime has runLauncherAsNode: set the node pods' resources and GPUs in the runtime, or for one job in "
    "`runtimePatches` of a base manifest"
)


class TrainJobCondition:
    """The ``status.conditions[].type`` values a TrainJob has (trainjob_types.go)."""

    SUSPENDED = JobCondition.SUSPENDED.value
    COMPLETE = "Complete"
    FAILED = JobCondition.FAILED.value


# Complete/Failed are the JobSet's Completed/Failed copied (trainjob_controller.go setTrainJobStatus); there is no
# Created condition: the Trainer has acknowledged the job once it reports its JobSet's jobs (or any condition, e.g.
# Failed for an unsupported runtime), and no Running one: the launcher pod tells. Once the JobSet finished,
# successfully or not, it deletes its active Jobs (jobset_controller.go reconcile -> deleteJobs, Foreground): the
# running nodes' pods go, as an MPIJob's cleanPodPolicy Running does.
STATE = StateReading(
    succeeded=TrainJobCondition.COMPLETE,
    failed=TrainJobCondition.FAILED,
    created=None,
    acknowledged=JOBS_STATUS,
    running_from_pods=True,
    created_text="status from the Kubeflow Trainer (no JobSet)",
    fails_on_failed_worker=True,
    clean_pod_policy=CLEAN_RUNNING,
    times_from_conditions=True,
)


def _attempts(backoff_limit: int, launcher_restart_policy: str | None) -> int | None:
    """Unknown: the launcher Job's backoffLimit is the runtime's (its JobSet template), which the TrainJob does not
    carry."""
    return None


def _retries(retries: int) -> RetriesMapping:
    """A TrainJob has no backoff limit of its own (the runtime's launcher Job has one: deploy/trainjob-mpi-runtime.yaml
    keeps it 0), so the job runs its launcher as the runtime says and each Airflow retry submits a fresh TrainJob."""
    return RetriesMapping(backoff_limit=0, launcher_restart_policy="Never", mapped=False)


TRAINJOB = JobKind(
    group=TRAINER_GROUP,
    version=API_TRAINJOB.rpartition("/")[2],
    kind=TRAINJOB_KIND,
    plural=TRAINJOB_PLURAL,
    controller="Kubeflow Trainer",
    restart_policies=("Never", "OnFailure"),
    managed_by=("trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue"),
    container_names={LAUNCHER_REPLICA: NODE_CONTAINER, WORKER_REPLICA: NODE_CONTAINER},
    replica_layout=NO_REPLICAS,
    field_paths=FIELD_PATHS,
    field_defaults={
        "runtime": DEFAULT_RUNTIME,
        "runtime_kind": CLUSTER_TRAINING_RUNTIME,
        "runtime_api_group": TRAINER_GROUP,
    },
    # runtimePatches (v2.3.0: per-manager patches of the runtime's pod templates), initializer: written as given
    verbatim_spec_keys=("runtimePatches", "initializer"),
    instead=INSTEAD,
    instead_of=dict.fromkeys(("worker.resources", "worker.gpus", "launcher.resources"), RESOURCES_INSTEAD),
    container_paths=(_TRAINER,),
    # @task.mpi's call Secret reaches the ranks through a runtimePatch of the `node` replicated job's `node` container
    # (the MPI plugin's names): the launcher of a runtime with runLauncherAsNode false runs only mpirun
    rank_pods_patch=RankPodsPatch(replicated_job=NODE_JOB_NAME, container=NODE_CONTAINER),
    implementations=(OPENMPI,),  # v2.3.0's CRD: mlPolicy.mpi.mpiImplementation enum OpenMPI
    field_rules={
        "worker.replicas": integer(1),  # numNodes: no minimum in the CRD; 0 node pods run no rank
        "run_policy.active_deadline_seconds": integer(1, INT64_MAX),  # the CRD's minimum: 1
        "runtime_api_group": one_of((TRAINER_GROUP,)),  # the runtimes v2.3.0 registers are its own
    },
    # constants.MPIReservedEnvNames: what the MPI plugin sets on the launcher (its webhook refuses them)
    reserved_env=(
        "OMPI_MCA_orte_default_hostfile",
        "OMPI_MCA_plm_rsh_args",
        "OMPI_MCA_orte_keep_fqdn_hostnames",
        "OMPI_MCA_orte_set_default_slots",
    ),
    retries_mapping=_retries,
    implementation_field=False,
    conditions=(TrainJobCondition.SUSPENDED, TrainJobCondition.COMPLETE, TrainJobCondition.FAILED),
    launcher_suffix=f"-{LAUNCHER_JOB_NAME}-0",  # the launcher's batch Job (its pods: <job>-launcher-0-0-<x>)
    worker_infix=f"-{NODE_JOB_NAME}-0-",  # a node pod's host name <job>-node-0-<i>
    launcher_owner=BATCH_JOB,
    # pod -> its batch Job (either replicated job's) -> the JobSet <job> -> the TrainJob (hooks/ownership.py)
    owner_suffixes=(f"-{LAUNCHER_JOB_NAME}-0", f"-{NODE_JOB_NAME}-0"),
    owner_parent=JOBSET,
    # Trainer v2.3.0 re-creates the JobSet of a TrainJob being deleted in the foreground: its reconciler checks no
    # deletionTimestamp, drops the Failed condition first (removeFailedCondition) and, the JobSet found gone (the
    # garbage collector's first step), applies a new one, which the foreground deletion then waits for again (seen
    # on the real node under load: 2 minutes, a retry adopting the dying job). Background: the TrainJob goes at once,
    # then its JobSet, Jobs and pods; a wait for the deletion waits for the JobSet too.
    delete_propagation="Background",
    state=STATE,
    pod_labels=PodLabels(
        JOBSET_NAME_LABEL,
        REPLICATED_JOB_LABEL,
        role_values={NODE_JOB_NAME: WORKER, LAUNCHER_JOB_NAME: LAUNCHER},
        index=COMPLETION_INDEX_LABEL,
        selector_values={WORKER: NODE_JOB_NAME, LAUNCHER: LAUNCHER_JOB_NAME},
    ),
    launcher_attempt=ATTEMPT_IS_POD,
    attempts_allowed=_attempts,
    # Trainer v2.3.0 applies the JobSet again, suspended, once the TrainJob is (jobset plugin's Build); JobSet v0.12.0
    # suspends each active batch Job (suspendJobs), whose pods the Job controller deletes without counting them
    # against backoffLimit. Resumed, the JobSet resumes the node Job, then the launcher's once the nodes are Ready
    # (dependsOn): a new launcher pod of the same Job
    on_suspend="suspends its JobSet, whose Jobs delete the launcher and node pods",
)
