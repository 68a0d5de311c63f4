"""build_manifest(spec): the MPIJob object to submit, for kubeflow.org/v2beta1 or kubeflow.org/v1.

Layout (layout.py) and validation (validation.py) live apart so validate() can check the merged
result without submitting; this module is the public entry point.
"""

from __future__ import annotations

from airflow_mpi.models.merge import deep_merge, load_base_manifest
from airflow_mpi.models.spec import MPIJobSpec
from airflow_mpi.models.validation import checked_manifest

__all__ = ["build_manifest", "deep_merge", "load_base_manifest"]


def build_manifest(spec: MPIJobSpec) -> dict:
    """The validated MPIJob manifest: parameters deep-merged onto ``spec.base_manifest`` (parameters win).

    Raises MPIJobValidationError listing every violation.
    """
    return checked_manifest(spec)
