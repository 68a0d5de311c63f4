"""What ``@task.mpi`` and ``@task.horovod`` add to their operators: a Python function as the MPI program.

The function's source and its rendered arguments (upstream XComs included), with a nonce made for this
submission, go into a Secret created right after the MPIJob, owned by it and mounted where the ranks run
(function_task/function_call.py); the ranks' command only names the mounted files. The launcher's log streams
as for any MPIJob, minus rank 0's marker lines of that nonce, which carry its return value
(wait/rank_result_capture.py) and become the task's XCom (also after a triggerer failover:
``FunctionTaskCallbacks.result``). Mixed in before Airflow's DecoratedOperator, as cncf.kubernetes'
``@task.kubernetes`` mixes it into its pod operator; what it adds to a try goes through the operator's public
callbacks (operators/callbacks.py): :class:`FunctionTaskCallbacks`.

Job first, then its Secret: the Secret names its owner by uid, which exists only once the job does, and the role may
only create secrets (no patch to add the owner later, which would let it rewrite any Secret of the namespace). A
Secret made first, owned by nothing, would outlive a try that ends before the job, with the function and its
arguments, where nobody could find or delete it. No order is without a window, so each one is closed where it can
be: the job is recorded (operators/job_record.py) before it is created, so that the listener and the sweeps find it
whatever happens next; a try that finds its task instance's job without its Secret replaces it
(operators/submission.py: the Secret cannot be made again, it holds the nonce of the try that made the job); a
Secret that could not be made deletes the job again, and if that delete fails too the job stays recorded.

Rank 0 signs its value with the submission's nonce (function_task/rank_result.py). A later try follows an
earlier try's job only when it holds that key: kept with the job's uid in Airflow 3.3+'s task state store;
elsewhere the job is replaced at once (``FunctionTaskCallbacks.followable``) rather than followed to an end
whose value this try could not verify.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.common.compat.sdk import DecoratedOperator, TaskDecorator, task_decorator_factory

from airflow_mpi.exceptions import MPIJobError
from airflow_mpi.function_task.function_call import (
    call_secret_data,
    call_secret_name,
    check_function,
    check_source,
    mount_call_secret,
    pickle_arguments,
    rank_command,
)
from airflow_mpi.function_task.rank_result import RESULT_NONCE_ANNOTATION, nonce_digest, result_digest_of
from airflow_mpi.jobspec.errors import ErrorList, MPIJobValidationError
from airflow_mpi.jobspec.kinds import kind_or_default
from airflow_mpi.jobspec.spec import LauncherCommand
from airflow_mpi.jobspec.status import job_state
from airflow_mpi.operators.callbacks import LogSink, MPIJobCallbacks
from airflow_mpi.operators.job_record import record_result_key, recorded_result_key
from airflow_mpi.operators.submission import dropped_without_call_secret, failure_text, replace
from airflow_mpi.operators.task_params import is_unrendered
from airflow_mpi.version_compat import AIRFLOW_V_3_0_PLUS, AirflowException, AirflowFailException
from airflow_mpi.wait.contract import Outcome, WaitResult
from airflow_mpi.wait.rank_result_capture import RankResult, ResultCollector, hide_result_lines, parse_result

if TYPE_CHECKING:
    from airflow_mpi.operators.mpijob import MPIJobOperator

    _MixinBase = DecoratedOperator  # what the mixin extends, for type checkers: it precedes it in the class
else:
    _MixinBase = object

Launch = Callable[[ErrorList, Mapping[str, Any]], LauncherCommand]

# Parameters of the operators that the decorated function replaces.
REPLACED = ("program", "command", "args")
UNVERIFIABLE = (
    "this try cannot verify rank 0's return value: {} {} is an earlier try's submission, and the key its rank 0 "
    "signs the value with (that try's nonce) is held only by that try and the job's call Secret"
)
NEVER_STARTED = (
    "Rank 0 never started the function: the ranks could not run {python!r} (an image without Python 3? "
    "`python=` names the interpreter) or mpirun could not start them; the launcher's log above says which"
)


def function_task_kwargs(decorator: str, python: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The operator's keyword arguments for a decorated function, checked; the program is the ranks' runner of
    the call, started by ``python``."""
    for name in REPLACED:
        if name in kwargs:
            reason = f"does not apply to {decorator}: the function is the program"
            raise MPIJobValidationError(name, kwargs[name], reason)
    if kwargs.get("get_logs") is False:
        raise MPIJobValidationError(
            "get_logs", False, f"{decorator} reads rank 0's return value from the launcher log"
        )
    if not isinstance(python, str) or not python:
        raise MPIJobValidationError(
            "python", python, "must name the ranks' Python interpreter (e.g. python3)"
        )
    return {**kwargs, "program": rank_command(python=python)}


class FunctionTaskCallbacks(MPIJobCallbacks):
    """What a decorated function adds to a try: the call's Secret, rank 0's verified return value.

    ``decorator`` names it in errors, ``python`` is the ranks' interpreter, ``launch`` the launcher command
    (with rank tags: rank 0's marker lines are told apart by them). The state of the try: ``nonce`` (of this
    try's submission), ``key`` (the nonce of the followed job's submission, when this try holds it),
    ``collector`` (rank 0's marker lines of the wait), ``event_result`` (what the trigger read),
    ``call_secret`` (its name and data)."""

    captures_result = True
    operator: Any  # a FunctionTaskMixin operator (DecoratedOperator and MPIJobOperator)

    def __init__(self, decorator: str, python: str, launch: Launch) -> None:
        self.decorator, self.python, self._launch = decorator, python, launch
        self.nonce: str | None = None
        self.key: str | None = None
        self.adopted = False  # the followed job is an earlier try's submission (this try lacks its key)
        self.collector = ResultCollector(None)
        self.event_result: RankResult | None = None
        self.call_secret: tuple[str, dict[str, str]] | None = None
        self.context: Any = None  # of the last build_manifest: where the job is recorded
        self._source = ""

    # ------------------------------------------------------------------ the ranks' command
    def bind(self, operator: Any) -> None:
        """The function must travel as source; literal arguments must pickle: an import error naming them."""
        super().bind(operator)
        reasons = check_function(operator.python_callable, self.decorator)
        try:
            self._source = operator.get_python_source()
        except (OSError, TypeError) as err:
            reasons.append(f"has no source to send to the ranks ({err})")
        else:
            reasons += [r for r in (check_source(self._source, operator.python_callable.__name__),) if r]
        if reasons:
            name = operator.python_callable.__name__
            raise MPIJobValidationError("python_callable", name, "; ".join(reasons))
        self.arguments()

    def launch_command(self, errors: ErrorList, values: Mapping[str, Any]) -> LauncherCommand:
        return self._launch(errors, values)

    def arguments(self) -> bytes:
        """The arguments as they are now, pickled (those still unknown, at parse time, are left out)."""
        args, kwargs = self.operator.op_args, self.operator.op_kwargs
        if is_unrendered(args) or is_unrendered(kwargs):
            args, kwargs = (), {}
        errors = ErrorList()
        arguments = pickle_arguments(errors, args, kwargs)
        errors.raise_if_any()
        return arguments

    def manifest_built(self, manifest: dict, context: Any) -> dict:
        """With a fresh nonce and the call's Secret (made from the arguments as they are now: rendered,
        upstream XComs are values; offline, they are left out) mounted into the pods. The Secret itself is
        created with the job (``job_created``); one too large is refused here, before anything is created."""
        self.context = context
        nonce = self.nonce = secrets.token_urlsafe(24)
        data = call_secret_data(self._source, self.operator.python_callable.__name__, self.arguments(), nonce)
        digest = nonce_digest(nonce)
        manifest["metadata"].setdefault("annotations", {})[RESULT_NONCE_ANNOTATION] = digest
        secret_name = call_secret_name(manifest["metadata"]["name"], digest)
        self.call_secret = (secret_name, data)
        return mount_call_secret(manifest, secret_name)

    def job_created(self, job: dict, manifest: dict) -> dict | None:
        """Create the call's Secret, owned by the job (module docstring: why in this order). The job was
        recorded first (``execute``), so that a try ending before the Secret leaves a job the next try and the
        sweeps find. A job of an earlier submission (adopted by the create) is followed only when
        ``followable``."""
        if result_digest_of(job) != result_digest_of(manifest):  # adopted: a job of an earlier submission
            return self.followable(job)
        assert self.call_secret is not None  # manifest_built made it
        secret, data = self.call_secret
        namespace = job["metadata"].get("namespace") or manifest["metadata"]["namespace"]
        try:
            self.operator.hook.create_owned_secret(secret, namespace, data, job)
        except Exception as err:
            self._drop(
                job,
                namespace,
                f"Could not create Secret {namespace}/{secret}, which carries the function "
                f"and its arguments to the ranks ({failure_text(err)})",
                err,
            )
        return job

    def _drop(self, job: dict, namespace: str, failure: str, err: Exception) -> None:
        """Delete a job whose Secret could not be made and fail the task; should the delete fail too, the job
        stays recorded: the next try replaces it (submission.py), the sweeps delete it once the task instance ended."""
        name = job["metadata"]["name"]
        try:
            self.operator.hook.delete_mpijob(name, namespace, uid=job["metadata"].get("uid"))
        except Exception as delete_err:
            raise AirflowException(
                f"{failure}; deleting {self.kind} {namespace}/{name} again failed too "
                f"({failure_text(delete_err)}). Its pods cannot start; it is recorded as this task instance's job: "
                "the next try replaces it, and the orphan sweep deletes it once the task instance has ended"
            ) from err
        raise AirflowFailException(
            f"{failure}; {self.kind} {name} was deleted again. The workers' role needs `create` on secrets "
            "(deploy/rbac.yaml)"
        ) from err

    @property
    def kind(self) -> str:
        """The job's kind, as messages name it (MPIJob, TrainJob)."""
        return kind_or_default(getattr(self.operator, "api_version", None)).kind

    def key_of(self, job: dict) -> str | None:
        """The key ``job``'s rank 0 signs its value with, when this try holds it: this try's nonce for its own
        submission; for an earlier try's, the key that try kept for that very job (its uid) in the task state store
        (Airflow 3.3+). Only the try that made a job and the job's call Secret hold it otherwise."""
        digest = result_digest_of(job)
        if self.nonce is not None and digest == nonce_digest(self.nonce):
            return self.nonce
        kept = recorded_result_key(self.context, (job.get("metadata") or {}).get("uid"))
        return kept if kept is not None and digest == nonce_digest(kept) else None

    def followable(self, job: dict) -> dict | None:
        """An earlier try's job is followed only when this try can verify its rank 0's value; otherwise it is
        replaced at once (not followed to its end and failed there): a new submission is a value this try can trust.
        A live one without its call Secret (its try ended between the two creates) is replaced too: its pods could
        never start.
        """
        hook, log = self.operator.hook, self.operator.log
        if not job_state(job).terminal and dropped_without_call_secret(hook, log, job):
            return None
        if self.key_of(job) is not None:
            return job
        replace(
            hook,
            log,
            job,
            "it is an earlier try's submission, and this try does not hold the key its "
            "rank 0 signs its return value with (kept from try to try only in Airflow "
            "3.3+'s task state store)",
        )
        return None

    def job_attached(self, job: dict) -> None:
        """The key of the followed job (``key_of``), kept for a later try where the task state store is."""
        self.key = self.key_of(job)
        self.adopted = self.key is None
        if self.key is not None:
            record_result_key(self.context, (job.get("metadata") or {}).get("uid"), self.key)
        self.collector = ResultCollector(self.key, self.operator.log.info)

    def result_key(self) -> str | None:
        return self.key

    # ------------------------------------------------------------------ running
    def new_try(self) -> None:
        """``execute`` began: no trigger's result yet."""
        self.event_result = None

    def resumed(self, event: dict[str, Any]) -> None:
        """``execute_complete`` began: the event carries the result; the drain only keeps marker lines out."""
        self.collector = ResultCollector(None, self.operator.log.info)
        self.event_result = RankResult.from_dict(event["result"]) if event.get("result") else None

    def launcher_log_sink(self, emit: LogSink) -> LogSink:
        return hide_result_lines(emit, self.collector)

    def result(self, payload: WaitResult) -> RankResult:
        """Rank 0's result: the trigger's (its event), else the wait's collector's; when a succeeded job's wait saw
        no complete value (a worker resumed past the marker lines), from the launcher's whole log, read once."""
        if self.event_result is not None:
            return self.event_result
        result = self.collector.result()
        if payload.outcome is not Outcome.SUCCESS or self.collector.complete:
            return result
        if self.key is None:
            unverifiable = UNVERIFIABLE.format(self.kind, payload.name) if self.adopted else None
            return RankResult(started=result.started, error=unverifiable)
        log, hook = self.operator.log, self.operator.hook
        log.info("Rank 0's return value was not among the lines this wait read: reading the launcher log")
        try:
            return parse_result(hook.launcher_log(payload.name, payload.namespace), self.key)
        except Exception as err:  # the cleanup below must run whatever happens here
            return RankResult(
                started=result.started,
                error=f"its launcher log could not be read back for rank "
                f"0's return value ({type(err).__name__}: {err})",
            )

    def finish(self, payload: WaitResult, finish_job: Callable[[], Any]) -> Any:
        """Clean up and raise as for any MPIJob; on success, rank 0's return value."""
        result = self.result(payload)  # before the cleanup deletes the launcher
        try:
            finish_job()
        except AirflowException as err:
            if result.started or payload.outcome is not Outcome.FAILED:
                raise
            text = f"{err}. {NEVER_STARTED.format(python=self.python)}"
            raise (err.reworded(text) if isinstance(err, MPIJobError) else type(err)(text)) from err
        job = f"{self.kind} {payload.namespace}/{payload.name} succeeded, but"
        if result.error:
            raise AirflowFailException(f"{job} {result.error} (rank 0's log is above)")
        if not result.has_value:
            raise AirflowFailException(f"{job} rank 0 reported no return value (its log is above)")
        return result.value


class FunctionTaskMixin(_MixinBase):
    """The decorated function runs on every rank; rank 0's return value is the task's XCom (through its
    callbacks, a :class:`FunctionTaskCallbacks`)."""

    custom_operator_name: str
    callbacks: FunctionTaskCallbacks
    # upstream XComs: left out of an offline rendering (render.py)
    runtime_only_fields = ("op_args", "op_kwargs")
    shallow_copy_attrs: Sequence[str] = ("python_callable",)

    def execute(self, context: Any) -> Any:
        self.callbacks.new_try()
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any], job_try_number: int | None = None) -> Any:
        self.callbacks.resumed(event)
        value = super().execute_complete(context, event, job_try_number)  # type: ignore[misc]
        if AIRFLOW_V_3_0_PLUS:  # as DecoratedOperator.execute does (multiple_outputs, assets)
            return self._handle_output(return_value=value)
        push = self.xcom_push  # type: ignore[attr-defined]  # Airflow 2's BaseOperator
        return self._handle_output(return_value=value, context=context, xcom_push=push)  # type: ignore[call-arg]


def function_task_operator(operator: type[MPIJobOperator], decorator: str, launch: Launch) -> type:
    """``operator`` running the function ``decorator`` decorates (subclass it to name the class), its launcher
    command made by ``launch``.

    Its template fields are the operator's but those the function replaces and ``get_logs`` (which must stay True,
    checked when the task is made), plus the function's arguments. Its ``__init__`` is its own: Airflow 3 wraps only
    operator classes' ``__init__`` (default_args, the upstream XComs of the arguments).
    """
    fixed = (*REPLACED, "get_logs")

    class FunctionTaskOperator(FunctionTaskMixin, DecoratedOperator, operator):  # type: ignore[misc,valid-type]
        custom_operator_name = decorator
        template_fields = ("op_args", "op_kwargs", *(f for f in operator.template_fields if f not in fixed))
        template_fields_renderers: ClassVar[dict[str, str]] = {
            **operator.template_fields_renderers,
            "op_args": "py",
            "op_kwargs": "py",
        }

        def __init__(self, *, python: str = "python3", **kwargs: Any) -> None:
            kwargs = function_task_kwargs(decorator, python, kwargs)
            super().__init__(**kwargs, callbacks=FunctionTaskCallbacks(decorator, python, launch))

    return FunctionTaskOperator


def function_task_decorator(
    operator_class: type,
    python_callable: Callable | None,
    multiple_outputs: bool | None,
    kwargs: dict[str, Any],
) -> TaskDecorator:
    """The TaskFlow decorator of a FunctionTaskMixin operator (as cncf.kubernetes' kubernetes_task)."""
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=operator_class,
        **kwargs,
    )
