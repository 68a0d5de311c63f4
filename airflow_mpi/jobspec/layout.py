"""Spec -> the manifest its fields make, for any kind: layout only (which value wins: precedence.py).

Every field the spec sets is written at its row's path (fields.py), in row order: the manifest's key order; each
role's replica spec where the job's kind keeps it (``JobKind.replica_layout``: for both MPIJob APIs
``spec.mpiReplicaSpecs.<Launcher|Worker>``); a kind not shaped like an MPIJob (``JobKind.field_paths``: TrainJob)
gets the rows it has where it says, in its order. None and empty mappings are left out, so that merged onto a base
manifest they override nothing. The readers below find a role's replica spec and pod spec through the kind too.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from airflow_mpi.jobspec.fields import FIELDS, REPLICA, ROW_KEYS, Field, MPIJobSpec, holder, manifest_path
from airflow_mpi.jobspec.kinds import JobKind, kind_or_default
from airflow_mpi.jobspec.vocabulary import ROLES

_JOB_ROWS = tuple(f for f in FIELDS if f.owner != REPLICA and f.path and not f.nested)
_REPLICA_ROWS = tuple(f for f in FIELDS if f.owner == REPLICA)


def render(spec: MPIJobSpec) -> dict:
    """The manifest of the fields ``spec`` sets; each role's main container is named by its ``container_name``."""
    kind = kind_or_default(spec.api_version)
    manifest: dict[str, Any] = {"apiVersion": spec.api_version, "kind": kind.kind}
    if kind.field_paths is not None:
        for key, path in kind.field_paths.items():
            row, role = ROW_KEYS[key]
            if (value := getattr(holder(spec, row, role), row.name)) is not None:
                _write(manifest, path, row, value)
        return manifest
    for row in _JOB_ROWS:
        obj = holder(spec, row)
        value = getattr(obj, row.name) if obj is not None and kind.has_row(row) else None
        if value is not None:
            _write(manifest, manifest_path(row, api=spec.api_version), row, value)
    for role in ROLES:
        replica = spec.replica(role)
        node: dict[str, Any] = {}
        for row in _REPLICA_ROWS:
            if (value := getattr(replica, row.name)) is not None:
                _write(node, row.path, row, value)
        node["template"]["spec"]["containers"] = [node["template"]["spec"]["containers"][0]]
        _put(manifest, kind.replica_path(role), node)
    return manifest


def _write(node: dict, path: tuple, row: Field, value: Any) -> None:
    value = value if row.to_manifest is None else row.to_manifest(value)
    if value != {}:
        _put(node, path, deepcopy(value) if isinstance(value, (dict, list)) else value)


def _put(node: dict, path: tuple, value: Any) -> None:
    for key in path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[path[-1]] = value


def value_at(node: Any, path: tuple) -> Any:
    """The value at ``path`` (keys, and indexes into lists) of a possibly malformed manifest, or None."""
    for key in path:
        if isinstance(key, int):
            node = node[key] if isinstance(node, list) and -len(node) <= key < len(node) else None
        else:
            node = node.get(key) if isinstance(node, dict) else None
    return node


def row_value(manifest: Any, row: Field, role: str | None = None) -> Any:
    """The value of ``row`` (of ``role``'s replica spec) where the manifest's kind holds it: None when absent, or
    when the kind has no such field."""
    kind = _kind(manifest, None)
    return value_at(manifest, manifest_path(row, role, kind.api_version)) if kind.has_row(row, role) else None


def _kind(manifest: Any, kind: JobKind | None) -> JobKind:
    return kind or kind_or_default(manifest.get("apiVersion") if isinstance(manifest, dict) else None)


def replica_specs(manifest: Any, kind: JobKind | None = None) -> Any:
    """The mapping of the replica specs (``spec.mpiReplicaSpecs``) as the manifest has it, whatever its type (None
    when absent); ``kind``: the job's (None: the manifest's apiVersion's, else the default kind's)."""
    return _kind(manifest, kind).replica_layout.specs_in(manifest)


def replica_spec(manifest: Any, role: str, kind: JobKind | None = None) -> dict:
    """The replica spec of ``role`` ("Launcher"/"Worker"), or {} (never raises on malformed input; {} for a kind
    without replica specs)."""
    kind = _kind(manifest, kind)
    node = value_at(manifest, kind.replica_path(role)) if kind.replica_layout.present else None
    return node if isinstance(node, dict) else {}


def pod_spec(manifest: Any, role: str, kind: JobKind | None = None) -> dict:
    """The replica spec of ``role``'s ``template.spec`` (``spec.mpiReplicaSpecs[role].template.spec``), or {}
    (never raises on malformed input)."""
    node = value_at(replica_spec(manifest, role, kind), ("template", "spec"))
    return node if isinstance(node, dict) else {}
