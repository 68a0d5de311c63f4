"""A service account bound only to the shipped role (deploy/rbac.yaml), and a kubeconfig with its real token.

The integration tests' ``kubernetes_default`` connection uses it, so every operator, trigger and sensor test proves
that the role grants what the provider needs; the API server's RBAC (on in the local cluster) refuses the rest.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE_FILE = REPO / "deploy" / "rbac.yaml"
SERVICE_ACCOUNT = "airflow-mpi-test"
TOKEN_SECONDS = 3600


WORKER_ROLE, SWEEPER_ROLE = "airflow-mpi", "airflow-mpi-sweeper"

#: Every (apiGroup, resource, verb) the workers and the triggerer send, hence all that the shipped role
#: ``airflow-mpi`` may grant. Written out rather than read from deploy/rbac.yaml, so that widening the file fails
#: tests/integration/test_least_privilege.py; tests/unit/hooks/test_rbac_calls.py records what the hooks send and
#: fails when the code needs a call not listed here, or no longer needs one that is.
WORKER_CALLS = frozenset(
    {
        ("kubeflow.org", "mpijobs", "create"),  # MPIJobHook.create_mpijob
        (
            "kubeflow.org",
            "mpijobs",
            "get",
        ),  # get_mpijob (reattach, wait_for_deleted), create's adoption, live delete
        (
            "kubeflow.org",
            "mpijobs",
            "list",
        ),  # list_mpijobs (reattach by identity labels); the watch hub's list
        ("kubeflow.org", "mpijobs", "watch"),  # the watch hub (wait/namespace_watch.py)
        (
            "kubeflow.org",
            "mpijobs",
            "delete",
        ),  # delete_mpijob, delete_live_mpijob: kill, timeouts, on_finish_action
        (
            "",
            "pods",
            "list",
        ),  # hooks/base.py _role_pods (launcher log, worker log tails); the watch hub's list
        ("", "pods", "watch"),  # the watch hub
        ("batch", "jobs", "get"),  # get_launcher_job: whose pods are the launcher's (hooks/ownership.py)
        (
            "jobset.x-k8s.io",
            "jobsets",
            "get",
        ),  # get_launcher_job of a TrainJob: its JobSet (hooks/ownership.py)
        ("trainer.kubeflow.org", "trainjobs", "create"),  # the same hook calls for a TrainJob (api_version)
        ("trainer.kubeflow.org", "trainjobs", "get"),
        ("trainer.kubeflow.org", "trainjobs", "list"),
        ("trainer.kubeflow.org", "trainjobs", "watch"),
        ("trainer.kubeflow.org", "trainjobs", "delete"),
        (
            "",
            "pods/log",
            "get",
        ),  # hooks/requests.py LogRequest: launcher log (followed), worker tails, failure report
        ("", "secrets", "create"),  # MPIJobHook.create_owned_secret: @task.mpi's function and arguments
        ("", "events", "list"),  # AsyncMPIJobHook.job_events / pod_events; the watch hub's list
        ("", "events", "watch"),  # the watch hub (ValidationError events)
        ("kueue.x-k8s.io", "workloads", "list"),  # the watch hub, for a job with Kueue's queue label
        ("kueue.x-k8s.io", "workloads", "watch"),  # the watch hub
        (
            "coordination.k8s.io",
            "leases",
            "get",
        ),  # hooks/identity_claims.py get_claim: the id's claim in a namespace
        ("coordination.k8s.io", "leases", "create"),  # create_claim: made where a namespace is first used
        (
            "coordination.k8s.io",
            "leases",
            "list",
        ),  # list_claims: this installation's claims (a deleted id Variable)
    }
)


def shipped_role(name: str = WORKER_ROLE) -> dict:
    """One of the shipped ClusterRoles: the workers' and triggerer's (default), or the sweeper's."""
    (role,) = [
        doc for doc in yaml.safe_load_all(ROLE_FILE.read_text()) if doc and doc["metadata"]["name"] == name
    ]
    return role


def role_calls(role: dict) -> set[tuple[str, str, str]]:
    """The (apiGroup, resource, verb) triples a role's rules name (wildcards as written)."""
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule["verbs"]
    }


def allowed_calls(api_client, namespace: str, calls) -> set[tuple[str, str, str]]:
    """Those of ``calls`` the API server's authorizer allows the client's identity in ``namespace``
    (SelfSubjectAccessReview; ``pods/log`` is resource ``pods``, subresource ``log``)."""
    from kubernetes import client

    authz = client.AuthorizationV1Api(api_client)
    allowed = set()
    for group, resource, verb in calls:
        name, _, subresource = resource.partition("/")
        attrs = {
            "namespace": namespace,
            "group": group,
            "resource": name,
            "verb": verb,
            **({"subresource": subresource} if subresource else {}),
        }
        if authz.create_self_subject_access_review({"spec": {"resourceAttributes": attrs}}).status.allowed:
            allowed.add((group, resource, verb))
    return allowed


def apply_role(api_client, role: dict | None = None) -> str:
    """Create or replace a ClusterRole (the shipped one unless given); its name."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(api_client)
    role = role or shipped_role()
    name = role["metadata"]["name"]
    try:
        rbac.replace_cluster_role(name, role)
    except client.exceptions.ApiException as exc:
        if exc.status != 404:
            raise
        rbac.create_cluster_role(role)
    return name


def role_without(verb: str, resource: str, name: str) -> dict:
    """The shipped role less one verb on one resource, under another name: a role of an earlier release."""
    role = shipped_role()
    role["metadata"]["name"] = name
    rules = [rule for rule in role["rules"] if resource in rule["resources"] and verb in rule["verbs"]]
    assert rules, f"the shipped role grants no {verb} on {resource}"
    for rule in rules:
        rule["verbs"] = [v for v in rule["verbs"] if v != verb]
    return role


def bind_service_account(api_client, namespace: str, role: str, service_account: str = SERVICE_ACCOUNT):
    """A service account in ``namespace`` bound (RoleBinding) to the ClusterRole ``role`` only; a CoreV1Api of
    ``api_client`` (to ask for its tokens)."""
    from kubernetes import client

    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    with _existing_is_fine():  # a reused cluster (AIRFLOW_MPI_CLUSTER_NAME) keeps them
        core.create_namespaced_service_account(namespace, {"metadata": {"name": service_account}})
    with _existing_is_fine():
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": service_account},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
            },
        )
    return core


def bound_service_account_kubeconfig(
    api_client,
    admin_kubeconfig: str,
    namespace: str,
    role: str,
    dest: Path,
    service_account: str = SERVICE_ACCOUNT,
) -> Path:
    """A service account in ``namespace`` bound (RoleBinding) to ``role`` only; a kubeconfig with its token."""
    core = bind_service_account(api_client, namespace, role, service_account)
    token = core.create_namespaced_service_account_token(
        service_account, namespace, {"spec": {"expirationSeconds": TOKEN_SECONDS}}
    ).status.token
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    current = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    cluster = next(c for c in admin["clusters"] if c["name"] == current["context"]["cluster"])
    dest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": service_account, "user": {"token": token}}],
                "contexts": [
                    {
                        "name": service_account,
                        "context": {
                            "cluster": cluster["name"],
                            "user": service_account,
                            "namespace": namespace,
                        },
                    }
                ],
                "current-context": service_account,
            }
        )
    )
    return dest


@contextlib.contextmanager
def _existing_is_fine() -> Iterator[None]:
    from kubernetes import client

    try:
        yield
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise


def use_as_kubernetes_default(monkeypatch, kubeconfig: str | Path, namespace: str) -> str:
    """Point the Airflow connection ``kubernetes_default`` (env) at a kubeconfig and namespace; its id."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT",
        json.dumps(
            {
                "conn_type": "kubernetes",
                "extra": {"kube_config_path": str(kubeconfig), "namespace": namespace},
            }
        ),
    )
    return "kubernetes_default"
