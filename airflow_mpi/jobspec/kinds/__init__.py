"""Job kinds: one object per MPI API (kind.py), the built-in ones, and the registry that finds them by api_version.

See docs/DESIGN.md ("Job kinds") for what a kind is and how to add one.
"""

from airflow_mpi.jobspec.kinds.kind import (
    ATTEMPT_IS_CONTAINER_RESTART,
    ATTEMPT_IS_POD,
    MPIJOB_REPLICAS,
    NO_REPLICAS,
    JobKind,
    LauncherOwner,
    PodLabels,
    RankPodsPatch,
    ReplicaLayout,
    RetriesMapping,
    StateReading,
)
from airflow_mpi.jobspec.kinds.mpijob_v1 import MPIJOB_V1
from airflow_mpi.jobspec.kinds.mpijob_v2beta1 import MPIJOB_V2BETA1
from airflow_mpi.jobspec.kinds.registry import (
    DEFAULT_KIND,
    ENTRY_POINT_GROUP,
    api_versions,
    kind_for,
    kind_or_default,
    kinds,
    register,
)
from airflow_mpi.jobspec.kinds.trainjob import API_TRAINJOB, TRAINJOB

__all__ = [
    "API_TRAINJOB", "ATTEMPT_IS_CONTAINER_RESTART", "ATTEMPT_IS_POD", "DEFAULT_KIND", "ENTRY_POINT_GROUP",
    "MPIJOB_REPLICAS", "MPIJOB_V1", "MPIJOB_V2BETA1", "NO_REPLICAS", "TRAINJOB", "JobKind", "LauncherOwner",
    "PodLabels", "RankPodsPatch", "ReplicaLayout", "RetriesMapping", "StateReading", "api_versions", "kind_for",
    "kind_or_default", "kinds", "register",
]  # fmt: skip
