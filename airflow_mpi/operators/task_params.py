"""The operators' parameters: the rows of how the task waits (the MPIJob's: jobspec/fields.py), the ``__init__``
signature all the rows make, and the parameters' values, rendered or not, checked under their names.

Non-templated parameters are validated when the DAG is parsed (so a bad value is an import error naming the parameter);
templated ones can only be checked after rendering, so parse-time validation puts a neutral stand-in where a value is
still a template, an XComArg or a template file. build_manifest checks all of them again once Airflow rendered them.
"""

from __future__ import annotations

import inspect
from numbers import Real
from typing import Any

from airflow_mpi.jobspec.coerce import as_bool, as_number
from airflow_mpi.jobspec.errors import ErrorList
from airflow_mpi.jobspec.fields import TASK, Field, parameters
from airflow_mpi.jobspec.naming import TaskIdentity
from airflow_mpi.jobspec.rules import Rule, one_of
from airflow_mpi.operators.finish_action import ACCEPTED, OnFinishAction, as_on_finish_action
from airflow_mpi.version_compat import conf

TEMPLATE_MARKERS = ("{{", "{%", "{#")


def _seconds(optional: bool) -> Rule:
    def problem(value: object) -> str | None:
        if (value is None and optional) or (
            isinstance(value, Real) and type(value) is not bool and float(value) > 0
        ):
            return None
        return "must be a number of seconds > 0" + (" (or None: no limit)" if optional else "")

    return problem


def _boolean(value: object) -> str | None:
    return None if isinstance(value, bool) else "must be a boolean (True or False)"


TASK_FIELDS: tuple[Field, ...] = (
    Field("kubernetes_conn_id", TASK, str, default="kubernetes_default",
          check=lambda v: None if isinstance(v, str) and v else "must be a connection id",
          doc="the `kubernetes` connection to the cluster (docs/guide.md, Connection)"),
    Field("deferrable", TASK, bool, templated=True, coerce=as_bool, check=_boolean,
          default=conf.getboolean("operators", "default_deferrable", fallback=False),
          doc="wait in the triggerer (`\"{{ params.deferrable }}\"`: the trigger form decides)"),
    Field("get_logs", TASK, bool, default=True, templated=True, coerce=as_bool, check=_boolean,
          doc="stream the launcher's log into the task log (`@task.mpi`, `@task.horovod`: always)"),
    Field("poll_interval", TASK, float, default=10.0, templated=True, coerce=as_number, check=_seconds(False),
          doc="seconds between watch renewals / fallback polls"),
    Field("startup_timeout", TASK, float | None, default=120.0, templated=True, coerce=as_number,
          check=_seconds(True),
          doc="seconds (> 0, or `None`: no limit) for the job to get `Created`"),
    Field("schedule_timeout", TASK, float | None, default=300.0, templated=True, coerce=as_number,
          check=_seconds(True),
          doc="seconds (> 0, or `None`) a pod may stay unscheduled or unable to pull its image"),
    Field("queue_timeout", TASK, float | None, default=None, templated=True, coerce=as_number, check=_seconds(True),
          doc="seconds (> 0) the job may wait in a Kueue queue at a stretch before the task fails and the job is "
              "deleted"),
    Field("on_finish_action", TASK, str, default=OnFinishAction.DELETE_SUCCEEDED.value, templated=True,
          coerce=as_on_finish_action, check=one_of(ACCEPTED),
          doc="`keep`, `delete_succeeded`, `delete` (cncf.kubernetes' `keep_pod`, `delete_succeeded_pod`, "
              "`delete_pod` mean the same)"),
    Field("worker_log_tail_lines", TASK, int, default=20, templated=True, coerce=as_number,
          check=lambda v: None if isinstance(v, int) and type(v) is not bool and v >= 0 else "must be an integer >= 0",
          doc="on failure, the last lines of each failed pod's log (read before the clean-up deletes it): the error "
              "quotes up to 10 of them, the task log gets them all; 0: none"),
)  # fmt: skip
TASK_PARAMETERS = parameters(TASK_FIELDS)


def init_signature(fields: dict[str, Field], required: tuple[str, ...] = ()) -> inspect.Signature:
    """The keyword-only ``__init__`` of an operator taking ``fields``: Airflow applies ``default_args`` and checks
    ``.partial()``/``.expand()`` by the names ``inspect.signature`` finds."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for name, row in fields.items():
        default = inspect.Parameter.empty if name in required else row.parameter_default
        annotation = row.type | str if row.coerce is not None else row.type
        annotation = annotation | None if default is None else annotation
        params.append(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        )
    params.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD, annotation=Any))
    return inspect.Signature(params, return_annotation=None)


def is_unrendered(value: Any, template_ext: tuple[str, ...] = ()) -> bool:
    """True for Jinja text, a template file name, or a lazy value (XComArg, ...) at any depth."""
    if isinstance(value, str):
        return any(m in value for m in TEMPLATE_MARKERS) or (
            bool(template_ext) and value.endswith(template_ext)
        )
    if isinstance(value, dict):
        return any(is_unrendered(k, template_ext) or is_unrendered(v, template_ext) for k, v in value.items())
    if isinstance(value, (list, tuple, set)):
        return any(is_unrendered(v, template_ext) for v in value)
    return hasattr(value, "resolve") and not isinstance(value, (int, float, bool))


def typed(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each task setting's rendered text as its type where it is one (the checks report the rest)."""
    return {
        name: row.coerce(ErrorList(), name, value)
        if (row := TASK_PARAMETERS.get(name)) and row.coerce
        else value
        for name, value in values.items()
    }


def parse_time_values(task: Any) -> dict[str, Any]:
    """Every parameter's value, a templated one not rendered yet replaced by its stand-in."""
    values = {name: getattr(task, name) for name in task.parameters}
    for name in task.template_fields:
        if name in values and is_unrendered(values[name], tuple(task.template_ext)):
            row = task.parameters[name]
            values[name] = row.parameter_default if row.stand_in is None else row.stand_in
    return typed(values)


def check_task_parameters(values: dict[str, Any]) -> None:
    """The parameters of how the task waits; raises MPIJobValidationError naming each bad one."""
    errors = ErrorList()
    for name, row in TASK_PARAMETERS.items():
        if row.check is not None and (problem := row.check(values[name])):
            errors.add(name, values[name], problem)
    errors.raise_if_any()


def placeholder_identity(task: Any, run_id: str) -> TaskIdentity:
    """The identity of a task instance that does not exist (parse time, offline rendering)."""
    return TaskIdentity(task.dag_id, task.task_id, run_id)


def try_identity(context: Any, deployment: str) -> TaskIdentity:
    """The identity of the try ``context`` runs, in ``deployment``."""
    ti = context["ti"]
    return TaskIdentity(
        ti.dag_id,
        ti.task_id,
        ti.run_id,
        ti.map_index,
        ti.try_number,
        deployment=deployment,
        task_instance_id=task_instance_id(context),
    )


def task_instance_id(context: Any) -> str:
    """The try's unique id in this deployment's database: Airflow 3's task instance UUID (new for each try);
    on 2.11, which has none, the DAG run's primary key with the task, map index and try (a run deleted and made
    again under the same run id gets a new key)."""
    ti = context["ti"]
    if getattr(ti, "id", None):
        return str(ti.id)
    dag_run = context.get("dag_run") if hasattr(context, "get") else None
    run_key = getattr(dag_run, "id", None) or ti.run_id
    return f"dagrun-{run_key}/{ti.task_id}/{ti.map_index}/try-{ti.try_number}"


def settings_explained(
    settings: dict[str, Any], retries: int, retries_mapped: bool, attempts_per_job: int | None
) -> list[str]:
    """The task log's account of every field's value and source, and of what Airflow retries mean for this job
    (``attempts_per_job``: the launcher attempts one job may make, as its kind counts them; None: not known)."""
    limit = settings["backoff_limit"].value
    lines = [
        "Each field: parameter > base manifest > default: "
        + ", ".join(f"{k}={v}" for k, v in settings.items())
    ]
    per_job = f"up to {attempts_per_job}" if attempts_per_job else "some"
    if retries_mapped:
        lines.append(
            f"Retries: Airflow retries={retries} are mapped onto the MPIJob (runPolicy.backoffLimit={limit}, launcher "
            f"restartPolicy={settings['launcher.restart_policy']}): {per_job} launcher attempts in one MPIJob; "
            "a Failed MPIJob fails the task without further Airflow retries; infrastructure errors stay retryable "
            "and reattach."
        )
    else:
        total = f"up to {attempts_per_job * (retries + 1)}" if attempts_per_job else "an unknown number of"
        lines.append(
            f"Retries: runPolicy.backoffLimit={limit} from the {settings['backoff_limit'].source}; Airflow "
            f"retries={retries} each start a fresh MPIJob ({per_job} launcher attempts each, {total} in total)."
        )
    return lines
