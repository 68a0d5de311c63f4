"""A try's launcher attempts: the backoff limit its job was submitted with, whether the task's retries became it,
and how many attempts the job may make as its kind counts them (pure: no I/O).

Where the retries became the backoff limit, a Failed job fails the task for good (its retries were spent inside the
job), and the wait numbers each launcher attempt against the attempts allowed. A resumed deferral builds no
manifest (for ``@task.mpi`` that would pickle the arguments again), so it gets these as the deferral carried them.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_mpi.jobspec import DEFAULT, Resolved
from airflow_mpi.jobspec.kinds import kind_or_default
from airflow_mpi.jobspec.layout import replica_spec
from airflow_mpi.jobspec.vocabulary import LAUNCHER_REPLICA


@dataclass(frozen=True)
class Attempts:
    backoff_limit: int  # runPolicy.backoffLimit submitted: parameter > base manifest > the task's retries
    retries_mapped: bool  # the task's retries became it (neither the parameter nor the base manifest set it)
    allowed: int | None  # launcher attempts the job may make (v2beta1: backoffLimit + 1; None: unknown)

    @classmethod
    def of(cls, resolved: Resolved, api_version: str | None, retries: int | None) -> Attempts:
        """From the try's resolved manifest."""
        kind = kind_or_default(api_version)
        setting = resolved.settings["backoff_limit"]
        mapped = setting.source == DEFAULT and kind.retries_mapping(retries or 0).mapped
        launcher = replica_spec(resolved.manifest, LAUNCHER_REPLICA, kind)
        policy = launcher.get("restartPolicy", kind.launcher_restart_policy)
        return cls(setting.value, mapped, kind.attempts_allowed(setting.value, policy))

    @classmethod
    def carried(cls, backoff_limit: int, retries_mapped: bool, api_version: str | None) -> Attempts:
        """As a deferral carried them to the resumed try: the launcher's restart policy is not known there."""
        return cls(
            backoff_limit, retries_mapped, kind_or_default(api_version).attempts_allowed(backoff_limit, None)
        )
