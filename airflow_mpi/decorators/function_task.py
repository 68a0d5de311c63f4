"""What ``@task.mpi`` and ``@task.horovod`` add to their operators: a Python function as the MPI program.

The function's source and its rendered arguments (upstream XComs included), with a nonce made for this submission,
go into a Secret created right after the MPIJob, owned by it and mounted where the ranks run
(function_task/function_call.py); the ranks' command only names the mounted files. The launcher's log streams as for
any MPIJob, minus rank 0's marker lines of that nonce, which carry its return value (function_task/rank_result.py)
and become the task's XCom (also after a triggerer failover: ``_result``). Mixed in before Airflow's
DecoratedOperator, as cncf.kubernetes' ``@task.kubernetes`` mixes it into its pod operator.

Job first, then its Secret: the Secret names its owner by uid, which exists only once the job does, and the role may
only create secrets (no patch to add the owner later, which would let it rewrite any Secret of the namespace). A
Secret made first, owned by nothing, would outlive a try that ends before the job, with the function and its
arguments, where nobody could find or delete it. No order is without a window, so each one is closed where it can
be: the job is recorded (operators/job_record.py) before it is created, so that the listener and the sweeps find it
whatever happens next; a try that finds its task instance's job without its Secret replaces it
(operators/submission.py: the Secret cannot be made again, it holds the nonce of the try that made the job); a
Secret that could not be made deletes the job again, and if that delete fails too the job stays recorded.

Rank 0 signs its value with the submission's nonce (function_task/rank_result.py). A later try follows an earlier
try's job only when it holds that key: kept with the job's uid in Airflow 3.3+'s task state store; elsewhere the
job is replaced at once (``_followable``) rather than followed to an end whose value this try could not verify.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from airflow.providers.common.compat.sdk import DecoratedOperator, TaskDecorator, task_decorator_factory

from airflow_mpi.jobspec.errors import ErrorList, MPIJobValidationError
from airflow_mpi.function_task.function_call import (
    call_secret_data, call_secret_name, check_function, check_source, mount_call_secret, pickle_arguments, rank_command,
)
from airflow_mpi.function_task.rank_result import (
    RESULT_NONCE_ANNOTATION, RankResult, ResultCollector, hide_result_lines, nonce_digest, parse_result,
    result_digest_of,
)
from airflow_mpi.jobspec.status import job_state
from airflow_mpi.operators.job_record import record_result_key, recorded_result_key
from airflow_mpi.operators.submission import dropped_without_call_secret, failure_text, replace
from airflow_mpi.operators.task_params import is_unrendered
from airflow_mpi.version_compat import AIRFLOW_V_3_0_PLUS, AirflowException, AirflowFailException

# Parameters of the operators that the decorated function replaces.
REPLACED = ("program", "command", "args")
UNVERIFIABLE = (
    "this try cannot verify rank 0's return value: MPIJob {} is an earlier try's submission, and the key its rank 0 "
    "signs the value with (that try's nonce) is held only by that try and the job's call Secret"
)
NEVER_STARTED = (
    "Rank 0 never started the function: the ranks could not run {python!r} (an image without Python 3? "
    "`python=` names the interpreter) or mpirun could not start them; the launcher's log above says which"
)


def function_task_kwargs(decorator: str, python: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The operator's keyword arguments for a decorated function, checked; ``python`` travels as the placeholder
    program (attributes can be set only once BaseOperator.__init__ ran)."""
    for name in REPLACED:
        if name in kwargs:
            reason = f"does not apply to {decorator}: the function is the program"
            raise MPIJobValidationError(name, kwargs[name], reason)
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
        self._nonce: str | None = None  # of this try's submission (build_manifest)
        self._key: str | None = None  # the nonce of the followed job's submission, when this try made it
        self._adopted = False  # the followed job is an earlier try's submission (this try lacks its key)
        self._collector = ResultCollector(None)  # rank 0's marker lines of the wait (sync path, drain)
        self._event_result: RankResult | None = None  # what the trigger read (deferrable path)
        self._call_secret: tuple[str, dict[str, str]] | None = None
        self._context: Any = None  # of the last build_manifest: where the job is recorded
        reasons = check_function(self.python_callable, self.custom_operator_name)
        try:
            self._source = self.get_python_source()
        except (OSError, TypeError) as err:
            reasons.append(f"has no source to send to the ranks ({err})")
        else:
            reasons += [r for r in (check_source(self._source, self.python_callable.__name__),) if r]
        if reasons:
            raise MPIJobValidationError("python_callable", self.python_callable.__name__, "; ".join(reasons))
        self._arguments()
        self.program = rank_command(python=self.python)
        super()._validate_at_parse_time()

    def _arguments(self) -> bytes:
        """The arguments as they are now, pickled (those still unknown, at parse time, are left out)."""
        args, kwargs = self.op_args, self.op_kwargs
        if is_unrendered(args) or is_unrendered(kwargs):
            args, kwargs = (), {}
        errors = ErrorList()
        arguments = pickle_arguments(errors, args, kwargs)
        errors.raise_if_any()
        return arguments

    def build_manifest(self, context: Any = None) -> dict:
        """As MPIJobOperator's, with a fresh nonce and the call's Secret (made from the arguments as they are now:
        rendered, upstream XComs are values; offline, they are left out) mounted into the pods. The Secret itself is
        created with the job (``_create``); one too large is refused here, before anything is created."""
        self._context = context
        nonce = self._nonce = secrets.token_urlsafe(24)
        data = call_secret_data(self._source, self.python_callable.__name__, self._arguments(), nonce)
        manifest = super().build_manifest(context)
        digest = nonce_digest(nonce)
        manifest["metadata"].setdefault("annotations", {})[RESULT_NONCE_ANNOTATION] = digest
        secret_name = call_secret_name(manifest["metadata"]["name"], digest)
        self._call_secret = (secret_name, data)
        return mount_call_secret(manifest, secret_name)

    def _create(self, manifest: dict) -> dict:
        """Create the job, then its call's Secret, owned by it (module docstring: why in this order). The job was
        recorded first (``execute``), so that a try ending before the Secret leaves a job the next try and the sweeps
        find."""
        namespace = manifest["metadata"]["namespace"]
        job = super()._create(manifest)
        if result_digest_of(job) != result_digest_of(manifest):  # adopted: a job of an earlier submission
            if self._followable(job) is None:
                return self._create(manifest)
            return job
        secret, data = self._call_secret
        namespace = job["metadata"].get("namespace") or namespace
        try:
            self.hook.create_owned_secret(secret, namespace, data, job)
        except Exception as err:
            self._drop(job, namespace, f"Could not create Secret {namespace}/{secret}, which carries the function "
                                       f"and its arguments to the ranks ({failure_text(err)})", err)
        return job

    def _drop(self, job: dict, namespace: str, failure: str, err: Exception) -> None:
        """Delete a job whose Secret could not be made and fail the task; should the delete fail too, the job
        stays recorded: the next try replaces it (submission.py), the sweeps delete it once the task instance ended."""
        name = job["metadata"]["name"]
        try:
            self.hook.delete_mpijob(name, namespace, uid=job["metadata"].get("uid"))
        except Exception as delete_err:
            raise AirflowException(
                f"{failure}; deleting MPIJob {namespace}/{name} again failed too ({failure_text(delete_err)}). Its "
                "pods cannot start; it is recorded as this task instance's job: the next try replaces it, and the "
                "orphan sweep deletes it once the task instance has ended"
            ) from err
        raise AirflowFailException(
            f"{failure}; MPIJob {name} was deleted again. The workers' role needs `create` on secrets "
            "(deploy/rbac.yaml)"
        ) from err

    def _key_of(self, job: dict) -> str | None:
        """The key ``job``'s rank 0 signs its value with, when this try holds it: this try's nonce for its own
        submission; for an earlier try's, the key that try kept for that very job (its uid) in the task state store
        (Airflow 3.3+). Only the try that made a job and the job's call Secret hold it otherwise."""
        digest = result_digest_of(job)
        if self._nonce is not None and digest == nonce_digest(self._nonce):
            return self._nonce
        kept = recorded_result_key(self._context, (job.get("metadata") or {}).get("uid"))
        return kept if kept is not None and digest == nonce_digest(kept) else None

    def _followable(self, job: dict) -> dict | None:
        """An earlier try's job is followed only when this try can verify its rank 0's value; otherwise it is
        replaced at once (not followed to its end and failed there): a new submission is a value this try can trust.
        A live one without its call Secret (its try ended between the two creates) is replaced too: its pods could
        never start.
        """
        if not job_state(job).terminal and dropped_without_call_secret(self.hook, self.log, job):
            return None
        if self._key_of(job) is not None:
            return job
        replace(self.hook, self.log, job, "it is an earlier try's submission, and this try does not hold the key "
                                          "its rank 0 signs its return value with (kept from try to try only in "
                                          "Airflow 3.3+'s task state store)")
        return None

    def _attached(self, job: dict) -> None:
        """The key of the followed job (``_key_of``), kept for a later try where the task state store is."""
        self._key = self._key_of(job)
        self._adopted = self._key is None
        if self._key is not None:
            record_result_key(self._context, (job.get("metadata") or {}).get("uid"), self._key)
        self._collector = ResultCollector(self._key, self.log.info)

    def _result_key(self) -> str | None:
        return self._key

    # ------------------------------------------------------------------ running
    def execute(self, context: Any) -> Any:
        self._event_result = None
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any], job_try_number: int | None = None) -> Any:
        self._collector = ResultCollector(None, self.log.info)  # the drain: the event carries the result
        self._event_result = RankResult.from_dict(event["result"]) if event.get("result") else None
        value = super().execute_complete(context, event, job_try_number)
        if AIRFLOW_V_3_0_PLUS:  # as DecoratedOperator.execute does (multiple_outputs, assets)
            return self._handle_output(return_value=value)
        return self._handle_output(return_value=value, context=context, xcom_push=self.xcom_push)

    def _launcher_log(self) -> Callable[[str], None]:
        return hide_result_lines(self.log.info, self._collector)

    def _result(self, payload: dict[str, Any]) -> RankResult:
        """Rank 0's result: the trigger's (its event), else the wait's collector's; when a succeeded job's wait saw
        no complete value (a worker resumed past the marker lines), from the launcher's whole log, read once."""
        if self._event_result is not None:
            return self._event_result
        result = self._collector.result()
        if payload.get("status") != "success" or self._collector.complete:
            return result
        if self._key is None:
            return RankResult(started=result.started, error=UNVERIFIABLE.format(payload.get("name")) if self._adopted
                              else None)
        self.log.info("Rank 0's return value was not among the lines this wait read: reading the launcher log")
        try:
            return parse_result(self.hook.launcher_log(payload["name"], payload["namespace"]), self._key)
        except Exception as err:  # the cleanup below must run whatever happens here
            return RankResult(started=result.started, error=f"its launcher log could not be read back for rank "
                                                            f"0's return value ({type(err).__name__}: {err})")

    def _finish(self, payload: dict[str, Any]) -> Any:
        """Clean up and raise as for any MPIJob; on success, rank 0's return value."""
        result = self._result(payload)  # before the cleanup deletes the launcher
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


def function_task_operator(operator: type, decorator: str) -> type:
    """``operator`` running the function ``decorator`` decorates (subclass it to name the class).

    Its template fields are the operator's but those the function replaces and ``get_logs`` (which must stay True,
    checked when the task is made), plus the function's arguments. Its ``__init__`` is its own: Airflow 3 wraps only
    operator classes' ``__init__`` (default_args, the upstream XComs of the arguments).
    """
    fixed = (*REPLACED, "get_logs")

    class FunctionTaskOperator(FunctionTaskMixin, DecoratedOperator, operator):
        custom_operator_name = decorator
        template_fields = ("op_args", "op_kwargs", *(f for f in operator.template_fields if f not in fixed))
        template_fields_renderers = {**operator.template_fields_renderers, "op_args": "py", "op_kwargs": "py"}

        def __init__(self, *, python: str = "python3", **kwargs: Any) -> None:
            super().__init__(**function_task_kwargs(decorator, python, kwargs))

    return FunctionTaskOperator


def function_task_decorator(
    operator_class: type, python_callable: Callable | None, multiple_outputs: bool | None, kwargs: dict[str, Any]
) -> TaskDecorator:
    """The TaskFlow decorator of a FunctionTaskMixin operator (as cncf.kubernetes' kubernetes_task)."""
    return task_decorator_factory(
        python_callable=python_callable, multiple_outputs=multiple_outputs, decorated_operator_class=operator_class,
        **kwargs,
    )
