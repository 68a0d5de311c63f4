"""Two Airflow deployments in one namespace (issue 18): each runs and sweeps only its own MPIJobs, and the orphan
listener never harms the components it runs in.

A is the package's stack. B is a second real Airflow 3 deployment started by this module: its own PostgreSQL and
metadata database, the same DAGs, the same cluster, kubeconfig and namespace, and default settings (neither pins
``[airflow_mpi] deployment_id``: two databases must be two identities without anyone configuring anything). B comes
up in the background while the first test works with A, and in the same background thread starts the work later
tests look at (a task whose worker it kills, a job B holds), so their waits overlap the other tests.

A sweep is awaited, never slept on: A's own orphan is a job whose task's worker is frozen (SIGSTOP) when the task is
marked failed, so nothing but A's orphan sweep can delete it. Once it is gone, A has swept the namespace, and every
foreign job listed beside it was either deleted by that sweep or is safe from it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import pytest
import yaml

from airflow_mpi.jobspec.status import job_state, true_condition_types
from airflowstack import AirflowClient, AirflowStack, Background, StackError, wait_until
from airflowstack.client import ApiError
from airflowstack.job_behaviour import RUN, SUCCEED, launcher_conf
from airflowstack.stack import SERVICES

from .conftest import E2E_DAGS, NAMESPACE, REPO, mpijobs

# the provider's public contract on every MPIJob (users' selectors depend on it: written out, not imported)
DEPLOYMENT_LABEL = "airflow-mpi.io/deployment"
TASK_INSTANCE_ID_ANNOTATION = "airflow-mpi.io/task-instance-id"
RUN_ID_ANNOTATION = "airflow-mpi.io/run-id"
DEPLOYMENT_VARIABLE = "airflow_mpi_deployment_id"
JOB_XCOM_KEY = "airflow_mpi_job"  # where the job lives, recorded by the operator before it waits

QUICK, HOLD, SYNC_LAST_TRY = "e2e_mpi_quick", "e2e_mpi_hold", "e2e_fault_sync_last_try"
PLAIN_FAIL, PLAIN_HOLD, SMOKE = "e2e_plain_fail", "e2e_plain_hold", "e2e_smoke"
GROUP, VERSION, PLURAL = "kubeflow.org", "v2beta1", "mpijobs"
LAUNCHER_LINES = ["shared namespace: step 1", "shared namespace: done"]

TIMEOUT = 180
SWEEP_TIMEOUT = (
    60  # a sweep's Kubernetes calls (list, get, delete) on an idle cluster take well under a second
)
# B only: the scheduler fails a task whose worker died once its heartbeats are this old (Airflow's default: 300 s).
# Workers heartbeat every 5 s; 30 s leaves a loaded machine 5 late heartbeats before a live task is failed.
B_ENV = {
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
}


def _suffix() -> str:
    return uuid.uuid4().hex[:8]


# ------------------------------------------------------------------------------------------------ cluster views
def _jobs(custom_api, dag_id: str, run_id: str) -> list[dict]:
    """MPIJobs of one DAG run, by the raw run id annotation (whichever deployment made them)."""
    return [
        j
        for j in mpijobs(custom_api, f"airflow-mpi.io/dag-id={dag_id}")
        if (j["metadata"].get("annotations") or {}).get(RUN_ID_ANNOTATION) == run_id
    ]


def _live(job: dict) -> bool:
    return not job["metadata"].get("deletionTimestamp") and not job_state(job).terminal


def _one_live_job(custom_api, dag_id: str, run_id: str) -> dict:
    def probe():
        jobs = [j for j in _jobs(custom_api, dag_id, run_id) if _live(j)]
        return jobs[0] if len(jobs) == 1 else None

    return wait_until(
        probe, timeout=TIMEOUT, interval=0.5, what=f"the live MPIJob of {dag_id}/{run_id}", ignore=()
    )


def _find(custom_api, uid: str) -> dict | None:
    return next((j for j in mpijobs(custom_api) if j["metadata"]["uid"] == uid), None)


def _assert_untouched(custom_api, job: dict, whose: str) -> None:
    """``job`` still exists (same uid), is not being deleted and still runs."""
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    now = _find(custom_api, uid)
    assert now is not None, f"{whose} MPIJob {name} (uid {uid}) was deleted"
    assert not now["metadata"].get("deletionTimestamp"), f"{whose} MPIJob {name} is being deleted"
    assert _live(now), f"{whose} MPIJob {name} no longer runs: {job_state(now).describe()}"


def _delete(custom_api, name: str) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        custom_api.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
    except ApiException as exc:
        if exc.status != 404:
            raise


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _deployment_id(client: AirflowClient) -> str:
    return wait_until(
        lambda: client.variable(DEPLOYMENT_VARIABLE),
        timeout=60,
        interval=0.5,
        what=f"the Variable {DEPLOYMENT_VARIABLE}",
        ignore=(),
    )


def _no_unexpected_commit(stack: AirflowStack) -> None:
    log = (stack.log_dir / "scheduler.log").read_text(errors="replace")
    assert "UNEXPECTED COMMIT" not in log, [line for line in log.splitlines() if "UNEXPECTED COMMIT" in line][
        :5
    ]
    stack.check_alive()


# ------------------------------------------------------------------------------------------ the two deployments
@dataclass
class DeploymentB:
    stack: AirflowStack
    client: AirflowClient
    plain_fail_run: str  # test_scheduler_stays_healthy: a plain task failing on its last try
    plain_hold_run: str  # ... and one whose worker was killed (the scheduler fails it)
    held_job: dict  # test_a_never_deletes_b_live_job: B's MPIJob, running until the module ends


def _kill_a_worker(stack: AirflowStack, client: AirflowClient) -> str:
    """Run ``e2e_plain_hold`` and SIGKILL its worker, supervisor first (then nothing is left to report the task's
    end: the scheduler fails it itself when its heartbeats stop); the run id."""
    run_id = client.trigger(PLAIN_HOLD)["dag_run_id"]
    ti = client.wait_task(PLAIN_HOLD, run_id, "hold", {"running"}, timeout=TIMEOUT)
    task = wait_until(
        lambda: stack.task_process(ti["id"]),
        timeout=60,
        interval=0.2,
        what=f"the task process of {PLAIN_HOLD}/{run_id}",
        ignore=(StackError,),
    )
    _signal([stack.task_supervisor(ti["id"]), task], signal.SIGKILL)
    return run_id


def _bring_up_b(stack: AirflowStack, custom_api) -> DeploymentB:
    stack.start()
    client = stack.client()
    client.wait_for_dags([QUICK, HOLD, PLAIN_FAIL, PLAIN_HOLD, SMOKE], timeout=TIMEOUT)
    plain_fail_run = client.trigger(PLAIN_FAIL)["dag_run_id"]
    plain_hold_run = _kill_a_worker(stack, client)
    hold_run = client.trigger(HOLD, run_id=f"held-in-b-{_suffix()}")["dag_run_id"]
    held_job = _one_live_job(custom_api, HOLD, hold_run)
    return DeploymentB(stack, client, plain_fail_run, plain_hold_run, held_job)


@pytest.fixture(scope="module", autouse=True)
def deployment_b(cluster, airflow_stack, dags_folder, artifacts_dir, custom_api, client):
    """B, starting in the background from the module's first test on (``b`` waits for it)."""
    client.wait_for_dags([QUICK, HOLD, SYNC_LAST_TRY, SMOKE], timeout=TIMEOUT)
    cluster.serve_launcher_logs(NAMESPACE, LAUNCHER_LINES)
    home = artifacts_dir / "airflow-home-b"
    shutil.rmtree(home, ignore_errors=True)
    roles = airflow_stack.service_kubeconfigs or None  # B's services under the same roles as A's
    stack = AirflowStack(
        dags_folder,
        home=home,
        kubeconfig=cluster.kubeconfig,
        namespace=NAMESPACE,
        extra_env=B_ENV,
        service_kubeconfigs=roles,
    )
    starting = Background(lambda: _bring_up_b(stack, custom_api), name="deployment-b")
    try:
        yield starting
    finally:
        starting.join()
        for name in list(stack.services):  # B is thrown away: no graceful stop (its triggerer's takes ~10 s)
            stack.stop_service(name, signal.SIGKILL)
        with contextlib.suppress(
            Exception
        ):  # B's held job would outlive B: later modules share the namespace
            _delete(custom_api, starting.result().held_job["metadata"]["name"])
        stack.stop()


@pytest.fixture(scope="module")
def b(deployment_b) -> DeploymentB:
    return deployment_b.result()


def _a_sweeps(stack: AirflowStack, client: AirflowClient, custom_api) -> None:
    """Make deployment A sweep the namespace: its API server's listener (a task marked failed through the REST API),
    then its scheduler's (that DAG run finishing).

    The first sweep is proven by A's own orphan: the MPIJob of a non-deferrable task whose worker (supervisor and
    task process) is frozen when the task is marked failed. No on_kill can run and no trigger exists, so only that
    sweep can delete the job, and it lists every job of the namespace to find it. The run's end is awaited, so its
    sweep has started too; it has nothing of A's left to delete, so its end cannot be seen.
    """
    run_id = client.trigger(SYNC_LAST_TRY, launcher_conf(RUN), run_id=f"swept-in-a-{_suffix()}")["dag_run_id"]
    ti = client.wait_task(SYNC_LAST_TRY, run_id, "job", {"running"}, timeout=TIMEOUT)
    own = _one_live_job(custom_api, SYNC_LAST_TRY, run_id)
    wait_until(
        lambda: client.xcom(SYNC_LAST_TRY, run_id, "job", key=JOB_XCOM_KEY),
        timeout=TIMEOUT,
        interval=0.5,
        what=f"the job record of {run_id}",
    )
    task = wait_until(
        lambda: stack.task_process(ti["id"]),
        timeout=60,
        interval=0.2,
        what=f"the task process of {run_id}",
        ignore=(StackError,),
    )
    worker = [stack.task_supervisor(ti["id"]), task]
    _signal(worker, signal.SIGSTOP)
    try:
        client.set_task_state(SYNC_LAST_TRY, run_id, "job", "failed")
        wait_until(
            lambda: _find(custom_api, own["metadata"]["uid"]) is None,
            timeout=SWEEP_TIMEOUT,
            interval=0.2,
            what=f"A's orphan {own['metadata']['name']} to be deleted by A's sweep",
            ignore=(),
        )
    finally:
        _signal(worker[::-1], signal.SIGCONT)  # the supervisor learns the task was failed and ends it
    assert client.wait_run(SYNC_LAST_TRY, run_id, timeout=TIMEOUT)["state"] == "failed"


# ------------------------------------------------------------------------------------------------------- tests
def test_a_rendered_manifest_applied_by_hand_survives_a_sweeps(airflow_stack, client, custom_api, tmp_path):
    """``airflow-mpi-render``'s manifest (identity annotations of a run that exists nowhere) applied with the
    Kubernetes API, as a user would with kubectl, belongs to no deployment: A's sweeps leave it running."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_"))
    }
    env["AIRFLOW_HOME"] = str(tmp_path)  # a user's shell: no deployment's configuration, no database
    out = subprocess.run(  # `python -m airflow_mpi.render` is `airflow-mpi-render`, from this checkout
        [sys.executable, "-m", "airflow_mpi.render", str(E2E_DAGS / "e2e_mpi_hold.py"), "hold",
         "--run-id", f"rendered-{_suffix()}"],
        capture_output=True, text=True, timeout=300, env=env, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    manifest = yaml.safe_load(out.stdout)
    manifest["metadata"]["namespace"] = NAMESPACE
    name = manifest["metadata"]["name"]
    custom_api.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, manifest)
    try:
        job = wait_until(
            lambda: (lambda j: j if j and "Running" in true_condition_types(j) else None)(
                next((j for j in mpijobs(custom_api) if j["metadata"]["name"] == name), None)
            ),
            timeout=TIMEOUT,
            interval=0.5,
            what=f"the rendered MPIJob {name} to run",
            ignore=(),
        )

        _a_sweeps(airflow_stack, client, custom_api)

        _assert_untouched(custom_api, job, "the hand-applied")
    finally:
        _delete(custom_api, name)


def test_the_same_dag_and_run_id_in_two_deployments_runs_two_mpijobs(client, b, custom_api):
    """Staging and prod run the same DAG under the same run id: each deployment gets an MPIJob of its own, which
    runs with its own conf, and each task's result is its own job's."""
    run_id = f"shared-{_suffix()}"
    clients = {"A": client, "B": b.client}
    confs = {"A": launcher_conf(SUCCEED, seconds=1), "B": launcher_conf(SUCCEED, seconds=2)}
    for who, c in clients.items():
        assert c.trigger(QUICK, confs[who], run_id=run_id)["dag_run_id"] == run_id
    tis = {
        who: c.wait_task(QUICK, run_id, "quick", {"success", "failed", "up_for_retry"}, timeout=TIMEOUT)
        for who, c in clients.items()
    }
    for who, ti in tis.items():
        assert ti["state"] == "success", (who, clients[who].task_log(QUICK, run_id, "quick")[-3000:])

    jobs = {j["metadata"]["name"]: j for j in _jobs(custom_api, QUICK, run_id)}
    results = {who: c.xcom(QUICK, run_id, "quick") for who, c in clients.items()}
    assert len(jobs) == 2, (
        f"{len(jobs)} MPIJob(s) {sorted(jobs)} for run {run_id} of two deployments; "
        f"their tasks returned {results}"
    )
    assert results["A"]["name"] != results["B"]["name"], results

    ids = {who: _deployment_id(c) for who, c in clients.items()}
    assert ids["A"] != ids["B"], ids
    for who, result in results.items():
        job = jobs[result["name"]]
        metadata = job["metadata"]
        assert metadata["labels"].get(DEPLOYMENT_LABEL) == ids[who], (who, metadata["labels"])
        assert metadata["annotations"].get(TASK_INSTANCE_ID_ANNOTATION) == tis[who]["id"], (who, metadata)
        launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
        assert launcher["command"] == confs[who]["command"], (who, launcher)
        assert result["condition"] == "Succeeded" and job_state(job).succeeded, (who, result, job_state(job))


def test_a_never_deletes_b_live_job(airflow_stack, client, b, custom_api):
    """B holds a running MPIJob (its task deferred, its trigger running in B's triggerer). A marks one of its own
    tasks failed and its run finishes: A sweeps the namespace twice, and B's job runs on."""
    held = b.held_job
    _assert_untouched(
        custom_api, held, "deployment B's"
    )  # earlier sweeps of A (the test above) spared it too

    _a_sweeps(airflow_stack, client, custom_api)

    _assert_untouched(custom_api, held, "deployment B's")
    assert held["metadata"]["labels"].get(DEPLOYMENT_LABEL) == _deployment_id(b.client)
    assert (
        b.client.task_instance(HOLD, held["metadata"]["annotations"][RUN_ID_ANNOTATION], "hold")["state"]
        == "deferred"
    )


def test_scheduler_stays_healthy_when_plain_tasks_fail(b, client, airflow_stack):
    """With the plugin installed (in B, like in every deployment): a PythonOperator failing on its last try, and a
    task the scheduler fails itself (its worker killed: no heartbeat), crash nothing and commit nothing of the
    scheduler's (no "UNEXPECTED COMMIT"); the scheduler schedules the next run to its end."""
    c = b.client
    assert c.wait_run(PLAIN_FAIL, b.plain_fail_run, timeout=TIMEOUT)["state"] == "failed"
    fail_ti = c.task_instance(PLAIN_FAIL, b.plain_fail_run, "fail")
    assert (fail_ti["state"], fail_ti["try_number"]) == ("failed", 2), fail_ti

    held = c.wait_task(
        PLAIN_HOLD, b.plain_hold_run, "hold", {"success", "failed", "up_for_retry"}, timeout=TIMEOUT
    )
    assert held["state"] == "failed", held
    assert c.event_logs(PLAIN_HOLD, "heartbeat timeout"), "the killed task was not failed by the scheduler"

    smoke = c.trigger(SMOKE, {"greeting": "after the failures"})["dag_run_id"]
    assert c.wait_run(SMOKE, smoke, timeout=TIMEOUT)["state"] == "success"
    for stack in (b.stack, airflow_stack):
        _no_unexpected_commit(stack)


def _logged(stack: AirflowStack, text: str, since: dict[str, int], services=SERVICES) -> int:
    """How often ``text`` is in the logs of ``services`` of ``stack``, after the offsets ``since``."""
    return sum(
        (stack.log_dir / f"{name}.log").read_text(errors="replace")[since.get(name, 0) :].count(text)
        for name in services
    )


def test_a_deployment_on_a_copy_of_a_database_deletes_none_of_its_jobs(airflow_stack, client, b, custom_api):
    """Staging restored from prod's backup (issue 32): B is restarted on a copy of A's database (pg_dump of A's,
    restored into B's PostgreSQL, A's fernet key: what a restore needs), so it holds A's id. A's jobs run on: one of
    a running try recorded before the copy (B's scheduler runs that try again: refused; B's sweeps find the job
    "theirs" and delete nothing), one of a deferred task (B's triggerer adopts its trigger: it fires an error and
    deletes nothing), and one of a run A started after the copy (no task instance in B's database: B's task of
    that run, same id and run id, hence the name of A's job, fails naming both installations instead of
    reattaching). A then kills its own."""
    recorded = client.trigger(SYNC_LAST_TRY, launcher_conf(RUN), run_id=f"copied-{_suffix()}")["dag_run_id"]
    deferred = client.trigger(HOLD, run_id=f"deferred-{_suffix()}")["dag_run_id"]
    client.wait_task(SYNC_LAST_TRY, recorded, "job", {"running"}, timeout=TIMEOUT)
    wait_until(
        lambda: client.xcom(SYNC_LAST_TRY, recorded, "job", key=JOB_XCOM_KEY),
        timeout=TIMEOUT,
        interval=0.5,
        what=f"the job record of {recorded}",
    )
    client.wait_task(HOLD, deferred, "hold", {"deferred"}, timeout=TIMEOUT)
    jobs = {
        "running at the copy": _one_live_job(custom_api, SYNC_LAST_TRY, recorded),
        "deferred at the copy": _one_live_job(custom_api, HOLD, deferred),
    }
    since = {name: (b.stack.log_dir / f"{name}.log").stat().st_size for name in b.stack.services}
    copy = b.stack.postgres.copy_database(airflow_stack.postgres, "airflow", f"copy_{_suffix()}")
    after = client.trigger(HOLD, run_id=f"after-the-copy-{_suffix()}")["dag_run_id"]
    jobs["started after the copy"] = _one_live_job(custom_api, HOLD, after)
    client.wait_task(HOLD, after, "hold", {"deferred"}, timeout=TIMEOUT)

    b.stack.restart(
        {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": copy,
            "AIRFLOW__CORE__FERNET_KEY": airflow_stack.env["AIRFLOW__CORE__FERNET_KEY"],
            # B's triggerer adopts the copy's triggers of A's triggerer (dead there) sooner (default: 30 s)
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
        }
    )
    assert _deployment_id(b.client) == _deployment_id(client)
    wait_until(
        lambda: _logged(b.stack, "this database is a copy of another deployment's", since),
        timeout=60,
        interval=0.5,
        what="B's components to log that its database is a copy",
        ignore=(),
    )

    assert b.client.trigger(HOLD, run_id=after)["dag_run_id"] == after
    ti = b.client.wait_task(
        HOLD, after, "hold", {"failed", "up_for_retry", "deferred", "success"}, timeout=TIMEOUT
    )
    log = b.client.task_log(HOLD, after, "hold")
    assert ti["state"] == "failed", (ti["state"], log[-3000:])
    assert "claimed for deployment id" in log and "by installation" in log and "deployment_id" in log, log[
        -3000:
    ]

    sweeps = {
        "scheduler": 2
    }  # B's sweeps, refused: the ends of the two copied runs (their jobs' places: "its")
    try:
        b.client.set_task_state(SYNC_LAST_TRY, recorded, "job", "failed")
        sweeps["api-server"] = 1  # marking it failed
    except ApiError as err:  # B's scheduler reset the try nobody ran there and ran it again: refused, failed
        if err.status_code != 409:
            raise
        # that try's start cleared the copied try's XComs, its job record among them (as every try's start does):
        # the end of its run has no place to sweep, only the deferred run's end is refused (a CI run waited for 2)
        sweeps["scheduler"] = 1
    assert b.client.wait_run(SYNC_LAST_TRY, recorded, timeout=TIMEOUT)["state"] == "failed"
    ti = b.client.wait_task(HOLD, deferred, "hold", {"failed", "up_for_retry", "success"}, timeout=TIMEOUT)
    assert ti["state"] == "failed", ti  # B's triggerer adopted the copied trigger: it fired an error at once
    gone = lambda: [k for k, j in jobs.items() if _find(custom_api, j["metadata"]["uid"]) is None]  # noqa: E731
    for service, count in sweeps.items():
        wait_until(
            lambda service=service, count=count: (
                gone() or _logged(b.stack, "Not sweeping it", since, [service]) >= count
            ),
            timeout=SWEEP_TIMEOUT,
            interval=0.2,
            what=f"{count} sweep(s) of B's {service}",
            ignore=(),
        )
    for which, job in jobs.items():
        _assert_untouched(custom_api, job, f"A's job {which}:")
    assert (
        client.task_instance(HOLD, after, "hold")["state"]
        == client.task_instance(HOLD, deferred, "hold")["state"]
        == "deferred"
    )
    assert client.task_instance(SYNC_LAST_TRY, recorded, "job")["state"] == "running"

    for dag_id, run_id, task_id in (
        (SYNC_LAST_TRY, recorded, "job"),
        (HOLD, deferred, "hold"),
        (HOLD, after, "hold"),
    ):
        # A kills its own: its workers, triggerer and sweeps are unaffected
        client.set_task_state(dag_id, run_id, task_id, "failed")
    for job in jobs.values():
        wait_until(
            lambda job=job: _find(custom_api, job["metadata"]["uid"]) is None,
            timeout=SWEEP_TIMEOUT,
            interval=0.2,
            what=f"A to delete its own {job['metadata']['name']}",
            ignore=(),
        )


def test_marking_an_mpi_task_failed_with_the_kubernetes_api_down_answers_at_once(
    airflow_stack, client, cluster, custom_api
):
    """The UI's "mark failed" is a REST request: with the Kubernetes API server down it answers in seconds (the
    sweep it causes waits elsewhere), and the scheduler, finishing that run meanwhile, schedules another to its end.
    Last in the module: the API server is restarted and the mpi-operator leads again before anything else runs
    (kube-scheduler may end itself seconds later, over a binding the kill cut: the cluster's component keeper starts
    it again; run O4 of 2026-12-07 had none, and test_ui's job was never scheduled)."""
    if not cluster.simulated:
        pytest.skip("stops the local cluster's kube-apiserver")
    run_id = client.trigger(HOLD, run_id=f"api-down-{_suffix()}")["dag_run_id"]
    job = _one_live_job(custom_api, HOLD, run_id)
    client.wait_task(HOLD, run_id, "hold", {"deferred"}, timeout=TIMEOUT)
    seen: dict[str, object] = {}

    def while_down() -> None:  # must not raise: the API server is started again after it returns
        try:
            started = time.monotonic()
            try:
                client.set_task_state(HOLD, run_id, "hold", "failed")
            finally:
                seen["seconds"] = time.monotonic() - started
            seen["hold"] = client.wait_run(HOLD, run_id, timeout=TIMEOUT)["state"]
            smoke = client.trigger(SMOKE, {"greeting": "kubernetes is down"})["dag_run_id"]
            seen["smoke"] = client.wait_run(SMOKE, smoke, timeout=TIMEOUT)["state"]
        except Exception as exc:  # noqa: BLE001 - reported below, once the API server is back
            seen["error"] = exc

    try:
        cluster.local.restart_apiserver(
            down_hook=while_down, grace=0
        )  # killed: its graceful stop can take 20 s
        cluster.local.controller("mpi-operator").wait_ready(timeout=120)
    finally:
        with contextlib.suppress(Exception):
            _delete(custom_api, job["metadata"]["name"])
    assert seen["seconds"] < 5, (
        f"marking the task failed took {seen['seconds']:.1f} s ({seen.get('error')!r})"
    )
    assert "error" not in seen, seen
    assert (seen["hold"], seen["smoke"]) == ("failed", "success"), seen
    _no_unexpected_commit(airflow_stack)
