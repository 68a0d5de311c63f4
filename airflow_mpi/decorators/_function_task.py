"""What ``@task.mpi`` and ``@task.horovod`` add to their operators: a Python function as the MPI program.

The function's source and its rendered arguments (upstream XComs included) become the ranks' command
(models/function_call.py) right before submission; the launcher's log streams as for any MPIJob, minus rank
0's marker lines, which carry its return value (models/rank_result.py) and become the task's XCom. Mixed in
before Airflow's DecoratedOperator, as cncf.kubernetes' ``@task.kubernetes`` mixes it into its pod operator.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from airflow.providers.common.compat.sdk import TaskDecorator, task_decorator_factory

from airflow_mpi.models.errors import ErrorList, MPIJobValidationError
from airflow_mpi.models.function_call import (
    ENCODED_FROM,
    check_function,
    check_source,
    pickle_arguments,
    rank_command,
)
from airflow_mpi.models.rank_result import hide_result_lines, parse_result
from airflow_mpi.operators._params import is_unrendered
from airflow_mpi.operators._redaction import redacted_yaml
from airflow_mpi.version_compat import AIRFLOW_V_3_0_PLUS, AirflowException, AirflowFailException

# Parameters of the operators that the decorated function replaces.
REPLACED = ("program", "command", "args")
NEVER_STARTED = (
    "Rank 0 never started the function: the ranks could not run {python!r} (an image without Python 3? "
    "`python=` names the interpreter) or mpirun could not start them; the launcher's log above says which"
)


def function_task_kwargs(decorator: str, python: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The operator's keyword arguments for a decorated function, checked.

    The concrete operators' ``__init__`` calls this (Airflow 3 wraps only operator classes' ``__init__``);
    attributes can be set only once BaseOperator.__init__ ran, so ``python`` travels as the placeholder program.
    """
    for name in REPLACED:
        if name in kwargs:
            raise MPIJobValidationError(name, kwargs[name], f"does not apply to {decorator}: the function is the program")
    if kwargs.get("get_logs") is False:
        raise MPIJobValidationError("get_logs", False, f"{decorator} reads rank 0's return value from the launcher log")
    if not isinstance(python, str) or not python:
        raise MPIJobValidationError("python", python, "must name the ranks' Python interpreter (e.g. python3)")
    return {**kwargs, "program": [python]}


class FunctionTaskMixin:
    """The decorated function runs on every rank; rank 0's return value is the task's XCom."""

    custom_operator_name: str
    captures_result = True
    runtime_only_fields = ("op_args", "op_kwargs")  # upstream XComs: left out of an offline rendering (render.py)
    shallow_copy_attrs = ("python_callable",)

    # ------------------------------------------------------------------ the ranks' command
    def _validate_at_parse_time(self) -> None:
        """The function must travel as source; literal arguments must pickle: an import error naming them."""
        self.python: str = self.program[0]
        self._result_lines: list[str] = []
        reasons = check_function(self.python_callable, self.custom_operator_name)
        try:
            self._source = self.get_python_source()
        except (OSError, TypeError) as err:
            reasons.append(f"has no source to send to the ranks ({err})")
        else:
            reasons += [r for r in (check_source(self._source, self.python_callable.__name__),) if r]
        if reasons:
            raise MPIJobValidationError("python_callable", self.python_callable.__name__, "; ".join(reasons))
        self.program = self._rank_program()
        super()._validate_at_parse_time()

    def _rank_program(self) -> list[str]:
        """The ranks' command for the current arguments (those still unknown, at parse time, are left out)."""
        args, kwargs = self.op_args, self.op_kwargs
        if is_unrendered(args) or is_unrendered(kwargs):
            args, kwargs = (), {}
        errors = ErrorList()
        arguments = pickle_arguments(errors, args, kwargs)
        errors.raise_if_any()
        return rank_command(self._source, self.python_callable.__name__, arguments, python=self.python)

    def build_manifest(self, context: Any = None) -> dict:
        """As MPIJobOperator's, the ranks' command made from the arguments as they are now (rendered: upstream
        XComs are values; not yet, offline: left out)."""
        self.program = self._rank_program()
        return super().build_manifest(context)

    def _log_manifest(self, manifest: dict) -> None:
        """The manifest without the encoded function and arguments (long, and the arguments may be private)."""
        encoded = set(self.program[ENCODED_FROM:])
        self.log.info("MPIJob manifest:\n%s", redacted_yaml(_abridged(copy.deepcopy(manifest), encoded)))

    # ------------------------------------------------------------------ running
    def execute(self, context: Any) -> Any:
        self._result_lines = []
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any], job_try_number: int | None = None) -> Any:
        self._result_lines = []
        value = super().execute_complete(context, event, job_try_number)
        if AIRFLOW_V_3_0_PLUS:  # as DecoratedOperator.execute does (multiple_outputs, assets)
            return self._handle_output(return_value=value)
        return self._handle_output(return_value=value, context=context, xcom_push=self.xcom_push)

    def _launcher_log(self) -> Callable[[str], None]:
        return hide_result_lines(self.log.info, self._result_lines)

    def _finish(self, payload: dict[str, Any]) -> Any:
        """Clean up and raise as for any MPIJob; on success, rank 0's return value."""
        result = parse_result([*(payload.get("result_lines") or []), *self._result_lines])
        try:
            super()._finish(payload)
        except AirflowException as err:
            if result.started or payload.get("status") != "failed":
                raise
            raise type(err)(f"{err}. {NEVER_STARTED.format(python=self.python)}") from err
        job = f"MPIJob {payload.get('namespace')}/{payload.get('name')} succeeded, but"
        if result.error:
            raise AirflowFailException(f"{job} {result.error} (rank 0's log is above)")
        if not result.has_value:
            raise AirflowFailException(f"{job} rank 0 reported no return value (its log is above)")
        return result.value


def _abridged(node: Any, encoded: set[str]) -> Any:
    """``node`` with the strings of ``encoded`` replaced by their length."""
    if isinstance(node, str) and node in encoded:
        return f"<{len(node)} characters: the function and its arguments, encoded>"
    if isinstance(node, list):
        return [_abridged(v, encoded) for v in node]
    if isinstance(node, Mapping):
        return {k: _abridged(v, encoded) for k, v in node.items()}
    return node


def function_task_decorator(
    operator_class: type, python_callable: Callable | None, multiple_outputs: bool | None, kwargs: dict[str, Any]
) -> TaskDecorator:
    """The TaskFlow decorator of a FunctionTaskMixin operator (as cncf.kubernetes' kubernetes_task)."""
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=operator_class,
        **kwargs,
    )
