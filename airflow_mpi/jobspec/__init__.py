"""The pure MPIJob model: parameters, precedence, validation, manifests and launcher command lines.

No I/O beyond reading a base manifest file, and no kubernetes or airflow imports: it can be used (and tested) anywhere.
"""

from airflow_mpi.jobspec.commands import Horovodrun, Mpirun, horovodrun_command, mpirun_command
from airflow_mpi.jobspec.errors import MPIJobValidationError
from airflow_mpi.jobspec.fields import MPIJobSpec, ReplicaSpec, RunPolicy, SchedulingPolicy
from airflow_mpi.jobspec.kinds.mpijob_v1 import API_V1
from airflow_mpi.jobspec.kinds.mpijob_v2beta1 import API_V2BETA1
from airflow_mpi.jobspec.merge import deep_merge, load_base_manifest
from airflow_mpi.jobspec.naming import TaskIdentity
from airflow_mpi.jobspec.precedence import Resolved, build_manifest, resolve, validate
from airflow_mpi.jobspec.settings import BASE_MANIFEST, DEFAULT, PARAMETER, Setting
from airflow_mpi.jobspec.spec import Defaults

__all__ = [
    "API_V1", "API_V2BETA1", "BASE_MANIFEST", "DEFAULT", "PARAMETER", "Defaults", "Horovodrun", "MPIJobSpec",
    "MPIJobValidationError", "Mpirun", "ReplicaSpec", "Resolved", "RunPolicy", "SchedulingPolicy", "Setting",
    "TaskIdentity", "build_manifest", "deep_merge", "horovodrun_command", "load_base_manifest", "mpirun_command",
    "resolve", "validate",
]  # fmt: skip
