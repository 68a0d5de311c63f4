"""``@task.mpi``'s call Secret: mounted only where the ranks run; a job left without it (its try ended between the
two creates, or its cleanup failed) is recorded, and the next try replaces it instead of waiting for ever."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from airflow_mpi.function_task.function_call import decode_call, lost_call_data, mounted_call_secret
from airflow_mpi.function_task.rank_result import nonce_digest, result_digest_of
from airflow_mpi.operators.job_record import JOB_XCOM_KEY, STATE_STORE_KEY, record_result_key
from airflow_mpi.version_compat import AirflowException, AirflowFailException, TaskDeferred
from airflow_mpi.wait.contract import Outcome, WaitResult
from tests.unit.operators.test_task_decorators import RUN_ID, build


class Store(dict):
    """Airflow 3.3's task_state_store: survives the try."""

    def set(self, key, value):
        self[key] = value


def context(store, xcoms, try_number=1):
    ti = NS(
        dag_id="d",
        task_id="add",
        run_id=RUN_ID,
        map_index=-1,
        try_number=try_number,
        xcom_push=lambda key, value: xcoms.append((key, value)),
    )
    return {"ti": ti, "task_state_store": store}


def defer(op, ctx):
    """The trigger the try deferred to (after submitting or reattaching)."""
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    return deferred.value.trigger


def next_try(earlier, **kwargs):
    op = build(deferrable=True, **kwargs)
    op.__dict__["hook"] = earlier.hook  # the same cluster
    return op


def followed(hook, trigger):
    return next(j for j in hook.jobs.values() if j["metadata"]["uid"] == trigger.uid)


def assert_has_its_secret(hook, trigger):
    """The followed job's workers mount a Secret that exists, is owned by it and carries the nonce whose digest the
    job carries (what rank 0's marker lines are checked against)."""
    job = followed(hook, trigger)
    data, owner = hook.secrets[("ns", mounted_call_secret(job))]
    assert owner == job["metadata"]["uid"]
    assert nonce_digest(decode_call(data["call"])["nonce"]) == result_digest_of(job)


# ---------------------------------------------------------------- where the Secret is mounted
def test_a_decorated_tasks_secret_reaches_the_workers_main_container_only():
    op = build()
    manifest = op.build_manifest(
        {"ti": NS(dag_id="d", task_id="add", run_id=RUN_ID, map_index=-1, try_number=1)}
    )
    replicas = manifest["spec"]["mpiReplicaSpecs"]
    mounting = {
        role: [
            c["name"]
            for c in [*r["template"]["spec"].get("initContainers", []), *r["template"]["spec"]["containers"]]
            if any(m["name"] == "airflow-mpi-call" for m in c.get("volumeMounts", []))
        ]
        for role, r in replicas.items()
    }
    assert replicas["Launcher"]["template"]["spec"]["initContainers"][0]["name"] == "wait-for-workers"
    assert mounting == {"Launcher": [], "Worker": ["worker"]}


# ---------------------------------------------------------------- a job without its Secret
def test_a_try_that_finds_its_job_without_the_call_secret_replaces_it():
    """The try that made the job ended before its Secret: the job's pods could never start (FailedMount)."""
    store, xcoms = Store(), []
    earlier = build(deferrable=True)
    manifest = earlier.build_manifest(context(store, xcoms))
    left = earlier.hook.create_mpijob(manifest, "ns")  # and the worker died here
    op = next_try(earlier)
    trigger = defer(op, context(store, xcoms, try_number=2))

    assert trigger.uid != left["metadata"]["uid"] and earlier.hook.deleted == [
        (left["metadata"]["name"], "ns")
    ]
    assert_has_its_secret(earlier.hook, trigger)
    # the stand-in the check made is the old job's: it goes with it, and would run nothing had a rank started
    assert earlier.hook.secrets[("ns", mounted_call_secret(left))] == (
        lost_call_data(),
        left["metadata"]["uid"],
    )


def test_a_job_with_its_call_secret_is_followed_not_replaced():
    store, xcoms = Store(), []
    earlier = build(deferrable=True)
    first = defer(earlier, context(store, xcoms))
    secrets = dict(earlier.hook.secrets)
    trigger = defer(next_try(earlier), context(store, xcoms, try_number=2))
    assert trigger.uid == first.uid
    assert (
        earlier.hook.deleted == [] and earlier.hook.secrets == secrets
    )  # the check's create was refused (409)


def test_a_running_job_is_followed_whatever_became_of_its_secret():
    """Its pods mounted the Secret when they started: a person deleted it since; the run goes on."""
    store, earlier = Store(), build(deferrable=True)
    left = earlier.hook.create_mpijob(earlier.build_manifest(context(store, [])), "ns")
    # as the earlier try attached
    record_result_key(context(store, []), left["metadata"]["uid"], earlier.callbacks.nonce)
    left["status"] = {
        "conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]
    }
    trigger = defer(next_try(earlier), context(store, [], try_number=2))
    assert (
        trigger.uid == left["metadata"]["uid"] and earlier.hook.secrets == {} and earlier.hook.deleted == []
    )
    assert trigger.result_key == earlier.callbacks.nonce  # the trigger reads a value this try can verify


@pytest.mark.parametrize("store", [None, Store()], ids=["no-state-store", "state-store-without-the-key"])
def test_an_earlier_tries_live_job_whose_key_this_try_lacks_is_replaced_at_once(store):
    """Airflow before 3.3 keeps nothing from try to try: the next try cannot verify the earlier submission's value
    (rank 0 signs it with that try's nonce), so it replaces the job now instead of following it to its end and
    failing there."""
    earlier = build(deferrable=True)
    ctx = context(store, []) if store is not None else {"ti": context(Store(), [])["ti"]}
    left = earlier.hook.create_mpijob(earlier.build_manifest(ctx), "ns")
    earlier.hook.create_owned_secret(mounted_call_secret(left), "ns", {"call": "x"}, left)
    left["status"] = {
        "conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]
    }
    op = next_try(earlier)
    ti = NS(**{**vars(ctx["ti"]), "try_number": 2})
    trigger = defer(op, {**ctx, "ti": ti})
    assert (
        earlier.hook.deleted == [(left["metadata"]["name"], "ns")] and trigger.uid != left["metadata"]["uid"]
    )
    assert trigger.result_key == op.callbacks.nonce


def test_a_secret_that_cannot_be_checked_fails_the_try_naming_it():
    earlier = build(deferrable=True)
    left = earlier.hook.create_mpijob(earlier.build_manifest(context(Store(), [])), "ns")
    earlier.hook.secret_error = ApiException(status=503, reason="Service Unavailable")
    with pytest.raises(
        AirflowException, match=rf"Secret ns/{mounted_call_secret(left)}, which MPIJob .* mount.*503"
    ):
        next_try(earlier).execute(context(Store(), [], try_number=2))
    assert list(earlier.hook.jobs.values()) == [left]


def test_an_adopted_job_of_an_earlier_submission_without_its_secret_is_replaced(monkeypatch):
    """The create's answer was lost and the job of that name is an earlier submission's (another nonce)."""
    earlier = build(deferrable=True)
    left = earlier.hook.create_mpijob(earlier.build_manifest(context(Store(), [])), "ns")
    op = next_try(earlier)
    real_create = op.hook.create_mpijob
    answers = iter([lambda manifest, namespace: left])  # the first create adopts it (hooks/mpijob.py)
    monkeypatch.setattr(op.hook, "create_mpijob", lambda m, ns: next(answers, real_create)(m, ns))
    monkeypatch.setattr(
        "airflow_mpi.operators.mpijob.reattach", lambda *a, **k: None
    )  # found only by the create
    trigger = defer(op, context(Store(), [], try_number=2))
    assert trigger.uid != left["metadata"]["uid"] and op.hook.deleted == [(left["metadata"]["name"], "ns")]
    assert_has_its_secret(op.hook, trigger)


# ---------------------------------------------------------------- a failed cleanup
def test_a_failed_cleanup_leaves_the_job_recorded_and_the_next_try_replaces_it(monkeypatch):
    """The same API outage refuses the Secret and the delete: the task fails, retryable, the job recorded."""
    store, xcoms = Store(), []
    op = build(deferrable=True)
    op.hook.secret_error = ApiException(status=503, reason="Service Unavailable")

    def outage(*args, **kwargs):
        raise ApiException(status=503, reason="Service Unavailable")

    monkeypatch.setattr(op.hook, "delete_mpijob", outage)
    with pytest.raises(
        AirflowException,
        match=r"Could not create Secret .*503.*deleting MPIJob ns/\S+ again failed "
        r"too.*recorded",
    ) as failed:
        op.execute(context(store, xcoms))
    assert not isinstance(failed.value, AirflowFailException)  # a retry may replace it
    ((_key, job),) = op.hook.jobs.items()
    record = {"name": job["metadata"]["name"], "namespace": "ns"}
    assert xcoms == [
        (
            JOB_XCOM_KEY,
            {**record, "kubernetes_conn_id": "kubernetes_default", "api_version": "kubeflow.org/v2beta1"},
        )
    ]
    assert store[STATE_STORE_KEY]["name"] == record["name"] and store[STATE_STORE_KEY]["namespace"] == "ns"

    monkeypatch.undo()
    op.hook.secret_error = None
    retry = next_try(op)
    trigger = defer(retry, context(store, xcoms, try_number=2))
    assert op.hook.deleted == [(record["name"], "ns")] and trigger.uid != job["metadata"]["uid"]
    assert_has_its_secret(op.hook, trigger)


def test_a_refused_secret_whose_job_is_deleted_again_fails_for_good():
    op = build()
    op.hook.secret_error = ApiException(status=403, reason="Forbidden")
    with pytest.raises(AirflowFailException, match=r"Could not create Secret ns/.*403.*was deleted again"):
        op.execute(context(Store(), []))
    assert op.hook.jobs == {}


def test_a_later_try_verifies_the_value_of_an_earlier_tries_job_with_the_key_kept_for_it(monkeypatch):
    """Airflow 3.3+: the earlier try kept its key with the job's uid; the next (sync) try follows that job and returns
    its rank 0's value; a key kept for another uid (a job made again under the name) is not used."""
    from tests.unit.operators.test_task_decorators import result_lines

    store, earlier = Store(), build()
    left = earlier.hook.create_mpijob(earlier.build_manifest(context(store, [])), "ns")
    earlier.hook.create_owned_secret(mounted_call_secret(left), "ns", {"call": "x"}, left)
    left["status"] = {
        "conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]
    }
    record_result_key(context(store, []), left["metadata"]["uid"], earlier.callbacks.nonce)
    op = build()
    op.__dict__["hook"] = earlier.hook

    async def wait(name, namespace, submitted_at, deadline, uid=None):
        for line in result_lines({"v": 42}, earlier.callbacks.nonce):
            op._launcher_log()(line)
        return WaitResult(Outcome.SUCCESS, name, namespace, "ok")

    monkeypatch.setattr(op, "_wait", wait)
    assert op.execute(context(store, [], try_number=2)) == {"v": 42}
    assert len(earlier.hook.created) == 1  # followed, not replaced (the one delete is delete_succeeded's)
    record_result_key(context(store, []), "another-uid", earlier.callbacks.nonce)
    assert op.callbacks.key_of(left) is None
