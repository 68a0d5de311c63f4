"""``@task.mpi``: a Python function run on every rank of an MPIJob; rank 0's return value is the XCom.

Takes MPIJobOperator's parameters (workers, slots_per_worker, image, resources, base_manifest, deferrable,
...) but ``program``/``command``/``args``: the function is the program. ``python`` names the ranks' Python
(default ``python3``). Every output line of the launcher's log carries its rank (mpirun's tag option).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from airflow.providers.common.compat.sdk import TaskDecorator

from airflow_mpi.decorators.function_task import function_task_decorator, function_task_operator
from airflow_mpi.jobspec.commands import Mpirun
from airflow_mpi.jobspec.errors import ErrorList
from airflow_mpi.jobspec.spec import LauncherCommand
from airflow_mpi.operators.mpijob import MPIJobOperator


def tagged_mpirun(errors: ErrorList, values: Mapping[str, Any]) -> LauncherCommand:
    """mpirun with every output line tagged with its rank (rank 0's result lines are told apart by it)."""
    return Mpirun(values["program"], values.get("mpirun_args"), tag_output=True, connect_by_ip=True)


class _MPIDecoratedOperator(function_task_operator(MPIJobOperator, "@task.mpi", tagged_mpirun)):  # type: ignore[misc]  # made by a function
    """MPIJobOperator running the decorated function."""


def mpi_task(
    python_callable: Callable | None = None, multiple_outputs: bool | None = None, **kwargs: Any
) -> TaskDecorator:
    """Run the decorated function on every rank of an MPIJob (kwargs: MPIJobOperator's parameters)."""
    return function_task_decorator(_MPIDecoratedOperator, python_callable, multiple_outputs, kwargs)
