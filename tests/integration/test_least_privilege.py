"""The shipped role (deploy/rbac.yaml ``airflow-mpi``) grants exactly the provider's calls, checked by the real API
server.

What must be allowed is the literal ``WORKER_CALLS`` (tests/integration/least_privilege.py, tied to the code by
tests/unit/hooks/test_rbac_calls.py), never the file itself: the authorizer is asked about those calls, about
everything the file grants (so that a grant beyond them shows up as allowed) and about calls a provider must never
make. The operator, trigger and sensor tests of tests/integration run as a service account bound only to this role
(``kubernetes_default_conn``), so they prove it suffices.
"""

from __future__ import annotations

import pytest
from kubernetes import client, config

from tests.integration.least_privilege import WORKER_CALLS, allowed_calls, role_calls, shipped_role

NEVER = {
    ("kubeflow.org", "mpijobs", "patch"),
    ("kubeflow.org", "mpijobs", "update"),
    ("kubeflow.org", "mpijobs", "deletecollection"),
    ("", "pods", "get"),
    ("", "pods", "create"),
    ("", "pods", "delete"),
    ("", "pods/exec", "create"),
    ("", "secrets", "get"),
    ("", "secrets", "list"),
    ("", "configmaps", "get"),
    ("", "events", "create"),
    ("batch", "jobs", "list"),
    ("", "namespaces", "get"),
}


@pytest.fixture
def as_service_account(least_privilege_kubeconfig):
    return config.new_client_from_config(config_file=least_privilege_kubeconfig)


def test_the_service_account_may_do_the_providers_calls_and_nothing_else(as_service_account, namespace):
    asked = WORKER_CALLS | role_calls(shipped_role()) | NEVER
    allowed = allowed_calls(as_service_account, namespace, asked)
    assert allowed == WORKER_CALLS, (
        f"beyond the provider's calls: {sorted(allowed - WORKER_CALLS)}; "
        f"missing: {sorted(WORKER_CALLS - allowed)}"
    )
    # and only in its own namespace
    assert not allowed_calls(as_service_account, "default", {("kubeflow.org", "mpijobs", "list")})


def test_a_real_request_outside_the_role_is_refused(as_service_account, namespace):
    with pytest.raises(client.exceptions.ApiException) as err:
        client.CoreV1Api(as_service_account).list_namespaced_secret(namespace)
    assert err.value.status == 403
