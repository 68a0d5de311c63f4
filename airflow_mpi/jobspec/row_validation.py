"""Which rows a job's kind has (JobKind.has_row, field_paths): a value for a field its kind lacks is refused by its
name, before anything is merged; and the merged manifest of a kind not shaped like an MPIJob (``field_paths``:
TrainJob) is checked where that kind keeps each row, since it has no replica specs, pod templates or runPolicy.

What the MPIJob kinds need beyond this (their spec keys, runPolicy, replica specs, pod templates) stays in
validation.py; both call here for the job's name, which every kind derives its pods' host names from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from typing import Any

from airflow_mpi.jobspec import rules
from airflow_mpi.jobspec.errors import ErrorList
from airflow_mpi.jobspec.fields import (
    FIELDS,
    JOB,
    LAUNCH,
    REPLICA,
    ROW_KEYS,
    SCHEDULING,
    Field,
    MPIJobSpec,
    holder,
)
from airflow_mpi.jobspec.kinds import JobKind
from airflow_mpi.jobspec.layout import value_at
from airflow_mpi.jobspec.pod_validation import check_resources
from airflow_mpi.jobspec.vocabulary import ROLES

# rows that describe the task, not a field of any manifest (api_version, base_manifest, unique_name_suffix...)
# (scheduling_policy's keys are its one row's)
_MANIFEST_ROWS = tuple(f for f in FIELDS if f.owner not in (LAUNCH, SCHEDULING) and f.path)


def check_job_name(errors: ErrorList, name: Any, workers: int, kind: JobKind) -> None:
    """A DNS-1035 label whose longest derived name (the kind's: the last worker's host name) is one too."""
    if name is None:
        errors.add("name", None, "is required (set name, or metadata.name in the base manifest)")
        return
    if problem := rules.dns1035_label(name):
        errors.add("name", name, f"{problem} (the operator uses it as a Service name)")
        return
    # mpi-operator validateMPIJobName: the last worker's hostname must be a DNS-1035 label; the longest name the
    # controller derives (the last worker's, else "<name>-launcher": the v2beta1 launcher Job, its pods' hostname)
    host = kind.longest_name(name, workers)
    if len(host) > rules.LABEL_MAX:
        reason = f"is too long: the operator derives {host!r} ({len(host)} characters, max {rules.LABEL_MAX})"
        errors.add("name", name, reason)


def check_kind_rows(errors: ErrorList, spec: MPIJobSpec, kind: JobKind) -> None:
    """Every field ``spec`` sets is one its kind has, each refusal under the field's name with what to do instead."""
    if kind.field_paths is not None:
        _check_own_rows(errors, spec, kind)
        return
    for row in (f for f in FIELDS if f.owner == JOB):
        value = getattr(spec, row.name) if not kind.has_row(row) else None
        if value is None:
            continue
        if row.name == "main_container":
            reason = f"is a {row.api} field; in {kind.api_version} the first container is the main one"
            errors.add(row.name, value, reason)
        elif row.name == "mpi_implementation" and spec.launch is not None:
            _check(errors, row.name, value, row.check)  # not written: it picks the launch flags
        else:
            hint = (
                " without program (with program it picks mpirun's flags)"
                if row.name == "mpi_implementation"
                else ""
            )
            errors.add(
                row.name,
                value,
                f"is not supported by {kind.api_version} ({kind.controller}){hint}: {row.api} only",
            )


def _check(errors: ErrorList, name: str, value: Any, rule: rules.Rule | None) -> bool:
    problem = rule(value) if rule is not None else None
    if problem:
        errors.add(name, value, problem)
    return not problem


def _check_own_rows(errors: ErrorList, spec: MPIJobSpec, kind: JobKind) -> None:
    """A ``field_paths`` kind: the rows it lists only; the MPI implementations it runs; one value per field."""
    written: dict[tuple, tuple[str, Any]] = {}
    for row in _MANIFEST_ROWS:
        for role in tuple(ROLES) if row.owner == REPLICA else (None,):
            value, key = getattr(holder(spec, row, role), row.name), row.key(role)
            if value is None:
                continue
            if is_dataclass(value) and not isinstance(value, type):  # scheduling_policy: as given
                value, key = {k: v for k, v in asdict(value).items() if v is not None}, row.name
            if row.name == "mpi_implementation":
                _check_implementation(errors, spec, kind, row, value)
            elif not kind.has_row(row, role):
                errors.add(
                    key,
                    value,
                    f"is not a field of {kind.api_version} {kind.kind} ({kind.controller}): "
                    + kind.instead_of.get(key, kind.instead),
                )
            elif (path := kind.row_path(row, role)) in written and written[path][1] != value:
                other = written[path][0]
                errors.add(
                    key,
                    value,
                    f"differs from {other}={written[path][1]!r}: {kind.kind} has one `{'.'.join(path)}`",
                )
            else:
                written[path] = (key, value)


def _check_implementation(errors: ErrorList, spec: MPIJobSpec, kind: JobKind, row: Field, value: Any) -> None:
    """A kind without an implementation field runs the ones it names; with ``program`` the value picks mpirun."""
    if kind.implementations is not None and value not in kind.implementations:
        runs = ", ".join(kind.implementations)
        errors.add(
            row.name,
            value,
            f"is not supported by {kind.api_version} ({kind.controller}): it runs {runs} only "
            "(the mpiImplementation its CRD accepts)",
        )
    elif spec.launch is None:
        errors.add(
            row.name, value, f"applies to {kind.api_version} only with program (it picks mpirun's flags)"
        )


def check_role_overrides(errors: ErrorList, given: Mapping[str, Any], kind: JobKind) -> None:
    """A kind without replica specs has no per-role overrides (``launcher={...}``, ``worker={...}``)."""
    if kind.replica_layout.present:
        return
    for role in ROLES.values():
        if given.get(role) is not None:
            reason = (
                f"{kind.kind} has no per-role replica specs: give the operator's parameters; for the rest, "
            )
            errors.add(role, given[role], reason + kind.instead)


def check_rows_manifest(errors: ErrorList, manifest: dict, kind: JobKind) -> None:
    """A merged manifest of a ``field_paths`` kind: its keys are the kind's (or kept verbatim), its values pass
    their rows' rules (the kind's own where it has one), its trainer's env leaves the controller's variables alone."""
    paths = kind.field_paths or {}
    _check_closed(errors, manifest, kind, paths)
    for key, path in paths.items():
        row, _ = ROW_KEYS[key]
        value = value_at(manifest, path)
        if value is None or path[0] == "metadata":  # metadata: validation.check_manifest's
            continue
        rule = kind.field_rules.get(key, row.check)
        if key.endswith(".resources") or key == "resources_per_node":
            check_resources(errors, key, value)
        elif key == "run_policy.managed_by":
            _check(errors, key, value, rules.one_of(kind.managed_by))
        elif key.endswith(".env") and isinstance(value, list):
            reserved = sorted(
                set(kind.reserved_env).intersection(e.get("name") for e in value if isinstance(e, dict))
            )
            if reserved:
                errors.add(
                    "env", reserved, f"are set by the {kind.controller} itself (its webhook refuses them)"
                )
        else:
            _check(errors, key, value, rule)


def _check_closed(errors: ErrorList, manifest: dict, kind: JobKind, paths: Mapping[str, tuple]) -> None:
    """Every key under ``spec`` is one the kind's rows (or its verbatim keys) name; a row's own value is free."""
    leaves = set(paths.values())
    closed = {p[:i] for p in leaves for i in range(1, len(p)) if p[0] == "spec"}
    closed = {p for p in closed if not any(p[: len(leaf)] == leaf for leaf in leaves)}
    for parent in sorted(closed, key=len):
        node = value_at(manifest, parent)
        if node is not None and not isinstance(node, dict):
            errors.add(".".join(parent), node, "must be a mapping")
            continue
        known = {p[len(parent)] for p in leaves if p[: len(parent)] == parent and len(p) > len(parent)}
        known |= set(kind.verbatim_spec_keys) if parent == ("spec",) else set()
        for key, value in (node or {}).items():
            if key not in known:
                reason = (
                    f"is not a field of {kind.api_version} {kind.kind} (known: {', '.join(sorted(known))})"
                )
                errors.add(".".join((*parent, key)), value, reason)
