"""``@task.mpi`` / ``@task.horovod``: resolved through the provider's task-decorators, checked at parse time,
the ranks' command built from the rendered arguments, rank 0's value returned, its lines kept out of the log."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timezone
from types import SimpleNamespace as NS

import pytest

from airflow_mpi.decorators.horovod import _HorovodDecoratedOperator
from airflow_mpi.decorators.mpi import _MPIDecoratedOperator
from airflow_mpi.jobspec import MPIJobValidationError
from airflow_mpi.jobspec.commands import HYDRA_CONNECT_BY_IP
from airflow_mpi.function_task.function_call import decode_call
from airflow_mpi.function_task.rank_result import nonce_digest, parse_result
from airflow_mpi.function_task.rank_runner import MARKER
from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.version_compat import AirflowException, AirflowFailException, TaskDeferred
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
    return DAG("d", schedule=None, start_date=datetime(2025, 1, 1, tzinfo=timezone.utc), **kwargs)


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


def result_lines(value, nonce=NONCE):
    """What rank 0 of ``f(value)`` prints, tagged by mpirun: the runner run for real on the call's Secret."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from airflow_mpi.jobspec.errors import ErrorList
    from airflow_mpi.function_task.function_call import CALL_MOUNT, call_secret_data, pickle_arguments, rank_command

    mount = Path(tempfile.mkdtemp())
    for key, text in call_secret_data("def f(v):\n    return v\n", "f", pickle_arguments(ErrorList(), [value], {}),
                                      nonce).items():
        (mount / key).write_text(text)
    argv = [w.replace(CALL_MOUNT, str(mount)) for w in rank_command(python=sys.executable)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env={"OMPI_COMM_WORLD_RANK": "0"}).stdout
    return [f"[1,0]<stdout>:{line}" for line in out.splitlines()]


def submitted_nonce(op) -> str:
    """The nonce of the call's Secret the operator created with its job."""
    ((data, _owner),) = op.hook.secrets.values()
    return decode_call(data["call"])["nonce"]


# ---------------------------------------------------------------- registration and parse time
@pytest.mark.parametrize(("decorator", "cls"), [("mpi", _MPIDecoratedOperator), ("horovod", _HorovodDecoratedOperator)])
def test_task_decorators_resolve_through_the_provider(decorator, cls):
    op = build(decorator)
    assert type(op) is cls and op.custom_operator_name == f"@task.{decorator}"


def test_provider_info_registers_both_decorators():
    from airflow_mpi.get_provider_info import get_provider_info

    names = {d["name"]: d["class-name"] for d in get_provider_info()["task-decorators"]}
    assert names == {"mpi": "airflow_mpi.decorators.mpi.mpi_task", "horovod": "airflow_mpi.decorators.horovod.horovod_task"}


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
    with pytest.raises(MPIJobValidationError, match=r"python_callable='uses_dag'.*names of its module \(JOB\)"):
        with dag():

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
    ti = NS(dag_id="d", task_id="add", run_id=RUN_ID, map_index=-1, try_number=1,
            xcom_pull=lambda *a, **k: pulls.append(k) or [1, 2], get_relevant_upstream_map_indexes=lambda *a, **k: None)  # fmt: skip
    op.render_template_fields({"ti": ti, "task_instance": ti, "expanded_ti_count": None})
    assert list(op.op_args) == [[1, 2]] and pulls

    manifest = op.build_manifest(context())
    argv = launcher_argv(manifest)
    assert argv[:3] == list(HYDRA_CONNECT_BY_IP)  # MPICH: the workers reach mpiexec by its IP
    argv = argv[3:]
    assert argv[:6] == ["mpirun", "-n", "4", "-ppn", "2", "-prepend-rank"]
    assert argv[6:] == ["/opt/venv/bin/python", "/etc/airflow-mpi/call/runner.py", "/etc/airflow-mpi/call/call"]
    secret_name, data = op._call_secret
    call = decode_call(data["call"])
    assert call["arguments"] == (([1, 2],), {"scale": 3})
    assert call["source"].startswith("def add(values, scale=1):") and "@task" not in call["source"]
    assert "def add" not in str(manifest) and secret_name in str(manifest)
    assert manifest["metadata"]["annotations"]["airflow-mpi.io/result-nonce-sha256"] == nonce_digest(call["nonce"])


def test_the_call_secret_is_created_with_the_job_and_owned_by_it():
    op = build(call=([3, 4],))
    op.execute_create = op._create(op.build_manifest(context()))
    ((namespace, name), (data, owner)) = next(iter(op.hook.secrets.items()))
    assert (namespace, name) == ("ns", op._call_secret[0]) and owner == op.execute_create["metadata"]["uid"]
    assert decode_call(data["call"])["arguments"] == (([3, 4],), {})


def test_a_refused_call_secret_deletes_the_job_again_and_names_the_role():
    op = build()
    op.hook.secret_error = RuntimeError("403 Forbidden: cannot create resource secrets")
    with pytest.raises(AirflowFailException, match=r"Could not create Secret ns/.*403 Forbidden.*was deleted again"):
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
def test_sync_run_returns_rank_zeros_value_and_hides_its_lines(monkeypatch):
    op = build(call=([3, 4],))
    shown = []
    log_into(monkeypatch, op, shown)

    async def fake_wait(name, namespace, submitted_at, deadline, uid=None):
        emit = op._launcher_log()
        nonce = submitted_nonce(op)
        forged = [ln.replace("[1,0]", "[1,3]") for ln in result_lines({"sum": -1}, nonce)]  # rank 3 prints markers
        for line in ["[1,1]<stdout>:hello", *forged, *result_lines({"sum": 7}, nonce),
                     *result_lines({"sum": -2}, "an earlier run's nonce")]:
            emit(line)
        return {"status": "success", "name": name, "namespace": "ns", "message": "ok"}

    monkeypatch.setattr(op, "_wait", fake_wait)
    assert op.execute(context()) == {"sum": 7}
    assert "[1,1]<stdout>:hello" in shown
    assert sum(MARKER in line for line in shown) == 2 * 2  # the forged and stale lines are ordinary output


def test_deferred_run_carries_the_result_lines_in_the_event_and_returns_the_value(monkeypatch):
    op = build(deferrable=True)

    async def no_log_left(name, namespace, log_state):
        op._launcher_log()(result_lines(0, submitted_nonce(op))[0])  # what the drain may still read: "started"

    monkeypatch.setattr(op, "_drain", no_log_left)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context())
    kwargs = deferred.value.trigger.serialize()[1]
    digest = nonce_digest(submitted_nonce(op))
    assert kwargs["capture_result"] is True and kwargs["result_digest"] == digest
    resumed = build(deferrable=True)  # execute_complete runs on a new operator object
    resumed.hook.jobs, resumed.hook.secrets = op.hook.jobs, op.hook.secrets
    resumed._drain = no_log_left
    value = resumed.execute_complete(context(), {"status": "success", "name": "n", "namespace": "ns",
                                                 "result_digest": digest,
                                                 "result_lines": result_lines([1, "two"], submitted_nonce(op))})
    assert value == [1, "two"]


def test_a_value_the_resumed_wait_passed_is_read_back_from_the_launcher_log_before_cleanup():
    """A triggerer killed after rank 0's marker lines: its successor resumed past them (the event has none)."""
    op = build(deferrable=True)
    op._drain = lambda *a, **k: asyncio.sleep(0)
    with pytest.raises(TaskDeferred):
        op.execute(context())
    digest = nonce_digest(submitted_nonce(op))
    op.hook.launcher_lines = ["[1,0]<stdout>:visible", *result_lines({"v": 1}, submitted_nonce(op))]
    (name, namespace) = next(iter(op.hook.jobs))[::-1]
    value = op.execute_complete(context(), {"status": "success", "name": name, "namespace": namespace,
                                            "result_digest": digest, "result_lines": []})
    assert value == {"v": 1} and op.hook.jobs == {}  # read before delete_succeeded removed the job


async def test_trigger_keeps_result_lines_out_of_the_triggerer_log(monkeypatch):
    t = trigger(capture_result=True, result_digest=nonce_digest(NONCE))
    shown = []
    monkeypatch.setattr(MPIJobTrigger, "log", property(lambda self: NS(info=shown.append, warning=shown.append)))
    # on Airflow 3 launcher lines are logged with their position (wait/log_ledger.py): capture those too
    import airflow_mpi.wait.log_ledger as readback

    monkeypatch.setattr(readback, "marked_emitter", lambda: lambda message, mark: shown.append(message))
    lines = ["2026-11-22T10:00:01Z [1,0]<stdout>:visible", *(f"2026-11-22T10:00:02Z {ln}" for ln in result_lines(42))]
    hook = FakeAsyncHook(job_obj=job("job", "ns", ("Created", "x"), ("Succeeded", "MPIJobSucceeded")),
                         launchers=[pod("job-launcher-a", state="terminated")], logs={("job-launcher-a", False): lines})
    use_hook(monkeypatch, t, hook)
    (event,) = [e async for e in t.run()]
    assert "[1,0]<stdout>:visible" in shown and not any(MARKER in str(line) for line in shown)
    assert parse_result(event.payload["result_lines"], nonce_digest(NONCE)).value == 42


def test_a_failed_job_whose_rank_zero_never_started_says_so():
    op = build()
    with pytest.raises(AirflowException, match=r"launcher exit codes: 1\. Rank 0 never started the function.*'python3'"):
        op._finish({"status": "failed", "name": "n", "namespace": "ns", "message": "x", "launcher_exit_codes": [1]})


def test_a_failed_job_whose_function_started_fails_as_any_mpijob():
    op = build()
    op._digest, op._result_lines = nonce_digest(NONCE), result_lines(0)[:1]  # "started"
    with pytest.raises(AirflowException) as err:
        op._finish({"status": "failed", "name": "n", "namespace": "ns", "message": "x"})
    assert "never started" not in str(err.value)


def test_a_return_value_that_cannot_be_an_xcom_fails_after_the_run():
    op = build()
    op._digest = nonce_digest(NONCE)
    op._result_lines = [f"[1,0]<stdout>:{MARKER} {NONCE} started", f"[1,0]<stdout>:{MARKER} {NONCE} unreturnable U2V0OiBub3QgSlNPTg=="]
    with pytest.raises(AirflowFailException, match="succeeded, but rank 0 returned a value that cannot be an XCom"):
        op._finish({"status": "success", "name": "n", "namespace": "ns", "message": "ok"})
    assert op.hook.deleted == [("n", "ns")]  # cleaned up as any succeeded job


def test_a_succeeded_job_without_a_value_fails():
    op = build()
    with pytest.raises(AirflowFailException, match="rank 0 reported no return value"):
        op._finish({"status": "success", "name": "n", "namespace": "ns", "message": "ok"})
