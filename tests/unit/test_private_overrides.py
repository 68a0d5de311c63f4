"""No class of airflow_mpi (a mixin's composed class included) overrides a private method of a class of
another package (issue 33): behaviour is changed through public seams (operators/callbacks.py,
hooks/protocols.py), not by redefining another package's ``_method``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import airflow_mpi


def package(module: str) -> str:
    """``airflow_mpi.<package>``; for other code its top four dotted names (a provider's package)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "airflow_mpi" else ".".join(parts[:4])


def private_overrides(cls: type) -> list[str]:
    """``cls``'s private methods, defined in airflow_mpi, that a class of another package also defines. Sunder
    names (``_missing_``, ``_generate_next_value_``) are the enum module's documented hooks, not private methods."""
    found = []
    for name in {
        n
        for c in cls.__mro__
        for n in vars(c)
        if n.startswith("_") and not n.startswith("__") and not n.endswith("_")
    }:
        owners = [c for c in cls.__mro__ if name in vars(c)]
        value = vars(owners[0])[name]
        if not owners[0].__module__.startswith("airflow_mpi") or not (
            inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod, property))
        ):
            continue
        other = next((c for c in owners[1:] if package(c.__module__) != package(owners[0].__module__)), None)
        if other is not None:
            found.append(f"{owners[0].__name__}.{name} overrides {other.__module__}.{other.__name__}")
    return found


def test_no_class_overrides_a_private_method_of_another_package():
    found = []
    for info in pkgutil.walk_packages(airflow_mpi.__path__, "airflow_mpi."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__:
                found += private_overrides(cls)
    assert found == []


def test_the_check_finds_an_override_of_the_operators_private_method():
    from airflow_mpi.operators import MPIJobOperator

    class Mixin:
        def _create(self, manifest):  # what the decorators did before the callbacks
            return manifest

    Mixin.__module__ = "airflow_mpi.decorators.example"
    composed = type("Composed", (Mixin, MPIJobOperator), {"__module__": "airflow_mpi.decorators.example"})
    expected = "Mixin._create overrides airflow_mpi.operators.mpijob.MPIJobOperator"
    assert private_overrides(composed) == [expected]
