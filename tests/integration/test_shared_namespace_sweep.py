"""Two deployments in one namespace, against the real API server and mpi-operator: the orphan sweep of one runs
as the shipped sweeper role (deploy/rbac.yaml ``airflow-mpi-sweeper``) and deletes its own orphan only.

The e2e module tests/e2e/test_shared_namespace.py runs the same with two real Airflow deployments; this one pins
the sweep's rules down: the other deployment's job of the *same* dag/task/run, a rendered manifest applied by hand,
a forged location and the role's limits, and finish requests handled after a clear and the next try (names are per
task instance, not per try).
"""

from __future__ import annotations

import time
from types import SimpleNamespace as NS

import pytest
from airflow.sdk import DAG
from kubernetes import client

from airflow_mpi.hooks.identity_claims import task_refusal
from airflow_mpi.hooks.orphan_sweep import BudgetedMPIJobHook, sweep_namespace
from airflow_mpi.jobspec.claims import CLAIM_GROUP, claim_name
from airflow_mpi.jobspec.naming import DEPLOYMENT_LABEL
from airflow_mpi.jobspec.orphans import TaskKey, TryState
from airflow_mpi.operators import MPIJobOperator
from airflow_mpi.plugins.orphan_listener import sweep_places
from airflow_mpi.version_compat import AirflowFailException
from tests.integration.least_privilege import (
    SWEEPER_ROLE,
    allowed_calls,
    apply_role,
    bound_service_account_kubeconfig,
    role_calls,
    shipped_role,
    use_as_kubernetes_default,
)

RUN_ID = "scheduled__2026-11-24T00:00:00+00:00"  # what two deployments with the same schedule both produce
KEY = TaskKey("shared", "train", RUN_ID, -1)
GROUP, VERSION = "kubeflow.org", "v2beta1"


def operator(namespace: str) -> MPIJobOperator:
    with DAG(KEY.dag_id, schedule=None):
        return MPIJobOperator(
            task_id=KEY.task_id,
            image="mpioperator/mpi-pi:openmpi",
            command=["sleep", "3600"],
            workers=1,
            namespace=namespace,
            suspend=True,
        )


def manifest_of(
    deployment: str | None, namespace: str, monkeypatch, key: TaskKey = KEY, try_number: int = 1
) -> dict:
    """The job try ``try_number`` of a deployment's task instance ``key`` submits (None: ``airflow-mpi-render``'s
    offline manifest)."""
    op = operator(namespace)
    if deployment is None:
        return op.build_manifest({"run_id": "offline"})
    monkeypatch.setenv("AIRFLOW__AIRFLOW_MPI__DEPLOYMENT_ID", deployment)
    ti = NS(
        dag_id=key.dag_id,
        task_id=key.task_id,
        run_id=key.run_id,
        map_index=key.map_index,
        try_number=try_number,
        id=ti_id(key, try_number),
    )
    return op.build_manifest({"ti": ti})


def ti_id(key: TaskKey, try_number: int) -> str:
    """The id of one try of ``key`` (Airflow 3 gives each try a new UUID)."""
    return f"ti-{key.map_index}-try-{try_number}"


@pytest.fixture
def sweeper_conn(k8s, kubeconfig, namespace, monkeypatch, tmp_path) -> str:
    """``kubernetes_default`` as a service account bound only to the sweeper role, as docs/security.md grants it to
    the scheduler and the API server."""
    role = apply_role(k8s, shipped_role(SWEEPER_ROLE))
    config = bound_service_account_kubeconfig(
        k8s, kubeconfig, namespace, role, tmp_path / "sweeper", service_account="airflow-mpi-sweeper-test"
    )
    return use_as_kubernetes_default(monkeypatch, config, namespace)


def test_a_sweep_deletes_its_own_orphan_only(k8s, namespace, sweeper_conn, monkeypatch):
    api = client.CustomObjectsApi(k8s)
    jobs = {
        who: api.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "mpijobs", manifest_of(who, namespace, monkeypatch)
        )
        for who in ("prod", "staging", None)
    }
    names = {who: job["metadata"]["name"] for who, job in jobs.items()}
    assert len(set(names.values())) == 3  # the same task instance: three jobs, none shared
    assert jobs["prod"]["metadata"]["labels"][DEPLOYMENT_LABEL] == "prod"
    assert DEPLOYMENT_LABEL not in jobs[None]["metadata"]["labels"]
    record = {
        "name": names["prod"],
        "namespace": namespace,
        "kubernetes_conn_id": sweeper_conn,
        "api_version": f"{GROUP}/{VERSION}",
    }

    # prod's task failed: prod's sweep deletes prod's live job, nothing else
    assert sweep_places(
        [(KEY, record)], "prod", lambda keys: {KEY: TryState("failed", 1, None)}, installation=PROD
    ) == [names["prod"]]
    left = {
        j["metadata"]["name"]: j
        for j in api.list_namespaced_custom_object(GROUP, VERSION, namespace, "mpijobs")["items"]
    }
    assert names["staging"] in left and names[None] in left
    assert left[names["staging"]]["metadata"]["uid"] == jobs["staging"]["metadata"]["uid"]
    # a gone task instance in staging's database is not prod's business either, and a record naming the staging
    # job (a forged XCom) does not open its namespace to prod's sweep
    forged = {**record, "name": names["staging"]}
    assert sweep_places([(KEY, forged)], "prod", lambda keys: {}, installation=PROD) == []
    assert {names["staging"], names[None]} <= {
        j["metadata"]["name"]
        for j in api.list_namespaced_custom_object(GROUP, VERSION, namespace, "mpijobs")["items"]
    }


def test_stale_requests_after_a_clear_delete_their_own_tries_jobs_never_the_next_tries(
    k8s, namespace, sweeper_conn, monkeypatch
):
    """Issue 32, item 4. A mapped task's instances 0, 1, 2 were marked failed in try 1 and cleared before the sweeper
    got to their requests. Instance 0's try 2 has made its job (same name; try 1's was deleted by its own
    cleanup) and runs; instance 1's try 2 has not started, its try 1 job still runs; instance 2's try 1 job is
    replaced by try 2's between the sweep's list and its delete."""
    api = client.CustomObjectsApi(k8s)
    mapped = [KEY._replace(map_index=i) for i in range(3)]
    made = {}

    def submit(key: TaskKey, try_number: int) -> dict:
        made[key, try_number] = api.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "mpijobs", manifest_of("prod", namespace, monkeypatch, key, try_number)
        )
        return made[key, try_number]

    def delete(
        job: dict,
    ) -> None:  # by its own try's cleanup (Background: gone at once, no finalizer to wait for)
        api.delete_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "mpijobs",
            job["metadata"]["name"],
            body=client.V1DeleteOptions(propagation_policy="Background"),
        )

    delete(submit(mapped[0], 1))
    submit(mapped[0], 2)
    submit(mapped[1], 1)
    submit(mapped[2], 1)
    assert len({made[k, 1]["metadata"]["name"] for k in mapped}) == 3
    assert (
        made[mapped[0], 2]["metadata"]["name"] == made[mapped[0], 1]["metadata"]["name"]
    )  # one name, every try

    database = {
        mapped[0]: TryState("running", 2, ti_id(mapped[0], 2)),  # committed; try 1's requests are stale
        mapped[1]: TryState("scheduled", 2, ti_id(mapped[1], 2)),
        mapped[2]: TryState("scheduled", 2, ti_id(mapped[2], 2)),
    }

    class ReplacedMeanwhile(BudgetedMPIJobHook):
        def list_mpijobs(self, *args, **kwargs):
            listed = super().list_mpijobs(*args, **kwargs)
            if (mapped[2], 2) not in made:  # after the list, before the delete: try 2 of instance 2 starts
                delete(made[mapped[2], 1])
                submit(mapped[2], 2)
            return listed

    deleted = []
    for key in mapped:  # the worker handles the queued requests in order, each sweeping the namespace
        hook = (ReplacedMeanwhile if key == mapped[2] else BudgetedMPIJobHook)(
            conn_id=sweeper_conn, api_version=f"{GROUP}/{VERSION}", deadline=time.monotonic() + 60
        )
        deleted.append(
            sweep_namespace(
                hook,
                namespace,
                "prod",
                lambda keys: {k: database[k] for k in keys},
                {key: TryState("failed", 1, ti_id(key, 1))},
            )
        )

    now = {
        j["metadata"]["uid"]: j
        for j in api.list_namespaced_custom_object(GROUP, VERSION, namespace, "mpijobs")["items"]
    }
    newer = [made[k, 2]["metadata"]["uid"] for k in (mapped[0], mapped[2])]
    assert [uid for uid in newer if uid not in now or now[uid]["metadata"].get("deletionTimestamp")] == []
    assert deleted == [
        [],
        [made[mapped[1], 1]["metadata"]["name"]],
        [],
    ]  # the stale request's own try's job stops
    own = made[mapped[1], 1]["metadata"]["uid"]
    assert own not in now or now[own]["metadata"].get("deletionTimestamp")


def test_the_sweeper_role_may_read_and_delete_mpijobs_and_nothing_else(
    k8s, kubeconfig, namespace, sweeper_conn, tmp_path
):
    """Asked of the real authorizer: everything the shipped sweeper role names (a grant added to the file shows up
    as allowed) and calls it must never make."""
    from kubernetes import config

    sweeper = config.new_client_from_config(config_file=str(tmp_path / "sweeper"))
    asked = {
        (GROUP, "mpijobs", v) for v in ("get", "list", "delete", "create", "watch", "patch", "update")
    } | {
        ("", "pods", "list"),
        ("", "pods/log", "get"),
        ("", "events", "list"),
        ("", "secrets", "get"),
        (CLAIM_GROUP, "leases", "update"),
        (CLAIM_GROUP, "leases", "delete"),
        ("", "configmaps", "get"),
    }
    allowed = allowed_calls(sweeper, namespace, asked | role_calls(shipped_role(SWEEPER_ROLE)))
    assert allowed == {(GROUP, "mpijobs", v) for v in ("get", "list", "delete")} | {
        (CLAIM_GROUP, "leases", v) for v in ("get", "create", "list")
    }


# ------------------------------------------------------------------------ a copy of prod's database (issue 32)
PROD, STAGING = "prod-installation", "staging-installation"  # where each one's metadata database is


def test_a_sweep_of_a_copied_database_deletes_none_of_the_originals_jobs(
    k8s, namespace, sweeper_conn, monkeypatch
):
    """Staging restored from prod's backup holds prod's id: prod's job of a run started after the copy has no task
    instance in staging's database. Prod's sweep claimed the namespace; staging's sweep (as the sweeper role) finds
    the claim naming prod's installation and deletes nothing."""
    api = client.CustomObjectsApi(k8s)
    job = api.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "mpijobs", manifest_of("prod", namespace, monkeypatch)
    )
    record = {
        "name": job["metadata"]["name"],
        "namespace": namespace,
        "kubernetes_conn_id": sweeper_conn,
        "api_version": f"{GROUP}/{VERSION}",
    }
    running = {KEY: TryState("running", 1, None)}
    assert sweep_places([(KEY, record)], "prod", lambda keys: running, installation=PROD) == []  # claims it

    assert sweep_places([(KEY, record)], "prod", lambda keys: {}, installation=STAGING) == []

    now = api.get_namespaced_custom_object(GROUP, VERSION, namespace, "mpijobs", job["metadata"]["name"])
    assert now["metadata"]["uid"] == job["metadata"]["uid"] and not now["metadata"].get("deletionTimestamp")
    lease = client.CoordinationV1Api(k8s).read_namespaced_lease(claim_name("prod"), namespace)
    assert lease.spec.holder_identity == PROD


def test_a_task_of_a_copied_database_refuses_to_reattach(
    k8s, namespace, kubernetes_default_conn, monkeypatch
):
    """Staging's scheduled run gets the name of prod's job (same id, same run id): its task, as the workers' role,
    fails for good naming both installations; prod's job is neither adopted nor deleted, nothing else is made."""
    api = client.CustomObjectsApi(k8s)
    job = api.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "mpijobs", manifest_of("prod", namespace, monkeypatch)
    )
    monkeypatch.setenv("AIRFLOW__AIRFLOW_MPI__INSTALLATION", PROD)
    op = operator(namespace)
    assert task_refusal(op.hook, namespace, "prod", PROD) is None  # prod's first task made the claim

    monkeypatch.setenv("AIRFLOW__AIRFLOW_MPI__INSTALLATION", STAGING)
    ti = NS(dag_id=KEY.dag_id, task_id=KEY.task_id, run_id=KEY.run_id, map_index=-1, try_number=1, id="uuid")
    op._wait = lambda *args, **kwargs: pytest.fail("staging's task follows prod's job")
    with pytest.raises(
        AirflowFailException,
        match=f"claimed for deployment id 'prod' by installation '{PROD}'.*installation is '{STAGING}'",
    ):
        op.execute({"ti": ti})
    op.on_kill()
    jobs = api.list_namespaced_custom_object(GROUP, VERSION, namespace, "mpijobs")["items"]
    assert [(j["metadata"]["uid"], j["metadata"].get("deletionTimestamp")) for j in jobs] == [
        (job["metadata"]["uid"], None)
    ]
