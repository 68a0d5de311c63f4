"""The one precedence rule: a parameter given > the base manifest's value > the operator's default.

Parameters are deep-merged onto the base manifest (layout.assemble), so a parameter always wins
and a field no parameter sets keeps the base manifest's value. Defaults come in here, *beneath*
the base manifest: a default fills a field only where neither a parameter nor the base manifest
sets it. The retries mapping (``runPolicy.backoffLimit`` = task retries, launcher
``restartPolicy: Never``) is such a default. Where each defaultable field's value came from is
reported, so the task log can say it. Where the operator's default would equal the controller's
own (one slot per worker, Open MPI), nothing is written: the manifest stays as the user wrote it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from airflow_mpi.models.spec import API_V1, LAUNCHER, OPENMPI, WORKER, Defaults, MPIJobSpec

PARAMETER, BASE_MANIFEST, DEFAULT = "parameter", "base manifest", "default"
CONTROLLER_DEFAULT = "controller default, not written"
_INT32_MAX = 2**31 - 1
# What the controllers assume where nothing sets a field: reported, never written (the command
# line built from ``program`` uses the same values).
CONTROLLER_DEFAULTS = {"slots_per_worker": 1, "mpi_implementation": OPENMPI}


@dataclass(frozen=True)
class Setting:
    """The value a field ends up with and where it came from (PARAMETER, BASE_MANIFEST or DEFAULT)."""

    value: Any
    source: str

    def __str__(self) -> str:
        return f"{self.value!r} ({self.source})"


@dataclass(frozen=True)
class _Field:
    name: str  # as the user writes the parameter
    attr: tuple[str, ...]  # where MPIJobSpec holds it
    paths: tuple[tuple[str, ...], ...]  # where a base manifest sets it (any one counts)
    default: Callable[[MPIJobSpec, Defaults], Any] = lambda spec, defaults: None
    v1_paths: tuple[tuple[str, ...], ...] = ()  # where a kubeflow.org/v1 base manifest also sets it

    def get(self, spec: MPIJobSpec) -> Any:
        return getattr(_walk(spec, self.attr[:-1]), self.attr[-1])

    def put(self, spec: MPIJobSpec, value: Any) -> None:
        setattr(_walk(spec, self.attr[:-1]), self.attr[-1], value)

    def in_base(self, base: dict, api_version: str) -> Any:
        paths = (*self.paths, *self.v1_paths) if api_version == API_V1 else self.paths
        return next((v for p in paths if (v := base_value(base, p)) is not None), None)


def _walk(obj: Any, attrs: tuple[str, ...]) -> Any:
    for attr in attrs:
        obj = getattr(obj, attr)
    return obj


def _retries_mapping(spec: MPIJobSpec, defaults: Defaults) -> bool:
    """The retries mapping applies unless ``backoff_limit`` is given as a parameter."""
    return defaults.retries is not None and spec.run_policy.backoff_limit is None


_REPLICAS, _RUN_POLICY = ("spec", "mpiReplicaSpecs"), ("spec", "runPolicy")
_FIELDS = (
    _Field("workers", ("worker", "replicas"), ((*_REPLICAS, WORKER, "replicas"),), lambda s, d: d.workers),
    _Field("slots_per_worker", ("slots_per_worker",), (("spec", "slotsPerWorker"),)),
    _Field("mpi_implementation", ("mpi_implementation",), (("spec", "mpiImplementation"),)),
    _Field(
        "clean_pod_policy",
        ("run_policy", "clean_pod_policy"),
        ((*_RUN_POLICY, "cleanPodPolicy"),),
        lambda s, d: d.clean_pod_policy,
        v1_paths=(("spec", "cleanPodPolicy"),),  # v1 has it twice; the training-operator lets runPolicy's win
    ),
    _Field("backoff_limit", ("run_policy", "backoff_limit"), ((*_RUN_POLICY, "backoffLimit"),), lambda s, d: d.retries),
    _Field(
        "launcher.restart_policy",
        ("launcher", "restart_policy"),
        ((*_REPLICAS, LAUNCHER, "restartPolicy"),),
        lambda s, d: "Never" if _retries_mapping(s, d) else None,
    ),
    _Field("namespace", ("namespace",), (("metadata", "namespace"),), lambda s, d: d.namespace),
)


def base_value(base: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` of a (possibly malformed) base manifest, or None."""
    node = base
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _copy(spec: MPIJobSpec) -> MPIJobSpec:
    """A copy whose nested dataclasses may be changed without touching ``spec``."""
    return replace(
        spec, launcher=replace(spec.launcher), worker=replace(spec.worker), run_policy=replace(spec.run_policy)
    )


def apply_defaults(spec: MPIJobSpec, base: dict) -> tuple[MPIJobSpec, dict[str, Setting]]:
    """``spec`` with its defaults filled in where neither it nor ``base`` sets a field, and every
    defaultable field's value with its source (fields set nowhere are left out)."""
    filled = _copy(spec)
    settings: dict[str, Setting] = {}
    for field in _FIELDS:
        given, in_base = field.get(spec), field.in_base(base, spec.api_version)
        default = field.default(spec, spec.defaults) if spec.defaults is not None else None
        if given is not None:
            settings[field.name] = Setting(given, PARAMETER)
        elif in_base is not None:
            settings[field.name] = Setting(in_base, BASE_MANIFEST)
        elif default is not None:
            field.put(filled, default)
            settings[field.name] = Setting(default, DEFAULT)
        elif field.name in CONTROLLER_DEFAULTS and (field.name != "mpi_implementation" or spec.api_version != API_V1):
            settings[field.name] = Setting(CONTROLLER_DEFAULTS[field.name], CONTROLLER_DEFAULT)
    name = spec.name if spec.name is not None else base_value(base, ("metadata", "name"))
    if name is not None:
        settings["name"] = Setting(name, PARAMETER if spec.name is not None else BASE_MANIFEST)
    elif spec.identity is not None:
        workers = settings["workers"].value if "workers" in settings else 1
        valid = isinstance(workers, int) and not isinstance(workers, bool) and 1 <= workers <= _INT32_MAX
        filled.name = spec.identity.job_name(max_workers=workers if valid else 1)
        settings["name"] = Setting(filled.name, DEFAULT)
    return filled, settings
