"""``@task.horovod``: a Python function run by ``horovodrun`` on every rank; rank 0's return value is the XCom.

Takes HorovodJobOperator's parameters (min_np, max_np, log_level, ... and MPIJobOperator's) but ``program``:
the function is the program (horovodrun prefixes every output line with its rank). ``python`` names the ranks'
Python (default ``python3``), which needs horovod installed for ``import horovod``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow.providers.common.compat.sdk import TaskDecorator

from airflow_mpi.decorators.function_task import function_task_decorator, function_task_operator
from airflow_mpi.operators.horovod import HorovodJobOperator, horovodrun_launch

_MADE = function_task_operator(HorovodJobOperator, "@task.horovod", horovodrun_launch)


class _HorovodDecoratedOperator(_MADE):  # type: ignore[misc,valid-type]  # a class made by a function
    """HorovodJobOperator running the decorated function."""


def horovod_task(
    python_callable: Callable | None = None, multiple_outputs: bool | None = None, **kwargs: Any
) -> TaskDecorator:
    """Run the decorated function with horovodrun on every rank (kwargs: HorovodJobOperator's parameters)."""
    return function_task_decorator(_HorovodDecoratedOperator, python_callable, multiple_outputs, kwargs)
