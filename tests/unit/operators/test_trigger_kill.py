"""A deferred task's kill deletes its MPIJob although the triggerer cancels the trigger again meanwhile
(triggers/cancellation.py). The last test drives the trigger with Airflow's own ``TriggerRunner.run_trigger`` and
``cancel_triggers``, as the triggerer does when a user clears the task and its next sync sends the id again."""

from __future__ import annotations

import asyncio

import pytest

from airflow_mpi.triggers.cancellation import KILL_BUDGET, kill_budget, outlive_cancellation
from tests.unit.fakes import FakeAsyncHook
from tests.unit.operators.test_trigger_sensor import LIVE, trigger, use_hook


async def test_the_work_outlives_repeated_cancellations_and_the_first_is_raised_after_it():
    release, done = asyncio.Event(), []

    async def work():
        await release.wait()
        done.append("deleted")

    caller = asyncio.create_task(outlive_cancellation(work(), budget=30))
    await asyncio.sleep(0)  # the caller is waiting for the work
    for n in range(3):
        caller.cancel(f"sync {n}")
        await asyncio.sleep(0)
    assert not caller.done() and done == []
    release.set()
    with pytest.raises(asyncio.CancelledError) as raised:
        await caller
    assert done == ["deleted"] and raised.value.args == ("sync 0",)


async def test_without_a_cancellation_the_works_value_is_returned_and_its_error_raised():
    async def fails():
        raise ValueError("refused")

    assert await outlive_cancellation(asyncio.sleep(0, "outcome")) == "outcome"
    with pytest.raises(ValueError, match="refused"):
        await outlive_cancellation(fails())


@pytest.mark.parametrize("on_kill_timeout, budget", [(None, 0.05), ("0.05", None)])
async def test_past_its_budget_the_work_is_cancelled_and_nothing_returned(
    monkeypatch, on_kill_timeout, budget
):
    """The budget given, or by default the triggerer's on_kill_timeout where it is shorter than KILL_BUDGET."""
    if on_kill_timeout:
        monkeypatch.setenv("AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT", on_kill_timeout)
    stopped = asyncio.Event()

    async def hanging_delete():
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    assert await outlive_cancellation(hanging_delete(), budget) is None
    await asyncio.wait_for(stopped.wait(), 5)


def test_the_budget_keeps_a_shorter_on_kill_timeout_of_the_triggerer(monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT", "5")
    assert kill_budget() == 5
    monkeypatch.setenv("AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT", "120")
    assert kill_budget() == KILL_BUDGET
    monkeypatch.delenv("AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT")
    assert kill_budget() == KILL_BUDGET  # the default: 30 s


def airflows_triggerer():
    """Airflow's triggerer module, where it calls ``on_kill`` on a user's action (3.3+); the test is skipped, saying
    why, on an Airflow that does not (the module-level import would skip this file's other tests with it)."""
    from airflow.jobs import triggerer_job_runner

    if not hasattr(triggerer_job_runner, "_USER_ACTION_CANCEL_MSG"):
        pytest.skip("this Airflow's triggerer calls no on_kill (before 3.3): cleanup's test below covers it")
    return triggerer_job_runner


async def test_a_cleared_tasks_job_is_deleted_although_the_next_sync_cancels_the_trigger_again(monkeypatch):
    triggerer = airflows_triggerer()
    hook = FakeAsyncHook(job_obj=LIVE)
    watching, deleting, answer = asyncio.Event(), asyncio.Event(), asyncio.Event()
    list_objects, delete_live = hook.list_objects, hook.delete_live_mpijob

    async def listed(*args, **kwargs):
        watching.set()
        return await list_objects(*args, **kwargs)

    async def slow_delete(
        name, namespace, uid=None
    ):  # the API server answers after the triggerer's next sync
        deleting.set()
        await answer.wait()
        return await delete_live(name, namespace, uid=uid)

    monkeypatch.setattr(hook, "list_objects", listed)
    monkeypatch.setattr(hook, "delete_live_mpijob", slow_delete)
    t = trigger()
    use_hook(monkeypatch, t, hook)
    runner = triggerer.TriggerRunner()
    task = asyncio.create_task(runner.run_trigger(1, t))
    runner.triggers[1] = {"task": task, "name": "e2e/run/hold", "events": 0, "is_watcher": False}
    await asyncio.wait_for(watching.wait(), 10)

    runner.to_cancel.append(1)  # the user cleared the task
    await runner.cancel_triggers()
    await asyncio.wait_for(deleting.wait(), 10)
    runner.to_cancel.append(1)  # the next sync: the trigger has not ended, so it is still to cancel
    await runner.cancel_triggers()
    await asyncio.sleep(0)
    answer.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(task), 10)
    assert hook.deleted == [("job", "ns")]


async def test_before_airflow_3_3_the_cleanups_delete_outlives_a_cancellation(monkeypatch):
    from airflow_mpi.triggers import mpijob as trigger_module

    monkeypatch.setattr(trigger_module, "AIRFLOW_V_3_3_PLUS", False)
    hook = FakeAsyncHook(job_obj=LIVE)
    deleting, answer = asyncio.Event(), asyncio.Event()
    delete_live = hook.delete_live_mpijob

    async def slow_delete(name, namespace, uid=None):
        deleting.set()
        await answer.wait()
        return await delete_live(name, namespace, uid=uid)

    async def cleared():
        return "scheduled", 2

    monkeypatch.setattr(hook, "delete_live_mpijob", slow_delete)
    t = trigger()
    use_hook(monkeypatch, t, hook)
    monkeypatch.setattr(t, "_task_state", cleared)
    cleanup = asyncio.create_task(t.cleanup())
    await asyncio.wait_for(deleting.wait(), 10)
    cleanup.cancel()  # the triggerer's next sync
    await asyncio.sleep(0)
    answer.set()
    with pytest.raises(asyncio.CancelledError):
        await cleanup
    assert hook.deleted == [("job", "ns")]
