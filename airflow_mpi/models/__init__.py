"""The pure MPIJob model: parameters, validation, manifests and launcher command lines.

No I/O beyond reading a base manifest file, and no kubernetes or airflow imports, so it can be
used (and tested) anywhere.
"""

from airflow_mpi.models.commands import horovodrun_command, mpirun_command
from airflow_mpi.models.errors import MPIJobValidationError
from airflow_mpi.models.manifest import build_manifest, deep_merge, load_base_manifest
from airflow_mpi.models.spec import API_V1, API_V2BETA1, MPIJobSpec, ReplicaSpec, RunPolicy, SchedulingPolicy
from airflow_mpi.models.validation import validate

__all__ = [
    "API_V1",
    "API_V2BETA1",
    "MPIJobSpec",
    "MPIJobValidationError",
    "ReplicaSpec",
    "RunPolicy",
    "SchedulingPolicy",
    "build_manifest",
    "deep_merge",
    "horovodrun_command",
    "load_base_manifest",
    "mpirun_command",
    "validate",
]
