"""Fixtures of the hook tests: a real Airflow connection (env var), no cluster, no waiting."""

from __future__ import annotations

import json

import pytest

from airflow_mpi.hooks.async_mpijob import AsyncMPIJobHook
from airflow_mpi.hooks.mpijob import MPIJobHook

CONN_ENV = "AIRFLOW_CONN_KUBERNETES_DEFAULT"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """Empty kubernetes_default connection, not in a pod, retries without sleeping."""
    monkeypatch.setenv(CONN_ENV, json.dumps({"conn_type": "kubernetes", "extra": {}}))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    for cls in (MPIJobHook, AsyncMPIJobHook):
        monkeypatch.setattr(cls, "IN_CLUSTER_NAMESPACE_FILE", str(tmp_path / "no-such-namespace-file"))
        monkeypatch.setattr(cls, "api_retry_wait", 0.0)


@pytest.fixture
def connection(monkeypatch):
    """Set the extras of the kubernetes_default connection (JSON connection in the environment)."""

    def set_extras(**extra):
        monkeypatch.setenv(CONN_ENV, json.dumps({"conn_type": "kubernetes", "extra": extra}))

    return set_extras


@pytest.fixture
def in_cluster_namespace(monkeypatch, tmp_path):
    """Pretend to run in a pod of namespace ``pod-ns``."""
    path = tmp_path / "namespace"
    path.write_text("pod-ns\n")
    for cls in (MPIJobHook, AsyncMPIJobHook):
        monkeypatch.setattr(cls, "IN_CLUSTER_NAMESPACE_FILE", str(path))
    return "pod-ns"
