"""The operators' parameters -> MPIJobSpec, every one checked under the name the user wrote.

Values may come rendered by Jinja: an integer parameter takes an int or a string of digits (what
a template renders) and nothing else; a float, a bool or ``"2.5"`` is an error naming the
parameter, never truncated. A parameter that would be ignored (it does not apply to the API
version, or another parameter covers the same field) is an error too. Errors the model finds
later in the merged manifest are reported under the parameter's name when the parameter holds
the offending value (``workers=0``, not only ``worker.replicas=0``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from airflow_mpi.jobspec.commands import Mpirun
from airflow_mpi.jobspec.errors import ErrorList, MPIJobValidationError
from airflow_mpi.jobspec.manifest import Resolved, resolve
from airflow_mpi.jobspec.naming import TaskIdentity
from airflow_mpi.jobspec.spec import (
    API_V2BETA1,
    Defaults,
    LauncherCommand,
    MPIJobSpec,
    ReplicaSpec,
    RunPolicy,
    SchedulingPolicy,
)

LaunchFactory = Callable[[ErrorList, Mapping[str, Any]], LauncherCommand]

# Parameters both roles get (ReplicaSpec field of the same name).
SHARED = (
    "image", "env", "env_from", "volumes", "volume_mounts", "node_selector", "tolerations", "affinity",
    "service_account_name", "image_pull_secrets", "priority_class_name",
)  # fmt: skip
# Parameters of one role -> the ReplicaSpec field they set (the role's dict may not set it too).
ROLE_PARAMETERS = {
    "launcher": {"command": "command", "args": "args", "launcher_resources": "resources"},
    "worker": {
        "workers": "replicas",
        "worker_resources": "resources",
        "gpus_per_worker": "gpus",
        "worker_readiness_probe": "readiness_probe",
    },
}
RUN_POLICY = ("clean_pod_policy", "ttl_seconds_after_finished", "active_deadline_seconds", "backoff_limit", "suspend",
              "managed_by")  # fmt: skip
JOB = ("name", "namespace", "labels", "annotations", "run_launcher_as_worker", "ssh_auth_mount_path",
       "launcher_creation_policy", "main_container", "unique_name_suffix")  # fmt: skip
INTEGERS = ("workers", "slots_per_worker", "gpus_per_worker", "backoff_limit", "ttl_seconds_after_finished",
            "active_deadline_seconds")  # fmt: skip
_ROLE_INTEGERS = ("replicas", "gpus")
_SCHEDULING_INTEGERS = ("min_available", "schedule_timeout_seconds")
_DIGITS = re.compile(r"\s*[+-]?\d+\s*")

# Paths the model reports (validation.py) -> the parameter that sets them.
_MODEL_PATHS = {
    "worker.replicas": "workers",
    "worker.gpus": "gpus_per_worker",
    "worker.resources": "worker_resources",
    "launcher.resources": "launcher_resources",
    "worker.readiness_probe": "worker_readiness_probe",
    "launcher.command": "command",
    "launcher.args": "args",
    "run_policy.scheduling_policy": "scheduling_policy",
    **{f"run_policy.{p}": p for p in RUN_POLICY},
    **{f"{role}.{p}": p for role in ("launcher", "worker") for p in SHARED},
}


def as_int(errors: ErrorList, name: str, value: Any) -> int | None:
    """``value`` as an int: an int, or a string of digits as a template renders it (None stays None)."""
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    errors.add(name, value, f"must be an integer, not {type(value).__name__} (no fraction or rounding is applied)")
    return None


def _args_list(errors: ErrorList, name: str, value: Any) -> Any:
    """A shell string split with shlex (lists and anything else are left for validation)."""
    if not isinstance(value, str):
        return value
    try:
        return shlex.split(value)
    except ValueError as exc:
        errors.add(name, value, f"is not a valid shell string: {exc}")
        return None


def _role(errors: ErrorList, role: str, overrides: Any, params: dict[str, Any]) -> ReplicaSpec:
    """A role's ReplicaSpec: its parameters, then the role's own dict (``launcher=``/``worker=``) over them."""
    spec = ReplicaSpec(**params)
    if overrides is None:
        return spec
    known = [f.name for f in fields(ReplicaSpec)]
    if not isinstance(overrides, dict):
        errors.add(role, overrides, f"must be a dict of ReplicaSpec fields ({', '.join(known)})")
        return spec
    for key, value in overrides.items():
        path = f"{role}.{key}"
        if key not in known:
            errors.add(path, value, f"is not a ReplicaSpec field; known: {', '.join(known)}")
            continue
        if key in _ROLE_INTEGERS:
            value = as_int(errors, path, value)
        current = getattr(spec, key)
        setattr(spec, key, {**current, **value} if isinstance(current, dict) and isinstance(value, dict) else value)
    return spec


def _scheduling(errors: ErrorList, value: Any) -> SchedulingPolicy | None:
    """``scheduling_policy`` with the manifest's camelCase or Python's snake_case keys."""
    if value is None:
        return None
    known = [f.name for f in fields(SchedulingPolicy)]
    if not isinstance(value, dict):
        errors.add("scheduling_policy", value, f"must be a dict with keys of {', '.join(known)}")
        return None
    policy = {}
    for key, item in value.items():
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower() if isinstance(key, str) else key
        if snake not in known:
            errors.add(f"scheduling_policy.{key}", item, f"is not a schedulingPolicy field; known: {', '.join(known)}")
        else:
            policy[snake] = as_int(errors, f"scheduling_policy.{key}", item) if snake in _SCHEDULING_INTEGERS else item
    return SchedulingPolicy(**policy)


def mpirun_launch(errors: ErrorList, values: Mapping[str, Any]) -> LauncherCommand:
    """MPIJobOperator's ``program``: mpirun for the job's MPI implementation."""
    return Mpirun(values["program"], values.get("mpirun_args"))


def _given(values: Mapping[str, Any], errors: ErrorList) -> dict[str, Any]:
    """The parameters given (not None), integers and shell strings normalised."""
    given = {k: v for k, v in values.items() if v is not None}
    for name in INTEGERS:
        if name in given:
            given[name] = as_int(errors, name, given[name])
    if "command" in given:
        given["command"] = _args_list(errors, "command", given["command"])
    return {k: v for k, v in given.items() if v is not None}


def _launch(errors: ErrorList, given: dict[str, Any], launch: LaunchFactory) -> LauncherCommand | None:
    if "program" not in given:
        if "mpirun_args" in given:
            errors.add("mpirun_args", given["mpirun_args"], "applies only with program (it extends program's mpirun)")
        return None
    if "command" in given:
        errors.add("command", given["command"], "cannot be combined with program (program builds the launcher command)")
    return launch(errors, given)


def spec_from_parameters(
    values: Mapping[str, Any],
    *,
    identity: TaskIdentity | None = None,
    defaults: Defaults | None = None,
    launch: LaunchFactory = mpirun_launch,
) -> tuple[MPIJobSpec, dict[str, Any]]:
    """The MPIJobSpec of an operator's (rendered) parameters, and the parameters given (normalised).

    ``values`` maps parameter names to values, None meaning not given.
    Raises MPIJobValidationError listing every parameter that cannot be used.
    """
    errors = ErrorList()
    given = _given(values, errors)
    launcher_command = _launch(errors, given, launch)
    shared = {k: given[k] for k in SHARED if k in given}
    roles = {}
    for role, own in ROLE_PARAMETERS.items():
        overrides = given.get(role)
        for param, attr in own.items():
            if param in given and isinstance(overrides, dict) and overrides.get(attr) is not None:
                errors.add(f"{role}.{attr}", overrides[attr], f"is also given as the {param} parameter: give one")
        from_params = {attr: given[param] for param, attr in own.items() if param in given}
        roles[role] = _role(errors, role, overrides, {**shared, **from_params})
    run_policy = RunPolicy(
        **{p: given.get(p) for p in RUN_POLICY}, scheduling_policy=_scheduling(errors, given.get("scheduling_policy"))
    )
    errors.raise_if_any()
    spec = MPIJobSpec(
        **{p: given.get(p) for p in JOB},
        launcher=roles["launcher"],
        worker=roles["worker"],
        slots_per_worker=given.get("slots_per_worker"),
        mpi_implementation=given.get("mpi_implementation"),
        run_policy=run_policy,
        api_version=given.get("api_version", API_V2BETA1),
        base_manifest=given.get("base_manifest"),
        launch=launcher_command,
        identity=identity,
        defaults=defaults,
    )
    return spec, given


def resolve_parameters(
    values: Mapping[str, Any],
    *,
    identity: TaskIdentity | None = None,
    defaults: Defaults | None = None,
    launch: LaunchFactory = mpirun_launch,
) -> Resolved:
    """The validated manifest of an operator's parameters (see spec_from_parameters and manifest.resolve)."""
    spec, given = spec_from_parameters(values, identity=identity, defaults=defaults, launch=launch)
    try:
        return resolve(spec)
    except MPIJobValidationError as err:
        named = {}  # one entry per parameter problem ("image" may be reported for both roles)
        for e in err.errors:
            e = _attributed(e, given)
            named.setdefault((e.field, repr(e.value), e.reason), e)
        raise MPIJobValidationError.from_errors(named.values()) from None


def _attributed(error: MPIJobValidationError, given: Mapping[str, Any]) -> MPIJobValidationError:
    """``error`` under the parameter's name when that parameter holds the offending value."""
    for path, param in _MODEL_PATHS.items():
        if (error.field == path or error.field.startswith((f"{path}.", f"{path}["))) and param in given:
            if _holds(given[param], error.value):
                return MPIJobValidationError(param + error.field[len(path):], error.value, error.reason)
    return error


def _holds(value: Any, wanted: Any) -> bool:
    """``wanted`` is ``value`` or somewhere inside it (a key or an item)."""
    if type(value) is type(wanted) and value == wanted:
        return True
    if isinstance(value, dict):
        return any(_holds(k, wanted) or _holds(v, wanted) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_holds(v, wanted) for v in value)
    return False
