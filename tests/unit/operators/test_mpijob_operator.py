from __future__ import annotations

import copy
import re
from datetime import UTC
from types import SimpleNamespace as NS

import pytest

from airflow_mpi.exceptions import MPIJobInfrastructureError, MPIJobInvalidSpecError, MPIJobProgramError
from airflow_mpi.jobspec import MPIJobValidationError
from airflow_mpi.jobspec.naming import (
    DEPLOYMENT_LABEL,
    TASK_INSTANCE_ID_ANNOTATION,
    TRY_NUMBER_LABEL,
    identity_labels,
)
from airflow_mpi.operators import HorovodJobOperator, MPIJobOperator
from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.version_compat import AirflowException, AirflowFailException, TaskDeferred
from airflow_mpi.wait.contract import WaitResult
from tests.unit.fakes import FakeSyncHook

RUN_ID = "manual__2026-11-22T10:00:00+00:00"


def context(try_number=1, map_index=-1):
    return {"ti": NS(dag_id="dag", task_id="mpi", run_id=RUN_ID, map_index=map_index, try_number=try_number)}


def make(hook=None, **kwargs):
    kwargs.setdefault("task_id", "mpi")
    kwargs.setdefault("image", "mpi:1")
    kwargs.setdefault("command", ["mpirun", "hostname"])
    kwargs.setdefault("workers", 2)
    kwargs.setdefault("namespace", "ns")
    op = MPIJobOperator(**kwargs)
    op.__dict__["hook"] = hook or FakeSyncHook()
    return op


def result(status="success", **extra):
    """A trigger's event."""
    return {
        "status": status,
        "name": "n",
        "namespace": "ns",
        "message": "m",
        "condition": "Succeeded",
        "launcher_pods": ["p"],
        "launcher_attempts": 1,
        "warnings": [],
        **extra,
    }


def wait_result(status="success", **extra):
    """What a wait in the worker returns."""
    return WaitResult.from_event(result(status, **extra))


# ---------------------------------------------------------------- manifest and retry mapping
def test_retries_become_backoff_limit_with_never_restarting_launcher():
    manifest = make(retries=3).build_manifest(context())
    assert manifest["spec"]["runPolicy"]["backoffLimit"] == 3
    assert manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] == "Never"


def test_explicit_backoff_limit_is_used_as_given():
    manifest = make(retries=3, backoff_limit=1).build_manifest(context())
    assert manifest["spec"]["runPolicy"]["backoffLimit"] == 1
    assert manifest["spec"]["mpiReplicaSpecs"]["Launcher"].get("restartPolicy", "OnFailure") == "OnFailure"


def test_manifest_carries_identity_and_deterministic_name():
    op = make()
    first, again = op.build_manifest(context()), op.build_manifest(context(try_number=2))
    assert first["metadata"]["name"] == again["metadata"]["name"]
    labels = first["metadata"]["labels"]
    assert labels == {**labels, **identity_labels("dag", "mpi", RUN_ID, -1, 1)}
    assert first["metadata"]["annotations"]["airflow-mpi.io/run-id"] == RUN_ID
    assert again["metadata"]["labels"][TRY_NUMBER_LABEL] == "2"
    assert first["metadata"]["namespace"] == "ns"
    assert first["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2


def test_program_builds_mpirun_with_np_workers_times_slots():
    manifest = make(command=None, program=["python", "pi.py"], workers=3, slots_per_worker=2).build_manifest(
        context()
    )
    container = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    cmd = container["command"] + container.get("args", [])
    assert cmd[0] == "mpirun" and cmd[cmd.index("-np") + 1] == "6" and cmd[-2:] == ["python", "pi.py"]


def test_role_overrides_and_user_labels():
    manifest = make(worker={"annotations": {"a": "b"}}, labels={"team": "hpc"}).build_manifest(context())
    assert manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"] == {"a": "b"}
    assert manifest["metadata"]["labels"]["team"] == "hpc"


def test_namespace_falls_back_to_the_hook():
    op = make(namespace=None, hook=FakeSyncHook(namespace="from-conn"))
    assert op.build_manifest(context())["metadata"]["namespace"] == "from-conn"


# ---------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "kwargs, field, value",
    [
        ({"workers": 0}, "workers", 0),
        ({"image": "mpi:1 "}, "image", "mpi:1 "),  # the kubelet would fail the pull after scheduling
        ({"image": "mpi :1"}, "image", "mpi :1"),
        ({"workers": 2.5}, "workers", 2.5),
        ({"workers": True}, "workers", True),
        ({"slots_per_worker": 0}, "slots_per_worker", 0),
        ({"gpus_per_worker": 1.0}, "gpus_per_worker", 1.0),
        ({"on_finish_action": "explode"}, "on_finish_action", "explode"),
        ({"poll_interval": 0}, "poll_interval", 0),
        ({"startup_timeout": 0}, "startup_timeout", 0),
        ({"schedule_timeout": -1}, "schedule_timeout", -1),
        ({"worker_log_tail_lines": 2.5}, "worker_log_tail_lines", 2.5),
        ({"deferrable": "yes"}, "deferrable", "yes"),
        ({"backoff_limit": -1}, "backoff_limit", -1),
        ({"clean_pod_policy": "Sometimes"}, "clean_pod_policy", "Sometimes"),
        ({"worker_resources": {"limits": {"cpu": "lots"}}}, "worker_resources.limits.cpu", "lots"),
        ({"worker": {"colour": "red"}}, "worker.colour", "red"),
        ({"worker": {"replicas": 3}}, "worker.replicas", 3),  # and workers=2 (make's default): two answers
        ({"launcher": {"command": ["x"]}}, "launcher.command", ["x"]),  # and command=: two answers
        ({"program": ["pi"]}, "command", ["mpirun", "hostname"]),  # program builds the command
        ({"command": None, "mpirun_args": ["-v"]}, "mpirun_args", ["-v"]),  # without program: ignored
        ({"command": 'echo "unclosed'}, "command", 'echo "unclosed'),
        ({"scheduling_policy": {"minAvailable": 1, "colour": 1}}, "scheduling_policy.colour", 1),
        ({"api_version": "kubeflow.org/v1", "mpi_implementation": "Intel"}, "mpi_implementation", "Intel"),
        ({"api_version": "kubeflow.org/v1", "ssh_auth_mount_path": "/s"}, "ssh_auth_mount_path", "/s"),
    ],
)
def test_bad_parameters_fail_at_dag_parse_naming_the_parameter_and_value(kwargs, field, value):
    with pytest.raises(MPIJobValidationError) as err:
        make(**kwargs)
    assert (field, value) in [(e.field, e.value) for e in err.value.errors], str(err.value)
    assert f"{field}={value!r}: " in str(err.value)


@pytest.mark.parametrize(
    "rendered, message", [("0", "workers=0: must be >= 1"), ("2.5", "workers='2.5': must be an integer")]
)
def test_templated_values_are_validated_after_rendering_only(rendered, message):
    op = make(workers="{{ params.workers }}")  # parse time: accepted
    op.workers = rendered  # what rendering produced
    hook = op.hook
    with pytest.raises(MPIJobValidationError, match=re.escape(message)):
        op.execute(context())
    assert hook.created == []


@pytest.mark.parametrize("role", ["launcher", "worker"])
def test_a_templated_role_dict_is_accepted_at_parse_time_and_applied_after_rendering(role):
    """A role dict from a Param (``launcher="{{ params.launcher }}"``, as the e2e DAGs do) is not checked until
    rendered; the parse-time stand-in is "not given", never the spec's internal default."""
    op = make(**{role: "{{ params.overrides }}"})  # parse time: accepted
    setattr(op, role, {"labels": {"from": "param"}})  # what rendering produced
    replica = op.build_manifest(context())["spec"]["mpiReplicaSpecs"][role.capitalize()]
    assert replica["template"]["metadata"]["labels"]["from"] == "param"


def test_digit_strings_rendered_by_jinja_are_integers():
    op = make(workers="{{ w }}", slots_per_worker="{{ s }}", command=None, program="pi")
    op.workers, op.slots_per_worker = "3", " 2 "
    spec = op.build_manifest(context())["spec"]
    assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 3 and spec["slotsPerWorker"] == 2


# ---------------------------------------------------------------- execute, reattach, finish
def test_execute_creates_once_and_returns_xcom(monkeypatch):
    op = make()
    captured = {}

    async def fake_wait(name, namespace, submitted_at, deadline, uid=None):
        captured["name"] = name
        return wait_result(name=name)

    monkeypatch.setattr(op, "_wait", fake_wait)
    xcom = op.execute(context())
    assert len(op.hook.created) == 1 and xcom["name"] == captured["name"]
    assert xcom["launcher_pods"] == ["p"] and xcom["api_version"] == "kubeflow.org/v2beta1"
    assert op.hook.deleted == [(captured["name"], "ns")]  # delete_succeeded


def _existing(op, *conditions, labels=None, try_number=1):
    manifest = op.build_manifest(context(try_number=try_number))
    obj = {**manifest, "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}
    if labels is not None:
        obj["metadata"] = {**obj["metadata"], "labels": labels}
    op.hook.jobs[("ns", manifest["metadata"]["name"])] = obj
    return obj


@pytest.mark.parametrize("conditions", [("Created", "Running"), ("Created", "Succeeded")])
def test_new_try_reattaches_to_live_or_succeeded_job(monkeypatch, conditions):
    op = make(retries=2)
    _existing(op, *conditions)

    async def fake_wait(*args, **kwargs):
        return wait_result()

    monkeypatch.setattr(op, "_wait", fake_wait)
    op.execute(context(try_number=2))
    assert op.hook.created == []


def test_failed_job_of_an_earlier_try_is_replaced():
    op = make(backoff_limit=0, retries=1)
    _existing(op, "Created", "Failed")
    op.deferrable = True
    with pytest.raises(TaskDeferred):
        op.execute(context(try_number=2))
    assert len(op.hook.deleted) == 1 and len(op.hook.created) == 1


def test_job_of_another_task_is_not_adopted():
    op = make()
    _existing(op, "Created", labels=identity_labels("other", "task", "run", -1, 1))
    with pytest.raises(AirflowFailException, match="is not this task instance's job in this deployment"):
        op.execute(context())
    assert op.hook.created == []


def test_a_run_id_spelled_like_another_runs_label_never_adopts_that_runs_live_job(monkeypatch):
    """Issue 32 item 2: run B's id is run A's sanitised label (the default allowed_run_id_pattern accepts it). B's job
    name differs (names hash the raw ids), the selector fallback finds A's live job (labels agree): B must not stream,
    report or delete it. B runs its own job; A's is left alone."""
    from airflow_mpi.jobspec.naming import sanitize_label_value

    op = make()
    a_job = _existing(op, "Created", "Running")
    crafted = {
        "ti": NS(dag_id="dag", task_id="mpi", run_id=sanitize_label_value(RUN_ID), map_index=-1, try_number=1)
    }
    assert op.build_manifest(crafted)["metadata"]["name"] != a_job["metadata"]["name"]
    waited = []

    async def fake_wait(name, *args, **kwargs):
        waited.append(name)
        return wait_result(name=name)

    monkeypatch.setattr(op, "_wait", fake_wait)
    op.execute(crafted)
    assert [m["metadata"]["annotations"]["airflow-mpi.io/run-id"] for m in op.hook.created] == [
        crafted["ti"].run_id
    ]
    assert waited == [op.hook.created[0]["metadata"]["name"]]
    assert a_job["metadata"]["name"] not in [name for name, _ in op.hook.deleted]


def test_the_same_task_instance_of_another_deployment_is_never_adopted_or_deleted():
    """Staging and prod share a namespace and run ids: a job carrying another deployment's label under this
    task's name (or a rendered manifest, which carries none) fails the task, naming both deployments."""
    op = make()
    for deployment in ("staging", None):
        _existing(op, "Created", "Failed", labels=identity_labels("dag", "mpi", RUN_ID, -1, 1, deployment))
        with pytest.raises(
            AirflowFailException, match=rf"deployment=.?{deployment}.?, this deployment's is 'tests-in"
        ):
            op.execute(context())
        assert op.hook.created == [] and op.hook.deleted == []


def test_the_job_carries_the_deployment_and_the_tries_task_instance_id():
    op = make()
    ctx = {"ti": NS(dag_id="dag", task_id="mpi", run_id=RUN_ID, map_index=-1, try_number=2, id="0196-uuid")}
    metadata = op.build_manifest(ctx)["metadata"]
    assert metadata["labels"][DEPLOYMENT_LABEL] == "tests-in-process"
    assert metadata["annotations"][TASK_INSTANCE_ID_ANNOTATION] == "0196-uuid"
    on_2_11 = {
        "ti": NS(dag_id="dag", task_id="mpi", run_id=RUN_ID, map_index=3, try_number=2),
        "dag_run": NS(id=41),
    }
    assert (
        op.build_manifest(on_2_11)["metadata"]["annotations"][TASK_INSTANCE_ID_ANNOTATION]
        == "dagrun-41/mpi/3/try-2"
    )


def test_two_deployments_name_the_same_task_instances_job_differently(monkeypatch):
    op = make()
    ours = op.build_manifest(context())["metadata"]["name"]
    monkeypatch.setenv("AIRFLOW__AIRFLOW_MPI__DEPLOYMENT_ID", "staging")
    assert op.build_manifest(context())["metadata"]["name"] != ours


def test_a_recorded_job_replaced_under_its_name_is_not_reattached_to(monkeypatch):
    op = make()
    obj = _existing(op, "Created", "Running")
    obj["metadata"]["uid"] = "made-by-someone-else"
    store = {
        "airflow_mpi_job": {"name": obj["metadata"]["name"], "namespace": "ns", "uid": "the-one-we-made"}
    }
    ctx = {**context(try_number=2), "task_state_store": NS(get=store.get, set=store.__setitem__)}
    with pytest.raises(AirflowFailException, match="someone replaced it"):
        op.execute(ctx)
    assert op.hook.created == [] and op.hook.deleted == []


def test_live_job_found_by_labels_under_another_name(monkeypatch):
    op = make()
    obj = _existing(op, "Created")
    renamed = {**obj, "metadata": {**obj["metadata"], "name": "user-renamed"}}
    op.hook.jobs = {("ns", "user-renamed"): renamed}

    async def fake_wait(name, *args, **kwargs):
        assert name == "user-renamed"
        return wait_result(name=name)

    monkeypatch.setattr(op, "_wait", fake_wait)
    op.execute(context())
    assert op.hook.created == []


def test_schema_rejection_is_a_permanent_error_naming_the_field():
    from kubernetes.client.exceptions import ApiException

    err = ApiException(status=422, reason="Unprocessable Entity")
    err.body = (
        '{"message": "invalid", "details": '
        '{"causes": [{"field": "spec.slotsPerWorker", "message": "Invalid value"}]}}'
    )
    op = make(hook=FakeSyncHook(create_error=err))
    with pytest.raises(AirflowFailException, match="spec.slotsPerWorker: Invalid value") as raised:
        op.execute(context())
    assert isinstance(raised.value, MPIJobInvalidSpecError) and raised.value.cause == "invalid"
    assert raised.value.namespace == "ns" and raised.value.name.startswith("dag-mpi-")
    forbidden = ApiException(status=403, reason="Forbidden")  # the role's, not the spec's
    with pytest.raises(AirflowFailException) as raised:
        make(hook=FakeSyncHook(create_error=forbidden)).execute(context())
    assert not isinstance(raised.value, MPIJobInvalidSpecError)


def test_deferrable_defers_with_plain_data_trigger():
    op = make(deferrable=True, retries=2)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, MPIJobTrigger)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_mpi.triggers.mpijob.MPIJobTrigger"
    assert kwargs["options"]["max_attempts"] == 3
    assert kwargs["connection"] == {"kube_config_path": "/tmp/kubeconfig"}
    import json

    json.dumps(kwargs)  # plain data only


@pytest.mark.parametrize(
    "backoff_limit, exc",
    [(None, AirflowFailException), (2, AirflowException)],
)
def test_failed_job_exception_follows_retry_mapping(monkeypatch, backoff_limit, exc):
    op = make(backoff_limit=backoff_limit)
    monkeypatch.setattr(op, "_drain", _no_drain)
    with pytest.raises(exc) as err:
        op.execute_complete(context(), result("failed", message="BackoffLimitExceeded"))
    assert isinstance(err.value, AirflowFailException) == (backoff_limit is None)
    assert isinstance(err.value, MPIJobProgramError) and err.value.retryable == (backoff_limit is not None)
    assert op.hook.deleted == []  # a failed job is kept for debugging by default


def test_failure_message_names_the_launchers_exit_codes(monkeypatch):
    op = make()
    monkeypatch.setattr(op, "_drain", _no_drain)
    with pytest.raises(AirflowFailException) as err:
        op.execute_complete(
            context(), result("failed", message="BackoffLimitExceeded", launcher_exit_codes=[1, 3])
        )
    assert str(err.value) == "MPIJob ns/n failed: BackoffLimitExceeded; launcher exit codes: 1, 3"


@pytest.mark.parametrize(
    "detail, expected",
    [
        ("it was deleted while the task waited", "MPIJob ns/n: it was deleted while the task waited"),
        (
            "MPIJob ns/n was deleted",
            "MPIJob ns/n was deleted",
        ),  # a detail naming the job is not wrapped again
        ("gone", "MPIJob ns/n deleted: gone"),
        (None, "MPIJob ns/n deleted: (no detail)"),
    ],
)
def test_deletion_message_says_deleted_and_names_the_job_once(monkeypatch, detail, expected):
    op = make(on_finish_action="keep")
    monkeypatch.setattr(op, "_drain", _no_drain)
    with pytest.raises(AirflowException) as err:
        op.execute_complete(context(), result("deleted", message=detail))
    assert str(err.value) == expected


async def _no_drain(*args):
    return None


@pytest.mark.parametrize("outcome", ["invalid", "unschedulable", "startup_timeout", "timeout"])
def test_abandoned_jobs_are_deleted_whatever_the_action(monkeypatch, outcome):
    op = make(on_finish_action="keep", get_logs=False)
    with pytest.raises(AirflowException):
        op.execute_complete(context(), result(outcome))
    assert op.hook.deleted == [("n", "ns")]


def test_on_finish_keep_keeps_a_succeeded_job(monkeypatch):
    op = make(on_finish_action="keep", get_logs=False)
    op.execute_complete(context(), result())
    assert op.hook.deleted == []


class Recorder:
    def __init__(self):
        self.lines = []

    def __getattr__(self, level):
        return lambda msg, *args, **kw: self.lines.append(msg % args if args else msg)


def test_failure_prints_warning_events_and_worker_tails(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(MPIJobOperator, "log", property(lambda self: recorder))
    op = make(get_logs=False, worker_log_tail_lines=5)
    with pytest.raises(AirflowFailException):
        op.execute_complete(context(), result("failed", warnings=["job-worker-0: BackOff: crash"]))
    text = "\n".join(recorder.lines)
    assert "job-worker-0: BackOff: crash" in text and "worker said goodbye" in text


def test_a_failed_jobs_error_names_the_cause_and_the_failed_workers_last_lines(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(MPIJobOperator, "log", property(lambda self: recorder))
    op = make(get_logs=False)
    op.hook.worker_log_tails = None  # the wait's report is used: no read after the clean-up
    failure = {
        "causes": ["worker pod n-worker-1 (container worker): OOMKilled: out of memory, memory limit 64Mi"],
        "tails": [
            {"pod": "n-worker-1", "role": "worker", "container": "worker", "lines": ["rank 1 allocating"]},
            {
                "pod": "n-launcher-x",
                "role": "launcher",
                "container": "launcher",
                "lines": [f"launcher line {i}" for i in range(15)],
            },
        ],
    }
    with pytest.raises(AirflowFailException) as err:
        op.execute_complete(
            context(),
            result("failed", message="BackoffLimitExceeded", launcher_exit_codes=[137], failure=failure),
        )
    assert str(err.value).splitlines() == [
        "MPIJob ns/n failed: BackoffLimitExceeded; launcher exit codes: 137",
        "cause: worker pod n-worker-1 (container worker): OOMKilled: out of memory, memory limit 64Mi",
        "last 1 log lines of worker n-worker-1 (container worker):",
        "    rank 1 allocating",
        "last 10 log lines of launcher n-launcher-x (container launcher):",
        *[f"    launcher line {i}" for i in range(5, 15)],
    ]
    assert (
        "rank 1 allocating" in recorder.lines
    )  # the worker's tail in the task log (the launcher's is there already)
    assert not any(line.startswith("launcher line") for line in recorder.lines)


def test_on_kill_deletes_a_live_job():
    op = make()
    op.on_kill()
    assert op.hook.deleted == []
    live = _existing(op, "Created", "Running")
    live["metadata"]["uid"] = "ours"
    op._job = (live["metadata"]["name"], "ns", "another-incarnation")
    op.on_kill()
    assert op.hook.deleted == []  # not the object this task made
    op._job = (live["metadata"]["name"], "ns", "ours")
    op.on_kill()
    assert op.hook.deleted == [op._job[:2]]


@pytest.mark.parametrize("condition", ["Succeeded", "Failed"])
def test_on_kill_keeps_a_finished_job(condition):
    """A resumed try killed by Airflow's deferral race must not delete the result a retry reattaches to."""
    op = make()
    done = _existing(op, "Created", condition)
    op._job = (done["metadata"]["name"], "ns", None)
    op.on_kill()
    assert op.hook.deleted == [] and op.hook.jobs


def test_deferrable_task_does_not_defer_on_a_succeeded_job(monkeypatch):
    """Reattaching to a finished job finishes in the worker: a trigger would fire inside the race window."""
    op = make(deferrable=True, get_logs=False, on_finish_action="keep", backoff_limit=0)
    _existing(op, "Created", "Succeeded")
    waited = []

    async def fake_wait(name, *args, **kwargs):
        waited.append(name)
        return wait_result(name=name)

    monkeypatch.setattr(op, "_wait", fake_wait)
    assert op.execute(context(try_number=2))["condition"] == "Succeeded"
    assert waited and op.hook.created == []


def test_deferral_carries_an_absolute_not_before_on_affected_airflow(monkeypatch):
    from datetime import datetime

    from airflow_mpi.operators import deferral as deferral_module
    from airflow_mpi.wait.deferral import RESUME_RACE_WINDOW

    for version, held in (("3.3.2", True), ("2.11.2", False)):
        monkeypatch.setattr(deferral_module, "AIRFLOW_VERSION", version)
        recorder = Recorder()
        monkeypatch.setattr(MPIJobOperator, "log", property(lambda self, recorder=recorder: recorder))
        before = datetime.now(UTC)
        op = make(deferrable=True)
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context())
        not_before = deferred.value.trigger.serialize()[1]["not_before"]
        assert (not_before is not None) is held
        # the task log says until when, as the trigger carries it (tests/e2e/test_deferral_race.py reads it)
        assert any(f"holds its event until {not_before}," in line for line in recorder.lines) is held
        if held:
            assert datetime.fromisoformat(not_before) - before >= RESUME_RACE_WINDOW


def test_horovod_builds_horovodrun():
    op = HorovodJobOperator(
        task_id="hvd",
        image="hvd:1",
        program=["python", "train.py"],
        workers=2,
        slots_per_worker=4,
        namespace="ns",
    )
    op.__dict__["hook"] = FakeSyncHook()
    manifest = op.build_manifest(context())
    container = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    cmd = container["command"] + container.get("args", [])
    assert cmd[0] == "horovodrun" and cmd[cmd.index("-np") + 1] == "8" and cmd[-2:] == ["python", "train.py"]


def test_conflict_or_missing_crd_on_create_fail_without_retry():
    from airflow_mpi.hooks.errors import MPIJobAPIUnavailable, MPIJobConflictError

    for error in (
        MPIJobConflictError("n", "ns", {"a": "1"}, {"a": "2"}),
        MPIJobAPIUnavailable("kubeflow.org/v2beta1", "ns"),
    ):
        op = make(hook=FakeSyncHook(create_error=error))
        with pytest.raises(AirflowFailException):
            op.execute(context())


def test_job_deleted_by_the_cleanup_of_an_earlier_try_is_resubmitted_once(monkeypatch):
    """Clearing a deferred task: its trigger deletes the MPIJob while the new try already reattached."""
    op = make(get_logs=False)
    existing = _existing(op, "Created", "Running", try_number=1)
    name = existing["metadata"]["name"]
    op.deferrable = True
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context(try_number=2))
    assert deferred.value.kwargs["job_try_number"] == 1 and op.hook.created == []
    op.hook.jobs.clear()  # the first try's trigger deleted it
    with pytest.raises(TaskDeferred) as again:
        op.execute_complete(context(try_number=2), result("deleted", name=name), job_try_number=1)
    assert len(op.hook.created) == 1 and again.value.kwargs["job_try_number"] == 2
    with pytest.raises(AirflowException, match="deleted"):  # a deletion of the current try's job fails
        op.execute_complete(context(try_number=2), result("deleted", name=name), job_try_number=2)


def test_job_being_deleted_is_not_reattached():
    op = make(deferrable=True)
    existing = _existing(op, "Created", "Running")
    existing["metadata"]["deletionTimestamp"] = "2026-11-22T10:00:00Z"
    op.hook.wait_for_deleted = lambda name, ns, timeout: op.hook.jobs.pop((ns, name), None) or True
    with pytest.raises(TaskDeferred):
        op.execute(context(try_number=2))
    assert len(op.hook.created) == 1


# ---------------------------------------------------------------- precedence, offline rendering
BASE = {
    "apiVersion": "kubeflow.org/v2beta1",
    "kind": "MPIJob",
    "metadata": {"name": "from-base"},
    "spec": {
        "mpiImplementation": "Intel",
        "runPolicy": {"backoffLimit": 4},
        "mpiReplicaSpecs": {
            "Launcher": {"template": {"spec": {"containers": [{"name": "l", "image": "base:1"}]}}},
            "Worker": {
                "replicas": 3,
                "template": {"spec": {"containers": [{"name": "w", "image": "base:1"}]}},
            },
        },
    },
}


def test_the_base_manifest_wins_over_operator_defaults_and_the_log_says_so(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(MPIJobOperator, "log", property(lambda self: recorder))
    op = make(image=None, command=None, workers=None, base_manifest=BASE, retries=2)
    spec = op.build_manifest(context())["spec"]
    assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 3 and spec["mpiImplementation"] == "Intel"
    assert spec["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 4}
    assert spec["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] == "Never"
    op._log_settings()
    text = "\n".join(recorder.lines)
    assert "workers=3 (base manifest)" in text and "backoff_limit=4 (base manifest)" in text
    assert (
        "launcher.restart_policy='Never' (default)" in text and "clean_pod_policy='Running' (default)" in text
    )
    assert "from the base manifest; Airflow retries=2 each start a fresh MPIJob" in text
    assert op.effective_backoff_limit() == 4


def test_a_failed_job_with_the_base_manifests_backoff_limit_stays_retryable_after_resuming(monkeypatch):
    op = make(image=None, command=None, workers=None, base_manifest=BASE, retries=2, get_logs=False)
    with pytest.raises(AirflowException) as err:  # a fresh instance, as after a deferral: nothing built yet
        op.execute_complete(context(), result("failed"))
    assert isinstance(err.value, MPIJobProgramError) and not isinstance(err.value, AirflowFailException)


def test_build_manifest_renders_offline_without_a_task_instance():
    op = make(namespace=None, hook=FakeSyncHook(namespace="from-connection"))
    manifest = op.build_manifest()
    assert manifest["metadata"]["namespace"] == "from-connection"
    assert manifest["metadata"]["labels"][TRY_NUMBER_LABEL] == "1"
    assert manifest["metadata"]["annotations"]["airflow-mpi.io/run-id"] == "offline"
    assert (
        op.build_manifest({"run_id": "review"})["metadata"]["annotations"]["airflow-mpi.io/run-id"]
        == "review"
    )
    no_namespace = make(namespace=None, hook=FakeSyncHook(namespace=None)).build_manifest()
    assert "namespace" not in no_namespace["metadata"]


def test_configured_namespace_reads_the_connection_and_tolerates_a_missing_one(monkeypatch):
    from airflow_mpi.hooks import MPIJobHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_MPI_TEST", '{"conn_type": "kubernetes", "extra": {"namespace": "team-a"}}'
    )
    assert MPIJobHook(conn_id="mpi_test").configured_namespace() == "team-a"
    monkeypatch.setenv("AIRFLOW_CONN_MPI_EMPTY", '{"conn_type": "kubernetes"}')
    assert MPIJobHook(conn_id="mpi_empty").configured_namespace() is None


def test_templated_task_parameters_are_checked_after_rendering_too():
    op = make(deferrable=False)
    op.deferrable = "maybe"  # what rendering produced: neither a boolean nor the text of one
    with pytest.raises(MPIJobValidationError, match="deferrable='maybe': must be a boolean"):
        op.build_manifest(context())


def test_rendered_text_of_a_task_setting_becomes_its_type():
    """Without render_template_as_native_obj a template renders text: "False" is False, not truthy text."""
    op = make(
        deferrable="{{ params.d }}",
        get_logs="{{ params.g }}",
        poll_interval="{{ params.p }}",
        worker_log_tail_lines="{{ params.t }}",
        workers="{{ params.w }}",
    )
    op.render_template_fields({"params": {"d": False, "g": "TRUE", "p": 2.5, "t": 7, "w": 3}})
    assert (op.deferrable, op.get_logs, op.poll_interval, op.worker_log_tail_lines) == (
        "False",
        "TRUE",
        "2.5",
        "7",
    )
    assert op.build_manifest(context())["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    assert (op.deferrable, op.get_logs, op.poll_interval, op.worker_log_tail_lines) == (False, True, 2.5, 7)
    resumed = make(
        get_logs="{{ params.g }}", on_finish_action="keep"
    )  # after a deferral: no build_manifest first
    resumed.render_template_fields({"params": {"g": False}})
    resumed.execute_complete(context(), result())
    assert resumed.get_logs is False


def test_deferrable_may_come_from_a_template():
    assert "deferrable" in MPIJobOperator.template_fields
    op = make(deferrable="{{ params.deferrable }}")  # parse time: accepted, checked once rendered
    op.deferrable = "True"
    with pytest.raises(TaskDeferred):
        op.execute(context())


# ---------------------------------------------------------------- scheduler_name: one row of jobspec/fields.py
def _scheduler_names(manifest: dict) -> list:
    replicas = manifest["spec"]["mpiReplicaSpecs"]
    return [replicas[role]["template"]["spec"].get("schedulerName") for role in ("Launcher", "Worker")]


@pytest.mark.parametrize("api_version", ["kubeflow.org/v2beta1", "kubeflow.org/v1"])
def test_scheduler_name_goes_to_both_roles_pods_and_a_role_may_override_it(api_version):
    op = make(scheduler_name="volcano", api_version=api_version)
    assert _scheduler_names(op.build_manifest(context())) == ["volcano", "volcano"]
    op = make(scheduler_name="volcano", worker={"scheduler_name": "kueue"}, api_version=api_version)
    assert _scheduler_names(op.build_manifest(context())) == ["volcano", "kueue"]
    assert _scheduler_names(make(api_version=api_version).build_manifest(context())) == [None, None]


def test_scheduler_name_of_the_base_manifest_is_kept_unless_the_parameter_is_given():
    base = copy.deepcopy(BASE)
    for role in ("Launcher", "Worker"):
        base["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["schedulerName"] = "from-base"
    kept = make(image=None, command=None, workers=None, base_manifest=base)
    assert _scheduler_names(kept.build_manifest(context())) == ["from-base", "from-base"]
    given = make(image=None, command=None, workers=None, base_manifest=base, scheduler_name="volcano")
    assert _scheduler_names(given.build_manifest(context())) == ["volcano", "volcano"]


@pytest.mark.parametrize("value", [5, ["volcano"], {"name": "volcano"}])
def test_a_bad_scheduler_name_fails_naming_the_parameter_before_anything_is_created(value):
    with pytest.raises(
        MPIJobValidationError, match=re.escape(f"scheduler_name={value!r}: must be a string")
    ) as err:
        make(scheduler_name=value)  # at DAG parse time
    assert len(err.value.errors) == 1  # reported once, not for each role
    op = make()
    op.scheduler_name = value  # changed after the DAG was parsed
    with pytest.raises(MPIJobValidationError, match=re.escape(f"scheduler_name={value!r}: must be a string")):
        op.execute(context())
    assert op.hook.created == []


def test_horovod_np_follows_the_base_manifest_and_refuses_a_fractional_min_np():
    base = {**BASE, "spec": {**BASE["spec"], "slotsPerWorker": 2, "mpiImplementation": "OpenMPI"}}
    op = HorovodJobOperator(task_id="hvd", program=["python", "train.py"], base_manifest=base, namespace="ns")
    op.__dict__["hook"] = FakeSyncHook()
    container = op.build_manifest(context())["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"][
        "containers"
    ][0]
    assert container["command"][:3] == ["horovodrun", "-np", "6"]
    with pytest.raises(MPIJobValidationError, match="min_np=1.5: must be an integer"):
        HorovodJobOperator(task_id="hvd2", image="i", program=["t"], min_np=1.5)


def test_manifest_in_the_task_log_hides_plain_and_airflow_known_secrets(monkeypatch):
    from airflow.providers.common.compat.sdk import mask_secret

    mask_secret("c0nn-pa55")  # e.g. a connection password rendered into the command by a template
    recorder = Recorder()
    monkeypatch.setattr(MPIJobOperator, "log", property(lambda self: recorder))
    op = make(
        deferrable=True,
        env={"DB_PASSWORD": "pw-plain", "EPOCHS": "3"},
        command=["train", "--token=t0ken", "--dsn", "postgres://u:c0nn-pa55@db/x"],
    )
    with pytest.raises(TaskDeferred):
        op.execute(context())
    (printed,) = [line for line in recorder.lines if line.startswith("MPIJob manifest:")]
    assert "pw-plain" not in printed and "t0ken" not in printed and "c0nn-pa55" not in printed
    assert "EPOCHS" in printed and "value: '3'" in printed  # everything else is still shown


# ---------------------------------------------------------------- the generated signature and Airflow's machinery
def _dag(**kwargs):
    try:
        from airflow.sdk import DAG
    except ImportError:  # Airflow 2.11
        from airflow import DAG
    from datetime import datetime

    return DAG("sig", start_date=datetime(2025, 1, 1, tzinfo=UTC), schedule=None, **kwargs)


def test_the_signature_lists_every_parameter_with_its_type_and_default():
    import inspect

    params = inspect.signature(MPIJobOperator.__init__).parameters
    assert set(MPIJobOperator.parameters) <= set(params) and params["scheduler_name"].default is None
    assert params["workers"].annotation == int | str | None and params["poll_interval"].default == 10.0
    horovod = inspect.signature(HorovodJobOperator.__init__).parameters
    assert horovod["program"].default is inspect.Parameter.empty and horovod["log_level"].default == "INFO"


def test_default_args_partial_expand_and_unknown_arguments_follow_the_signature():
    with _dag(default_args={"deferrable": True, "poll_interval": 3.0, "image": "img", "min_np": 2}):
        op = MPIJobOperator(task_id="t", command=["x"])
        assert (op.deferrable, op.poll_interval, op.image) == (True, 3.0, "img")
        assert HorovodJobOperator(task_id="h", program=["p"], workers=2).min_np == 2
        MPIJobOperator.partial(task_id="m", image="i", command=["x"]).expand(workers=[1, 2])
        HorovodJobOperator.partial(task_id="hm", image="i", program=["x"]).expand(min_np=[1])
        with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
            MPIJobOperator.partial(task_id="p", image="i", bogus=1)
        with pytest.raises((TypeError, AirflowException), match="Invalid arguments were passed"):
            MPIJobOperator(task_id="u", image="i", bogus=1)
        with pytest.raises((TypeError, AirflowException), match="missing keyword argument 'program'"):
            HorovodJobOperator(task_id="np", image="i")


def test_on_kill_in_a_task_process_whose_supervisor_died_keeps_the_job():
    """A SIGTERM or an execution_timeout reaching a task process that outlived its Airflow 3 supervisor is not
    Airflow killing the task: the next try reattaches to the live job, so it is kept (operators/supervision.py)."""
    import os

    op = make()
    live = _existing(op, "Created", "Running")
    op._job = (live["metadata"]["name"], "ns", None)
    op._supervisor = os.getppid() + 1  # started under another parent: that supervisor died
    op.on_kill()
    assert op.hook.deleted == []
    op._supervisor = os.getppid()  # still supervised: Airflow's kill
    op.on_kill()
    assert op.hook.deleted == [op._job[:2]]


def test_the_job_is_recorded_before_it_is_created():
    """A worker that dies right after the create (here: the create's answer never comes back) leaves a job the
    orphan listener can find from the XCom record, also with retries=0 (issue 32's notes)."""
    op = make()
    pushed = []
    ti = NS(
        dag_id="dag",
        task_id="mpi",
        run_id=RUN_ID,
        map_index=-1,
        try_number=1,
        xcom_push=lambda key, value: pushed.append((key, value)),
    )
    op.hook.create_error = KeyboardInterrupt()  # the worker process ends inside the create
    with pytest.raises(KeyboardInterrupt):
        op.execute({"ti": ti})
    name = op.build_manifest({"ti": ti})["metadata"]["name"]
    assert [(k, v["name"], v["namespace"]) for k, v in pushed] == [("airflow_mpi_job", name, "ns")]


def test_a_top_level_queue_is_airflows_executor_queue_and_the_gang_queue_a_scheduling_policy_key():
    op = make(queue="gpu-workers", scheduling_policy={"queue": "research", "minAvailable": 3})
    assert op.queue == "gpu-workers"  # BaseOperator's: the executor queue the task runs on
    run_policy = op.build_manifest(context())["spec"]["runPolicy"]
    assert run_policy["schedulingPolicy"] == {"queue": "research", "minAvailable": 3}


@pytest.mark.parametrize(
    "name, value",
    [
        ("min_available", 2),
        ("priority_class", "high"),
        ("min_resources", {"cpu": "4"}),
        ("schedule_timeout_seconds", 60),
    ],
)
def test_gang_scheduling_fields_outside_scheduling_policy_are_refused_naming_them(name, value):
    """Accepted and dropped before: the field reaches the manifest only as a key of ``scheduling_policy``."""
    with pytest.raises((AirflowException, TypeError), match=name):
        make(**{name: value})


@pytest.mark.parametrize(("retries", "try_number", "follows"), [(1, 1, True), (1, 2, False), (0, 1, False)])
def test_the_resumed_part_of_a_deferred_try_knows_whether_a_retry_follows(retries, try_number, follows):
    """The worker that resumes after the trigger is a process (a KubernetesExecutor pod) of its own: its ``on_kill``
    keeps the job for a retry as the deferring worker's does."""
    op = make(retries=retries, on_finish_action="keep", get_logs=False)
    op.execute_complete(context(try_number=try_number), result())
    assert op._retry_follows is follows


@pytest.mark.parametrize(
    ("retries", "try_number", "deleting", "kept"),
    [
        (1, 1, True, True),  # the cluster deletes the pod, a retry follows: it reattaches to the job
        (1, 2, True, False),  # the last try: nothing would reattach, the job goes now
        (1, 1, False, False),  # the pod stays: Airflow killed the task (marked failed)
    ],
)
def test_on_kill_in_a_task_pod_the_cluster_deletes_keeps_the_job_for_the_retry(
    monkeypatch, retries, try_number, deleting, kept
):
    """KubernetesExecutor: a drained, evicted or deleted task pod is a try cut short, not Airflow's kill
    (hooks/task_pod.py)."""
    from airflow_mpi.operators import supervision

    monkeypatch.setattr(supervision, "own_pod", lambda: ("airflow", "mpi-pod"))
    op = make(retries=retries)
    asked = []
    op.hook.task_pod_deleting = lambda ns, name: asked.append((ns, name)) or deleting
    live = _existing(op, "Created", "Running")
    op._retry_follows = supervision.retry_follows(context(try_number=try_number)["ti"], op.retries)
    op._job = (live["metadata"]["name"], "ns", None)
    op.on_kill()
    assert op.hook.deleted == ([] if kept else [op._job[:2]])
    assert asked == ([("airflow", "mpi-pod")] if op._retry_follows else [])
    # kept: the synchronous wait ends with a retryable error naming the pod and the job
    assert (op._cut_short is not None) == kept
    if kept:
        assert isinstance(op._cut_short, MPIJobInfrastructureError) and op._cut_short.name == op._job[0]
        assert "airflow/mpi-pod" in str(op._cut_short) and "kept for the retry" in str(op._cut_short)
