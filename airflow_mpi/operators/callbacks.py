"""MPIJobCallbacks: the public extension points of MPIJobOperator (as cncf.kubernetes'
KubernetesPodOperatorCallback).

An operator calls its callbacks object at each point of a try: where ``program`` becomes the launcher's
command, the manifest is built, the job is created or found, the launcher's log is emitted, a deferral names
the key rank 0's result is verified with, and the try finishes. The defaults change nothing;
HorovodJobOperator supplies :class:`~airflow_mpi.operators.horovod.HorovodCallbacks` (horovodrun),
``@task.mpi``/``@task.horovod`` theirs (decorators/function_task.py: the function's call Secret and rank 0's
return value). Unlike the cncf.kubernetes callbacks (class methods), this is an instance, one per operator: it
holds the state of a try (a nonce, a collector) between the points. Pass it as ``callbacks=`` to the operator;
the operator binds it (``bind``) when it is made.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_mpi.jobspec.parameters import mpirun_launch

if TYPE_CHECKING:
    from airflow_mpi.jobspec.errors import ErrorList
    from airflow_mpi.jobspec.spec import LauncherCommand
    from airflow_mpi.operators.mpijob import MPIJobOperator
    from airflow_mpi.wait.contract import WaitResult

LogSink = Callable[..., None]  # one launcher log line (and, from the trigger's ledger, its position)


class MPIJobCallbacks:
    """The extension points of one MPIJobOperator; every method's default leaves the operator's behaviour
    as is. ``operator`` is the operator this object was bound to (``bind``): its hook, log and parameters.
    """

    operator: MPIJobOperator
    #: rank 0's marker lines are read from the launcher log (also by the trigger), not shown
    captures_result: bool = False

    def bind(self, operator: MPIJobOperator) -> None:
        """Called once, by the operator's ``__init__``, before the operator checks its parameters at parse
        time: where a subclass checks what it adds to the operator (the decorators: the function)."""
        self.operator = operator

    def copy_for(self, operator: MPIJobOperator) -> MPIJobCallbacks:
        """This object for a copy of its operator (Airflow runs a shallow copy of the parsed task, with the
        templates rendered on it): a shallow copy bound to ``operator``, without ``bind``'s parse-time checks,
        which the original passed."""
        twin = copy.copy(self)
        twin.operator = operator
        return twin

    def launch_command(self, errors: ErrorList, values: Mapping[str, Any]) -> LauncherCommand:
        """The launcher command ``program`` becomes (``values``: the resolved parameters); problems go to
        ``errors``. Default: ``mpirun`` sized from the resolved job."""
        return mpirun_launch(errors, values)

    def manifest_built(self, manifest: dict[str, Any], context: Any) -> dict[str, Any]:
        """The manifest ``build_manifest`` returns, given the one the parameters resolved to (validated);
        ``context`` as ``build_manifest`` got it (None offline). Raise to refuse it, before anything is
        created."""
        return manifest

    def job_created(self, job: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any] | None:
        """``job``, as the API server answered the create of ``manifest`` (or the job of this task instance
        it adopted instead), to follow; None when it was replaced (deleted): the operator creates ``manifest``
        again."""
        return job

    def followable(self, job: dict[str, Any]) -> dict[str, Any] | None:
        """``job``, an earlier try's or submission's this try found, when this try can follow it; None when
        it was replaced (deleted: a fresh one is submitted). Default: every job is followable."""
        return job

    def job_attached(self, job: dict[str, Any]) -> None:
        """The job this try follows, created or reattached to (before the wait)."""

    def launcher_log_sink(self, emit: LogSink) -> LogSink:
        """Where the launcher's log lines go, given where the operator would send them (``emit``)."""
        return emit

    def result_key(self) -> str | None:
        """The key rank 0's marker lines of the followed job are signed with, for a deferral's trigger (a
        secret: it travels to the trigger, never into a log or an event). Default: None (none to verify)."""
        return None

    def finish(self, payload: WaitResult, finish_job: Callable[[], Any]) -> Any:
        """The try's end: ``payload`` is the wait's result (or the trigger's event), ``finish_job`` the
        operator's cleanup, which raises for a job that did not succeed; returns the task's return value (its
        XCom)."""
        return finish_job()


__all__ = ["LogSink", "MPIJobCallbacks"]
