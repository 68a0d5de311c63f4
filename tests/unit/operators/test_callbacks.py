"""MPIJobCallbacks (operators/callbacks.py): the operator calls a callbacks object given as ``callbacks=`` at
each point of a try, and what the callbacks answer is what the operator does."""

from __future__ import annotations

import pytest

from airflow_mpi.jobspec.parameters import mpirun_launch
from airflow_mpi.operators import HorovodCallbacks, HorovodJobOperator, MPIJobCallbacks
from airflow_mpi.version_compat import TaskDeferred
from tests.unit.fakes import FakeSyncHook
from tests.unit.operators.test_mpijob_operator import context, make, wait_result


class Recording(MPIJobCallbacks):
    """Records each call; ``refuse_created``/``refuse_found``: how many jobs to replace."""

    def __init__(self, refuse_created: int = 0, refuse_found: bool = False) -> None:
        self.calls: list[str] = []
        self.refuse_created, self.refuse_found = refuse_created, refuse_found
        self.attached: list[dict] = []
        self.lines: list[str] = []

    def bind(self, operator):
        self.calls.append("bind")
        super().bind(operator)

    def launch_command(self, errors, values):
        self.calls.append("launch_command")
        return mpirun_launch(errors, values)

    def manifest_built(self, manifest, context):
        self.calls.append("manifest_built")
        manifest["metadata"].setdefault("annotations", {})["seen-by"] = "callbacks"
        return manifest

    def job_created(self, job, manifest):
        self.calls.append("job_created")
        if self.refuse_created:
            self.refuse_created -= 1
            self.operator.hook.delete_mpijob(job["metadata"]["name"], "ns")
            return None
        return job

    def followable(self, job):
        self.calls.append("followable")
        if self.refuse_found:
            self.operator.hook.delete_mpijob(job["metadata"]["name"], "ns")
            return None
        return job

    def job_attached(self, job):
        self.calls.append("job_attached")
        self.attached.append(job)

    def launcher_log_sink(self, emit):
        self.calls.append("launcher_log_sink")
        return lambda line, *rest: self.lines.append(line.upper())

    def result_key(self):
        self.calls.append("result_key")
        return "the-key"

    def finish(self, payload, finish_job):
        self.calls.append("finish")
        finish_job()  # the operator's cleanup
        return {"value": payload.name}


def run(op, monkeypatch):
    async def wait_emitting_one_line(name, namespace, submitted_at, deadline, uid=None):
        op._launcher_log()("hello from the launcher")
        return wait_result(name=name)

    monkeypatch.setattr(op, "_wait", wait_emitting_one_line)
    return op.execute(context())


def test_the_operator_calls_its_callbacks_at_each_point_of_a_try(monkeypatch):
    callbacks = Recording()
    op = make(callbacks=callbacks, command=None, program=["python", "pi.py"])
    assert op.callbacks is callbacks and callbacks.operator is op
    assert callbacks.calls == ["bind", "launch_command"]  # parse time: program checked through it
    value = run(op, monkeypatch)
    (created,) = op.hook.created
    assert value == {"value": created["metadata"]["name"]}  # finish's return value is the task's
    assert created["metadata"]["annotations"]["seen-by"] == "callbacks"  # the manifest submitted is theirs
    assert callbacks.calls[2:] == [
        "launch_command",
        "manifest_built",
        "job_created",
        "job_attached",
        "launcher_log_sink",
        "finish",
    ]
    assert callbacks.attached == [created] and callbacks.lines == ["HELLO FROM THE LAUNCHER"]
    assert op.hook.deleted == [(created["metadata"]["name"], "ns")]  # the cleanup ran inside finish


def test_a_created_job_the_callbacks_replace_is_created_again(monkeypatch):
    op = make(callbacks=Recording(refuse_created=1))
    run(op, monkeypatch)
    first, second = op.hook.created
    assert op.callbacks.calls.count("job_created") == 2
    assert op.callbacks.attached[0]["metadata"]["uid"] == "uid-1"
    assert first["metadata"]["name"] == second["metadata"]["name"]


@pytest.mark.parametrize("refuse", [False, True])
def test_a_found_job_is_followed_only_when_the_callbacks_say_so(monkeypatch, refuse):
    hook = FakeSyncHook()
    earlier = make(hook)
    left = hook.create_mpijob(earlier.build_manifest(context()), "ns")
    left["status"] = {"conditions": [{"type": "Created", "status": "True"}]}
    op = make(hook, callbacks=Recording(refuse_found=refuse))
    run(op, monkeypatch)
    assert "followable" in op.callbacks.calls
    if refuse:  # replaced: a fresh job is created and attached
        assert len(hook.created) == 2 and op.callbacks.attached[0]["metadata"]["uid"] == "uid-1"
    else:
        assert len(hook.created) == 1 and op.callbacks.attached == [left]


def test_a_deferral_carries_the_callbacks_result_key_and_whether_they_capture_a_result():
    callbacks = Recording()
    callbacks.captures_result = True
    op = make(callbacks=callbacks, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context())
    kwargs = deferred.value.trigger.serialize()[1]
    assert kwargs["result_key"] == "the-key" and kwargs["capture_result"] is True
    assert make(deferrable=True).captures_result is False  # the default callbacks read no result


def test_horovod_launches_through_its_callbacks_and_a_plain_operator_through_mpirun():
    horovod = HorovodJobOperator(task_id="hvd", image="hvd:1", program=["python", "train.py"], namespace="ns")
    assert isinstance(horovod.callbacks, HorovodCallbacks)
    argv = horovod.build_manifest(context())["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    assert "horovodrun" in str(argv["containers"][0])
    assert type(make().callbacks) is MPIJobCallbacks
