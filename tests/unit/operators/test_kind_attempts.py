"""The operator numbers a job's launcher attempts ("attempt n of N" in the task log, the trigger's max_attempts) as
the job's kind counts them (jobspec/kinds/), from the manifest it submits: on v2beta1 a launcher Job's
backoffLimit + 1 pods, on v1 one per job (Airflow retries submit a fresh job), more only for a base manifest's
OnFailure launcher. A failed job is final for the task only where its kind maps the retries into the job."""

from __future__ import annotations

import pytest

from airflow_mpi.exceptions import MPIJobProgramError
from airflow_mpi.jobspec.kinds import MPIJOB_V1, MPIJOB_V2BETA1
from airflow_mpi.version_compat import AirflowException, AirflowFailException, TaskDeferred
from tests.unit.operators.test_mpijob_operator import _no_drain, context, make, result


def _max_attempts(**kwargs) -> int | None:
    op = make(deferrable=True, **kwargs)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context())
    return deferred.value.trigger.serialize()[1]["options"]["max_attempts"]


@pytest.mark.parametrize("retries", [0, 2])
def test_v2beta1_gives_retries_plus_one_attempts_in_one_job(retries):
    assert _max_attempts(api_version=MPIJOB_V2BETA1.api_version, retries=retries) == retries + 1


@pytest.mark.parametrize("retries", [0, 2])
def test_v1_gives_one_attempt_per_job(retries):
    assert _max_attempts(api_version=MPIJOB_V1.api_version, retries=retries) == 1


@pytest.mark.parametrize(
    "kind, final", [(MPIJOB_V2BETA1, AirflowFailException), (MPIJOB_V1, AirflowException)],
    ids=lambda k: getattr(k, "api_version", ""),
)  # fmt: skip
def test_a_failed_job_is_final_only_where_the_kind_maps_the_retries(monkeypatch, kind, final):
    """v2beta1: the job already made retries + 1 attempts, so its failure fails the task for good; v1: one attempt
    per job, so the failure stays retryable and the next try submits a fresh job."""
    op = make(api_version=kind.api_version, retries=2)
    monkeypatch.setattr(op, "_drain", _no_drain)
    op.build_manifest(context())
    with pytest.raises(AirflowException) as err:
        op.execute_complete(context(), result("failed", message="launcher failed"))
    assert isinstance(err.value, MPIJobProgramError)  # the program's own failure, final or not
    assert isinstance(err.value, AirflowFailException) == (final is AirflowFailException)


def test_a_v1_launcher_that_is_never_restarted_makes_one_attempt_whatever_the_backoff_limit():
    base = {"spec": {"mpiReplicaSpecs": {"Launcher": {"restartPolicy": "Never"}}}}
    assert (
        _max_attempts(api_version=MPIJOB_V1.api_version, retries=2, base_manifest=base, backoff_limit=4) == 1
    )


def test_a_v2beta1_backoff_limit_given_as_a_parameter_gives_that_many_retries():
    assert _max_attempts(api_version=MPIJOB_V2BETA1.api_version, retries=2, backoff_limit=4) == 5
