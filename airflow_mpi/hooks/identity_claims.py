"""The claims of a deployment id on the cluster (jobspec/claims.py): made where a namespace is first used, and read
before a task creates or reattaches to a job there and before the sweeper sweeps it.

The three requests go through the sync hook (``MPIJobHook`` or the sweep's budgeted one), to the Lease API by its
group path; the checks return the refusal's text (None: go ahead), and their callers decide what a refusal means (a
task fails for good, the sweeper skips the namespace).
"""

from __future__ import annotations

from airflow_mpi.hooks.protocols import PlanSender
from airflow_mpi.hooks.requests import CUSTOM_OBJECTS, Call, get_call, items_of
from airflow_mpi.jobspec.claims import (
    CLAIM_GROUP,
    CLAIM_PLURAL,
    CLAIM_VERSION,
    claim_body,
    claim_name,
    claim_selector,
    claimed,
    foreign_claim,
    live_jobs_of_another_id,
)
from airflow_mpi.jobspec.orphans import deployment_selector, is_live


def _where(namespace: str) -> dict[str, str]:
    return {"group": CLAIM_GROUP, "version": CLAIM_VERSION, "namespace": namespace, "plural": CLAIM_PLURAL}


def _exists(exc: BaseException) -> None:
    """A create's error reader: None for a 409 (the claim exists: someone made it first), else raise."""
    if getattr(exc, "status", None) == 409:
        return None
    raise exc


def get_claim(hook: PlanSender, namespace: str, deployment: str) -> dict | None:
    """The namespace's claim of ``deployment``; None when there is none."""
    return hook._run(namespace, lambda ns: get_call(_where(ns), claim_name(deployment)))


def list_claims(hook: PlanSender, namespace: str, installation: str) -> list[dict]:
    """The claims ``installation`` made in the namespace (one per deployment id it has used there)."""
    kwargs = {**_where(namespace), "label_selector": claim_selector(installation)}
    return hook._run(
        namespace,
        lambda ns: Call(
            CUSTOM_OBJECTS, "list_namespaced_custom_object", {**kwargs, "namespace": ns}, on_result=items_of
        ),
    )


def create_claim(hook: PlanSender, namespace: str, deployment: str, installation: str) -> dict | None:
    """Claim ``deployment`` in the namespace for ``installation``; None when a claim exists already (409). A resend
    after a transient error that did create it answers 409 too: the caller reads the claim either way."""
    return hook._run(
        namespace,
        lambda ns: Call(
            CUSTOM_OBJECTS,
            "create_namespaced_custom_object",
            {**_where(ns), "body": claim_body(deployment, installation, ns)},
            on_error=_exists,
        ),
    )


def holder(hook: PlanSender, namespace: str, deployment: str, installation: str) -> str | None:
    """The installation the namespace's claim of ``deployment`` names; the claim is made first where there is none
    (create-if-absent: of two first users, the API server keeps one claim and the other reads it)."""
    claim = get_claim(hook, namespace, deployment)
    if claim is None:
        if create_claim(hook, namespace, deployment, installation) is not None:
            return installation
        claim = get_claim(hook, namespace, deployment)  # 409: another first user made it
    return None if claim is None else claimed(claim)[1]  # None (deleted meanwhile): refused, nothing is known


def live_jobs(hook: PlanSender, namespace: str, deployments: list[str]) -> dict[str, list[str]]:
    """The live MPIJobs of each of ``deployments`` in the namespace (those with any)."""
    found = {}
    for other in deployments:
        listed = hook.list_mpijobs(namespace, label_selector=deployment_selector(other))
        if names := sorted(job["metadata"]["name"] for job in listed if is_live(job)):
            found[other] = names
    return found


def claimed_ids(hook: PlanSender, namespace: str, installation: str) -> list[str]:
    """The deployment ids ``installation`` claimed in the namespace."""
    return sorted({d for claim in list_claims(hook, namespace, installation) if (d := claimed(claim)[0])})


def task_refusal(hook: PlanSender, namespace: str, deployment: str, installation: str) -> str | None:
    """Why a task of ``deployment`` held by ``installation`` may not create or reattach to a job in the namespace:
    the claim names another installation (a copied database), or this installation claimed another id there whose
    jobs still run (its Variable deleted or changed meanwhile). None: go ahead (the claim made where missing)."""
    ids = claimed_ids(hook, namespace, installation)
    if live := live_jobs(hook, namespace, [d for d in ids if d != deployment]):
        return live_jobs_of_another_id(namespace, deployment, live)
    return None if deployment in ids else sweep_refusal(hook, namespace, deployment, installation)


def sweep_refusal(hook: PlanSender, namespace: str, deployment: str, installation: str) -> str | None:
    """Why the sweeper of ``deployment`` held by ``installation`` may not sweep the namespace (None: it may)."""
    found = holder(hook, namespace, deployment, installation)
    return None if found == installation else foreign_claim(namespace, deployment, found, installation)


def live_claims(hook: PlanSender, namespace: str, installation: str) -> dict[str, list[str]]:
    """The ids ``installation`` claimed in the namespace whose jobs still run (a scheduler about to make an id)."""
    return live_jobs(hook, namespace, claimed_ids(hook, namespace, installation))
