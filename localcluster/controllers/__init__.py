"""The controllers a local cluster can run beside its control plane, by name (``up --controller NAME``).

A new controller is one class here (a ``Controller`` subclass in a module of its own, listed in ``REGISTRY``)
plus, when its binary is not part of the main build, its recipe in ``localcluster/build_recipes.py`` (``ADDONS``).
``REGISTRY``'s order is the start order (and reversed, the stop order).
"""

from __future__ import annotations

from collections.abc import Iterable

from .base import Controller
from .kueue import Kueue
from .mpi_operator import MpiOperator
from .training_operator import TrainingOperator

REGISTRY: dict[str, type[Controller]] = {c.name: c for c in (MpiOperator, Kueue, TrainingOperator)}


def select(names: Iterable[str], api_version: str) -> tuple[str, ...]:
    """``names`` checked against the registry and ``api_version``, without repeats, in start order."""
    wanted = set(names)
    unknown = sorted(wanted - set(REGISTRY))
    if unknown:
        raise ValueError(f"unknown controller(s) {unknown}; known: {sorted(REGISTRY)}")
    for name in wanted:
        versions = REGISTRY[name].api_versions
        if versions is not None and api_version not in versions:
            raise ValueError(
                f"controller {name} needs api_version {' or '.join(versions)}, not {api_version!r}"
            )
    return tuple(n for n in REGISTRY if n in wanted)


def addons(names: Iterable[str]) -> tuple[str, ...]:
    """The add-on builds (``localcluster.build.ADDONS``) that the controllers ``names`` run from, in registry
    order, without repeats."""
    wanted = set(names)
    return tuple(dict.fromkeys(c.addon for n, c in REGISTRY.items() if n in wanted and c.addon))


__all__ = ["REGISTRY", "Controller", "Kueue", "MpiOperator", "TrainingOperator", "addons", "select"]
