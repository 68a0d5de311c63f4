"""``@task.mpi`` / ``@task.horovod``: resolved through the provider's task-decorators, checked at parse time,
the ranks' command built from the rendered arguments, rank 0's value returned, its lines kept out of the log."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from types import SimpleNamespace as NS

import pytest

from airflow_mpi.decorators.horovod import _HorovodDecoratedOperator
from airflow_mpi.decorators.mpi import _MPIDecoratedOperator
from airflow_mpi.exceptions import MPIJobProgramError
from airflow_mpi.function_task.function_call import decode_call
from airflow_mpi.function_task.rank_result import (
    RESULT_NONCE_ANNOTATION,
    UNVERIFIED,
    RankResult,
    ResultCollector,
    nonce_digest,
)
from airflow_mpi.function_task.rank_runner import MARKER, line_mac
from airflow_mpi.jobspec import MPIJobValidationError
from airflow_mpi.jobspec.commands import HYDRA_CONNECT_BY_IP
from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.version_compat import AirflowException, AirflowFailException, TaskDeferred
from airflow_mpi.wait.contract import Outcome, WaitResult
from tests.unit.fakes import FakeAsyncHook, FakeSyncHook, job, pod
from tests.unit.operators.test_trigger_sensor import trigger, use_hook

try:
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.11
    from airflow.decorators import task
    from airflow.models.dag import DAG

RUN_ID = "manual__2026-11-22T10:00:00+00:00"
JOB = {"image": "mpi:1", "workers": 2, "slots_per_worker": 2, "namespace": "ns"}


def context(task_id="add"):
    return {"ti": NS(dag_id="d", task_id=task_id, run_id=RUN_ID, map_index=-1, try_number=1)}


def dag(**kwargs):
    return DAG("d", schedule=None, start_date=datetime(2025, 1, 1, tzinfo=UTC), **kwargs)


def build(decorator="mpi", call=(5,), **kwargs):
    """``@task.<decorator>(**kwargs)`` over ``add`` called with ``call``, in a DAG; the operator."""
    with dag() as d:

        @getattr(task, decorator)(**{**JOB, **kwargs})
        def add(n, scale=1):
            # a comment
            return n * scale

        add(*call)
    op = d.get_task("add")
    op.__dict__["hook"] = FakeSyncHook()
    return op


def launcher_argv(manifest):
    container = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    return [*container.get("command", []), *container.get("args", [])]


NONCE = "the-nonce-of-this-submission"


def result_lines(value, nonce=NONCE, source="def f(v):\n    return v\n"):
    """What rank 0 of ``f(value)`` prints, tagged by mpirun: the runner run for real on the call's Secret."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from airflow_mpi.function_task.function_call import (
        CALL_MOUNT,
        call_secret_data,
        pickle_arguments,
        rank_command,
    )
    from airflow_mpi.jobspec.errors import ErrorList

    mount = Path(tempfile.mkdtemp())
    for key, text in call_secret_data(source, "f", pickle_arguments(ErrorList(), [value], {}), nonce).items():
        (mount / key).write_text(text)
    argv = [w.replace(CALL_MOUNT, str(mount)) for w in rank_command(python=sys.executable)]
    out = subprocess.run(
        argv, capture_output=True, text=True, check=True, env={"OMPI_COMM_WORLD_RANK": "0"}
    ).stdout
    return [f"[1,0]<stdout>:{line}" for line in out.splitlines()]


def submitted_nonce(op) -> str:
    """The nonce of the call's Secret the operator created with its job."""
    ((data, _owner),) = op.hook.secrets.values()
    return decode_call(data["call"])["nonce"]


# ---------------------------------------------------------------- registration and parse time
@pytest.mark.parametrize(
    ("decorator", "cls"), [("mpi", _MPIDecoratedOperator), ("horovod", _HorovodDecoratedOperator)]
)
def test_task_decorators_resolve_through_the_provider(decorator, cls):
    op = build(decorator)
    assert type(op) is cls and op.custom_operator_name == f"@task.{decorator}"


def test_provider_info_registers_both_decorators():
    from airflow_mpi.get_provider_info import get_provider_info

    names = {d["name"]: d["class-name"] for d in get_provider_info()["task-decorators"]}
    assert names == {
        "mpi": "airflow_mpi.decorators.mpi.mpi_task",
        "horovod": "airflow_mpi.decorators.horovod.horovod_task",
    }


@pytest.mark.parametrize("name", ["program", "command", "args"])
def test_the_program_parameters_are_refused(name):
    with pytest.raises(MPIJobValidationError, match=f"{name}=.*the function is the program"):
        build(**{name: ["x"]})


def test_get_logs_false_is_refused_the_value_comes_from_the_log():
    with pytest.raises(MPIJobValidationError, match="get_logs=False"):
        build(get_logs=False)


@pytest.mark.parametrize("cls", [_MPIDecoratedOperator, _HorovodDecoratedOperator])
def test_a_template_cannot_turn_the_log_off_but_may_make_the_task_deferrable(cls):
    assert "get_logs" not in cls.template_fields and "program" not in cls.template_fields
    assert {"deferrable", "op_args", "op_kwargs"} <= set(cls.template_fields)


def test_unpicklable_literal_argument_fails_at_parse_time_naming_it():
    with pytest.raises(MPIJobValidationError, match=r"op_args\[0\].*cannot be pickled"):
        build(call=(threading.Lock(),))


def test_function_using_a_module_name_fails_at_parse_time():
    with (
        pytest.raises(
            MPIJobValidationError, match=r"python_callable='uses_dag'.*names of its module \(JOB\)"
        ),
        dag(),
    ):

        @task.mpi(**JOB)
        def uses_dag():
            return JOB

        uses_dag()


# ---------------------------------------------------------------- the submitted command
def test_launcher_runs_the_function_source_with_the_rendered_upstream_argument_on_every_rank():
    with dag() as d:

        @task
        def upstream():
            return [1, 2]

        @task.mpi(**JOB, mpi_implementation="MPICH", python="/opt/venv/bin/python")
        def add(values, scale=1):
            return sum(values) * scale

        add(upstream(), scale=3)
    op = d.get_task("add")
    op.__dict__["hook"] = FakeSyncHook()
    pulls = []
    ti = NS(
        dag_id="d",
        task_id="add",
        run_id=RUN_ID,
        map_index=-1,
        try_number=1,
        task=op,  # Airflow 3.4's XComArg.resolve asks whether the reader is in the producer's loop
        xcom_pull=lambda *a, **k: pulls.append(k) or [1, 2],
        get_relevant_upstream_map_indexes=lambda *a, **k: None,
    )
    op.render_template_fields({"ti": ti, "task_instance": ti, "expanded_ti_count": None})
    assert list(op.op_args) == [[1, 2]] and pulls

    manifest = op.build_manifest(context())
    argv = launcher_argv(manifest)
    assert argv[:3] == list(HYDRA_CONNECT_BY_IP)  # MPICH: the workers reach mpiexec by its IP
    argv = argv[3:]
    assert argv[:6] == ["mpirun", "-n", "4", "-ppn", "2", "-prepend-rank"]
    assert argv[6:] == [
        "/opt/venv/bin/python",
        "/etc/airflow-mpi/call/runner.py",
        "/etc/airflow-mpi/call/call",
    ]
    secret_name, data = op.callbacks.call_secret
    call = decode_call(data["call"])
    assert call["arguments"] == (([1, 2],), {"scale": 3})
    assert call["source"].startswith("def add(values, scale=1):") and "@task" not in call["source"]
    assert "def add" not in str(manifest) and secret_name in str(manifest)
    assert manifest["metadata"]["annotations"]["airflow-mpi.io/result-nonce-sha256"] == nonce_digest(
        call["nonce"]
    )


def test_the_call_secret_is_created_with_the_job_and_owned_by_it():
    op = build(call=([3, 4],))
    op.execute_create = op._create(op.build_manifest(context()))
    ((namespace, name), (data, owner)) = next(iter(op.hook.secrets.items()))
    assert (namespace, name) == ("ns", op.callbacks.call_secret[0])
    assert owner == op.execute_create["metadata"]["uid"]
    assert decode_call(data["call"])["arguments"] == (([3, 4],), {})


def test_a_refused_call_secret_deletes_the_job_again_and_names_the_role():
    op = build()
    op.hook.secret_error = RuntimeError("403 Forbidden: cannot create resource secrets")
    with pytest.raises(
        AirflowFailException, match=r"Could not create Secret ns/.*403 Forbidden.*was deleted again"
    ):
        op._create(op.build_manifest(context()))
    assert op.hook.jobs == {} and len(op.hook.deleted) == 1


def test_a_call_too_large_for_its_secret_fails_before_anything_is_created():
    import os

    op = build(call=(os.urandom(800_000),))  # incompressible
    with pytest.raises(MPIJobValidationError, match="op_args/op_kwargs.*Secret"):
        op.execute(context())
    assert op.hook.created == [] and op.hook.secrets == {}


def log_into(monkeypatch, op, lines):
    record = NS(info=lambda msg, *a: lines.append(msg % a if a else msg), warning=lambda *a: None)
    monkeypatch.setattr(type(op), "log", property(lambda self: record))


def test_the_logged_manifest_holds_neither_function_nor_arguments(monkeypatch):
    op = build(call=("s3cr3t-argument",))
    lines = []
    log_into(monkeypatch, op, lines)
    op._log_manifest(op.build_manifest(context()))
    (text,) = lines
    assert "s3cr3t-argument" not in text and "def add" not in text and "/etc/airflow-mpi/call/call" in text


# ---------------------------------------------------------------- the result
def marker(*words, key=NONCE, rank="[1,0]<stdout>:"):
    """A marker line as rank 0's runner prints it under ``key``, tagged by mpirun."""
    return f"{rank}{MARKER} {line_mac(key, words)} {' '.join(words)}"


def test_sync_run_returns_rank_zeros_value_and_hides_its_lines(monkeypatch):
    op = build(call=([3, 4],))
    shown = []
    log_into(monkeypatch, op, shown)

    async def fake_wait(name, namespace, submitted_at, deadline, uid=None):
        emit = op._launcher_log()
        nonce = submitted_nonce(op)
        forged = [
            ln.replace("[1,0]", "[1,3]") for ln in result_lines({"sum": -1}, nonce)
        ]  # rank 3 prints markers
        for line in [
            "[1,1]<stdout>:hello",
            *forged,
            *result_lines({"sum": 7}, nonce),
            *result_lines({"sum": -2}, "an earlier run's nonce"),
        ]:
            emit(line)
        return WaitResult.from_event({"status": "success", "name": name, "namespace": "ns", "message": "ok"})

    monkeypatch.setattr(op, "_wait", fake_wait)
    assert op.execute(context()) == {"sum": 7}
    assert "[1,1]<stdout>:hello" in shown
    assert sum(MARKER in line for line in shown) == 2  # another rank's lines are ordinary output
    assert shown.count(UNVERIFIED) == 1  # an earlier run's lines: not a result, said once, never echoed


def test_deferred_run_carries_only_the_decoded_value_and_returns_it(monkeypatch):
    op = build(deferrable=True)

    async def no_log_left(name, namespace, log_state):
        op._launcher_log()(
            result_lines(0, submitted_nonce(op))[0]
        )  # what the drain may still read: "started"

    monkeypatch.setattr(op, "_drain", no_log_left)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context())
    kwargs = deferred.value.trigger.serialize()[1]
    assert kwargs["capture_result"] is True and kwargs["result_key"] == submitted_nonce(op)
    assert submitted_nonce(op) not in repr(deferred.value.trigger)
    resumed = build(deferrable=True)  # execute_complete runs on a new operator object, without the key
    resumed.hook.jobs, resumed.hook.secrets = op.hook.jobs, op.hook.secrets
    resumed._drain = no_log_left
    value = resumed.execute_complete(
        context(),
        {
            "status": "success",
            "name": "n",
            "namespace": "ns",
            "result": RankResult(True, True, [1, "two"]).to_dict(),
        },
    )
    assert value == [1, "two"]


def test_a_value_the_sync_wait_passed_is_read_back_from_the_launcher_log_before_cleanup(monkeypatch):
    op = build()

    async def wait_without_the_markers(name, namespace, submitted_at, deadline, uid=None):
        op.hook.launcher_lines = ["[1,0]<stdout>:visible", *result_lines({"v": 1}, submitted_nonce(op))]
        return WaitResult(Outcome.SUCCESS, name, namespace, "ok")

    monkeypatch.setattr(op, "_wait", wait_without_the_markers)
    assert (
        op.execute(context()) == {"v": 1} and op.hook.jobs == {}
    )  # read before delete_succeeded removed the job


def test_a_try_that_reattached_to_an_earlier_submission_cannot_verify_its_value():
    op = build()
    op._attached({"metadata": {"annotations": {RESULT_NONCE_ANNOTATION: nonce_digest(NONCE)}}})
    for line in result_lines(5):
        op._launcher_log()(line)
    with pytest.raises(
        AirflowFailException,
        match="this try cannot verify rank 0's return value: MPIJob n is an earlier try's submission",
    ):
        op._finish(WaitResult(Outcome.SUCCESS, "n", "ns", "ok"))


def trigger_hook(lines):
    stamped = ["2026-11-22T10:00:01Z [1,0]<stdout>:visible", *(f"2026-11-22T10:00:02Z {ln}" for ln in lines)]
    return FakeAsyncHook(
        job_obj=job("job", "ns", ("Created", "x"), ("Succeeded", "MPIJobSucceeded")),
        launchers=[pod("job-launcher-a", state="terminated")],
        logs={("job-launcher-a", False): stamped},
    )


def capture_trigger_log(monkeypatch, shown):
    monkeypatch.setattr(
        MPIJobTrigger, "log", property(lambda self: NS(info=shown.append, warning=shown.append))
    )
    # on Airflow 3 launcher lines are logged with their position (wait/log_ledger.py): capture those too
    import airflow_mpi.wait.log_ledger as readback

    monkeypatch.setattr(readback, "marked_emitter", lambda: lambda message, mark: shown.append(message))


async def test_the_trigger_event_carries_the_value_never_the_marker_lines_nor_the_nonce(monkeypatch):
    t = trigger(capture_result=True, result_key=NONCE)
    shown = []
    capture_trigger_log(monkeypatch, shown)
    use_hook(monkeypatch, t, trigger_hook(result_lines(42)))
    (event,) = [e async for e in t.run()]
    assert "[1,0]<stdout>:visible" in shown and not any(MARKER in str(line) for line in shown)
    assert event.payload["result"] == {"started": True, "has_value": True, "value": 42, "error": None}
    logged = repr(event)  # what Airflow 3.3's triggerer logs into the task log ("Trigger fired event")
    assert MARKER not in logged and NONCE not in logged and NONCE not in repr(t)


async def test_a_value_the_resumed_trigger_passed_is_read_back_by_the_trigger(monkeypatch):
    """A triggerer killed after rank 0's marker lines: its successor resumed past them; the worker that resumes
    the task does not hold the key, so the trigger reads the value back itself."""
    t = trigger(
        capture_result=True,
        result_key=NONCE,
        log_state={
            "cursor": {"job-launcher-a/launcher/0": [1795341602, 0, 9]},
            "streams": ["job-launcher-a/launcher/0"],
            "done": [],
        },
    )
    capture_trigger_log(monkeypatch, [])
    use_hook(monkeypatch, t, trigger_hook(result_lines({"v": 1})))
    (event,) = [e async for e in t.run()]
    assert event.payload["result"]["value"] == {"v": 1}


@pytest.mark.parametrize("path", ["sync", "trigger"])
async def test_both_waits_read_a_result_with_the_same_collector(monkeypatch, path):
    lines = [*result_lines(7), *result_lines(8, "an earlier run's nonce")]
    if path == "sync":
        op = build()
        op.callbacks.nonce = NONCE
        op._attached({"metadata": {"annotations": {RESULT_NONCE_ANNOTATION: nonce_digest(NONCE)}}})
        collector = op.callbacks.collector
        for line in lines:
            op._launcher_log()(line)
        result = op.callbacks.result(WaitResult(Outcome.SUCCESS, "n"))
    else:
        t = trigger(capture_result=True, result_key=NONCE)
        capture_trigger_log(monkeypatch, [])
        made = []
        monkeypatch.setattr(
            "airflow_mpi.triggers.mpijob.ResultCollector",
            lambda *a: made.append(ResultCollector(*a)) or made[-1],
        )
        use_hook(monkeypatch, t, trigger_hook(lines))
        (event,) = [e async for e in t.run()]
        (collector,) = made
        result = RankResult.from_dict(event.payload["result"])
    assert isinstance(collector, ResultCollector) and collector.rejected == 2
    assert result == RankResult(started=True, has_value=True, value=7)


def test_a_failed_job_whose_rank_zero_never_started_says_so():
    op = build()
    with pytest.raises(
        AirflowException, match=r"launcher exit codes: 1\. Rank 0 never started the function.*'python3'"
    ) as err:
        op._finish(WaitResult(Outcome.FAILED, "n", "ns", "x", launcher_exit_codes=[1], uid="u1"))
    # the same failure, reworded: its class and what it knows of the job stay
    assert isinstance(err.value, MPIJobProgramError) and isinstance(err.value, AirflowFailException)
    assert (err.value.name, err.value.uid, err.value.exit_codes, err.value.cause) == (
        "n",
        "u1",
        [1],
        "program",
    )


def test_a_failed_job_whose_function_started_fails_as_any_mpijob():
    op = build()
    op.callbacks.collector = ResultCollector(NONCE)
    op.callbacks.collector.take(result_lines(0)[0])  # "started"
    with pytest.raises(AirflowException) as err:
        op._finish(WaitResult(Outcome.FAILED, "n", "ns", "x"))
    assert "never started" not in str(err.value)


def test_a_return_value_that_cannot_be_an_xcom_fails_after_the_run():
    op = build()
    op.callbacks.collector = ResultCollector(NONCE)
    for line in (marker("started"), marker("unreturnable", "U2V0OiBub3QgSlNPTg==")):
        op.callbacks.collector.take(line)
    with pytest.raises(
        AirflowFailException, match="succeeded, but rank 0 returned a value that cannot be an XCom"
    ):
        op._finish(WaitResult(Outcome.SUCCESS, "n", "ns", "ok"))
    assert op.hook.deleted == [("n", "ns")]  # cleaned up as any succeeded job


def test_a_succeeded_job_without_a_value_fails():
    op = build()
    with pytest.raises(AirflowFailException, match="rank 0 reported no return value"):
        op._finish(WaitResult(Outcome.SUCCESS, "n", "ns", "ok"))


def test_the_copy_airflow_runs_sends_its_own_rendered_arguments_to_the_ranks():
    """Airflow runs a shallow copy of the parsed task (``prepare_for_execution``) and renders the templates on
    it: the call must carry the copy's rendered arguments (found by the fault suite: the parsed task's callbacks
    read the unrendered ``{{ run_id }}`` and left the argument out, so the function ran without it)."""
    with dag() as d:

        @task.mpi(**JOB)
        def stamp(run_id):
            return run_id

        stamp(run_id="{{ run_id }}")
    parsed = d.get_task("stamp")
    op = parsed.prepare_for_execution()
    assert op is not parsed
    op.__dict__["hook"] = FakeSyncHook()
    op.render_template_fields({"run_id": RUN_ID, "ti": context("stamp")["ti"]})
    op.build_manifest(context("stamp"))
    _, data = op.callbacks.call_secret
    assert decode_call(data["call"])["arguments"] == ((), {"run_id": RUN_ID})
    assert op.callbacks.operator is op and parsed.callbacks.operator is parsed
    assert parsed.callbacks.call_secret is None  # the try's state is the copy's alone
