"""The one precedence rule, in one function: a parameter given > the base manifest's value > the operator's default.

resolve(spec) checks the parameters and the base manifest on their own first, so that a problem is named as the user
wrote it; then apply() merges them and returns the manifest to submit and where each defaultable field's value came
from (the task log says it; the operator reads the backoff limit). A default fills a field only where neither a
parameter nor the base manifest sets it; the retries mapping (``runPolicy.backoffLimit`` and the launcher's
``restartPolicy`` from the task's retries, as the job's kind maps them: jobspec/kinds/) is such a default. The
parameters, rendered by layout.py, are deep-merged onto the base manifest, so they win and every field they leave
alone keeps the base's value. A default equal to the controller's own (one slot per worker, Open MPI) is not
written: the manifest stays as the user wrote it.
"""

from __future__ import annotations

from collections.abc import Callable
from copy import deepcopy
from dataclasses import dataclass, replace
from typing import Any, cast

from airflow_mpi.jobspec import rules
from airflow_mpi.jobspec.commands import without_hydra_address
from airflow_mpi.jobspec.container_defaults import (
    container_defaults,
    idle_workers,
    launcher_dns_search,
    launcher_waits_for_workers,
)
from airflow_mpi.jobspec.errors import ErrorList
from airflow_mpi.jobspec.fields import (
    REPLICA,
    ROW_KEYS,
    RUN_POLICY,
    Field,
    MPIJobSpec,
    field_of,
    holder,
    manifest_path,
)
from airflow_mpi.jobspec.kinds import JobKind, kind_or_default
from airflow_mpi.jobspec.layout import pod_spec, render, replica_specs, row_value
from airflow_mpi.jobspec.merge import deep_merge, load_base_manifest
from airflow_mpi.jobspec.settings import BASE_MANIFEST, CONTROLLER_DEFAULT, DEFAULT, PARAMETER, Setting
from airflow_mpi.jobspec.spec import (
    MPIUSER_SSH_AUTH_MOUNT_PATH,
    OPENMPI,
    Defaults,
    LauncherCommand,
)
from airflow_mpi.jobspec.validation import check_base_manifest, check_manifest, check_parameters
from airflow_mpi.jobspec.vocabulary import LAUNCHER_REPLICA, ROLES, WORKER_REPLICA

# What the controllers assume where nothing sets a field: reported, never written (the command line built from
# ``program`` uses the same values).
CONTROLLER_DEFAULTS: dict[str, Any] = {"slots_per_worker": 1, "mpi_implementation": OPENMPI}
# Named lists whose items a parameter replaces whole (not merged key by key), so that e.g. an env var given as a
# parameter with "value" does not keep the base's "valueFrom" of the same name.
_REPLACED_POD_LISTS = ("volumes",)
_REPLACED_CONTAINER_LISTS = ("env", "volumeMounts")
# the same, for a kind without replica specs (TrainJob): the rows whose named lists are replaced at its own paths
_REPLACED_ROWS = (field_of("env", REPLICA),)
# what the launcher command is sized from, and where it goes
_IMPLEMENTATION, _SLOTS, _LAUNCHER_RUNS = (
    field_of(n) for n in ("mpi_implementation", "slots_per_worker", "run_launcher_as_worker")
)
_WORKERS, _COMMAND = field_of("replicas", REPLICA), field_of("command", REPLICA)


@dataclass(frozen=True)
class Resolved:
    """A validated manifest, and where its defaultable fields' values came from."""

    manifest: dict
    settings: dict[str, Setting]


def _mpiuser_convention(spec: MPIJobSpec, defaults: Defaults) -> str | None:
    """A job described by parameters only follows the mpi-operator's unprivileged convention; a base manifest's
    silence keeps the controller's root one (upstream's Horovod examples run root images on its defaults)."""
    kind = kind_or_default(spec.api_version)
    return MPIUSER_SSH_AUTH_MOUNT_PATH if kind.mpiuser_convention and spec.base_manifest is None else None


def _wait_for_workers(spec: MPIJobSpec, defaults: Defaults) -> str | None:
    """The launcher starts once its workers are Ready (their sshd listening, _container_defaults): started at
    once, it races the workers' DNS records and ssh gives up (kubeflow/mpi-operator#386)."""
    return kind_or_default(spec.api_version).launcher_creation_policy


def _retries_backoff_limit(spec: MPIJobSpec, defaults: Defaults) -> int | None:
    """The retries mapping's backoffLimit (the kind's: attempts as its controller counts them)."""
    if defaults.retries is None:
        return None
    return kind_or_default(spec.api_version).retries_mapping(defaults.retries).backoff_limit


def _retries_restart_policy(spec: MPIJobSpec, defaults: Defaults) -> str | None:
    """The retries mapping's launcher restartPolicy (v2beta1: Never, a failed pod is an attempt of the launcher
    Job; v1: OnFailure, a restarted container is one)."""
    if defaults.retries is None:
        return None
    return kind_or_default(spec.api_version).retries_mapping(defaults.retries).launcher_restart_policy


# The retries mapping's fields: a kind without them reports the mapping as what its launcher does (TrainJob: the
# runtime's launcher Job, one run), and each Airflow retry submits a fresh job (RetriesMapping.mapped False).
_RETRIES_MAPPING = ("backoff_limit", "launcher.restart_policy")
# The defaultable fields: (setting name, field, role, default); in this order in the task log.
_DEFAULTS: tuple[tuple[str, Field, str | None, Callable[[MPIJobSpec, Defaults], Any] | None], ...] = (
    ("workers", field_of("replicas", REPLICA), WORKER_REPLICA, lambda s, d: d.workers),
    ("slots_per_worker", field_of("slots_per_worker"), None, None),
    ("mpi_implementation", field_of("mpi_implementation"), None, None),
    ("clean_pod_policy", field_of("clean_pod_policy", RUN_POLICY), None, lambda s, d: d.clean_pod_policy),
    ("backoff_limit", field_of("backoff_limit", RUN_POLICY), None, lambda s, d: _retries_backoff_limit(s, d)),
    ("launcher.restart_policy", field_of("restart_policy", REPLICA), LAUNCHER_REPLICA,
     lambda s, d: _retries_restart_policy(s, d) if s.run_policy.backoff_limit is None else None),
    ("namespace", field_of("namespace"), None, lambda s, d: d.namespace() if callable(d.namespace) else d.namespace),
    ("ssh_auth_mount_path", field_of("ssh_auth_mount_path"), None, _mpiuser_convention),
    ("launcher_creation_policy", field_of("launcher_creation_policy"), None, _wait_for_workers),
)  # fmt: skip


def resolve(spec: MPIJobSpec) -> Resolved:
    """The validated manifest of ``spec``; raises MPIJobValidationError listing every violation."""
    errors = ErrorList()
    check_parameters(errors, spec)
    errors.raise_if_any()
    base = load_base_manifest(spec.base_manifest) if spec.base_manifest is not None else {}
    check_base_manifest(errors, spec, base)
    errors.raise_if_any()
    return apply(spec, base)


def build_manifest(spec: MPIJobSpec) -> dict:
    """The validated MPIJob manifest: parameters > base manifest > defaults, field by field."""
    return resolve(spec).manifest


def validate(spec: MPIJobSpec) -> None:
    """Raise MPIJobValidationError listing every violation of ``spec`` and its merged manifest."""
    resolve(spec)


def apply(spec: MPIJobSpec, base: dict) -> Resolved:
    """``spec`` merged onto ``base``, validated, and where its defaultable fields came from."""
    kind = kind_or_default(spec.api_version)
    filled = replace(
        spec,
        launcher=replace(spec.launcher),
        worker=replace(spec.worker),
        run_policy=replace(spec.run_policy),
    )
    role: str | None  # a role's name, then None for the rows of no role (_DEFAULTS)
    for role in ROLES:
        filled.replica(role).container_name = _main_container_name(spec, role, base, kind)
    settings: dict[str, Setting] = {}
    for name, row, role, default in _DEFAULTS:
        given, in_base = (
            getattr(holder(spec, row, role), row.name),
            _in_base(base, row, role, spec.api_version),
        )
        if given is not None:
            settings[name] = Setting(given, PARAMETER)
        elif in_base is not None:
            settings[name] = Setting(in_base, BASE_MANIFEST)
        elif default and spec.defaults is not None and (value := default(spec, spec.defaults)) is not None:
            if kind.has_row(row, role):
                setattr(holder(filled, row, role), row.name, value)
                settings[name] = Setting(value, DEFAULT)
            elif name in _RETRIES_MAPPING:  # a kind without the fields: what its launcher does (not written)
                settings[name] = Setting(value, CONTROLLER_DEFAULT)
        elif name in CONTROLLER_DEFAULTS and kind.has_row(row, role):
            settings[name] = Setting(CONTROLLER_DEFAULTS[name], CONTROLLER_DEFAULT)
    for key, value in kind.field_defaults.items():  # the kind's own (TrainJob: its runtimeRef)
        row, role = ROW_KEYS[key]
        if (given := getattr(holder(spec, row, role), row.name)) is not None:
            settings[key] = Setting(given, PARAMETER)
        elif (in_base := _in_base(base, row, role, spec.api_version)) is not None:
            settings[key] = Setting(in_base, BASE_MANIFEST)
        else:
            setattr(holder(filled, row, role), row.name, value)
            settings[key] = Setting(value, DEFAULT)
    if spec.defaults is not None and kind.container_defaults:
        container_defaults(filled, base, settings)
    if spec.defaults is not None and kind.idle_worker_command:
        idle_workers(filled, base, settings, kind.idle_worker_command)
    _name(filled, spec, base, settings, kind)
    if spec.defaults is not None and kind.launcher_dns_search:
        launcher_dns_search(filled, base, settings)
    if spec.identity is not None:
        filled.labels = {**(spec.labels or {}), **spec.identity.labels()}
        filled.annotations = {**(spec.annotations or {}), **spec.identity.annotations()}
    manifest = _merged(filled, base, kind)
    errors = ErrorList()
    check_manifest(errors, manifest)
    errors.raise_if_any()
    if spec.launch is not None:
        _put_launcher_command(manifest, spec)
    if spec.defaults is not None:
        launcher_waits_for_workers(manifest, settings, spec.defaults)
    return Resolved(manifest, settings)


def base_value(base: Any, path: tuple) -> Any:
    """The value at ``path`` of a (possibly malformed) base manifest, or None."""
    node = base
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _in_base(base: dict, row: Field, role: str | None, api: str) -> Any:
    """The base manifest's value of ``row``: at the row's path, or where the kind holds it (v1: ``v1_path``)."""
    paths = dict.fromkeys((manifest_path(row, role, api, own_path=True), manifest_path(row, role, api)))
    return next((v for p in paths if (v := base_value(base, p)) is not None), None)


def is_name(name: Any) -> bool:
    """A valid job name (DNS-1035 label), before any suffix."""
    return isinstance(name, str) and not rules.dns1035_label(name)


def _name(
    filled: MPIJobSpec, spec: MPIJobSpec, base: dict, settings: dict[str, Setting], kind: JobKind
) -> None:
    """The job's name: derived from the task instance; a given one (parameter or base manifest) is its prefix,
    unless ``unique_name_suffix`` is False: upstream's examples all say ``name: pi``, and a second run, a
    concurrent one or a retry beside a failed job kept for debugging would each find the first one's job."""
    name = spec.name if spec.name is not None else base_value(base, ("metadata", "name"))
    source = PARAMETER if spec.name is not None else BASE_MANIFEST
    workers = settings["workers"].value if "workers" in settings else 1
    valid = isinstance(workers, int) and not isinstance(workers, bool) and 1 <= workers <= rules.INT32_MAX
    if spec.identity is None or (
        name is not None and (spec.unique_name_suffix is False or not is_name(name))
    ):
        if name is not None:  # used as given (validation names an invalid one)
            settings["name"] = Setting(name, source)
        return
    workers = workers if valid else 1
    filled.name = spec.identity.job_name(
        max_workers=workers, prefix=name, longest_suffix=len(kind.longest_name("", workers))
    )
    settings["name"] = Setting(
        filled.name, DEFAULT if name is None else f"{source}, suffixed per task instance"
    )


def _main_container_name(spec: MPIJobSpec, role: str, base: dict, kind: JobKind) -> str:
    """container_name, else the base manifest's first container, else the version's default (for v1
    ``main_container`` when set: kubexec.sh runs in the container of that name)."""
    if name := spec.replica(role).container_name:
        return name
    containers = pod_spec(base, role, kind).get("containers")
    first = containers[0] if isinstance(containers, list) and containers else None
    if isinstance(first, dict) and isinstance(first.get("name"), str):
        return first["name"]
    if kind.main_container_field and spec.main_container:
        return spec.main_container
    return kind.container_names[role]


def _merged(filled: MPIJobSpec, base: dict, kind: JobKind) -> dict:
    """The parameters (with the defaults filled in) deep-merged onto the base manifest, the main containers first."""
    override = render(filled)
    merged = deep_merge(_without_replaced(base, override, kind), override)
    if not kind.replica_layout.present:  # no replica specs: nothing of the MPIJob's below applies
        return merged
    replicas, key = replica_specs(merged, kind), kind.replica_path(LAUNCHER_REPLICA)[-1]
    launcher = replicas.get(key)
    if isinstance(launcher, dict) and "replicas" not in launcher:
        replicas[key] = {
            "replicas": 1,
            **launcher,
        }  # the only valid count; first, as written by hand
    for role in ROLES:
        name = filled.replica(role).container_name
        containers = pod_spec(merged, role, kind).get("containers")
        if isinstance(containers, list):
            containers.sort(key=lambda c: not (isinstance(c, dict) and c.get("name") == name))
    clean = filled.run_policy.clean_pod_policy
    base_policy = base_value(base, ("spec", "runPolicy"))
    if (
        kind.top_level_clean_pod_policy
        and clean is not None
        and isinstance(base_policy, dict)
        and "cleanPodPolicy" in (base_policy)
    ):
        # training-operator lets runPolicy.cleanPodPolicy win over the top-level field: keep them equal.
        merged["spec"]["runPolicy"]["cleanPodPolicy"] = clean
    return merged


def _without_replaced(base: dict, override: dict, kind: JobKind) -> dict:
    """A copy of ``base`` whose named items that ``override`` replaces wholesale are already replaced, in place:
    the base's order matters for env vars that refer to earlier ones with $(NAME)."""
    base = deepcopy(base)
    if not kind.replica_layout.present:  # the named lists at the kind's own paths (TrainJob: trainer.env)
        for role in ROLES:
            for row in _REPLACED_ROWS:
                if kind.has_row(row, role):
                    path = manifest_path(row, role, kind.api_version)
                    old, new = base_value(base, path[:-1]), base_value(override, path[:-1])
                    if isinstance(old, dict) and isinstance(new, dict):
                        _replace_named(old, new, (path[-1],))
        return base
    for role in ROLES:
        new_pod, old_pod = pod_spec(override, role, kind), pod_spec(base, role, kind)
        _replace_named(old_pod, new_pod, _REPLACED_POD_LISTS)
        new_main = new_pod["containers"][0]
        old_containers = old_pod.get("containers")
        for old in old_containers if isinstance(old_containers, list) else []:
            if isinstance(old, dict) and old.get("name") == new_main["name"]:
                _replace_named(old, new_main, _REPLACED_CONTAINER_LISTS)
    return base


def _replace_named(old: dict, new: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        if isinstance(old.get(key), list) and isinstance(new.get(key), list):
            by_name = {
                i["name"]: i for i in new[key] if isinstance(i, dict) and isinstance(i.get("name"), str)
            }
            old[key] = [deepcopy(by_name[_name_of(i)]) if _name_of(i) in by_name else i for i in old[key]]


def _name_of(item: Any) -> str | None:
    return item["name"] if isinstance(item, dict) and isinstance(item.get("name"), str) else None


def _put_launcher_command(manifest: dict, spec: MPIJobSpec) -> None:
    """Set the main launcher container's command from ``spec.launch``, sized from the valid manifest: it replaces
    the base manifest's command and args, which belonged to its own command line. Each field is read where the job's
    kind holds it (a TrainJob: its trainer's numNodes, numProcPerNode, command)."""
    kind = kind_or_default(manifest["apiVersion"])  # valid: its kind is known

    # v1, TrainJob have no mpiImplementation field: there the parameter only picks the command's flags
    implementation = (
        row_value(manifest, _IMPLEMENTATION)
        or spec.mpi_implementation
        or CONTROLLER_DEFAULTS["mpi_implementation"]
    )
    launch = cast(LauncherCommand, spec.launch)  # the caller checked it is set
    command = launch.command(
        workers=row_value(manifest, _WORKERS, WORKER_REPLICA),
        slots_per_worker=row_value(manifest, _SLOTS) or CONTROLLER_DEFAULTS["slots_per_worker"],
        implementation=implementation,
        run_launcher_as_worker=row_value(manifest, _LAUNCHER_RUNS) is True,
    )
    path = manifest_path(_COMMAND, LAUNCHER_REPLICA, kind.api_version)
    container = _container_at(manifest, path[:-1])
    if kind.hydra_address_wired:
        command = without_hydra_address(command)
    command = kind.launcher_command(implementation, command)
    if kind.launcher_command_in_args and implementation in launch.in_args:
        container.pop("command", None)  # the image's entrypoint runs it
        container["args"] = [*command, *(spec.launcher.args or [])]
        return
    container["command"] = command
    if spec.launcher.args is None:
        container.pop("args", None)


def _container_at(manifest: dict, path: tuple) -> dict:
    """The container (a TrainJob: its trainer) at ``path``, made where absent."""
    node: Any = manifest
    for key in path:
        node = node[key] if isinstance(node, list) else node.setdefault(key, {})
    return cast(dict, node)
