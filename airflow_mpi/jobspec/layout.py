"""Spec -> the manifest its fields make, for either API version: layout only (which value wins: precedence.py).

Every field the spec sets is written at its row's path (fields.py), in row order: the manifest's key order. None and
empty mappings are left out, so that merged onto a base manifest they override nothing.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from airflow_mpi.jobspec.fields import FIELDS, REPLICA, MPIJobSpec, holder, manifest_path
from airflow_mpi.jobspec.spec import KIND, LAUNCHER_REPLICA, WORKER_REPLICA


def render(spec: MPIJobSpec) -> dict:
    """The manifest of the fields ``spec`` sets; each role's main container is named by its ``container_name``."""
    manifest: dict[str, Any] = {"apiVersion": spec.api_version, "kind": KIND}
    for role in (None, LAUNCHER_REPLICA, WORKER_REPLICA):
        for row in FIELDS:
            if (row.owner == REPLICA) != (role is not None) or not row.path or row.nested:
                continue
            obj = holder(spec, row, role)
            value = None if obj is None or row.api not in (None, spec.api_version) else getattr(obj, row.name)
            if value is not None and row.to_manifest is not None:
                value = row.to_manifest(value)
            if value is not None and value != {}:
                _put(manifest, manifest_path(row, role, spec.api_version), deepcopy(value))
        if role is not None:
            pod = pod_spec(manifest, role)
            pod["containers"] = [pod["containers"][0]]
    return manifest


def _put(node: dict, path: tuple, value: Any) -> None:
    *parents, last = path
    for key in parents:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[last] = value


def pod_spec(manifest: Any, role: str) -> dict:
    """``spec.mpiReplicaSpecs[role].template.spec`` or {} (never raises on malformed input)."""
    node = manifest
    for key in ("spec", "mpiReplicaSpecs", role, "template", "spec"):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}
