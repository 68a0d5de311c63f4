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
from copy import deepcopy
from dataclasses import dataclass, replace
from typing import Any

from airflow_mpi.jobspec.layout import main_container_name, pod_spec
from airflow_mpi.jobspec.rules import dns1035_label
from airflow_mpi.jobspec.spec import (
    API_V1,
    API_V2BETA1,
    CLUSTER_DOMAIN,
    INTEL,
    LAUNCHER_REPLICA,
    MPICH,
    MPIUSER_SSH_AUTH_MOUNT_PATH,
    MPIUSER_SSHD_COMMAND,
    MPIUSER_UID,
    OPENMPI,
    ROLES,
    SSHD_LISTENING_CHECK,
    WAIT_FOR_WORKERS_READY,
    WORKER_REPLICA,
    Defaults,
    MPIJobSpec,
    ReplicaSpec,
)

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


def _mpiuser_convention(spec: MPIJobSpec, defaults: Defaults) -> str | None:
    """A job described by parameters only follows the mpi-operator's unprivileged convention; a base manifest's
    silence keeps the controller's root one (upstream's Horovod examples run root images on its defaults)."""
    return MPIUSER_SSH_AUTH_MOUNT_PATH if spec.api_version == API_V2BETA1 and spec.base_manifest is None else None


def _wait_for_workers(spec: MPIJobSpec, defaults: Defaults) -> str | None:
    """The launcher starts once its workers are Ready (their sshd listening, _container_defaults): started at
    once, it races the workers' DNS records and ssh gives up (kubeflow/mpi-operator#386)."""
    return WAIT_FOR_WORKERS_READY if spec.api_version == API_V2BETA1 else None


_REPLICAS, _RUN_POLICY = ("spec", "mpiReplicaSpecs"), ("spec", "runPolicy")
_FIELDS = (
    _Field("workers", ("worker", "replicas"), ((*_REPLICAS, WORKER_REPLICA, "replicas"),), lambda s, d: d.workers),
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
        ((*_REPLICAS, LAUNCHER_REPLICA, "restartPolicy"),),
        lambda s, d: "Never" if _retries_mapping(s, d) else None,
    ),
    _Field("namespace", ("namespace",), (("metadata", "namespace"),), lambda s, d: d.namespace),
    _Field("ssh_auth_mount_path", ("ssh_auth_mount_path",), (("spec", "sshAuthMountPath"),), _mpiuser_convention),
    _Field("launcher_creation_policy", ("launcher_creation_policy",), (("spec", "launcherCreationPolicy"),),
           _wait_for_workers),
)
# Until a worker's sshd listens, it is not Ready (checked every second, given a minute to start).
STARTUP_PROBE = {"exec": {"command": list(SSHD_LISTENING_CHECK)}, "periodSeconds": 1, "failureThreshold": 60}


def base_value(base: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` of a (possibly malformed) base manifest, or None."""
    node = base
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def is_name(name: Any) -> bool:
    """A valid job name (DNS-1035 label), before any suffix."""
    return isinstance(name, str) and not dns1035_label(name)


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
    if spec.defaults is not None and spec.api_version == API_V2BETA1:
        _container_defaults(filled, base, settings)
    _name(filled, spec, base, settings)
    if spec.defaults is not None and spec.api_version == API_V2BETA1:
        _launcher_dns_search(filled, base, settings)
    return filled, settings


def _name(filled: MPIJobSpec, spec: MPIJobSpec, base: dict, settings: dict[str, Setting]) -> None:
    """The job's name: derived from the task instance; a given one (parameter or base manifest) is its prefix,
    unless ``unique_name_suffix`` is False: upstream's examples all say ``name: pi``, and a second run, a
    concurrent one or a retry beside a failed job kept for debugging would each find the first one's job."""
    name = spec.name if spec.name is not None else base_value(base, ("metadata", "name"))
    source = PARAMETER if spec.name is not None else BASE_MANIFEST
    workers = settings["workers"].value if "workers" in settings else 1
    valid = isinstance(workers, int) and not isinstance(workers, bool) and 1 <= workers <= _INT32_MAX
    if spec.identity is None or (name is not None and (spec.unique_name_suffix is False or not is_name(name))):
        if name is not None:  # used as given (validation names an invalid one)
            settings["name"] = Setting(name, source)
        return
    filled.name = spec.identity.job_name(max_workers=workers if valid else 1, prefix=name)
    settings["name"] = Setting(filled.name, DEFAULT if name is None else f"{source}, suffixed per task instance")


def _main(spec: MPIJobSpec, base: dict, role: str) -> dict:
    """The base manifest's main container of ``role`` ({} if none)."""
    name = main_container_name(spec, role, base)
    containers = pod_spec(base, role).get("containers")
    found = [c for c in containers if isinstance(c, dict) and c.get("name") == name] if isinstance(containers, list) else []
    return found[0] if found else {}


def _sets_uid(replica: ReplicaSpec, main: dict, pod: dict) -> bool:
    contexts = (replica.security_context, replica.pod_security_context, main.get("securityContext"),
                pod.get("securityContext"))
    return any(isinstance(c, dict) and c.get("runAsUser") is not None for c in contexts)


def _container_defaults(filled: MPIJobSpec, base: dict, settings: dict[str, Setting]) -> None:
    """What upstream's examples spell out in the containers, where neither a parameter nor the base manifest does:
    the workers' startup probe behind WaitForWorkersReady, and in the mpiuser convention the workers' sshd
    command and the uid both roles run as."""
    worker, worker_main = filled.worker, _main(filled, base, WORKER_REPLICA)
    policy = settings.get("launcher_creation_policy")
    probed = worker.readiness_probe or worker.startup_probe or worker_main.get("readinessProbe") or worker_main.get(
        "startupProbe")
    if policy is not None and policy.value == WAIT_FOR_WORKERS_READY and not probed:
        worker.startup_probe = deepcopy(STARTUP_PROBE)
        settings["worker.startup_probe"] = Setting("a TCP socket listens (sshd)", DEFAULT)
    path = settings.get("ssh_auth_mount_path")
    if path is None or path.value != MPIUSER_SSH_AUTH_MOUNT_PATH:
        return
    if worker.command is None and worker.args is None and not worker_main.get("command") and not worker_main.get(
            "args"):
        worker.command = list(MPIUSER_SSHD_COMMAND)
        settings["worker.command"] = Setting(" ".join(MPIUSER_SSHD_COMMAND), DEFAULT)
    for role in (LAUNCHER_REPLICA, WORKER_REPLICA):
        replica = filled.replica(role)
        if not _sets_uid(replica, _main(filled, base, role), pod_spec(base, role)):
            replica.security_context = {**(replica.security_context or {}), "runAsUser": MPIUSER_UID}
            settings[f"{ROLES[role]}.run_as_user"] = Setting(MPIUSER_UID, DEFAULT)


def _launcher_dns_search(filled: MPIJobSpec, base: dict, settings: dict[str, Setting]) -> None:
    """MPICH and Intel MPI: the launcher's own short host name resolvable in the launcher, as the mpi-operator makes
    it in the workers (its ``<job>.<ns>.svc.cluster.local`` search domain). Upstream's MPICH/Intel images wait in
    their entrypoint until ``nslookup $HOSTNAME`` answers, which without that domain never happens: each job
    started about 100 s late (measured on the real node). Left alone when the pod sets a ``dnsConfig``."""
    implementation = settings.get("mpi_implementation")
    namespace = settings.get("namespace")
    launcher = filled.launcher
    if (implementation is None or implementation.value not in (MPICH, INTEL) or namespace is None
            or not isinstance(filled.name, str) or launcher.dns_searches is not None
            or pod_spec(base, LAUNCHER_REPLICA).get("dnsConfig") is not None):
        return
    launcher.dns_searches = [f"{filled.name}.{namespace.value}.svc.{CLUSTER_DOMAIN}"]
    settings["launcher.dns_searches"] = Setting(launcher.dns_searches[0], DEFAULT)
