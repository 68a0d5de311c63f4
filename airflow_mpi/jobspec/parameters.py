"""The operators' parameters -> MPIJobSpec, every one checked under the name the user wrote.

Values may come rendered by Jinja: each parameter's row (fields.py) says how a template's text becomes its type. An
integer parameter takes an int or a string of digits and nothing else; a float, a bool or ``"2.5"`` is an error naming
the parameter, never truncated. A parameter that would be ignored (it does not apply to the API version, or another
parameter covers the same field) is an error too. Errors the model finds later in the merged manifest are reported
under the parameter's name when the parameter holds the offending value (``workers=0``, not only ``worker.replicas=0``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from airflow_mpi.jobspec.coerce import as_int
from airflow_mpi.jobspec.commands import Mpirun
from airflow_mpi.jobspec.errors import ErrorList, MPIJobValidationError
from airflow_mpi.jobspec.fields import (
    HOROVOD_FIELDS,
    JOB,
    PARAMETERS,
    REPLICA,
    RUN_POLICY,
    SCHEDULING,
    MPIJobSpec,
    ReplicaSpec,
    RunPolicy,
    SchedulingPolicy,
    field_of,
    parameters,
    role_parameter,
    rows,
)
from airflow_mpi.jobspec.kinds import kind_or_default
from airflow_mpi.jobspec.naming import TaskIdentity
from airflow_mpi.jobspec.precedence import Resolved, resolve
from airflow_mpi.jobspec.redaction import redact_value
from airflow_mpi.jobspec.row_validation import check_role_overrides
from airflow_mpi.jobspec.spec import Defaults, LauncherCommand
from airflow_mpi.jobspec.vocabulary import ROLES

__all__ = ["as_int", "mpirun_launch", "resolve_parameters", "spec_from_parameters"]

LaunchFactory = Callable[[ErrorList, Mapping[str, Any]], LauncherCommand]
_TYPED = {**PARAMETERS, **parameters(HOROVOD_FIELDS)}
_REPLICA_ROWS = {row.name: row for row in rows(REPLICA)}
# Paths the model reports (validation.py) -> the parameter that sets them.
_MODEL_PATHS = {
    **{
        f"{role}.{row.name}": p
        for row in rows(REPLICA)
        for role in ROLES.values()
        if (p := role_parameter(row, role))
    },
    **{f"run_policy.{row.name}": row.name for row in rows(RUN_POLICY)},
}


def _role(errors: ErrorList, role: str, overrides: Any, params: dict[str, Any]) -> ReplicaSpec:
    """A role's ReplicaSpec: its parameters, then the role's own dict (``launcher=``/``worker=``) over them."""
    spec = ReplicaSpec(**params)
    if overrides is None:
        return spec
    known = ", ".join(_REPLICA_ROWS)
    if not isinstance(overrides, dict):
        errors.add(role, overrides, f"must be a dict of ReplicaSpec fields ({known})")
        return spec
    for key, value in overrides.items():
        path, row = f"{role}.{key}", _REPLICA_ROWS.get(key)
        if row is None:
            errors.add(path, value, f"is not a ReplicaSpec field; known: {known}")
            continue
        if row.coerce is not None:
            value = row.coerce(errors, path, value)
        current = getattr(spec, key)
        setattr(
            spec,
            key,
            {**current, **value} if isinstance(current, dict) and isinstance(value, dict) else value,
        )
    return spec


def _scheduling(errors: ErrorList, value: Any) -> SchedulingPolicy | None:
    """``scheduling_policy`` with the manifest's camelCase or Python's snake_case keys."""
    if value is None:
        return None
    known = {f.name: f for f in rows(SCHEDULING)}
    if not isinstance(value, dict):
        errors.add("scheduling_policy", value, f"must be a dict with keys of {', '.join(known)}")
        return None
    policy = {}
    for key, item in value.items():
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower() if isinstance(key, str) else key
        row = known.get(snake)
        if row is None:
            errors.add(
                f"scheduling_policy.{key}",
                item,
                f"is not a schedulingPolicy field; known: {', '.join(known)}",
            )
        else:
            policy[snake] = row.coerce(errors, f"scheduling_policy.{key}", item) if row.coerce else item
    return SchedulingPolicy(**policy)


def mpirun_launch(errors: ErrorList, values: Mapping[str, Any]) -> LauncherCommand:
    """MPIJobOperator's ``program``: mpirun for the job's MPI implementation."""
    return Mpirun(values["program"], values.get("mpirun_args"))


def _given(values: Mapping[str, Any], errors: ErrorList) -> dict[str, Any]:
    """The parameters given (not None), rendered text as each one's type."""
    given = {}
    for name, value in values.items():
        row = _TYPED.get(name)
        if value is not None and row is not None and row.coerce is not None:
            value = row.coerce(errors, name, value)
        if value is not None:
            given[name] = value
    return given


def _launch(errors: ErrorList, given: dict[str, Any], launch: LaunchFactory) -> LauncherCommand | None:
    if "program" not in given:
        if "mpirun_args" in given:
            errors.add(
                "mpirun_args", given["mpirun_args"], "applies only with program (it extends program's mpirun)"
            )
        return None
    if "command" in given:
        errors.add(
            "command",
            given["command"],
            "cannot be combined with program (program builds the launcher command)",
        )
    return launch(errors, given)


def spec_from_parameters(
    values: Mapping[str, Any],
    *,
    identity: TaskIdentity | None = None,
    defaults: Defaults | None = None,
    launch: LaunchFactory = mpirun_launch,
) -> tuple[MPIJobSpec, dict[str, Any]]:
    """The MPIJobSpec of an operator's (rendered) parameters (None: not given), and the parameters given (normalised).

    Raises MPIJobValidationError listing every parameter that cannot be used.
    """
    errors = ErrorList()
    given = _given(values, errors)
    launcher_command = _launch(errors, given, launch)
    check_role_overrides(
        errors, given, kind_or_default(given.get("api_version", field_of("api_version").default))
    )
    roles: dict[str, Any] = {}
    for role in ROLES.values():
        overrides, params = given.get(role), {}
        for row in rows(REPLICA):
            param = role_parameter(row, role)
            if param not in given:
                continue
            params[row.name] = given[param]
            if (
                isinstance(row.param, dict)
                and isinstance(overrides, dict)
                and overrides.get(row.name) is not None
            ):
                reason = f"is also given as the {param} parameter: give one"
                errors.add(f"{role}.{row.name}", overrides[row.name], reason)
        roles[role] = _role(errors, role, overrides, params)
    run_policy = RunPolicy(
        **{row.name: given.get(row.name) for row in rows(RUN_POLICY) if not row.nested},
        scheduling_policy=_scheduling(errors, given.get("scheduling_policy")),
    )
    errors.raise_if_any()
    job = {
        row.name: given[row.name] for row in rows(JOB) if row.param and not row.nested and row.name in given
    }
    spec = MPIJobSpec(
        **job, **roles, run_policy=run_policy, launch=launcher_command, identity=identity, defaults=defaults
    )
    return spec, given


def resolve_parameters(
    values: Mapping[str, Any],
    *,
    identity: TaskIdentity | None = None,
    defaults: Defaults | None = None,
    launch: LaunchFactory = mpirun_launch,
) -> Resolved:
    """The validated manifest of an operator's parameters (see spec_from_parameters and precedence.resolve)."""
    spec, given = spec_from_parameters(values, identity=identity, defaults=defaults, launch=launch)
    try:
        return resolve(spec)
    except MPIJobValidationError as err:
        # one entry per parameter problem ("image" may be reported for both roles)
        named: dict[tuple[str, str, str], Any] = {}
        for e in err.errors:
            e = _attributed(e, given)
            named.setdefault((e.field, repr(e.value), e.reason), e)
        raise MPIJobValidationError.from_errors(named.values()) from None


def _attributed(error: MPIJobValidationError, given: Mapping[str, Any]) -> MPIJobValidationError:
    """``error`` under the parameter's name when that parameter holds the offending value."""
    for path, param in _MODEL_PATHS.items():
        under_path = error.field == path or error.field.startswith((f"{path}.", f"{path}["))
        # errors hold redacted values (errors.py)
        if under_path and param in given and _holds(redact_value(given[param]), error.value):
            return MPIJobValidationError(param + error.field[len(path) :], error.value, error.reason)
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
