"""build_manifest(spec): the MPIJob object to submit, for kubeflow.org/v2beta1 or kubeflow.org/v1.

The parameters and the base manifest are checked on their own first, so that a problem is named as the user wrote
it; then the precedence rule (precedence.py) merges parameters, base manifest and defaults into the manifest and
validates the result. Nothing here does I/O but reading a base manifest file.
"""

from __future__ import annotations

from airflow_mpi.jobspec import precedence
from airflow_mpi.jobspec.errors import ErrorList
from airflow_mpi.jobspec.fields import MPIJobSpec
from airflow_mpi.jobspec.merge import deep_merge, load_base_manifest
from airflow_mpi.jobspec.precedence import Resolved
from airflow_mpi.jobspec.validation import check_base_manifest, check_parameters

__all__ = ["Resolved", "build_manifest", "deep_merge", "load_base_manifest", "resolve", "validate"]


def resolve(spec: MPIJobSpec) -> Resolved:
    """The validated manifest of ``spec``; raises MPIJobValidationError listing every violation."""
    errors = ErrorList()
    check_parameters(errors, spec)
    errors.raise_if_any()
    base = load_base_manifest(spec.base_manifest) if spec.base_manifest is not None else {}
    check_base_manifest(errors, spec, base)
    errors.raise_if_any()
    return precedence.apply(spec, base)


def build_manifest(spec: MPIJobSpec) -> dict:
    """The validated MPIJob manifest: parameters > base manifest > defaults, field by field."""
    return resolve(spec).manifest


def validate(spec: MPIJobSpec) -> None:
    """Raise MPIJobValidationError listing every violation of ``spec`` and its merged manifest."""
    resolve(spec)
