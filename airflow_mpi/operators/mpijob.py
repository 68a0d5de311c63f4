"""MPIJobOperator: run one Kubeflow MPIJob per task instance and wait for its launcher.

What it guarantees, where the peers (SparkKubernetesOperator, KubernetesJobOperator, Flyte's MPI plugin) fall short:

* one MPIJob per task instance: a deterministic name plus identity labels, so a new try or a restarted worker
  reattaches instead of submitting a duplicate, and a Succeeded job is not rerun;
* Airflow ``retries`` become the MPIJob's ``runPolicy.backoffLimit`` (launcher ``restartPolicy: Never``, so every
  attempt keeps its pod and log) where neither the parameters nor the base manifest set them, and a Failed job then
  fails the task for good: attempts are not multiplied;
* every field follows one rule, in the model: a parameter given > the base manifest > a default;
* the launcher log streams live into the task log, every attempt under its own header, exactly once;
* invalid specs, unschedulable pods and image errors fail fast and leave nothing behind; killing the task (also while
  deferred) deletes the MPIJob, so no GPU stays held.

Building the manifest is the model's (airflow_mpi.jobspec.parameters); this class adapts Airflow's rendering, context
and connection to it. The Kubernetes clients are imported lazily: DAG files import this module at parse time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_mpi import deployment_identity
from airflow_mpi.jobspec import Defaults, Resolved, TaskIdentity
from airflow_mpi.jobspec.fields import PARAMETERS, Field
from airflow_mpi.jobspec.kinds import kind_or_default
from airflow_mpi.jobspec.naming import DEPLOYMENT_LABEL
from airflow_mpi.jobspec.parameters import resolve_parameters
from airflow_mpi.jobspec.status import job_state
from airflow_mpi.operators.attempts import Attempts
from airflow_mpi.operators.callbacks import MPIJobCallbacks
from airflow_mpi.operators.deferral import deferral_of
from airflow_mpi.operators.job_record import record_job, recorded_job
from airflow_mpi.operators.lineage import MPIJobLineage, facts_of
from airflow_mpi.operators.links import LinkValues, extra_links, persist_links
from airflow_mpi.operators.outcome import finish
from airflow_mpi.operators.redaction import redacted_yaml
from airflow_mpi.operators.signatures import typed_init
from airflow_mpi.operators.submission import (
    check_claim,
    create,
    deleted_by_earlier_try,
    reattach,
    try_number_of,
)
from airflow_mpi.operators.supervision import (
    orphaned,
    pod_taken_away,
    retry_follows,
    supervisor_pid,
    until_orphaned,
)
from airflow_mpi.operators.task_params import (
    TASK_PARAMETERS,
    check_task_parameters,
    init_signature,
    parse_time_values,
    placeholder_identity,
    settings_explained,
    try_identity,
    typed,
)
from airflow_mpi.version_compat import BaseOperator
from airflow_mpi.wait.contract import Outcome, WaitOptions, WaitResult
from airflow_mpi.wait.log_groups import escape, log_group

if TYPE_CHECKING:
    from airflow_mpi.hooks import MPIJobHook
    from airflow_mpi.operators.signatures import MPIJobOperatorSignature as _Base
else:
    _Base = BaseOperator  # the parameters for type checkers: operators/signatures.py

TEMPLATE_EXT = (".yaml", ".yml", ".json")
_PARAMETERS = {**PARAMETERS, **TASK_PARAMETERS}


def template_fields_of(parameters: dict) -> tuple[str, ...]:
    return tuple(name for name, row in parameters.items() if row.templated)


class MPIJobOperator(_Base, MPIJobLineage):
    """Run a Kubeflow MPIJob and wait for it; see the module docstring and docs/parameters.md.

    The parameters (their types, defaults and rules) are the rows of jobspec/fields.py (the MPIJob's) and
    operators/task_params.py (how the task waits); ``None`` means "not given". ``program`` (instead of ``command``)
    makes the launcher run ``mpirun`` sized from the resolved job. ``name`` is a prefix: the task instance's hash is
    appended (``pi`` -> ``pi-1a2b3c4d``), so concurrent runs, retries and jobs kept for debugging never collide
    (``unique_name_suffix=False``: exactly ``name``). ``callbacks``: an :class:`MPIJobCallbacks` (operators/
    callbacks.py), the extension points of a try (HorovodJobOperator and the decorators supply their own).
    """

    parameters: ClassVar[dict[str, Field]] = _PARAMETERS
    template_fields: Sequence[str] = template_fields_of(_PARAMETERS)
    template_ext: Sequence[str] = TEMPLATE_EXT
    template_fields_renderers: ClassVar[dict[str, str]] = {
        n: f.templated for n, f in _PARAMETERS.items() if f.templated in ("json", "yaml")
    }
    ui_color = "#c7e2f7"
    operator_extra_links = extra_links()  # the job, its launcher pod, its logs (operators/links.py)

    @typed_init(_Base.__init__)
    def __init__(self, *, callbacks: MPIJobCallbacks | None = None, **kwargs: Any) -> None:
        given = {name: kwargs.pop(name, f.parameter_default) for name, f in _PARAMETERS.items()}
        super().__init__(**kwargs)
        for name, value in given.items():
            setattr(self, name, value)
        self._callbacks = callbacks if callbacks is not None else MPIJobCallbacks()
        self._callbacks.bind(self)
        self._job: tuple[str, str, str | None] | None = (
            None  # (name, namespace, uid) once created or attached
        )
        self._resolved: Resolved | None = None  # of the last build_manifest
        self._supervisor: int | None = None  # the Airflow 3 supervisor of this try's process (supervision.py)
        self._retry_follows = False  # a retry of this try will run (and reattach to its job)
        self._cut_short: BaseException | None = None  # set by on_kill when the cluster deletes the try's pod
        self._validate_at_parse_time()

    __init__.__signature__ = init_signature(_PARAMETERS)  # type: ignore[attr-defined]  # for Airflow's checks

    # ------------------------------------------------------------------ spec building
    def _validate_at_parse_time(self) -> None:
        """Reject bad values when the DAG is parsed (task_params.py: stand-ins for what is not rendered yet)."""
        values = parse_time_values(self)
        check_task_parameters(values)
        if self.base_manifest is not None and values.get("base_manifest") is None:
            values["image"] = (
                values.get("image") or PARAMETERS["image"].stand_in
            )  # the base manifest may carry it
        self._resolve(values, placeholder_identity(self, "parse-time"), namespace=None)

    @property
    def callbacks(self) -> MPIJobCallbacks:
        """This operator's callbacks, bound to it. Airflow runs a shallow copy of the parsed task
        (``prepare_for_execution``), and renders the templates on the copy: the copy gets its own callbacks,
        bound to it, or they would read the parsed task's unrendered parameters (and share a try's state)."""
        if self._callbacks.operator is not self:
            self._callbacks = self._callbacks.copy_for(self)
        return self._callbacks

    @property
    def captures_result(self) -> bool:
        """Rank 0's return value is read from marker lines of the launcher log (the decorators): kept out
        of the log, also by the trigger."""
        return self.callbacks.captures_result

    def _resolve(self, values: dict[str, Any], identity: TaskIdentity, namespace: Any) -> Resolved:
        defaults = Defaults(
            retries=self.retries or 0, namespace=namespace, schedule_timeout=values["schedule_timeout"]
        )
        launch = self.callbacks.launch_command  # what ``program`` becomes (HorovodJobOperator: horovodrun)
        return resolve_parameters(values, identity=identity, defaults=defaults, launch=launch)

    def _task_settings(self) -> dict[str, Any]:
        """How the task waits, a rendered template's text as each setting's type: set on the task too, where the
        wait reads them."""
        values = typed({name: getattr(self, name) for name in TASK_PARAMETERS})
        for name, value in values.items():
            if value is not getattr(self, name):
                setattr(self, name, value)
        return values

    def build_manifest(self, context: Any = None) -> dict:
        """Exactly the manifest this task instance submits (validated; raises before any API call).

        With a task instance, the job carries this deployment's identity (``deployment_identity.py``) and the try's
        unique id. Without one (offline rendering) the identity labels use a placeholder run (``context["run_id"]``,
        else "offline") and no deployment: a rendered manifest applied by hand belongs to no deployment, so no sweep
        ever deletes it. The namespace then comes from the connection only when one is configured there.
        """
        values = {**{name: getattr(self, name) for name in self.parameters}, **self._task_settings()}
        check_task_parameters(values)
        namespace: Callable[[], str | None]  # asked only when the model needs it
        if context and context.get("ti") is not None:
            identity = try_identity(context, deployment_identity.for_task())
            namespace = lambda: self.hook.resolve_namespace()  # noqa: E731 (the hook only when it is needed)
        else:
            identity = placeholder_identity(self, (context or {}).get("run_id") or "offline")
            namespace = lambda: self.hook.configured_namespace()  # noqa: E731
        self._resolved = self._resolve(values, identity, namespace)
        return self.callbacks.manifest_built(self._resolved.manifest, context)

    def _resolution(self) -> Resolved:
        """The resolution of the last build_manifest, else an offline one (a try resumed from a deferral of an
        earlier release, which carried no backoff limit: ``resume_deferred``)."""
        if self._resolved is None:
            self.build_manifest()
        assert self._resolved is not None, "set by build_manifest"
        return self._resolved

    _carried: Attempts | None = None  # as the deferral carried them (``resume_deferred``)

    def _attempts(self) -> Attempts:
        """This try's manifest's, else as the deferral carried them, else (deferred by an earlier release) those of
        an offline build."""
        if self._resolved is None and self._carried is not None:
            return self._carried
        return Attempts.of(self._resolution(), self.api_version, self.retries)

    def effective_backoff_limit(self) -> int:
        """``runPolicy.backoffLimit`` submitted: parameter > base manifest > task retries."""
        return self._attempts().backoff_limit

    # ------------------------------------------------------------------ I/O
    @cached_property
    def hook(self) -> MPIJobHook:
        from airflow_mpi.hooks import MPIJobHook

        return MPIJobHook(conn_id=self.kubernetes_conn_id, api_version=self.api_version)

    def _start_process(self, context: Any) -> None:
        """What ``on_kill`` reads of this process: its Airflow supervisor, and whether a retry follows this try (the
        worker that defers and the one that resumes are two processes, in two pods on the KubernetesExecutor)."""
        self._supervisor = supervisor_pid()
        self._retry_follows = retry_follows(context.get("ti"), self.retries)

    def execute(self, context: Any) -> dict:
        self._start_process(context)
        manifest = self.build_manifest(context)
        meta = manifest["metadata"]
        job_ref = f"{manifest['kind']} {meta['namespace']}/{meta['name']}"
        with log_group(self.log, f"{job_ref}: settings and manifest"):
            self._log_settings()
            self._log_manifest(manifest)
        self._job_facts = facts_of(manifest)  # the OpenLineage facet's (operators/lineage.py)
        self._check_claim(meta["namespace"], meta["labels"][DEPLOYMENT_LABEL])
        job = self._follow_or_create(context, manifest)
        name, namespace = job["metadata"]["name"], job["metadata"].get("namespace") or meta["namespace"]
        uid = job["metadata"].get("uid")
        self._job = (name, namespace, uid)
        self._attached(job)
        record_job(
            context, name, namespace, conn_id=self.kubernetes_conn_id, api_version=self.api_version, uid=uid
        )
        job_try = try_number_of(job)
        submitted_at = _parse_time((job.get("metadata") or {}).get("creationTimestamp")) or _now()
        persist_links(context, self.hook, LinkValues(namespace, name, uid, start=submitted_at), self.log)
        if self.deferrable and job_state(job).terminal:
            # A trigger would fire at once, inside Airflow's deferral race (wait/deferral.py): finish here.
            self.log.info("%s %s already finished: not deferring", job.get("kind"), name)
        elif self.deferrable:
            self._defer(name, namespace, submitted_at, job_try, uid)
        result = asyncio.run(self._wait(name, namespace, submitted_at, deadline=None, uid=uid))
        if self._deleted_by_earlier_try(context, result, job_try):
            return self.execute(context)
        return self._finish(result, context)

    def resume_deferred(
        self,
        context: Any,
        event: dict[str, Any],
        job_try_number: int | None = None,
        backoff_limit: int | None = None,
        retries_mapped: bool | None = None,
        job_facts: dict[str, Any] | None = None,
    ) -> Any:
        """Where a deferral resumes (``_defer``): with what ``execute`` knew of the backoff limit (and the spec's
        facts, for the OpenLineage facet), so that the resumed try builds no manifest (for ``@task.mpi`` that would
        pickle the arguments again and make a new nonce); then ``execute_complete``, which subclasses extend (its
        signature stays the usual one)."""
        if backoff_limit is not None and retries_mapped is not None:
            self._carried = Attempts.carried(backoff_limit, retries_mapped, self.api_version)
        self._job_facts = job_facts
        return self.execute_complete(context, event, job_try_number)

    def execute_complete(
        self, context: Any, event: dict[str, Any], job_try_number: int | None = None
    ) -> dict:
        """Resume after the trigger: print the log lines the trigger could not, then finish. Called directly
        (a deferral of an earlier release), the backoff limit comes from an offline resolution."""
        self._start_process(context)
        self._task_settings()
        result = WaitResult.from_event(event)
        name, namespace = event["name"], event["namespace"]
        self._check_claim(namespace)  # a deferred task copied with its database resumes here, never past this
        self._job = (name, namespace, result.uid)
        if self._deleted_by_earlier_try(context, result, job_try_number):
            return self.execute(context)
        if self.get_logs and result.outcome is not Outcome.INVALID:
            asyncio.run(self._drain(name, namespace, result.log_state))
        return self._finish(result, context)

    def _check_claim(self, namespace: str, deployment: str | None = None) -> None:
        """Refuse another deployment's namespace claim (submission.check_claim); ``deployment``: the id the manifest
        already carries, else read. The installation is kept for the deferral."""
        self._installation = deployment_identity.installation_for_task()
        check_claim(self.hook, namespace, deployment or deployment_identity.for_task(), self._installation)

    def _deleted_by_earlier_try(self, context: Any, payload: WaitResult, job_try: int | None) -> bool:
        """True (once per try) when the cleanup of the try that made the job this try reattached to deleted it."""
        if getattr(self, "_resubmitted", False) or not deleted_by_earlier_try(
            self.hook, self.log, payload, job_try, context["ti"].try_number
        ):
            return False
        self._resubmitted = True
        return True

    def on_kill(self) -> None:
        """Delete the MPIJob (and, through the garbage collector, its pods) when the task is killed.

        Only a live job is deleted: a finished one holds nothing, and a Succeeded one is what a retry reattaches to, so
        a spurious kill (Airflow's deferral race) never costs a rerun. A process whose Airflow supervisor died, or
        whose KubernetesExecutor pod the cluster is deleting with a retry to come, deletes nothing: the kill is not
        Airflow's, and the next try reattaches to the job (supervision.py).
        """
        if self._job is None:
            return
        name, namespace, uid = self._job
        if orphaned(self._supervisor):
            with contextlib.suppress(OSError):  # the log's socket died with the supervisor
                self.log.warning(
                    "Task killed after its Airflow supervisor died: %s %s/%s kept for the next try",
                    kind_or_default(self.api_version).kind,
                    namespace,
                    name,
                )
            return
        if (error := pod_taken_away(self.hook, self._retry_follows, namespace, name, uid)) is not None:
            self.log.warning("%s", error)
            self._cut_short = error  # the synchronous wait ends with it (supervision.until_orphaned)
            return
        outcome = self.hook.delete_live_mpijob(name, namespace, uid=uid)
        self.log.info("Task killed: MPIJob %s/%s %s", namespace, name, outcome)

    def _log_settings(self) -> None:
        attempts = self._attempts()
        for line in settings_explained(
            self._resolution().settings, self.retries or 0, attempts.retries_mapped, attempts.allowed
        ):
            self.log.info("%s", escape(line))

    def _followable(self, job: dict) -> dict | None:
        """``job``, an earlier try's or submission's this try found, when this try can follow it; None when it was
        replaced (deleted: a fresh one is submitted). The callbacks decide (``@task.mpi``'s are stricter)."""
        return self.callbacks.followable(job)

    def _attached(self, job: dict) -> None:
        """The job this try follows, created or reattached to (the decorators' callbacks read its nonce)."""
        self.callbacks.job_attached(job)

    def _result_key(self) -> str | None:
        """The key rank 0's marker lines of the followed job are signed with (decorators only; secret: it travels to
        the trigger, never into a log or an event)."""
        return self.callbacks.result_key()

    def _create(self, manifest: dict) -> dict:
        """Create the job; the callbacks may replace what the create answered (then it is created again)."""
        job = self.callbacks.job_created(create(self.hook, manifest), manifest)
        return job if job is not None else self._create(manifest)

    def _follow_or_create(self, context: Any, manifest: dict) -> dict:
        """The job of this task instance an earlier try or worker left (recorded, or found by its labels) when this
        try can follow it, else a new one: recorded before it exists, so a worker dying right after the create
        leaves no unrecorded job."""
        job = reattach(self.hook, self.log, manifest, recorded_job(context))
        if job and (job := self._followable(job)):
            return job
        meta = manifest["metadata"]
        record_job(
            context,
            meta["name"],
            meta["namespace"],
            conn_id=self.kubernetes_conn_id,
            api_version=self.api_version,
        )
        return self._create(manifest)

    async def _wait(
        self,
        name: str,
        namespace: str,
        submitted_at: datetime,
        deadline: datetime | None,
        uid: str | None = None,
    ) -> WaitResult:
        result = await self._monitor(name, namespace, submitted_at, deadline, uid=uid)
        assert result is not None, "only a drain returns no result"
        return result

    async def _drain(self, name: str, namespace: str, log_state: dict | None) -> None:
        await self._monitor(name, namespace, _now(), None, drain_only=True, log_state=log_state)

    async def _monitor(
        self, name: str, namespace: str, submitted_at: datetime, deadline: datetime | None, **kwargs: Any
    ) -> WaitResult | None:
        from airflow_mpi.wait.monitor import monitor_with

        options = self._wait_options(deadline)
        return await until_orphaned(
            monitor_with(
                self.hook,
                name,
                namespace,
                options,
                emit=self._launcher_log(),
                submitted_at=submitted_at,
                **kwargs,
            ),
            self._supervisor,
            cut_short=lambda: self._cut_short,
        )

    def _wait_options(self, deadline: datetime | None) -> WaitOptions:
        return WaitOptions.of_task(
            self._task_settings(), max_attempts=self._attempts().allowed, deadline=deadline
        )

    def _launcher_log(self) -> Callable[[str], None]:
        """Where the launcher's log lines go (the decorators' callbacks keep rank 0's result lines apart)."""
        return self.callbacks.launcher_log_sink(self.log.info)

    def _log_manifest(self, manifest: dict) -> None:
        self.log.info("MPIJob manifest:\n%s", escape(redacted_yaml(manifest)))

    def _defer(
        self, name: str, namespace: str, submitted_at: datetime, job_try: int | None, uid: str | None
    ) -> None:
        trigger, timeout = deferral_of(
            self,
            name,
            namespace,
            submitted_at,
            uid,
            options=self._wait_options,
            result_key=self._result_key(),
            installation=self._installation,
        )
        attempts = self._attempts()  # the resume needs them: it builds no manifest
        kwargs = {
            "job_try_number": job_try,
            "backoff_limit": attempts.backoff_limit,
            "retries_mapped": attempts.retries_mapped,
            "job_facts": self._job_facts,
        }
        self.defer(trigger=trigger, method_name="resume_deferred", kwargs=kwargs, timeout=timeout)

    def _finish(self, result: WaitResult, context: Any = None) -> Any:
        from airflow_mpi.operators.metrics import emit_try_metrics, task_tags

        emit_try_metrics(result, task_tags(self, result.namespace))  # once per try: only a try's end is here
        self._last_result = result  # the OpenLineage facet's
        persist_links(context, self.hook, LinkValues.of_result(result, _now()), self.log)  # the pod known now
        return self.callbacks.finish(
            result,
            lambda: finish(
                self,
                result,
                api_version=self.api_version,
                on_finish_action=self.on_finish_action,
                fail_permanently=self._attempts().retries_mapped,
                worker_log_tail_lines=self._task_settings()["worker_log_tail_lines"],
            ),
        )


def _now() -> datetime:
    return datetime.now(UTC)


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime) or not value:
        return value or None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


__all__ = ["MPIJobOperator"]
