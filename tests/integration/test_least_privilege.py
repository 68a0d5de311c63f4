"""The shipped role (deploy/rbac.yaml) grants the provider's calls and nothing else, checked by the real API server.

The operator, trigger and sensor tests of tests/integration already run as a service account bound only to it
(``kubernetes_default_conn``); this asks the API server's authorizer about everything else.
"""

from __future__ import annotations

import pytest
from kubernetes import client, config

from tests.integration.least_privilege import shipped_role

GRANTED = {(rule_group, resource, verb)
           for rule in shipped_role()["rules"]
           for rule_group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}
ASKED = sorted(GRANTED | {
    ("kubeflow.org", "mpijobs", "patch"), ("kubeflow.org", "mpijobs", "update"),
    ("kubeflow.org", "mpijobs", "deletecollection"), ("", "pods", "get"), ("", "pods", "create"),
    ("", "pods", "delete"), ("", "pods/exec", "create"), ("", "secrets", "get"), ("", "secrets", "list"),
    ("", "configmaps", "get"), ("", "events", "create"), ("batch", "jobs", "list"), ("", "namespaces", "get"),
})


@pytest.fixture
def as_service_account(least_privilege_kubeconfig):
    return config.new_client_from_config(config_file=least_privilege_kubeconfig)


def test_the_service_account_may_do_what_the_role_grants_and_nothing_else(as_service_account, namespace):
    authz = client.AuthorizationV1Api(as_service_account)
    for group, resource, verb in ASKED:
        sub, _, subresource = resource.partition("/")
        attrs = {"namespace": namespace, "group": group, "resource": sub, "verb": verb}
        if subresource:
            attrs["subresource"] = subresource
        review = authz.create_self_subject_access_review({"spec": {"resourceAttributes": attrs}})
        assert review.status.allowed is ((group, resource, verb) in GRANTED), (group, resource, verb)
    # and only in its own namespace
    other = authz.create_self_subject_access_review({"spec": {"resourceAttributes": {
        "namespace": "default", "group": "kubeflow.org", "resource": "mpijobs", "verb": "list"}}})
    assert other.status.allowed is False


def test_a_real_request_outside_the_role_is_refused(as_service_account, namespace):
    with pytest.raises(client.exceptions.ApiException) as err:
        client.CoreV1Api(as_service_account).list_namespaced_secret(namespace)
    assert err.value.status == 403
