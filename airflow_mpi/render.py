"""Print the MPIJob a DAG task would submit, as YAML, offline: no task instance, no cluster, no database.

    python -m airflow_mpi.render dags/mpi_pi.py pi --param workers=4
    airflow-mpi-render dags/mpi_pi.py pi            (the same, as an installed console script)

The DAG file is parsed as the dag-processor parses it; the task's templated parameters are rendered with the DAG's
Params (``--param NAME=VALUE`` overrides one; VALUE is read as JSON, else as text) and a placeholder run (``--run-id``,
which the identity labels then name). The namespace is the parameter's, else the base manifest's, else the
connection's only when one is configured. The manifest is validated exactly as at run time; a value that cannot be
used is reported with its parameter's name (exit status 1). Secret-looking values are masked, as in the task log.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import json
import sys
from typing import Any

from airflow_mpi.jobspec import MPIJobValidationError
from airflow_mpi.operators.redaction import redacted_yaml

OFFLINE_RUN_ID = "offline"


class RenderError(Exception):
    """The DAG or the task cannot be rendered (not an invalid parameter: that is MPIJobValidationError)."""


def _dagbag(dag_file: str) -> Any:
    try:
        from airflow.dag_processing.dagbag import DagBag  # Airflow 3
    except ImportError:  # Airflow 2.11
        from airflow.models.dagbag import DagBag  # type: ignore[no-redef]
    kwargs: dict[str, Any] = {}
    if "include_examples" in inspect.signature(DagBag.__init__).parameters:
        kwargs["include_examples"] = False
    return DagBag(dag_folder=dag_file, **kwargs)


def _find_task(dag_file: str, task_id: str, dag_id: str | None) -> tuple[Any, Any]:
    bag = _dagbag(dag_file)
    if bag.import_errors:
        raise RenderError("; ".join(f"{path}: {error}" for path, error in bag.import_errors.items()))
    dags = [d for d in bag.dags.values() if (dag_id is None or d.dag_id == dag_id) and task_id in d.task_dict]
    if len(dags) != 1:
        raise RenderError(
            f"{len(dags)} DAGs in {dag_file} have a task {task_id!r} (DAGs there: {sorted(bag.dags)}); "
            "choose one with --dag-id"
        )
    dag, task = dags[0], dags[0].task_dict[task_id]
    if not callable(getattr(task, "build_manifest", None)):
        raise RenderError(f"task {task_id!r} is a {type(task).__name__}, not an MPIJobOperator")
    return dag, task


def render(
    dag_file: str, task_id: str, *, dag_id: str | None = None, params: dict[str, Any] | None = None,
    run_id: str = OFFLINE_RUN_ID,
) -> dict:  # fmt: skip
    """The validated manifest of ``task_id`` in ``dag_file`` (see the module docstring)."""
    dag, task = _find_task(dag_file, task_id, dag_id)
    task = copy.deepcopy(task)  # rendering replaces the template fields' values
    runtime_only = set(getattr(task, "runtime_only_fields", ()))  # a decorated function's upstream XComs
    task.template_fields = tuple(f for f in task.template_fields if f not in runtime_only)
    dag_params = copy.deepcopy(dag.params)
    try:
        dag_params.update(params or {})
        resolved_params = dict(dag_params.validate())
        task.render_template_fields({"params": resolved_params, "run_id": run_id, "dag": dag, "task": task})
    except Exception as exc:  # a Param out of bounds, a template needing a real run (ti, XCom, ...)
        raise RenderError(
            f"cannot render {dag.dag_id}.{task_id} offline: {type(exc).__name__}: {exc}"
        ) from exc
    return task.build_manifest({"run_id": run_id})


def _param(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE")
    try:
        return name, json.loads(value)
    except ValueError:
        return name, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="airflow-mpi-render", description=__doc__.split("\n\n")[0])
    parser.add_argument("dag_file", help="the DAG file (a .py file, or a folder of them)")
    parser.add_argument("task_id")
    parser.add_argument("--dag-id", help="when several DAGs have a task of that id")
    parser.add_argument("--param", action="append", type=_param, default=[], metavar="NAME=VALUE")
    parser.add_argument("--run-id", default=OFFLINE_RUN_ID, help="run id the identity labels name")
    args = parser.parse_args(argv)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # Airflow's own log lines stay out of the YAML
            manifest = render(
                args.dag_file, args.task_id, dag_id=args.dag_id, params=dict(args.param), run_id=args.run_id
            )
    except (RenderError, MPIJobValidationError) as exc:
        print(f"airflow-mpi-render: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(redacted_yaml(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
