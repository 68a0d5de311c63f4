"""The Kubeflow and Kubernetes names the package reads and writes: the MPIJob resource (group, kind, plural), the
replica keys and the role names of their pods, the labels every MPIJob controller puts on those pods, pod phases and
the MPIJob's condition types.

Each is defined here once and imported wherever it is written or compared (tests/unit/test_vocabulary.py fails
when one comes back as a literal). What differs between the APIs (their versions, their controllers' other labels,
the reason of an invalid job's event) is in their kinds (jobspec/kinds/). Pure: no I/O, only the standard library.
"""

from __future__ import annotations

from enum import StrEnum

# ---------------------------------------------------------------- the MPIJob resource (every MPIJob API)
API_GROUP = "kubeflow.org"
MPIJOB_KIND = "MPIJob"
MPIJOB_PLURAL = "mpijobs"
MPI_REPLICA_SPECS = (
    "mpiReplicaSpecs"  # spec.mpiReplicaSpecs: the MPIJob kinds' replica specs (kinds/ ReplicaLayout)
)

# The model's roles, the keys of spec.mpiReplicaSpecs (other kinds map them to their own keys: kinds/ ReplicaLayout),
# and the role names: the controllers' pod label values (lowercase), the operator parameters' role prefixes
# (``launcher.restart_policy``), the spec's attributes (MPIJobSpec.worker).
LAUNCHER_REPLICA, WORKER_REPLICA = "Launcher", "Worker"
LAUNCHER, WORKER = "launcher", "worker"
ROLES = {LAUNCHER_REPLICA: LAUNCHER, WORKER_REPLICA: WORKER}

# Pod labels the controllers set
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"  # LAUNCHER | WORKER (v1: V1_LAUNCHER_ROLE on the launcher)
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"  # a worker's index


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
