"""MPIJobOperator: run one Kubeflow MPIJob per task instance and wait for its launcher.

What it guarantees, where the peers (SparkKubernetesOperator, KubernetesJobOperator, Flyte's MPI
plugin) fall short:

* one MPIJob per task instance: a deterministic name plus identity labels, so a new try or a
  restarted worker reattaches instead of submitting a duplicate, and a Succeeded job is not rerun;
* Airflow ``retries`` become the MPIJob's ``runPolicy.backoffLimit`` (launcher ``restartPolicy:
  Never``, so every attempt keeps its pod and log) where neither the parameters nor the base
  manifest set them, and a Failed job then fails the task for good: attempts are not multiplied;
* every field follows one rule, in the model: a parameter given > the base manifest > a default;
* the launcher log streams live into the task log, every attempt under its own header, exactly once;
* invalid specs, unschedulable pods and image errors fail fast and leave nothing behind; killing
  the task (also while deferred) deletes the MPIJob, so no GPU stays held.

Building the manifest is the model's (airflow_mpi.jobspec.parameters); this class adapts Airflow's
rendering, context and connection to it. The Kubernetes clients are imported lazily: DAG files
import this module at parse time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_mpi import deployment_identity
from airflow_mpi.jobspec import API_V2BETA1, DEFAULT, Defaults, Resolved, TaskIdentity
from airflow_mpi.wait.deferral import not_before_text
from airflow_mpi.jobspec.errors import ErrorList
from airflow_mpi.jobspec.parameters import mpirun_launch, resolve_parameters
from airflow_mpi.wait.progress import Timeouts
from airflow_mpi.jobspec.spec import LauncherCommand
from airflow_mpi.jobspec.status import job_state
from airflow_mpi.operators.job_record import record_job, recorded_job
from airflow_mpi.operators.outcome import finish
from airflow_mpi.operators.task_params import (
    PARSE_TIME_STAND_INS,
    check_task_parameters,
    parse_time_values,
    placeholder_identity,
    settings_explained,
    task_instance_id,
    task_values,
)
from airflow_mpi.operators.redaction import redacted_yaml
from airflow_mpi.operators.submission import create, deleted_by_earlier_try, reattach, try_number_of
from airflow_mpi.version_compat import AIRFLOW_VERSION, BaseOperator, conf

if TYPE_CHECKING:
    from airflow_mpi.hooks import MPIJobHook

TEMPLATE_EXT = (".yaml", ".yml", ".json")


class MPIJobOperator(BaseOperator):
    """Run a Kubeflow MPIJob and wait for it; see the module docstring and the README's parameter table.

    :param image: image of both roles (``launcher`` / ``worker`` dicts may override per role).
    Every MPIJob field follows one rule (airflow_mpi.jobspec.precedence): a parameter given >
    the base manifest's value > the operator's default. ``None`` means "not given".

    :param command: launcher command (list, or a shell string split with shlex).
    :param program: instead of ``command``: the launcher runs ``mpirun`` for the job's MPI
        implementation with ``-np = workers x slots_per_worker`` (as resolved) and ``mpirun_args``.
    :param backoff_limit: unset (and unset in the base manifest): the task's ``retries`` are mapped
        onto the MPIJob (see module docstring); otherwise Airflow's retries each start a fresh MPIJob.
    :param name: a prefix: the task instance's hash is appended (``pi`` -> ``pi-1a2b3c4d``), so concurrent runs,
        retries and jobs kept for debugging never collide; also for the base manifest's ``metadata.name``.
    :param unique_name_suffix: False: the job is named exactly ``name`` (one job of that name at a time).
    :param on_finish_action: ``keep``, ``delete_succeeded`` (default) or ``delete``.
    """

    template_fields: Sequence[str] = (
        "name", "namespace", "image", "command", "args", "program", "mpirun_args", "env", "env_from", "labels",
        "annotations", "base_manifest", "worker_resources", "launcher_resources", "gpus_per_worker", "workers",
        "slots_per_worker", "mpi_implementation", "launcher", "worker",
    )  # fmt: skip
    template_ext: Sequence[str] = TEMPLATE_EXT
    # The parameters that make up the MPIJob (airflow_mpi.jobspec.parameters reads them by these names).
    spec_parameters: Sequence[str] = (
        "image", "command", "args", "program", "mpirun_args", "workers", "slots_per_worker", "mpi_implementation",
        "api_version", "name", "namespace", "env", "env_from", "worker_resources", "gpus_per_worker",
        "launcher_resources", "volumes", "volume_mounts", "node_selector", "tolerations", "affinity",
        "service_account_name", "image_pull_secrets", "priority_class_name", "labels", "annotations", "launcher",
        "worker", "launcher_creation_policy", "run_launcher_as_worker", "ssh_auth_mount_path",
        "worker_readiness_probe", "main_container", "backoff_limit", "clean_pod_policy", "ttl_seconds_after_finished",
        "active_deadline_seconds", "scheduling_policy", "suspend", "managed_by", "base_manifest", "unique_name_suffix",
    )  # fmt: skip
    template_fields_renderers = {
        "base_manifest": "yaml",
        "env": "json",
        "worker_resources": "json",
        "launcher_resources": "json",
        "launcher": "json",
        "worker": "json",
        "labels": "json",
        "annotations": "json",
    }
    ui_color = "#c7e2f7"
    # The decorators' ranks report rank 0's return value in marker lines: kept out of the log (also by the trigger).
    captures_result: bool = False

    def __init__(
        self,
        *,
        image: str | None = None,
        command: list[str] | str | None = None,
        args: list[str] | None = None,
        program: list[str] | str | None = None,
        mpirun_args: list[str] | str | None = None,
        workers: int | str | None = None,
        slots_per_worker: int | str | None = None,
        mpi_implementation: str | None = None,
        api_version: str = API_V2BETA1,
        name: str | None = None,
        unique_name_suffix: bool = True,
        namespace: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        env: dict[str, str] | list[dict] | None = None,
        env_from: list[dict] | None = None,
        worker_resources: dict | None = None,
        gpus_per_worker: int | str | None = None,
        launcher_resources: dict | None = None,
        volumes: list[dict] | None = None,
        volume_mounts: list[dict] | None = None,
        node_selector: dict[str, str] | None = None,
        tolerations: list[dict] | None = None,
        affinity: dict | None = None,
        service_account_name: str | None = None,
        image_pull_secrets: list[str] | None = None,
        priority_class_name: str | None = None,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        launcher: dict[str, Any] | None = None,
        worker: dict[str, Any] | None = None,
        launcher_creation_policy: str | None = None,
        run_launcher_as_worker: bool | None = None,
        ssh_auth_mount_path: str | None = None,
        worker_readiness_probe: dict | None = None,
        main_container: str | None = None,
        backoff_limit: int | None = None,
        clean_pod_policy: str | None = None,
        ttl_seconds_after_finished: int | None = None,
        active_deadline_seconds: int | None = None,
        scheduling_policy: dict[str, Any] | None = None,
        suspend: bool | None = None,
        managed_by: str | None = None,
        base_manifest: dict | str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        get_logs: bool = True,
        poll_interval: float = 10.0,
        startup_timeout: float | None = 120.0,
        schedule_timeout: float | None = 300.0,
        on_finish_action: str = "delete_succeeded",
        worker_log_tail_lines: int = 20,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.image = image
        self.command = command
        self.args = args
        self.program = program
        self.mpirun_args = mpirun_args
        self.workers = workers
        self.slots_per_worker = slots_per_worker
        self.mpi_implementation = mpi_implementation
        self.api_version = api_version
        self.name = name
        self.unique_name_suffix = unique_name_suffix
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.env = env
        self.env_from = env_from
        self.worker_resources = worker_resources
        self.gpus_per_worker = gpus_per_worker
        self.launcher_resources = launcher_resources
        self.volumes = volumes
        self.volume_mounts = volume_mounts
        self.node_selector = node_selector
        self.tolerations = tolerations
        self.affinity = affinity
        self.service_account_name = service_account_name
        self.image_pull_secrets = image_pull_secrets
        self.priority_class_name = priority_class_name
        self.labels = labels
        self.annotations = annotations
        self.launcher = launcher
        self.worker = worker
        self.launcher_creation_policy = launcher_creation_policy
        self.run_launcher_as_worker = run_launcher_as_worker
        self.ssh_auth_mount_path = ssh_auth_mount_path
        self.worker_readiness_probe = worker_readiness_probe
        self.main_container = main_container
        self.backoff_limit = backoff_limit
        self.clean_pod_policy = clean_pod_policy
        self.ttl_seconds_after_finished = ttl_seconds_after_finished
        self.active_deadline_seconds = active_deadline_seconds
        self.scheduling_policy = scheduling_policy
        self.suspend = suspend
        self.managed_by = managed_by
        self.base_manifest = base_manifest
        self.deferrable = deferrable
        self.get_logs = get_logs
        self.poll_interval = poll_interval
        self.startup_timeout = startup_timeout
        self.schedule_timeout = schedule_timeout
        self.on_finish_action = on_finish_action
        self.worker_log_tail_lines = worker_log_tail_lines
        self._job: tuple[str, str, str | None] | None = None  # (name, namespace, uid) once created or attached
        self._resolved: Resolved | None = None  # of the last build_manifest
        self._validate_at_parse_time()

    # ------------------------------------------------------------------ spec building
    def _validate_at_parse_time(self) -> None:
        """Reject bad values when the DAG is parsed (an import error naming the parameter).

        Values Airflow has not rendered yet get stand-ins; they are checked again after rendering.
        """
        values = parse_time_values(self, tuple(self.template_fields), tuple(self.template_ext))
        check_task_parameters(values)
        if self.base_manifest is not None and values.get("base_manifest") is None:
            values["image"] = values.get("image") or PARSE_TIME_STAND_INS["image"]  # the base manifest may carry it
        self._resolve(values, placeholder_identity(self, "parse-time"), namespace=None)

    def _launch(self, errors: ErrorList, values: Mapping[str, Any]) -> LauncherCommand:
        """The launcher command ``program`` builds (HorovodJobOperator: horovodrun)."""
        return mpirun_launch(errors, values)

    def _resolve(self, values: dict[str, Any], identity: TaskIdentity, namespace: str | None) -> Resolved:
        defaults = Defaults(retries=self.retries or 0, namespace=namespace)
        return resolve_parameters(values, identity=identity, defaults=defaults, launch=self._launch)

    def build_manifest(self, context: Any = None) -> dict:
        """Exactly the manifest this task instance submits (validated; raises before any API call).

        With a task instance, the job carries this deployment's identity (``deployment_identity.py``) and the
        try's unique id. Without one (offline rendering) the identity labels use a placeholder run
        (``context["run_id"]``, else "offline") and no deployment: a rendered manifest applied by hand belongs to
        no deployment, so no sweep ever deletes it. The namespace then comes from the connection only when one is
        configured there.
        """
        values = task_values(self)
        check_task_parameters(values)
        ti = context.get("ti") if context else None
        if ti is not None:
            identity = TaskIdentity(ti.dag_id, ti.task_id, ti.run_id, ti.map_index, ti.try_number,
                                    deployment=deployment_identity.for_task(),
                                    task_instance_id=task_instance_id(context))
            namespace = None if values.get("namespace") else self.hook.resolve_namespace(None)
        else:
            identity = placeholder_identity(self, (context or {}).get("run_id") or "offline")
            namespace = None if values.get("namespace") else self.hook.configured_namespace()
        self._resolved = self._resolve(values, identity, namespace)
        return self._resolved.manifest

    def _resolution(self) -> Resolved:
        """The resolution of the last build_manifest, else an offline one (a try resumed after deferral)."""
        if self._resolved is None:
            self.build_manifest()
        return self._resolved

    def effective_backoff_limit(self) -> int:
        """``runPolicy.backoffLimit`` submitted: parameter > base manifest > task retries."""
        return self._resolution().settings["backoff_limit"].value

    def _retries_mapped(self) -> bool:
        """True when the task's retries became the MPIJob's backoffLimit (neither parameter nor base set it)."""
        return self._resolution().settings["backoff_limit"].source == DEFAULT

    # ------------------------------------------------------------------ I/O
    @cached_property
    def hook(self) -> MPIJobHook:
        from airflow_mpi.hooks import MPIJobHook

        return MPIJobHook(conn_id=self.kubernetes_conn_id, api_version=self.api_version)

    def execute(self, context: Any) -> dict:
        manifest = self.build_manifest(context)
        self._log_settings()
        self._log_manifest(manifest)
        job = self._reattach(context, manifest) or self._create(manifest)
        name, namespace = job["metadata"]["name"], job["metadata"].get("namespace") or manifest["metadata"]["namespace"]
        uid = job["metadata"].get("uid")
        self._job = (name, namespace, uid)
        self._attached(job)
        record_job(context, name, namespace, conn_id=self.kubernetes_conn_id, api_version=self.api_version, uid=uid)
        job_try = try_number_of(job)
        submitted_at = _parse_time((job.get("metadata") or {}).get("creationTimestamp")) or _now()
        if self.deferrable and job_state(job).terminal:
            # A trigger would fire at once, inside Airflow's deferral race (wait/deferral.py): finish here.
            self.log.info("MPIJob %s already finished: not deferring", name)
        elif self.deferrable:
            self._defer(context, name, namespace, submitted_at, job_try, uid)
        payload = asyncio.run(self._wait(name, namespace, submitted_at, deadline=None, uid=uid))
        if self._deleted_by_earlier_try(context, payload, job_try):
            return self.execute(context)
        return self._finish(payload)

    def execute_complete(self, context: Any, event: dict[str, Any], job_try_number: int | None = None) -> dict:
        """Resume after the trigger: print the log lines the trigger could not, then finish."""
        name, namespace = event["name"], event["namespace"]
        self._job = (name, namespace, event.get("uid"))
        if self._deleted_by_earlier_try(context, event, job_try_number):
            return self.execute(context)
        if self.get_logs and event.get("status") not in ("invalid",):
            asyncio.run(self._drain(name, namespace, event.get("log_state")))
        return self._finish(event)

    def _deleted_by_earlier_try(self, context: Any, payload: dict[str, Any], job_try: int | None) -> bool:
        """True (once per try) when the job this try reattached to was deleted by the cleanup of the try that made it."""
        if getattr(self, "_resubmitted", False) or not deleted_by_earlier_try(
            self.hook, self.log, payload, job_try, context["ti"].try_number
        ):
            return False
        self._resubmitted = True
        return True

    def on_kill(self) -> None:
        """Delete the MPIJob (and, through the garbage collector, its pods) when the task is killed.

        Only a live job is deleted: a finished one holds nothing, and a Succeeded one is what a retry
        reattaches to, so a spurious kill (Airflow's deferral race) never costs a rerun.
        """
        if self._job is None:
            return
        name, namespace, uid = self._job
        outcome = self.hook.delete_live_mpijob(name, namespace, uid=uid)
        self.log.info("Task killed: MPIJob %s/%s %s", namespace, name, outcome)

    def _log_settings(self) -> None:
        for line in settings_explained(self._resolution().settings, self.retries or 0, self._retries_mapped()):
            self.log.info("%s", line)

    def _attached(self, job: dict) -> None:
        """The job this try follows, created or reattached to (the decorators read its result nonce)."""

    def _result_digest(self) -> str | None:
        """The SHA-256 of the result nonce of the followed job (decorators only: rank 0's marker lines)."""
        return None

    def _reattach(self, context: Any, manifest: dict) -> dict | None:
        return reattach(self.hook, self.log, manifest, recorded_job(context))

    def _create(self, manifest: dict) -> dict:
        return create(self.hook, manifest)

    def _monitor_kwargs(self, submitted_at: datetime, deadline: datetime | None) -> dict[str, Any]:
        return {
            "submitted_at": submitted_at,
            "timeouts": Timeouts(self.startup_timeout, self.schedule_timeout),
            "poll_interval": self.poll_interval,
            "get_logs": self.get_logs,
            "max_attempts": self.effective_backoff_limit() + 1,
            "deadline": deadline,
            "tail_lines": self.worker_log_tail_lines,  # of each failed pod's log, in a failed try's error
        }

    async def _wait(
        self, name: str, namespace: str, submitted_at: datetime, deadline: datetime | None, uid: str | None = None
    ) -> dict:
        from airflow_mpi.wait.monitor import monitor_with

        kwargs = self._monitor_kwargs(submitted_at, deadline)
        return await monitor_with(self.hook, name, namespace, emit=self._launcher_log(), uid=uid, **kwargs)

    async def _drain(self, name: str, namespace: str, log_state: dict | None) -> None:
        from airflow_mpi.wait.monitor import monitor_with

        kwargs = self._monitor_kwargs(_now(), None)
        await monitor_with(self.hook, name, namespace, drain_only=True, emit=self._launcher_log(), log_state=log_state, **kwargs)

    def _launcher_log(self) -> Callable[[str], None]:
        """Where the launcher's log lines go (the decorators keep rank 0's result lines apart)."""
        return self.log.info

    def _log_manifest(self, manifest: dict) -> None:
        self.log.info("MPIJob manifest:\n%s", redacted_yaml(manifest))

    def _defer(
        self, context: Any, name: str, namespace: str, submitted_at: datetime, job_try: int | None, uid: str | None
    ) -> None:
        from airflow_mpi.triggers import MPIJobTrigger

        deferred_at = _now()
        deadline = deferred_at + self.execution_timeout if self.execution_timeout else None
        trigger = MPIJobTrigger(
            name=name,
            namespace=namespace,
            api_version=self.api_version,
            kubernetes_conn_id=self.kubernetes_conn_id,
            connection=self.hook.connection_settings(),
            submitted_at=submitted_at.isoformat(),
            poll_interval=self.poll_interval,
            startup_timeout=self.startup_timeout,
            schedule_timeout=self.schedule_timeout,
            get_logs=self.get_logs,
            max_attempts=self.effective_backoff_limit() + 1,
            deadline=deadline.isoformat() if deadline else None,
            not_before=not_before_text(deferred_at, AIRFLOW_VERSION),
            capture_result=self.captures_result,
            uid=uid,
            result_digest=self._result_digest(),
            tail_lines=self.worker_log_tail_lines,
        )
        # The trigger enforces execution_timeout itself (and deletes the job); the deferral timeout
        # is a backstop in case the triggerer is down.
        backstop = self.execution_timeout + timedelta(minutes=5) if self.execution_timeout else None
        self.defer(
            trigger=trigger, method_name="execute_complete", kwargs={"job_try_number": job_try}, timeout=backstop
        )

    def _finish(self, payload: dict[str, Any]) -> dict:
        return finish(
            self,
            payload,
            api_version=self.api_version,
            on_finish_action=self.on_finish_action,
            fail_permanently=self._retries_mapped(),
            worker_log_tail_lines=self.worker_log_tail_lines,
        )


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


__all__ = ["MPIJobOperator"]
