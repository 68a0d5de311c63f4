"""Deep merge of parameters onto a user's base manifest, and loading that base manifest.

A base manifest lets users keep cluster specifics (sidecars, volumes, tolerations) in YAML while DAG parameters set
what varies per task. Lists of named objects (containers, env, volumes, ...) are merged by name so a parameter can
change one container without restating the others.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from copy import deepcopy
from pathlib import Path
from typing import Any

import yaml

from airflow_mpi.jobspec.errors import MPIJobValidationError

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def _named(items: Any) -> bool:
    return (
        isinstance(items, list)
        and bool(items)
        and all(isinstance(i, Mapping) and isinstance(i.get("name"), str) for i in items)
    )


def _merge_named(base: list, override: list) -> list:
    """Each override item merges into the first not yet merged base item of its name, else is appended. Duplicate
    names (invalid in Kubernetes) are kept rather than dropped, so validation reports them."""
    merged = [deepcopy(item) for item in base]
    taken: set[int] = set()
    for item in override:
        index = next(
            (i for i, old in enumerate(base) if old["name"] == item["name"] and i not in taken), None
        )
        if index is None:
            merged.append(deepcopy(item))
        else:
            taken.add(index)
            merged[index] = deep_merge(base[index], item)
    return merged


def deep_merge(base: Any, override: Any) -> Any:
    """``override`` merged onto ``base`` (neither is modified).

    Dicts merge key by key; a ``None`` in ``override`` keeps the base value. Two lists of dicts that all carry a
    "name" merge item by item by name (base order, new names appended). Anything else, including an empty list, is
    replaced by ``override``.
    """
    if override is None:
        return deepcopy(base)
    if isinstance(override, Mapping):
        merged = {k: deepcopy(v) for k, v in base.items()} if isinstance(base, Mapping) else {}
        for key, value in override.items():
            if value is not None:
                merged[key] = deep_merge(merged.get(key), value)
        return merged
    if _named(base) and _named(override):
        return _merge_named(base, override)
    return deepcopy(override)


def load_base_manifest(src: Mapping | str | os.PathLike) -> dict:
    """A base manifest from a dict, YAML or JSON text, or a path to a .yaml/.yml/.json file. A one-line string ending
    in one of those suffixes is taken as a path (and must exist): a mistyped file name fails loudly instead of being
    parsed as a YAML scalar."""
    if isinstance(src, Mapping):
        return deepcopy(dict(src))
    if isinstance(src, os.PathLike) or (
        isinstance(src, str) and "\n" not in src.strip() and src.strip().lower().endswith(MANIFEST_SUFFIXES)
    ):
        path = Path(os.fspath(src).strip())
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise _error(os.fspath(src), f"cannot read file: {exc.strerror or exc}") from exc
        return _parse(text, os.fspath(src), as_json=path.suffix.lower() == ".json")
    if isinstance(src, str):
        return _parse(src, src, as_json=src.lstrip().startswith("{"))
    raise _error(src, f"must be a dict, YAML/JSON text or a file path, not {type(src).__name__}")


def _parse(text: str, origin: str, *, as_json: bool) -> dict:
    try:
        documents = [json.loads(text)] if as_json else [d for d in yaml.safe_load_all(text) if d is not None]
    except (ValueError, yaml.YAMLError) as exc:
        raise _error(origin, f"is not valid {'JSON' if as_json else 'YAML'}: {exc}") from exc
    if len(documents) > 1:
        raise _error(origin, f"holds {len(documents)} YAML documents; expected one MPIJob")
    data = documents[0] if documents else None
    if not isinstance(data, dict):
        raise _error(origin, f"must be a mapping (an MPIJob object), not {type(data).__name__}")
    return data


def _error(value: Any, reason: str) -> MPIJobValidationError:
    return MPIJobValidationError("base_manifest", value, reason)
