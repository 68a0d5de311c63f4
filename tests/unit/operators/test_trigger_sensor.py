from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from airflow_mpi.sensors import MPIJobSensor
from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.triggers import mpijob as trigger_module
from airflow_mpi.version_compat import AirflowException, AirflowFailException, TaskDeferred
from airflow_mpi.wait.contract import WaitOptions
from tests.unit.fakes import FakeAsyncHook, FakeSyncHook, job, pod

NOW = datetime.now(UTC).isoformat()


def trigger(options=None, **kw):
    """A trigger waiting as ``options`` (WaitOptions' fields) say; by default it polls every 10 ms."""
    kw.setdefault("name", "job")
    kw.setdefault("namespace", "ns")
    kw.setdefault("submitted_at", NOW)
    return MPIJobTrigger(options=WaitOptions(**{"poll_interval": 0.01, **(options or {})}), **kw)


def use_hook(monkeypatch, t, hook):
    @contextlib.asynccontextmanager
    async def cm():
        yield hook

    monkeypatch.setattr(t, "_hook", cm)


def test_serialize_round_trips_plain_data():
    t = trigger(
        connection={"kube_config_path": "/k"},
        options={"deadline": datetime.fromisoformat(NOW)},
        log_state={"cursor": {}, "streams": [], "done": []},
    )
    classpath, kwargs = t.serialize()
    rebuilt = MPIJobTrigger(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert classpath == "airflow_mpi.triggers.mpijob.MPIJobTrigger"


# A trigger as the release before WaitOptions stored it: its serialize() output (wait options as arguments).
STORED_BEFORE_OPTIONS = {
    "name": "pi-1a2b3c4d",
    "namespace": "ns",
    "uid": "uid-pi-1a2b3c4d",
    "kubernetes_conn_id": "kubernetes_default",
    "api_version": "kubeflow.org/v2beta1",
    "connection": {"kube_config_path": "/k"},
    "submitted_at": "2026-11-24T10:00:00+00:00",
    "deadline": "2099-11-24T11:00:00+00:00",
    "poll_interval": 2.5,
    "startup_timeout": 60.0,
    "schedule_timeout": None,
    "queue_timeout": 900.0,
    "target_condition": "Running",
    "owns_job": False,
    "get_logs": False,
    "log_state": {"cursor": {}, "streams": [], "done": []},
    "max_attempts": 4,
    "tail_lines": 7,
    "not_before": "2026-11-24T10:00:12+00:00",
    "capture_result": True,
    "result_key": "k3y",
    "result_digest": None,
    "installation": None,
}


async def test_a_trigger_stored_before_the_options_argument_loads_and_runs_with_its_options(monkeypatch):
    t = MPIJobTrigger(**STORED_BEFORE_OPTIONS)
    assert t.options == WaitOptions(
        poll_interval=2.5,
        startup_timeout=60.0,
        schedule_timeout=None,
        queue_timeout=900.0,
        get_logs=False,
        max_attempts=4,
        tail_lines=7,
        deadline=datetime(2099, 11, 24, 11, 0, tzinfo=UTC),
        target_condition="Running",
        owns_job=False,
    )
    assert (t.name, t.uid, t.connection, t.result_key, t.capture_result) == (
        "pi-1a2b3c4d",
        "uid-pi-1a2b3c4d",
        {"kube_config_path": "/k"},
        "k3y",
        True,
    )
    _, kwargs = t.serialize()  # stored again in the new shape: one options argument
    assert kwargs["options"] == t.options.to_dict() and not set(trigger_module.LEGACY_OPTIONS) & set(kwargs)
    assert MPIJobTrigger(**kwargs).options == t.options
    hook = FakeAsyncHook(job_obj=job("pi-1a2b3c4d", "ns", ("Created", "x"), ("Running", "y")))
    use_hook(monkeypatch, t, hook)
    (event,) = [e async for e in t.run()]
    assert event.payload["status"] == "target"  # its target_condition, Running, ended the wait
    await t.on_kill()
    assert hook.deleted == []  # owns_job=False: someone else's job


async def test_run_yields_one_terminal_event_with_logs_position(monkeypatch):
    t = trigger()
    hook = FakeAsyncHook(
        job_obj=job("job", "ns", ("Created", "x"), ("Succeeded", "MPIJobSucceeded")),
        launchers=[pod("job-launcher-a", state="terminated")],
        logs={("job-launcher-a", False): ["2026-11-22T10:00:01Z hello"]},
    )
    use_hook(monkeypatch, t, hook)
    events = [e async for e in t.run()]
    assert len(events) == 1
    payload = events[0].payload
    assert payload["status"] == "success" and payload["reason"] == "MPIJobSucceeded"
    assert payload["log_state"]["streams"] == ["job-launcher-a/launcher/0"]


async def test_run_turns_unexpected_errors_into_an_error_event(monkeypatch):
    t = trigger()

    class Broken(FakeAsyncHook):
        async def get_mpijob(self, name, namespace):
            raise RuntimeError("boom")

    use_hook(monkeypatch, t, Broken(job_obj=None))
    events = [e async for e in t.run()]
    assert events[0].payload["status"] == "error" and "boom" in events[0].payload["message"]


LIVE = job("job", "ns", ("Created", "MPIJobCreated"), ("Running", "MPIJobRunning"))


async def test_on_kill_deletes_unless_fired_or_not_owned(monkeypatch):
    hook = FakeAsyncHook(job_obj=LIVE)
    t = trigger()
    use_hook(monkeypatch, t, hook)
    await t.on_kill()
    assert hook.deleted == [("job", "ns")]
    hook.deleted.clear()
    t._fired = True
    await t.on_kill()
    not_owned = trigger(options={"owns_job": False})
    use_hook(monkeypatch, not_owned, hook)
    await not_owned.on_kill()
    assert hook.deleted == []


@pytest.mark.parametrize(
    "state, current_try, deleted",
    [
        ("deferred", 1, False),  # a triggerer restart: the same try still waits
        ("deferred", None, False),  # Airflow 3.0-3.2: no try number to compare
        (
            "deferred",
            2,
            True,
        ),  # cleared, and the next try reattached to the job and deferred before this cleanup
        ("failed", 1, True),
        ("up_for_retry", 1, True),
        (None, 1, True),  # cleared, not scheduled yet
    ],
)
async def test_cleanup_before_airflow_3_3_deletes_only_when_its_try_left_deferred(
    monkeypatch, state, current_try, deleted
):
    monkeypatch.setattr(trigger_module, "AIRFLOW_V_3_3_PLUS", False)
    hook = FakeAsyncHook(job_obj=LIVE)
    t = trigger()
    t.task_instance = SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=-1, try_number=1)
    use_hook(monkeypatch, t, hook)

    async def task_state():
        return state, current_try

    monkeypatch.setattr(t, "_task_state", task_state)
    await t.cleanup()
    assert bool(hook.deleted) is deleted


async def test_cleanup_on_airflow_3_3_never_deletes(monkeypatch):
    monkeypatch.setattr(trigger_module, "AIRFLOW_V_3_3_PLUS", True)
    hook = FakeAsyncHook(job_obj=LIVE)
    t = trigger()
    use_hook(monkeypatch, t, hook)
    await t.cleanup()
    assert hook.deleted == []


@pytest.mark.parametrize("condition", ["Succeeded", "Failed"])
async def test_on_kill_keeps_a_finished_job(monkeypatch, condition):
    """A kill after the job finished (e.g. Airflow failing a resumed try) must not cost a rerun."""
    hook = FakeAsyncHook(job_obj=job("job", "ns", ("Created", "x"), (condition, "y")))
    t = trigger()
    use_hook(monkeypatch, t, hook)
    await t.on_kill()
    assert hook.deleted == []


async def test_event_is_held_until_not_before(monkeypatch):
    """The hold is measured from the absolute not_before: a restarted trigger waits only what is left."""
    slept: list[float] = []

    async def fake_sleep(seconds):
        slept.append(seconds)

    monkeypatch.setattr(trigger_module.asyncio, "sleep", fake_sleep)
    not_before = datetime.now(UTC) + timedelta(seconds=30)
    finished = job("job", "ns", ("Created", "x"), ("Succeeded", "MPIJobSucceeded"))
    for not_before_value, held in (
        (not_before.isoformat(), True),
        ((not_before - timedelta(minutes=1)).isoformat(), False),
        (None, False),
    ):
        slept.clear()
        t = trigger(not_before=not_before_value, options={"get_logs": False})
        use_hook(monkeypatch, t, FakeAsyncHook(job_obj=finished))
        events = [e async for e in t.run()]
        assert events[0].payload["status"] == "success"
        holds = [s for s in slept if s > 1]
        assert bool(holds) is held, (not_before_value, slept)
        if held:
            assert 25 < holds[0] <= 30


# ---------------------------------------------------------------- sensor
def sensor(hook, **kw):
    s = MPIJobSensor(task_id="wait", job_name="job", namespace="ns", **kw)
    s.__dict__["hook"] = hook
    return s


def with_job(*conditions):
    return FakeSyncHook(jobs={("ns", "job"): job("job", "ns", *[(c, "r") for c in conditions])})


def test_sensor_pokes_until_target_condition():
    assert sensor(with_job("Created")).poke({}) is False
    assert sensor(with_job("Created", "Running"), target_condition="Running").poke({}) is True
    assert sensor(with_job("Created", "Succeeded")).poke({}) is True


def test_sensor_fails_fast_on_failed_job_and_on_missing_job():
    with pytest.raises(AirflowFailException, match="failed"):
        sensor(with_job("Created", "Failed")).poke({})
    with pytest.raises(AirflowException, match="does not exist"):
        sensor(FakeSyncHook()).poke({})


def test_a_poke_rides_out_an_api_server_restart_but_not_a_refusal(monkeypatch):
    """A poke that meets the API server restarting waits it out (like the operator's wait); a 403 is an answer."""
    from kubernetes.client.exceptions import ApiException

    from airflow_mpi.hooks import retries

    monkeypatch.setattr(retries, "OUTAGE_RETRY_DELAY", 0)

    class Restarting(FakeSyncHook):
        def __init__(self, failures, **kw):
            super().__init__(**kw)
            self.failures = list(failures)

        def get_mpijob(self, name, namespace):
            if self.failures:
                raise self.failures.pop(0)
            return super().get_mpijob(name, namespace)

    hook = Restarting(
        [ConnectionRefusedError(111, "refused")] * 6 + [ApiException(status=503)],
        jobs=with_job("Created", "Succeeded").jobs,
    )
    assert sensor(hook).poke({}) is True and hook.failures == []
    monkeypatch.setattr(retries._Recent, "last", None)  # a minute later: no failure seen lately
    refused = Restarting([ApiException(status=403), ConnectionRefusedError(111, "refused")], jobs=hook.jobs)
    with pytest.raises(ApiException):
        sensor(refused).poke({})
    assert len(refused.failures) == 1


def test_sensor_rejects_unknown_condition_at_parse_time():
    with pytest.raises(ValueError, match="target_condition='Done'"):
        MPIJobSensor(task_id="s", job_name="j", target_condition="Done")


def test_deferrable_sensor_defers_without_owning_the_job():
    s = sensor(with_job("Created"), deferrable=True, timeout=60)
    with pytest.raises(TaskDeferred) as deferred:
        s.execute({})
    kwargs = deferred.value.trigger.serialize()[1]
    options = kwargs["options"]
    assert options["owns_job"] is False and options["target_condition"] == "Succeeded" and options["deadline"]


def test_deferrable_sensor_does_not_defer_when_the_condition_already_holds():
    """A trigger would fire at once, inside Airflow's deferral race: the worker answers instead."""
    s = sensor(with_job("Created", "Succeeded"), deferrable=True, timeout=60)
    assert s.execute({}) is None
    with pytest.raises(AirflowFailException):
        sensor(with_job("Created", "Failed"), deferrable=True).execute({})


def test_sensor_execute_complete_maps_events():
    s = sensor(with_job("Created", "Succeeded"))
    assert (
        s.execute_complete({}, {"status": "success", "name": "job", "namespace": "ns", "message": ""})["name"]
        == "job"
    )
    with pytest.raises(AirflowFailException):
        s.execute_complete({}, {"status": "failed", "name": "job", "namespace": "ns", "message": "x"})
    with pytest.raises(AirflowException, match="timed out"):
        s.execute_complete({}, {"status": "timeout", "name": "job", "namespace": "ns"})
    assert s.hook.deleted == []


@pytest.mark.parametrize("outcome", ["invalid", "unschedulable", "startup_timeout", "worker_failed"])
def test_the_sensor_never_deletes_the_job_it_watches_whatever_the_wait_concluded(outcome):
    """The operator deletes a job it gave up on (it holds GPUs for nothing); the sensor's job is someone else's."""
    s = sensor(with_job("Created"))
    with pytest.raises(AirflowException):
        s.execute_complete({}, {"status": outcome, "name": "job", "namespace": "ns", "message": "x"})
    assert s.hook.deleted == []
