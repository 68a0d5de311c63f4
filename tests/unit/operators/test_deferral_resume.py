"""A deferred task resumes with what ``execute`` knew (the backoff limit and where it came from): the resumed
try builds no manifest (for ``@task.mpi`` that would pickle its arguments again and make a new nonce). A task
deferred by the release before, whose deferral carries only ``job_try_number``, still resumes and finishes
alike."""

from __future__ import annotations

import pytest

from airflow_mpi.exceptions import MPIJobProgramError
from airflow_mpi.function_task.rank_result import RankResult
from airflow_mpi.version_compat import AirflowException, AirflowFailException, TaskDeferred
from airflow_mpi.wait import monitor as monitor_module
from tests.unit.operators.test_mpijob_operator import context, make, result
from tests.unit.operators.test_task_decorators import build
from tests.unit.operators.test_task_decorators import context as task_context


def resume(op, deferral: TaskDeferred, event: dict, ctx: dict):
    """What Airflow runs in the resumed try: the deferral's method with its kwargs and the trigger's event."""
    return op.resume_execution(deferral.method_name, {**(deferral.kwargs or {}), "event": event}, ctx)


def deferred(op, ctx) -> TaskDeferred:
    with pytest.raises(TaskDeferred) as raised:
        op.execute(ctx)
    return raised.value


@pytest.fixture
def drains(monkeypatch) -> list:
    """The options of every drain of the launcher log (what the resumed try's wait would be given)."""
    seen = []

    async def monitor_with(hook, name, namespace, options, **kwargs):
        seen.append(options)

    monkeypatch.setattr(monitor_module, "monitor_with", monitor_with)
    return seen


def no_manifest(monkeypatch, op):
    monkeypatch.setattr(op, "build_manifest", lambda *a, **k: pytest.fail("the resumed try built a manifest"))


@pytest.mark.parametrize("backoff_limit, exc", [(None, AirflowFailException), (2, AirflowException)])
def test_a_resumed_operator_builds_no_manifest_and_finishes_as_the_deferral_said(
    monkeypatch, drains, backoff_limit, exc
):
    """retries=3 mapped onto backoffLimit (a Failed job fails for good), or backoff_limit=2 (retryable)."""
    deferral = deferred(make(deferrable=True, retries=3, backoff_limit=backoff_limit), context())
    assert deferral.method_name == "resume_deferred"
    for event, raises in ((result(), None), (result("failed", message="BackoffLimitExceeded"), exc)):
        resumed = make(deferrable=True, retries=3, backoff_limit=backoff_limit, on_finish_action="keep")
        no_manifest(monkeypatch, resumed)  # a new worker: a fresh operator object
        if raises is None:
            assert resume(resumed, deferral, event, context())["condition"] == "Succeeded"
        else:
            with pytest.raises(AirflowException) as err:
                resume(resumed, deferral, event, context())
            assert isinstance(err.value, MPIJobProgramError)
            assert isinstance(err.value, AirflowFailException) == (raises is AirflowFailException)
    assert [o.max_attempts for o in drains] == [(backoff_limit if backoff_limit is not None else 3) + 1] * 2


@pytest.mark.parametrize("backoff_limit, exc", [(None, AirflowFailException), (2, AirflowException)])
def test_a_task_deferred_by_the_release_before_still_resumes_from_an_offline_resolution(
    monkeypatch, drains, backoff_limit, exc
):
    """Its deferral carried only job_try_number, and resumes in execute_complete: the manifest is resolved
    offline, once, for the backoff limit."""
    event = result("failed", message="BackoffLimitExceeded")
    resumed = make(deferrable=True, retries=3, backoff_limit=backoff_limit)
    built = []
    build_manifest = resumed.build_manifest
    monkeypatch.setattr(resumed, "build_manifest", lambda *a, **k: built.append(a) or build_manifest(*a, **k))
    with pytest.raises(AirflowException) as err:
        resumed.resume_execution("execute_complete", {"event": event, "job_try_number": 1}, context())
    assert isinstance(err.value, AirflowFailException) == (exc is AirflowFailException) and built == [()]
    assert "BackoffLimitExceeded" in str(err.value)
    assert [o.max_attempts for o in drains] == [(backoff_limit if backoff_limit is not None else 3) + 1]


def test_a_resumed_mpi_task_builds_no_manifest_nor_pickles_its_arguments(monkeypatch, drains):
    op = build(deferrable=True, retries=1)
    deferral = deferred(op, task_context())
    resumed = build(deferrable=True, retries=1)  # a new worker: a fresh operator object, without the nonce
    resumed.__dict__["hook"] = op.hook
    no_manifest(monkeypatch, resumed)
    monkeypatch.setattr(
        resumed.callbacks, "arguments", lambda: pytest.fail("the resumed try pickled the arguments")
    )
    event = {**result(), "result": RankResult(True, True, 12).to_dict()}
    assert resume(resumed, deferral, event, task_context()) == 12
    assert [o.max_attempts for o in drains] == [2]
    failed = build(deferrable=True, retries=1)
    failed.__dict__["hook"] = op.hook
    no_manifest(monkeypatch, failed)
    event = {**result("failed"), "result": RankResult(True, False, None).to_dict()}
    with pytest.raises(AirflowFailException, match="MPIJob ns/n failed"):  # retries mapped: fails for good
        resume(failed, deferral, event, task_context())


def test_an_mpi_task_deferred_by_the_release_before_still_resumes():
    event = {**result(), "result": RankResult(True, True, [1, "two"]).to_dict()}
    resumed = build(deferrable=True)
    resumed._drain = _no_drain
    old_deferral = {"event": event, "job_try_number": 1}
    assert resumed.resume_execution("execute_complete", old_deferral, task_context()) == [1, "two"]


async def _no_drain(*args):
    return None
