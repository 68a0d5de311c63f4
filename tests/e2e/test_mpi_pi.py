"""mpi_pi through real Airflow services and the REST API, against the cluster (local: real API server and
mpi-operator, simulated nodes; the launcher's lines come from the cluster's served logs)."""

from __future__ import annotations

import pytest

from airflowstack import ApiError, wait_until
from airflowstack.kube import pi_output

from .conftest import NAMESPACE, mpijobs

DAG = "mpi_pi"
RUN_TIMEOUT = 240


@pytest.fixture(scope="module", autouse=True)
def dags_ready(client):
    client.wait_for_dags([DAG, "e2e_mpi_hold"], timeout=180)


def _wait(probe, timeout: float, what: str):
    return wait_until(probe, timeout=timeout, interval=0.5, what=what)


def _assert_launcher_lines(log: str, cluster, np: int) -> None:
    assert "pi is approximately" in log, log[-3000:]
    if cluster.simulated:
        for line in pi_output(np):
            assert line in log, f"{line!r} missing from the task log:\n{log[-3000:]}"


def test_rest_trigger_with_conf_overrides_runs_and_returns_the_job(client, cluster, custom_api):
    conf = {
        "workers": 3,
        "slots_per_worker": 2,
        "image": "mpioperator/mpi-pi:openmpi",
        "mpi_implementation": "OpenMPI",
        "deferrable": False,
    }
    cluster.serve_launcher_logs(NAMESPACE, pi_output(6))
    run = client.trigger(DAG, conf)
    assert run["conf"] == conf
    run_id = run["dag_run_id"]

    finished = client.wait_run(DAG, run_id, timeout=RUN_TIMEOUT)
    assert finished["state"] == "success", client.task_log(DAG, run_id, "pi")

    log = client.task_log(DAG, run_id, "pi")
    _assert_launcher_lines(log, cluster, np=6)
    assert "replicas: 3" in log  # the submitted manifest: the conf's worker count
    assert "slotsPerWorker: 2" in log

    job = client.xcom(DAG, run_id, "pi")
    assert job["condition"] == "Succeeded"
    assert job["namespace"] == NAMESPACE and job["name"]
    assert job["launcher_pods"]
    report = client.xcom(DAG, run_id, "report")
    assert report["job"] == f"{NAMESPACE}/{job['name']}"
    assert report["condition"] == "Succeeded"
    # on_finish_action="delete_succeeded": nothing is left on the cluster
    _wait(
        lambda: not [j for j in mpijobs(custom_api) if j["metadata"]["name"] == job["name"]],
        60,
        f"MPIJob {job['name']} to be deleted after success",
    )


def test_deferrable_run_passes_through_the_triggerer(client, cluster):
    conf = {"workers": 2, "slots_per_worker": 1, "deferrable": True}
    cluster.serve_launcher_logs(NAMESPACE, pi_output(2))
    run_id = client.trigger(DAG, conf)["dag_run_id"]

    seen: list[str] = []
    ti = client.wait_task(
        DAG,
        run_id,
        "pi",
        {"success", "failed", "upstream_failed"},
        timeout=RUN_TIMEOUT,
        seen=seen,
        interval=0.2,
    )
    assert ti["state"] == "success", client.task_log(DAG, run_id, "pi")
    assert "deferred" in seen, f"task states observed: {seen}"
    assert ti["try_number"] == 1
    assert client.wait_run(DAG, run_id, timeout=60)["state"] == "success"

    log = client.task_log(DAG, run_id, "pi")
    _assert_launcher_lines(log, cluster, np=2)
    # the worker deferred, the real triggerer ran the MPIJobTrigger (its lines are part of the task log) and
    # fired the event the worker resumed with
    assert "Pausing task as DEFERRED" in log
    assert f"trigger {DAG}/{run_id}/pi/-1/1" in log and "Trigger fired event" in log
    job = client.xcom(DAG, run_id, "pi")
    assert job["condition"] == "Succeeded"


@pytest.mark.parametrize(
    "conf",
    [
        {"workers": 0},
        {"workers": 17},
        {"slots_per_worker": 9},
        {"mpi_implementation": "LAM"},
        {"image": ""},
        {"deferrable": "yes"},
    ],
    ids=["workers-0", "workers-17", "slots-9", "implementation", "image-empty", "deferrable-string"],
)
def test_conf_violating_a_param_schema_is_refused(client, custom_api, conf):
    runs_before = {r["dag_run_id"] for r in client.dag_runs(DAG)}
    jobs_before = {j["metadata"]["uid"] for j in mpijobs(custom_api)}
    with pytest.raises(ApiError) as err:
        client.trigger(DAG, conf)
    assert err.value.status_code == 400, err.value
    assert {r["dag_run_id"] for r in client.dag_runs(DAG)} == runs_before
    assert {j["metadata"]["uid"] for j in mpijobs(custom_api)} <= jobs_before


# ---------------------------------------------------------------- killing a deferred task deletes its MPIJob
HOLD = "e2e_mpi_hold"


def _live_jobs(custom_api, run_id: str) -> list[dict]:
    return [
        j
        for j in mpijobs(custom_api, "airflow-mpi.io/dag-id=e2e_mpi_hold")
        if (j["metadata"].get("annotations") or {}).get("airflow-mpi.io/run-id") == run_id
        and not j["metadata"].get("deletionTimestamp")
    ]


def _deferred_job(client, custom_api, run_id: str, try_number: int = 1) -> dict:
    """Wait for the task to be deferred with its trigger running in the triggerer; return the MPIJob it waits on.

    A trigger only runs (and can react to the task being killed) once the triggerer has picked it up: the
    trigger's first log line ("trigger <dag>/<run>/<task>/<map index>/<try> (ID n) starting") shows that. A try
    may defer twice (a cleared try whose reattached job the old trigger deletes resubmits), so the observation is
    of the task instance's *current* trigger, by its ID: counting start lines against deferrals fails because
    Airflow writes both triggers' logs of one try and one triggerer to the same file, the second overwriting the
    first. The observation must be unchanged when looked at again (one live job, the same trigger).
    """

    def observe():
        ti = client.task_instance(HOLD, run_id, "hold")
        if ti["state"] in ("success", "failed", "upstream_failed"):
            log = client.task_log(HOLD, run_id, "hold", try_number)
            raise AssertionError(
                f"try {try_number} ended {ti['state']} instead of waiting on its MPIJob:\n{log[-3000:]}"
            )
        trigger_id = (ti.get("trigger") or {}).get("id")
        if ti["state"] != "deferred" or ti["try_number"] != try_number or trigger_id is None:
            return None, []
        started = f"trigger {HOLD}/{run_id}/hold/-1/{try_number} (ID {trigger_id}) starting"
        if started not in client.task_log(HOLD, run_id, "hold", try_number):
            return None, []
        jobs = _live_jobs(custom_api, run_id)
        return (trigger_id, [j["metadata"]["uid"] for j in jobs]), jobs

    def settled():
        first, jobs = observe()
        if (
            first is None or len(first[1]) != 1
        ):  # not deferred (yet, or between two deferrals) / no single job
            return None
        again, _ = observe()
        return jobs[0] if again == first else None

    return wait_until(
        settled,
        timeout=RUN_TIMEOUT,
        interval=0.5,
        what=f"try {try_number} of {HOLD}/{run_id} to wait in a running trigger",
        ignore=(),
    )


def _gone(custom_api, uid: str) -> bool:
    return uid not in {j["metadata"]["uid"] for j in mpijobs(custom_api)}


def test_marking_a_deferred_task_failed_deletes_its_mpijob(client, custom_api):
    run_id = client.trigger(HOLD)["dag_run_id"]
    job = _deferred_job(client, custom_api, run_id)

    client.set_task_state(HOLD, run_id, "hold", "failed")
    _wait(
        lambda: _gone(custom_api, job["metadata"]["uid"]),
        90,
        f"MPIJob {job['metadata']['name']} to be deleted after the task was marked failed",
    )
    assert client.wait_run(HOLD, run_id, timeout=60)["state"] == "failed"


def test_clearing_a_deferred_task_deletes_its_mpijob(client, custom_api):
    run_id = client.trigger(HOLD)["dag_run_id"]
    job = _deferred_job(client, custom_api, run_id)

    client.clear_task(HOLD, run_id, ["hold"])
    _wait(
        lambda: _gone(custom_api, job["metadata"]["uid"]),
        90,
        f"MPIJob {job['metadata']['name']} to be deleted after the task was cleared",
    )

    # the cleared task runs again with a fresh MPIJob; end it the same way
    def next_try():
        ti = client.task_instance(HOLD, run_id, "hold")
        return ti if ti["try_number"] >= 2 and ti["state"] == "deferred" else None

    _wait(next_try, RUN_TIMEOUT, "the cleared task's next try to be deferred")
    again = _deferred_job(client, custom_api, run_id, try_number=2)
    assert again["metadata"]["uid"] != job["metadata"]["uid"]
    client.set_task_state(HOLD, run_id, "hold", "failed")
    _wait(lambda: _gone(custom_api, again["metadata"]["uid"]), 90, "the second MPIJob to be deleted")


def test_marking_a_task_failed_before_a_triggerer_picked_it_up_deletes_its_mpijob(
    airflow_stack, client, custom_api
):
    """No trigger runs, so no on_kill can: the provider's listener in the API server deletes the live job."""
    airflow_stack.stop_service("triggerer")
    try:
        run_id = client.trigger(HOLD)["dag_run_id"]
        client.wait_task(HOLD, run_id, "hold", {"deferred"}, timeout=RUN_TIMEOUT)
        (job,) = _wait(lambda: _live_jobs(custom_api, run_id), 60, f"the MPIJob of {HOLD}/{run_id}")
        assert f"trigger {HOLD}/{run_id}/hold/" not in client.task_log(HOLD, run_id, "hold")

        client.set_task_state(HOLD, run_id, "hold", "failed")
        _wait(
            lambda: _gone(custom_api, job["metadata"]["uid"]),
            60,
            f"MPIJob {job['metadata']['name']} to be deleted although no trigger ever ran",
        )
        assert client.wait_run(HOLD, run_id, timeout=60)["state"] == "failed"
    finally:
        airflow_stack.start_service("triggerer")
