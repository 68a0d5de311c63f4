"""Two deployments in one namespace, against the real API server and mpi-operator: the orphan sweep of one runs
as the shipped sweeper role (deploy/rbac.yaml ``airflow-mpi-sweeper``) and deletes its own orphan only.

The e2e module tests/e2e/test_shared_namespace.py runs the same with two real Airflow deployments; this one pins
the sweep's rules down: the other deployment's job of the *same* dag/task/run, a rendered manifest applied by hand,
a forged location and the role's limits.
"""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
from airflow.sdk import DAG
from kubernetes import client

from airflow_mpi.jobspec.naming import DEPLOYMENT_LABEL
from airflow_mpi.jobspec.orphans import TaskKey
from airflow_mpi.operators import MPIJobOperator
from airflow_mpi.plugins.orphan_listener import sweep_places
from tests.integration.least_privilege import (SWEEPER_ROLE, allowed_calls, apply_role,
                                               bound_service_account_kubeconfig, role_calls, shipped_role,
                                               use_as_kubernetes_default)

RUN_ID = "scheduled__2026-11-24T00:00:00+00:00"  # what two deployments with the same schedule both produce
KEY = TaskKey("shared", "train", RUN_ID, -1)
GROUP, VERSION = "kubeflow.org", "v2beta1"


def operator(namespace: str) -> MPIJobOperator:
    with DAG(KEY.dag_id, schedule=None):
        return MPIJobOperator(task_id=KEY.task_id, image="mpioperator/mpi-pi:openmpi", command=["sleep", "3600"],
                              workers=1, namespace=namespace, suspend=True)


def manifest_of(deployment: str | None, namespace: str, monkeypatch) -> dict:
    """The job a deployment's task instance KEY submits (None: ``airflow-mpi-render``'s offline manifest)."""
    op = operator(namespace)
    if deployment is None:
        return op.build_manifest({"run_id": "offline"})
    monkeypatch.setenv("AIRFLOW__AIRFLOW_MPI__DEPLOYMENT_ID", deployment)
    ti = NS(dag_id=KEY.dag_id, task_id=KEY.task_id, run_id=KEY.run_id, map_index=-1, try_number=1, id="uuid")
    return op.build_manifest({"ti": ti})


@pytest.fixture
def sweeper_conn(k8s, kubeconfig, namespace, monkeypatch, tmp_path) -> str:
    """``kubernetes_default`` as a service account bound only to the sweeper role, as the README grants it to the
    scheduler and the API server."""
    role = apply_role(k8s, shipped_role(SWEEPER_ROLE))
    config = bound_service_account_kubeconfig(k8s, kubeconfig, namespace, role, tmp_path / "sweeper",
                                              service_account="airflow-mpi-sweeper-test")
    return use_as_kubernetes_default(monkeypatch, config, namespace)


def test_a_sweep_deletes_its_own_orphan_only(k8s, namespace, sweeper_conn, monkeypatch):
    api = client.CustomObjectsApi(k8s)
    jobs = {who: api.create_namespaced_custom_object(GROUP, VERSION, namespace, "mpijobs",
                                                     manifest_of(who, namespace, monkeypatch))
            for who in ("prod", "staging", None)}
    names = {who: job["metadata"]["name"] for who, job in jobs.items()}
    assert len(set(names.values())) == 3  # the same task instance: three jobs, none shared
    assert jobs["prod"]["metadata"]["labels"][DEPLOYMENT_LABEL] == "prod"
    assert DEPLOYMENT_LABEL not in jobs[None]["metadata"]["labels"]
    record = {"name": names["prod"], "namespace": namespace, "kubernetes_conn_id": sweeper_conn,
              "api_version": f"{GROUP}/{VERSION}"}

    # prod's task failed: prod's sweep deletes prod's live job, nothing else
    assert sweep_places([(KEY, record)], "prod", lambda keys: {KEY: "failed"}) == [names["prod"]]
    left = {j["metadata"]["name"]: j for j in api.list_namespaced_custom_object(GROUP, VERSION, namespace,
                                                                               "mpijobs")["items"]}
    assert names["staging"] in left and names[None] in left
    assert left[names["staging"]]["metadata"]["uid"] == jobs["staging"]["metadata"]["uid"]
    # a gone task instance in staging's database is not prod's business either, and a record naming the staging
    # job (a forged XCom) does not open its namespace to prod's sweep
    forged = {**record, "name": names["staging"]}
    assert sweep_places([(KEY, forged)], "prod", lambda keys: {}) == []
    assert {names["staging"], names[None]} <= {j["metadata"]["name"] for j in api.list_namespaced_custom_object(
        GROUP, VERSION, namespace, "mpijobs")["items"]}


def test_the_sweeper_role_may_read_and_delete_mpijobs_and_nothing_else(k8s, kubeconfig, namespace, sweeper_conn,
                                                                        tmp_path):
    """Asked of the real authorizer: everything the shipped sweeper role names (a grant added to the file shows up
    as allowed) and calls it must never make."""
    from kubernetes import config

    sweeper = config.new_client_from_config(config_file=str(tmp_path / "sweeper"))
    asked = {(GROUP, "mpijobs", v) for v in ("get", "list", "delete", "create", "watch", "patch", "update")} | {
        ("", "pods", "list"), ("", "pods/log", "get"), ("", "events", "list"), ("", "secrets", "get")}
    allowed = allowed_calls(sweeper, namespace, asked | role_calls(shipped_role(SWEEPER_ROLE)))
    assert allowed == {(GROUP, "mpijobs", "get"), (GROUP, "mpijobs", "list"), (GROUP, "mpijobs", "delete")}
