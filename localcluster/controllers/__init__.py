"""The controllers a local cluster can run beside its control plane, by name (``up --controller NAME``).

A new controller is one class here (a ``Controller`` subclass in a module of its own, listed in ``REGISTRY``)
plus, when its binary is not part of the main build, its recipe in ``localcluster/build_recipes.py`` (``ADDONS``).
``REGISTRY``'s order is the start order (and reversed, the stop order); a controller that ``requires`` others
comes after them, and choosing it chooses them too (``trainer``: ``jobset``).
"""

from __future__ import annotations

from collections.abc import Iterable

from .base import Controller
from .jobset import JobSet
from .kueue import Kueue
from .mpi_operator import MpiOperator
from .trainer import Trainer
from .training_operator import TrainingOperator

REGISTRY: dict[str, type[Controller]] = {
    c.name: c for c in (MpiOperator, Kueue, TrainingOperator, JobSet, Trainer)
}


def _with_requirements(names: Iterable[str]) -> set[str]:
    """``names`` and the controllers they require, transitively (unknown names kept, for the caller to refuse)."""
    wanted: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo += REGISTRY[name].requires if name in REGISTRY else ()
    return wanted


def select(names: Iterable[str], api_version: str) -> tuple[str, ...]:
    """``names`` and what they require, checked against the registry and ``api_version``, without repeats, in
    start order."""
    wanted = _with_requirements(names)
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
    """The add-on builds (``localcluster.build.ADDONS``) that the controllers ``names`` (and those they require)
    run from, in registry order, without repeats."""
    wanted = _with_requirements(names)
    return tuple(dict.fromkeys(c.addon for n, c in REGISTRY.items() if n in wanted and c.addon))


__all__ = [
    "REGISTRY",
    "Controller",
    "JobSet",
    "Kueue",
    "MpiOperator",
    "Trainer",
    "TrainingOperator",
    "addons",
    "select",
]
