"""One MPIJob per task instance: find the one an earlier try (or a restarted worker) left, or create it.

A new try reattaches to its task instance's live or Succeeded job instead of submitting a duplicate (the identity
labels, this deployment's included, say whose a job is); a job an earlier try left Failed is replaced; a job being
deleted (a killed earlier try) is waited out. Rejections a retry would meet again fail the task for good.

For the decorators (their callbacks' ``followable``): a ``@task.mpi`` job whose call Secret is missing is
replaced (``dropped_without_call_secret``): its pods cannot start without it (FailedMount, for ever: the job
stays Created, outside ``startup_timeout``), and no try can make it again (it carries the nonce of the try
that made the job, which was never stored). Whether it exists is asked by creating it (409: it does), owned by
the job: the role has ``create`` on secrets, never ``get``.
"""

from __future__ import annotations

from typing import Any, Protocol

from airflow_mpi.exceptions import MPIJobInvalidSpecError
from airflow_mpi.function_task.function_call import call_patch_refusal, lost_call_data, mounted_call_secret
from airflow_mpi.hooks.protocols import MPIJobRequests, PlanSender
from airflow_mpi.jobspec.naming import DEPLOYMENT_LABEL, TRY_NUMBER_LABEL, reattach_selector, same_task
from airflow_mpi.jobspec.status import job_state, true_condition_types
from airflow_mpi.jobspec.vocabulary import JobCondition
from airflow_mpi.version_compat import AirflowException, AirflowFailException
from airflow_mpi.wait.contract import Cause, Outcome, WaitResult

DELETION_WAIT = 120  # seconds to wait for an earlier try's job to be gone before submitting anew


class TaskLog(Protocol):
    """The task's log: a standard library Logger on Airflow 2, the Task SDK's structlog logger on Airflow 3."""

    def info(self, msg: str, /, *args: Any) -> Any: ...

    def warning(self, msg: str, /, *args: Any) -> Any: ...


def reattach(
    hook: MPIJobRequests, log: TaskLog, manifest: dict, recorded: tuple[str, str, str | None] | None
) -> dict | None:
    """The live (or Succeeded) MPIJob of this task instance, if one exists (``manifest``'s name follows it).

    A job of another deployment, a rendered manifest applied by hand or a job of an older release under this name
    fails the task, naming the owner: it is never adopted, deleted or waited for. ``recorded``: the job an earlier try
    of this task instance recorded (job_record.py), looked up first, and only that object (its uid).
    """
    name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    labels = manifest["metadata"]["labels"]
    existing = None
    if recorded:
        existing = hook.get_mpijob(recorded[0], recorded[1])
        uid = existing and existing["metadata"].get("uid")
        if existing is not None and recorded[2] and uid != recorded[2]:
            raise AirflowFailException(
                f"MPIJob {recorded[1]}/{recorded[0]} is not the job an earlier try of this task instance made "
                f"(uid {uid}, recorded {recorded[2]}): someone replaced it; not reattaching to or deleting it"
            )
    if existing is None:
        existing = hook.get_mpijob(name, namespace)
    if existing is None:
        found = hook.list_mpijobs(namespace, label_selector=reattach_selector(labels))  # labels: a superset
        live = [
            j for j in found if not job_state(j).terminal and same_task(j["metadata"], manifest["metadata"])
        ]
        existing = live[0] if live else None
    if existing is None:
        return None
    existing_labels = (existing.get("metadata") or {}).get("labels") or {}
    existing_name, existing_ns = existing["metadata"]["name"], existing["metadata"]["namespace"]
    if not same_task(existing["metadata"], manifest["metadata"]):
        raise AirflowFailException(
            f"MPIJob {existing_ns}/{existing_name} already exists and is not this task instance's job in this "
            f"deployment ({DEPLOYMENT_LABEL}={existing_labels.get(DEPLOYMENT_LABEL)!r}, this deployment's is "
            f"{labels.get(DEPLOYMENT_LABEL)!r}; labels {existing_labels}): not reattaching to or deleting it; "
            "choose another name"
        )
    state = job_state(existing)
    if existing["metadata"].get("deletionTimestamp"):
        log.info(
            "MPIJob %s is being deleted (a killed earlier try): waiting for it, then submitting anew",
            existing_name,
        )
        hook.wait_for_deleted(existing_name, existing_ns, timeout=DELETION_WAIT)
        return None
    if state.terminal and not state.succeeded:
        log.info(
            "MPIJob %s of an earlier try ended %s: replacing it with a fresh one",
            existing_name,
            state.describe(),
        )
        hook.delete_mpijob(existing_name, existing_ns, uid=existing["metadata"].get("uid"))
        hook.wait_for_deleted(existing_name, existing_ns, timeout=DELETION_WAIT)
        return None
    if state.succeeded:
        log.info("MPIJob %s already Succeeded: not running it again", existing_name)
    else:
        log.info("Reattaching to MPIJob %s (%s) instead of creating another", existing_name, state.describe())
    manifest["metadata"]["name"] = existing_name
    return existing


def dropped_without_call_secret(hook: MPIJobRequests, log: TaskLog, job: dict) -> bool:
    """True when ``job`` (this task instance's, live) mounts a call Secret that does not exist: it was deleted then
    (and waited out), so that a fresh job is submitted. A job not started yet only: a Running one's pods mounted it
    (its workers are Ready, and mpi-operator starts the launcher after them), a person deleted it since."""
    secret = mounted_call_secret(job)
    if secret is None or JobCondition.RUNNING in true_condition_types(job):
        return False
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    try:
        hook.create_owned_secret(secret, namespace, lost_call_data(), job)
    except Exception as err:
        if getattr(err, "status", None) == 409:  # AlreadyExists: the job's own
            return False
        raise AirflowException(
            f"Could not tell whether Secret {namespace}/{secret}, which MPIJob {name}'s pods mount, exists "
            f"({failure_text(err)}): not following a job whose pods may never start"
        ) from err
    replace(
        hook,
        log,
        job,
        f"it has no call Secret {secret} (the try that made it ended before creating it): its "
        "pods could never start",
    )
    return True


def replace(hook: MPIJobRequests, log: TaskLog, job: dict, why: str) -> None:
    """Delete this task instance's ``job`` (that object only: its uid) and wait until it is gone, so that a fresh one
    is submitted under its name; ``why`` is said in the task log."""
    name, namespace, uid = job["metadata"]["name"], job["metadata"]["namespace"], job["metadata"].get("uid")
    log.warning("MPIJob %s: %s. Replacing it with a fresh one", name, why)
    hook.delete_mpijob(name, namespace, uid=uid)
    hook.wait_for_deleted(name, namespace, timeout=DELETION_WAIT)


def failure_text(err: BaseException) -> str:
    """``err`` in one line for a task's error: its type, HTTP status and the API server's message."""
    from airflow_mpi.hooks.errors import error_message

    status = getattr(err, "status", None)
    return (
        f"{type(err).__name__}{f' {status}' if status else ''}: {' '.join(error_message(err).split())[:300]}"
    )


def deleted_by_earlier_try(
    hook: MPIJobRequests, log: TaskLog, payload: WaitResult, job_try: int | None, try_number: int
) -> bool:
    """True when the job this try reattached to was deleted by the cleanup of the try that made it.

    Clearing a deferred task kills its trigger (which deletes the MPIJob) while the new try may already have found
    that MPIJob: the new try then submits a fresh one (waiting until the old one is gone). Any other deletion (a
    person deleting the job of the current try) fails the task.
    """
    if payload.outcome is not Outcome.DELETED or job_try is None or job_try >= try_number:
        return False
    assert payload.name and payload.namespace, "a wait's result names its job"
    log.info(
        "MPIJob %s of try %s was deleted by that try's cleanup (task cleared?): submitting a fresh one",
        payload.name,
        job_try,
    )
    hook.wait_for_deleted(payload.name, payload.namespace, timeout=DELETION_WAIT)
    return True


def create(hook: MPIJobRequests, manifest: dict) -> dict:
    """Submit ``manifest``; a rejection a retry would meet again fails the task for good, naming the causes."""
    from kubernetes.client.exceptions import ApiException

    from airflow_mpi.hooks.errors import MPIJobAPIUnavailable, MPIJobConflictError, error_message

    try:
        return hook.create_mpijob(manifest, manifest["metadata"]["namespace"])
    except (MPIJobAPIUnavailable, MPIJobConflictError) as err:
        raise AirflowFailException(str(err)) from err
    except ApiException as err:
        if err.status in (400, 403, 404, 422):
            name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
            why = error_message(err, causes=True)
            why += call_patch_refusal(manifest, why)  # what a TrainJob's runtime must have for @task.mpi
            text = f"The API server rejected MPIJob {name} ({err.status} {err.reason}): {why}"
            if err.status in (400, 422):  # the spec itself (403: the role, 404: the CRD)
                invalid = Cause.INVALID.value
                raise MPIJobInvalidSpecError(
                    text, namespace=namespace, name=name, outcome=invalid, cause=invalid
                ) from err
            raise AirflowFailException(text) from err
        raise


def try_number_of(job: dict) -> int | None:
    """The try that created ``job`` (its identity label), if it carries one."""
    value = ((job.get("metadata") or {}).get("labels") or {}).get(TRY_NUMBER_LABEL)
    return int(value) if value and value.isdigit() else None


def check_claim(hook: PlanSender, namespace: str, deployment: str, installation: str) -> None:
    """Fail for good, before anything is created, reattached to or deleted, where the namespace's claim of this
    deployment's id names another installation (a copy of another deployment's database) or this installation
    holds another id there whose jobs still run (hooks/identity_claims.py)."""
    from airflow_mpi.hooks.errors import error_message
    from airflow_mpi.hooks.identity_claims import task_refusal

    try:
        refusal = task_refusal(hook, namespace, deployment, installation)
    except Exception as err:
        if getattr(err, "status", None) != 403:
            raise
        raise AirflowFailException(
            f"May not read or make this deployment's claim in namespace {namespace!r} (HTTP 403: "
            f"{error_message(err)}): the role of kubernetes_default needs coordination.k8s.io leases "
            "get/create/list there (deploy/rbac.yaml, role airflow-mpi)"
        ) from err
    if refusal:
        raise AirflowFailException(refusal)
