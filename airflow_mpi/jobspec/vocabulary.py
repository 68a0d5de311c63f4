"""The Kubeflow and Kubernetes names the package reads and writes: the MPIJob API (group, versions, kind,
plural), the replica keys and the role names of their pods, the labels the controllers put on those pods, pod
phases and the MPIJob's condition types.

Each is defined here once and imported wherever it is written or compared (tests/unit/test_vocabulary.py fails
when one comes back as a literal). What differs between the two APIs (the mpi-operator's kubeflow.org/v2beta1,
the training-operator's kubeflow.org/v1) is grouped under its API. Pure: no I/O, only the standard library.
"""

from __future__ import annotations

from enum import StrEnum

# ---------------------------------------------------------------- the MPIJob resource (both APIs)
API_GROUP = "kubeflow.org"
MPIJOB_KIND = "MPIJob"
MPIJOB_PLURAL = "mpijobs"

# The keys of spec.mpiReplicaSpecs, and the role names: the controllers' pod label values (lowercase), the
# operator parameters' role prefixes (``launcher.restart_policy``), the spec's attributes (MPIJobSpec.worker).
LAUNCHER_REPLICA, WORKER_REPLICA = "Launcher", "Worker"
LAUNCHER, WORKER = "launcher", "worker"
ROLES = {LAUNCHER_REPLICA: LAUNCHER, WORKER_REPLICA: WORKER}

# Pod labels the controllers set
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"  # LAUNCHER | WORKER (v1: V1_LAUNCHER_ROLE on the launcher)
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"

# ---------------------------------------------------------------- kubeflow.org/v2beta1: mpi-operator >= 0.4
API_V2BETA1 = f"{API_GROUP}/v2beta1"  # a role's pods: JOB_NAME_LABEL + JOB_ROLE_LABEL
V2BETA1_INVALID_REASON = "ValidationError"  # its Warning event for an MPIJob it will never create

# ---------------------------------------------------------------- kubeflow.org/v1: training-operator v1.x
API_V1 = f"{API_GROUP}/v1"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"  # from 1.5 (incl. 1.8): LAUNCHER | WORKER
V1_LAUNCHER_ROLE = "master"  # the launcher's JOB_ROLE_LABEL value
LEGACY_JOB_NAME_LABEL = "mpi-job-name"  # <= 1.4, with LEGACY_ROLE_LABEL instead of REPLICA_TYPE_LABEL
LEGACY_ROLE_LABEL = "mpi-job-role"
# its Warning event for an invalid MPIJob: NewReason(MPIJobKind, JobFailedValidationReason) (pkg/util/status.go)
V1_INVALID_REASON = "MPIJobFailedValidation"


# ---------------------------------------------------------------- status
class PodPhase(StrEnum):
    """``status.phase`` of a pod (a str: compares equal to the API's text)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


TERMINAL_PHASES = (PodPhase.SUCCEEDED, PodPhase.FAILED)


class JobCondition(StrEnum):
    """The ``status.conditions[].type`` values of an MPIJob, the same on both APIs (a str, like PodPhase)."""

    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


TERMINAL_CONDITIONS = (JobCondition.SUCCEEDED, JobCondition.FAILED)
