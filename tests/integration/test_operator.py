"""The provider against a real API server and the real mpi-operator (issue 4's integration list).

The operator runs as Airflow would run it (execute / defer / trigger / execute_complete / on_kill),
with a minimal task-instance context; its log lines are recorded from ``self.log``. On the local
cluster the pods are simulated (localcluster.behaviour): their lifetime, exit codes and log lines
are chosen here through pod template labels and annotations.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from types import SimpleNamespace as NS

import pytest
from kubernetes import client

from airflow_mpi.hooks import MPIJobHook
from airflow_mpi.jobspec.naming import reattach_selector
from airflow_mpi.operators import MPIJobOperator
from airflow_mpi.sensors import MPIJobSensor
from airflow_mpi.triggers import MPIJobTrigger
from airflow_mpi.version_compat import AirflowException, AirflowFailException, TaskDeferred
from localcluster import behaviour as bh
from tests.integration.test_cluster_smoke import watch_mpijob, watch_pods

LINES = [
    "pi is approximately 3.1415926544231274",
    "error is 0.0000000008333343",
    "wall clock time = 0.000042",
]
JOB_SELECTOR = "training.kubeflow.org/job-name={}"


class Recorder:
    """Stands in for ``self.log`` of an operator/trigger: keeps every formatted line."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._added = threading.Condition()

    def __getattr__(self, level):
        def record(msg, *args, **kwargs):
            with self._added:
                self.lines.append(str(msg) % args if args else str(msg))
                self._added.notify_all()

        return record

    def await_lines(self, until, timeout: float, what: str) -> None:
        """Until ``until(lines)`` holds for the lines kept so far (an event, not a sleep); fails naming ``what``."""
        with self._added:
            if not self._added.wait_for(lambda: until(self.lines), timeout):
                raise AssertionError(f"no {what} in the log within {timeout}s: {self.lines}")

    def payload_lines(self) -> list[str]:
        return [ln for ln in self.lines if ln in LINES]

    def headers(self) -> list[str]:
        return [ln for ln in self.lines if ln.startswith("========== launcher attempt")]


@pytest.fixture
def record(monkeypatch):
    rec = Recorder()
    for cls in (MPIJobOperator, MPIJobTrigger, MPIJobSensor):
        monkeypatch.setattr(cls, "log", property(lambda self: rec))
    return rec


def ctx(task_id: str, try_number: int = 1) -> dict:
    ti = NS(
        dag_id="it",
        task_id=task_id,
        run_id="manual__2026-11-22T10:00:00+00:00",
        map_index=-1,
        try_number=try_number,
        get_first_reschedule_date=lambda context: None,
    )
    return {"ti": ti, "task_reschedule_count": 0}


def operator(
    task_id: str, namespace: str, *, run_duration: str = "2s", lifecycle: str | None = None, **kwargs
):
    launcher = kwargs.pop("launcher", {})
    labels = {bh.LIFECYCLE: lifecycle} if lifecycle else {}
    launcher = {"labels": labels, "annotations": {bh.RUN_DURATION: run_duration}, **launcher}
    kwargs.setdefault("poll_interval", 2)
    kwargs.setdefault("workers", 2)
    return MPIJobOperator(
        task_id=task_id,
        namespace=namespace,
        image="mpioperator/mpi-pi:openmpi",
        program=["/home/mpiuser/pi"],
        launcher=launcher,
        **kwargs,
    )


def mpijobs(k8s, namespace: str) -> list[dict]:
    return client.CustomObjectsApi(k8s).list_namespaced_custom_object(
        "kubeflow.org", "v2beta1", namespace, "mpijobs"
    )["items"]


def true_conditions(obj: dict) -> set[str]:
    return {c["type"] for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}


def run_trigger(trigger: MPIJobTrigger) -> dict:
    async def first_event():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(first_event())


def wait_gone(k8s, namespace: str, name: str, timeout: float = 120, version: str = "v2beta1") -> None:
    """Until the MPIJob (of API ``version``; foreground deletion: after its dependents) and its pods are gone."""
    from kubernetes import watch

    watch_pods(k8s, namespace, JOB_SELECTOR.format(name), lambda pods: not pods)
    api = client.CustomObjectsApi(k8s)
    listing = api.list_namespaced_custom_object(
        "kubeflow.org", version, namespace, "mpijobs", field_selector=f"metadata.name={name}"
    )
    if not listing["items"]:
        return
    for event in watch.Watch().stream(
        api.list_namespaced_custom_object,
        "kubeflow.org",
        version,
        namespace,
        "mpijobs",
        field_selector=f"metadata.name={name}",
        resource_version=listing["metadata"]["resourceVersion"],
        timeout_seconds=int(timeout),
    ):
        if event["type"] == "DELETED":
            return
    raise AssertionError(f"MPIJob {namespace}/{name} still exists after {timeout}s")


# ------------------------------------------------------------------ 1. success, sync
@pytest.mark.needs_simulation
def test_sync_success_streams_logs_once_and_returns_xcom(
    cluster, k8s, namespace, kubernetes_default_conn, record
):
    cluster.set_launcher_logs(namespace, LINES)
    op = operator("sync_ok", namespace, on_finish_action="keep")
    xcom = op.execute(ctx("sync_ok"))
    assert record.payload_lines() == LINES
    assert xcom["condition"] == "Succeeded" and xcom["launcher_attempts"] == 1
    assert xcom["namespace"] == namespace and len(xcom["launcher_pods"]) == 1
    job = client.CustomObjectsApi(k8s).get_namespaced_custom_object(
        "kubeflow.org", "v2beta1", namespace, "mpijobs", xcom["name"]
    )
    types = {c["type"] for c in job["status"]["conditions"]}
    assert {"Created", "Running", "Succeeded"} <= types
    assert any("Retries: Airflow retries=0 are mapped" in ln for ln in record.lines)


# ------------------------------------------------------------------ 2. success, deferrable
@pytest.mark.needs_simulation
def test_deferrable_success_through_the_real_trigger(
    cluster, k8s, namespace, kubernetes_default_conn, record
):
    cluster.set_launcher_logs(namespace, LINES)
    op = operator("deferred_ok", namespace, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx("deferred_ok"))
    trigger = MPIJobTrigger(**deferred.value.trigger.serialize()[1])  # as the triggerer rebuilds it
    event = run_trigger(trigger)
    assert event["status"] == "success"
    resumed = operator("deferred_ok", namespace, deferrable=True)  # as Airflow resumes it: a fresh operator
    resumed.build_manifest = lambda *a, **k: pytest.fail("the resumed try built a manifest")
    xcom = resumed.resume_execution(
        deferred.value.method_name, {**deferred.value.kwargs, "event": event}, ctx("deferred_ok")
    )
    assert record.payload_lines() == LINES  # streamed by the trigger, nothing repeated on resume
    assert xcom["condition"] == "Succeeded"
    wait_gone(k8s, namespace, xcom["name"])  # delete_succeeded


# ------------------------------------------------------------------ 3. retries -> backoffLimit
@pytest.mark.needs_simulation
def test_failing_launcher_uses_backoff_limit_not_airflow_retries(
    cluster, k8s, namespace, kubernetes_default_conn, record
):
    cluster.set_launcher_logs(namespace, LINES)
    op = operator("fails", namespace, lifecycle=bh.FAIL, run_duration="1s", retries=2)
    with pytest.raises(AirflowFailException, match="BackoffLimitExceeded"):
        op.execute(ctx("fails"))
    headers = record.headers()
    assert [h.split(",")[0] for h in headers] == [f"========== launcher attempt {i} of 3" for i in (1, 2, 3)]
    assert record.payload_lines() == LINES * 3
    launchers = (
        client.CoreV1Api(k8s)
        .list_namespaced_pod(namespace, label_selector="training.kubeflow.org/job-role=launcher")
        .items
    )
    assert len(launchers) == 3 and {p.metadata.name for p in launchers} == {
        h.split("pod ")[1].split(" ")[0] for h in headers
    }
    (job,) = mpijobs(k8s, namespace)
    assert "Failed" in true_conditions(job)


# ------------------------------------------------------------------ 4. rejected specs
def test_schema_rejection_is_clear_and_leaves_nothing(k8s, namespace, kubernetes_default_conn, record):
    op = operator(
        "schema",
        namespace,
        base_manifest={
            "spec": {
                "mpiReplicaSpecs": {
                    "Worker": {
                        "template": {
                            "spec": {
                                "containers": [
                                    {"name": "worker", "ports": [{"containerPort": "not-a-number"}]}
                                ]
                            }
                        }
                    }
                }
            }
        },
    )
    with pytest.raises(AirflowFailException, match="containerPort"):
        op.execute(ctx("schema"))
    assert mpijobs(k8s, namespace) == []


def test_controller_validation_error_fails_fast_and_deletes(k8s, namespace, kubernetes_default_conn, record):
    """A spec only the controller rejects (it has no webhook): the operator, finding it for its task,
    sees the ValidationError event, fails without retry and deletes it."""
    op = operator("invalid", namespace)
    manifest = op.build_manifest(ctx("invalid"))
    manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2  # the model never produces this
    MPIJobHook().create_mpijob(manifest, namespace)
    with pytest.raises(AirflowFailException, match="invalid"):
        op.execute(ctx("invalid"))
    wait_gone(k8s, namespace, manifest["metadata"]["name"])


# ------------------------------------------------------------------ 5. unschedulable
def test_unschedulable_job_times_out_with_failed_scheduling_and_is_deleted(
    k8s, namespace, kubernetes_default_conn, record
):
    # the launcher starts (AtStartup) and waits for workers that never get a node
    op = operator(
        "gpus",
        namespace,
        gpus_per_worker=bh.NODE_GPUS + 1,
        schedule_timeout=5,
        poll_interval=1,
        run_duration="600s",
    )
    with pytest.raises(AirflowException, match="FailedScheduling|not scheduled") as err:
        op.execute(ctx("gpus"))
    assert "nvidia.com/gpu" in str(err.value) or any("nvidia.com/gpu" in ln for ln in record.lines)
    assert not isinstance(err.value, AirflowFailException)  # capacity may come back: retryable
    name = op.build_manifest(ctx("gpus"))["metadata"]["name"]
    wait_gone(k8s, namespace, name)


# ------------------------------------------------------------------ 6. reattach
@pytest.mark.needs_simulation
def test_second_try_reattaches_instead_of_creating(cluster, k8s, namespace, kubernetes_default_conn, record):
    cluster.set_launcher_logs(namespace, LINES)
    first = operator("reattach", namespace, run_duration="6s", retries=1, on_finish_action="keep")
    worker = Background(first.execute, ctx("reattach"))
    name = first.build_manifest(ctx("reattach"))["metadata"]["name"]
    watch_mpijob(k8s, namespace, name, lambda o: "Running" in true_conditions(o))
    second = operator("reattach", namespace, run_duration="6s", retries=1, on_finish_action="keep")
    xcom = second.execute(ctx("reattach", try_number=2))  # e.g. the first worker died; Airflow retried
    worker.result(120)
    assert xcom["name"] == name and xcom["condition"] == "Succeeded"
    selector = reattach_selector(first.build_manifest(ctx("reattach"))["metadata"]["labels"])
    assert (
        len(
            client.CustomObjectsApi(k8s).list_namespaced_custom_object(
                "kubeflow.org", "v2beta1", namespace, "mpijobs", label_selector=selector
            )["items"]
        )
        == 1
    )
    assert any("Reattaching to MPIJob" in ln for ln in record.lines)


class Background:
    """Runs ``fn(*args)`` in a thread, as an Airflow worker runs ``execute``; ``result()`` joins it."""

    def __init__(self, fn, *args) -> None:
        self._outcome: list = []
        self._thread = threading.Thread(target=lambda: self._outcome.append(_call(fn, *args)))
        self._thread.start()

    def done(self) -> bool:
        return bool(self._outcome)

    def result(self, timeout: float):
        self._thread.join(timeout)
        assert self._outcome, f"still running after {timeout}s"
        return self._outcome[0]


def _call(fn, *args):
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001 - recorded for the assertion
        return err


# ------------------------------------------------------------------ 7. kill
@pytest.mark.needs_simulation
def test_on_kill_during_sync_wait_deletes_job_and_pods(
    cluster, k8s, namespace, kubernetes_default_conn, record
):
    op = operator("killed", namespace, run_duration="600s")
    worker = Background(op.execute, ctx("killed"))
    name = op.build_manifest(ctx("killed"))["metadata"]["name"]
    watch_mpijob(k8s, namespace, name, lambda o: "Running" in true_conditions(o))
    op.on_kill()
    wait_gone(k8s, namespace, name)
    assert isinstance(worker.result(120), AirflowException)


@pytest.mark.needs_simulation
def test_trigger_on_kill_during_deferred_wait_deletes_job_and_pods(
    cluster, k8s, namespace, kubernetes_default_conn, record
):
    op = operator("killed_deferred", namespace, run_duration="600s", deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx("killed_deferred"))
    trigger = deferred.value.trigger
    name = trigger.name

    async def scenario():
        run = asyncio.create_task(_first(trigger))
        await asyncio.to_thread(watch_mpijob, k8s, namespace, name, lambda o: "Running" in true_conditions(o))
        await trigger.on_kill()  # what the Airflow 3.3 triggerer calls when a user marks the task failed
        return await asyncio.wait_for(run, 120)

    event = asyncio.run(scenario())
    assert event["status"] == "deleted"
    wait_gone(k8s, namespace, name)


async def _first(trigger):
    async for event in trigger.run():
        return event.payload


# ------------------------------------------------------------------ 8. sensor
@pytest.mark.needs_simulation
@pytest.mark.parametrize("mode", ["poke", "reschedule", "deferrable"])
@pytest.mark.parametrize("lifecycle", [bh.SUCCEED, bh.FAIL])
def test_sensor_waits_on_existing_job(
    cluster, k8s, namespace, kubernetes_default_conn, record, mode, lifecycle
):
    from airflow.exceptions import AirflowRescheduleException

    cluster.set_launcher_logs(namespace, LINES)
    name = f"sensed-{uuid.uuid4().hex[:6]}"
    submit = operator(
        "submit",
        namespace,
        name=name,
        unique_name_suffix=False,
        lifecycle=lifecycle,
        run_duration="3s",
        deferrable=True,
    )  # the exact name the sensor is told
    with pytest.raises(TaskDeferred):
        submit.execute(ctx("submit"))  # submitted, not waited for
    sensor = MPIJobSensor(
        task_id="sense",
        job_name=name,
        namespace=namespace,
        attach_logs=True,
        poke_interval=1,
        timeout=120,
        mode="reschedule" if mode == "reschedule" else "poke",
        deferrable=mode == "deferrable",
    )
    if mode == "deferrable":
        with pytest.raises(TaskDeferred) as deferred:
            sensor.execute(ctx("sense"))
        event = run_trigger(MPIJobTrigger(**deferred.value.trigger.serialize()[1]))
        outcome = _call(sensor.execute_complete, ctx("sense"), event)
    else:
        if mode == "reschedule":
            with pytest.raises(AirflowRescheduleException):
                sensor.execute(ctx("sense"))  # not done yet: the slot is given back
        watch_mpijob(k8s, namespace, name, lambda o: {"Succeeded", "Failed"} & true_conditions(o))
        outcome = _call(sensor.poke, ctx("sense"))
    if lifecycle == bh.SUCCEED:
        assert outcome is True or outcome.get("condition") == "Succeeded"
        assert record.payload_lines() == LINES  # attach_logs
    else:
        assert isinstance(outcome, AirflowFailException)
    assert [j["metadata"]["name"] for j in mpijobs(k8s, namespace)] == [name]  # the sensor never deletes


# ------------------------------------------------------------------ 9. watch resilience
@pytest.mark.needs_simulation
def test_wait_survives_an_api_server_restart(cluster, k8s, namespace, kubernetes_default_conn, record):
    cluster.set_launcher_logs(namespace, LINES)
    op = operator("restart", namespace, run_duration="12s")
    worker = Background(op.execute, ctx("restart"))
    name = op.build_manifest(ctx("restart"))["metadata"]["name"]
    watch_mpijob(k8s, namespace, name, lambda o: "Running" in true_conditions(o))
    cluster.restart_apiserver()
    outcome = worker.result(180)
    assert isinstance(outcome, dict) and outcome["condition"] == "Succeeded", outcome
    assert record.payload_lines() == LINES


@pytest.mark.needs_simulation
def test_wait_survives_an_api_server_down_at_its_first_read(
    cluster, namespace, kubernetes_default_conn, record, monkeypatch
):
    """The API server goes away as the wait sends its first GET (a CI run: a restart right after the create) and
    stays away until that GET has used up the call's own retries: the wait rides it out like its watches do."""
    import logging

    from airflow_mpi.hooks.async_mpijob import AsyncMPIJobHook
    from airflow_mpi.hooks.mpijob import MPIJobHook as SyncHook

    cluster.set_launcher_logs(namespace, LINES)
    monkeypatch.setattr(AsyncMPIJobHook, "api_retries", 1)  # the call gives up at its first failure
    monkeypatch.setattr(SyncHook, "api_retries", 1)
    down, outage_ridden, restarted = threading.Event(), threading.Event(), threading.Event()
    worker: list[Background] = []

    class Seen(logging.Handler):
        def emit(self, rec):
            if "Kubernetes API unavailable" in rec.getMessage():
                outage_ridden.set()

    def keep_down_until_the_wait_rides_it_out_or_ends() -> None:
        down.set()
        while not outage_ridden.wait(0.2) and not worker[0].done():
            pass

    real_get = AsyncMPIJobHook.get_mpijob
    first = [True]

    async def get_mpijob(self, name, ns):
        if first[0]:
            first[0] = False
            threading.Thread(
                target=lambda: (
                    cluster.restart_apiserver(down_hook=keep_down_until_the_wait_rides_it_out_or_ends),
                    restarted.set(),
                )
            ).start()
            await asyncio.to_thread(down.wait)
        return await real_get(self, name, ns)

    monkeypatch.setattr(AsyncMPIJobHook, "get_mpijob", get_mpijob)
    handler = Seen()
    logging.getLogger("airflow_mpi.hooks.retries").addHandler(handler)
    try:
        op = operator("first-read", namespace, run_duration="2s")
        worker.append(Background(op.execute, ctx("first-read")))
        outcome = worker[0].result(300)
    finally:
        logging.getLogger("airflow_mpi.hooks.retries").removeHandler(handler)
        restarted.wait(120)
    assert outage_ridden.is_set() and not first[0]
    assert isinstance(outcome, dict) and outcome["condition"] == "Succeeded", outcome
    assert record.payload_lines() == LINES
