"""build_manifest(spec): the MPIJob object to submit, for kubeflow.org/v2beta1 or kubeflow.org/v1.

The steps, in order: check the parameters; load the base manifest; fill the defaults where
neither a parameter nor the base manifest sets a field (precedence.py); deep-merge the parameters
onto the base manifest (layout.py); validate the result (validation.py); then build the launcher
command from the resolved worker count, slots and MPI implementation. Nothing here does I/O but
reading a base manifest file.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_mpi.jobspec.errors import ErrorList
from airflow_mpi.jobspec.layout import assemble, pod_spec
from airflow_mpi.jobspec.merge import deep_merge, load_base_manifest
from airflow_mpi.jobspec.precedence import CONTROLLER_DEFAULTS, Setting, apply_defaults
from airflow_mpi.jobspec.spec import API_V2BETA1, LAUNCHER_REPLICA, WORKER_REPLICA, MPIJobSpec
from airflow_mpi.jobspec.validation import check_base_manifest, check_manifest, check_parameters

__all__ = ["Resolved", "build_manifest", "deep_merge", "load_base_manifest", "resolve", "validate"]


@dataclass(frozen=True)
class Resolved:
    """A validated manifest, and where its defaultable fields' values came from."""

    manifest: dict
    settings: dict[str, Setting]


def resolve(spec: MPIJobSpec) -> Resolved:
    """The validated manifest of ``spec``; raises MPIJobValidationError listing every violation."""
    errors = ErrorList()
    check_parameters(errors, spec)
    errors.raise_if_any()
    base = load_base_manifest(spec.base_manifest) if spec.base_manifest is not None else {}
    check_base_manifest(errors, spec, base)
    errors.raise_if_any()
    filled, settings = apply_defaults(spec, base)
    if spec.identity is not None:
        filled.labels = {**(spec.labels or {}), **spec.identity.labels()}
        filled.annotations = {**(spec.annotations or {}), **spec.identity.annotations()}
    manifest = assemble(filled, base)
    check_manifest(errors, manifest)
    errors.raise_if_any()
    if spec.launch is not None:
        _put_launcher_command(manifest, spec)
    return Resolved(manifest, settings)


def build_manifest(spec: MPIJobSpec) -> dict:
    """The validated MPIJob manifest: parameters > base manifest > defaults, field by field."""
    return resolve(spec).manifest


def validate(spec: MPIJobSpec) -> None:
    """Raise MPIJobValidationError listing every violation of ``spec`` and its merged manifest."""
    resolve(spec)


def _put_launcher_command(manifest: dict, spec: MPIJobSpec) -> None:
    """Set the main launcher container's command from ``spec.launch``, sized from the valid manifest."""
    job = manifest["spec"]
    # v1 has no mpiImplementation field: there the parameter only picks the command's flags
    implementation = job.get("mpiImplementation") or spec.mpi_implementation
    command = spec.launch.command(
        workers=job["mpiReplicaSpecs"][WORKER_REPLICA]["replicas"],
        slots_per_worker=job.get("slotsPerWorker", CONTROLLER_DEFAULTS["slots_per_worker"]),
        implementation=implementation or CONTROLLER_DEFAULTS["mpi_implementation"],
        run_launcher_as_worker=job.get("runLauncherAsWorker") is True,
    )
    container = pod_spec(manifest, LAUNCHER_REPLICA)["containers"][0]
    if manifest["apiVersion"] == API_V2BETA1 and implementation in spec.launch.in_args:
        container.pop("command", None)  # the image's entrypoint runs it (the base manifest's command was its own)
        container["args"] = [*command, *(spec.launcher.args or [])]
        return
    container["command"] = command
    if spec.launcher.args is None:  # the base manifest's args belonged to its own command
        container.pop("args", None)
