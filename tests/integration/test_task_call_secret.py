"""``@task.mpi``'s call Secret on the real API server and the real mpi-operator (issue 32, item 5).

A job without its Secret never starts on a real node (its pods wait in ContainerCreating, FailedMount): kwok does not
mount volumes, so the workers here are held Pending for an hour (``START_DELAY``) as such pods would be, and the
launcher is never created (WaitForWorkersReady). The tasks run as the shipped role, which may create secrets but
never read them; the refused cleanup is the API server's own refusal (a role without those verbs), as an outage
refuses both calls.
"""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime
from types import SimpleNamespace as NS

import pytest
from kubernetes import client, watch

from airflow_mpi.function_task.function_call import decode_call, mounted_call_secret
from airflow_mpi.function_task.rank_result import nonce_digest, result_digest_of
from airflow_mpi.operators.job_record import JOB_XCOM_KEY, STATE_STORE_KEY
from airflow_mpi.version_compat import AirflowException, AirflowFailException, TaskDeferred
from localcluster import behaviour as bh
from tests.integration.least_privilege import apply_role, bound_service_account_kubeconfig, role_without

try:
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.11
    from airflow.decorators import task
    from airflow.models.dag import DAG

RUN_ID = "manual__2026-11-22T10:00:00+00:00"
NO_CLEANUP_ROLE = "airflow-mpi-test-no-cleanup"


def square(n: int) -> int:
    return n * n


def decorated(namespace: str, **kwargs):
    """``@task.mpi`` over ``square(7)``, deferrable; its workers never start (see the module docstring)."""
    with DAG("it", schedule=None, start_date=datetime(2025, 1, 1, tzinfo=UTC)) as dag:
        task.mpi(
            namespace=namespace,
            image="python:3.12",
            workers=2,
            deferrable=True,
            worker={"annotations": {bh.START_DELAY: "1h"}},
            **kwargs,
        )(square)(7)
    return dag.get_task("square")


class Store(dict):
    """Airflow 3.3's task_state_store: kept from try to try."""

    def set(self, key, value):
        self[key] = value


def context(store: Store, xcoms: list, try_number: int) -> dict:
    ti = NS(
        dag_id="it",
        task_id="square",
        run_id=RUN_ID,
        map_index=-1,
        try_number=try_number,
        xcom_push=lambda key, value: xcoms.append((key, value)),
        get_first_reschedule_date=lambda context: None,
    )
    return {"ti": ti, "task_reschedule_count": 0, "task_state_store": store}


def deferred_to(op, ctx: dict):
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    return deferred.value.trigger


def job_of(k8s, namespace: str, name: str) -> dict | None:
    try:
        return client.CustomObjectsApi(k8s).get_namespaced_custom_object(
            "kubeflow.org", "v2beta1", namespace, "mpijobs", name
        )
    except client.exceptions.ApiException as err:
        if err.status == 404:
            return None
        raise


def assert_followed_job_has_its_secret(k8s, namespace: str, trigger) -> None:
    """The job the trigger follows mounts a Secret that exists, is owned by it, and carries the nonce whose digest
    the job carries (what rank 0's marker lines are checked against)."""
    job = job_of(k8s, namespace, trigger.name)
    assert job is not None and job["metadata"]["uid"] == trigger.uid
    secret = client.CoreV1Api(k8s).read_namespaced_secret(mounted_call_secret(job), namespace)
    assert [(o.kind, o.uid) for o in secret.metadata.owner_references] == [("MPIJob", trigger.uid)]
    call = decode_call(base64.b64decode(secret.data["call"]).decode())
    assert nonce_digest(call["nonce"]) == result_digest_of(job)


def wait_secret_gone(k8s, namespace: str, name: str, timeout: int = 60) -> None:
    """Until the garbage collector removed the Secret (its owner, the replaced job, is gone)."""
    core = client.CoreV1Api(k8s)
    listing = core.list_namespaced_secret(namespace, field_selector=f"metadata.name={name}")
    if not listing.items:
        return
    for event in watch.Watch().stream(
        core.list_namespaced_secret,
        namespace,
        field_selector=f"metadata.name={name}",
        resource_version=listing.metadata.resource_version,
        timeout_seconds=timeout,
    ):
        if event["type"] == "DELETED":
            return
    raise AssertionError(f"Secret {namespace}/{name} still exists after {timeout}s")


def test_a_job_left_without_its_call_secret_is_replaced_by_the_next_try(
    k8s, namespace, kubernetes_default_conn
):
    """Try 1's worker died between creating the job and its Secret. Try 2 does not follow that job (it would wait
    for ever): it replaces it with one that has its Secret; the stand-in it made goes with the old job."""
    store, xcoms = Store(), []
    first = decorated(namespace)
    left = first.hook.create_mpijob(
        first.build_manifest(context(store, xcoms, 1)), namespace
    )  # and died here

    trigger = deferred_to(decorated(namespace), context(store, xcoms, 2))

    assert trigger.uid != left["metadata"]["uid"]
    assert_followed_job_has_its_secret(k8s, namespace, trigger)
    wait_secret_gone(k8s, namespace, mounted_call_secret(left))


@pytest.fixture
def no_cleanup_conn(k8s, kubeconfig, namespace, tmp_path, monkeypatch) -> str:
    """A connection whose identity may submit but neither create secrets nor delete MPIJobs."""
    import json

    role = role_without("create", "secrets", NO_CLEANUP_ROLE)
    for rule in role["rules"]:
        if "mpijobs" in rule["resources"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "delete"]
    role["rules"] = [rule for rule in role["rules"] if rule["verbs"]]
    apply_role(k8s, role)
    path = bound_service_account_kubeconfig(
        k8s,
        kubeconfig,
        namespace,
        NO_CLEANUP_ROLE,
        tmp_path / "no-cleanup",
        service_account=f"no-cleanup-{uuid.uuid4().hex[:6]}",
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_NO_CLEANUP",
        json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(path), "namespace": namespace}}
        ),
    )
    return "kubernetes_no_cleanup"


def test_a_failed_cleanup_leaves_the_job_recorded_and_the_next_try_replaces_it(
    k8s, namespace, kubernetes_default_conn, no_cleanup_conn
):
    store, xcoms = Store(), []
    with pytest.raises(
        AirflowException,
        match=r"Could not create Secret .*403.*deleting MPIJob .* again failed too"
        r".*recorded",
    ) as failed:
        decorated(namespace, kubernetes_conn_id=no_cleanup_conn).execute(context(store, xcoms, 1))
    assert not isinstance(failed.value, AirflowFailException)  # a retry may replace it
    ((key, record),) = xcoms
    assert key == JOB_XCOM_KEY and record["namespace"] == namespace
    assert store[STATE_STORE_KEY]["name"] == record["name"]
    left = job_of(k8s, namespace, record["name"])
    assert left is not None and not left["metadata"].get(
        "deletionTimestamp"
    )  # the listener and sweeps find it

    trigger = deferred_to(decorated(namespace), context(store, xcoms, 2))

    assert trigger.uid != left["metadata"]["uid"]
    assert_followed_job_has_its_secret(k8s, namespace, trigger)
