"""Who holds a deployment identity: the installation value and the claim objects that tell a copy apart (pure).

The deployment id lives in the metadata database (deployment_identity.py), so a deployment built from a copy of
another's database (staging restored from a prod backup) holds the same id. Two values kept *outside* the database
tell them apart:

* the **installation**: ``[airflow_mpi] installation`` if set, else a short hash of where the metadata database is
  (:func:`installation_of_url`: backend, user, host, port, database; never the password or the query). A copy
  restored elsewhere is reached by another URL, so it is another installation. The Variable
  ``airflow_mpi_installation`` records the installation that holds the id.
* the **claim**: one Lease per namespace and deployment id (:func:`claim_body`), made by whoever first uses the
  namespace, naming the installation (``spec.holderIdentity`` and a label). A task creates or reattaches to a job,
  and the sweeper sweeps a namespace, only where the claim names the installation the Variable records.

A Lease rather than a ConfigMap: it carries no data, so reading claims needs no ``get`` on ConfigMaps (which hold
other applications' configuration). Nothing renews or expires it (no ``leaseDurationSeconds``): it is a record, not
a lock. This module decides and words; hooks/identity_claims.py does the I/O.
"""

from __future__ import annotations

import hashlib

from airflow_mpi.jobspec.naming import DEPLOYMENT_LABEL, LABEL_PREFIX, MANAGED_BY_LABEL, MANAGED_BY_VALUE

CLAIM_GROUP, CLAIM_VERSION, CLAIM_PLURAL = "coordination.k8s.io", "v1", "leases"
CLAIM_PREFIX = "airflow-mpi-claim-"
INSTALLATION_LABEL = LABEL_PREFIX + "installation"
INSTALLATION_KEY = "installation"  # [airflow_mpi] installation
INSTALLATION_VARIABLE = "airflow_mpi_installation"
_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433}
_HASH_LENGTH = 16


def installation_of_url(url: str) -> str:
    """The installation value of a metadata database URL: the same for every URL that names the same database the
    same way (whatever driver, password or query), another one for a database elsewhere."""
    from sqlalchemy.engine import make_url  # parses only: no connection

    parsed = make_url(url)
    backend = parsed.get_backend_name().lower()
    port = parsed.port or _DEFAULT_PORTS.get(backend)
    where = "\x1f".join(
        str(part or "")
        for part in (backend, parsed.username, (parsed.host or "").lower(), port, parsed.database)
    )
    return hashlib.sha256(where.encode()).hexdigest()[:_HASH_LENGTH]


def claim_name(deployment: str) -> str:
    """The claim's object name (ids may hold '_', '.' and capitals, which names may not: hashed)."""
    return CLAIM_PREFIX + hashlib.sha256(deployment.encode()).hexdigest()[:_HASH_LENGTH]


def claim_selector(installation: str) -> str:
    """The claims of one installation (all its deployment ids)."""
    return f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{INSTALLATION_LABEL}={installation}"


def claim_body(deployment: str, installation: str, namespace: str) -> dict:
    """The Lease that says ``installation`` holds ``deployment``'s jobs in ``namespace``."""
    return {
        "apiVersion": f"{CLAIM_GROUP}/{CLAIM_VERSION}",
        "kind": "Lease",
        "metadata": {
            "name": claim_name(deployment),
            "namespace": namespace,
            "labels": {
                MANAGED_BY_LABEL: MANAGED_BY_VALUE,
                DEPLOYMENT_LABEL: deployment,
                INSTALLATION_LABEL: installation,
            },
        },
        "spec": {"holderIdentity": installation},
    }


def claimed(claim: dict) -> tuple[str | None, str | None]:
    """``(deployment, installation)`` a claim names (None where it names none: not a claim of this provider)."""
    labels = (claim.get("metadata") or {}).get("labels") or {}
    return labels.get(DEPLOYMENT_LABEL), (claim.get("spec") or {}).get("holderIdentity")


def copied_database(deployment: str, recorded: str, own: str) -> str:
    """The error of a component whose database records another installation as the holder of ``deployment``."""
    return (
        f"airflow-mpi: the metadata database says deployment id {deployment!r} is held by installation "
        f"{recorded!r}, and this installation is {own!r}: this database is a copy of another deployment's (or "
        f"it moved). This installation is now recorded, and no task of it creates, reattaches to or deletes a "
        f"job, and no sweep deletes one, where that deployment claimed the namespace. {RESOLUTION}"
    )


def foreign_claim(namespace: str, deployment: str, holder: str | None, installation: str) -> str:
    """The refusal where the namespace's claim of ``deployment`` names another installation."""
    return (
        f"airflow-mpi: namespace {namespace!r} is claimed for deployment id {deployment!r} by installation "
        f"{holder!r} (Lease {namespace}/{claim_name(deployment)}), and this deployment's installation is "
        f"{installation!r}: its database is a copy of that deployment's (or it moved). Nothing is created, "
        f"reattached to or deleted there. {RESOLUTION}"
    )


def live_jobs_of_another_id(namespace: str, deployment: str | None, others: dict[str, list[str]]) -> str:
    """The refusal where this installation's claims name other ids whose jobs still run: the Variable was deleted
    (``deployment`` None: no new id is made) or changed while they ran, and a new id would leave them unswept."""
    jobs = "; ".join(f"id {other!r}: {', '.join(sorted(names))}" for other, names in sorted(others.items()))
    now = (
        "the Variable airflow_mpi_deployment_id is missing"
        if deployment is None
        else f"its id is {deployment!r}"
    )
    return (
        f"airflow-mpi: in namespace {namespace!r} this installation holds other deployment ids whose MPIJobs "
        f"still run ({jobs}), and {now}: it was deleted or changed while they ran, and a new id would leave "
        "them unswept and start second jobs beside them. Restore the old id (the Variable, or "
        "[airflow_mpi] deployment_id), or delete those jobs, then retry (restart the scheduler)."
    )


RESOLUTION = (
    "If this is a copy (staging restored from a prod backup): give it an identity of its own: set "
    "[airflow_mpi] deployment_id to a new value, or delete its Variable airflow_mpi_deployment_id and restart its "
    "scheduler. If this is the same deployment whose database moved: set [airflow_mpi] installation to the "
    "claim's installation, or delete its claims (kubectl delete lease -l "
    f"{INSTALLATION_LABEL}=<old installation>) in the namespaces it uses."
)
