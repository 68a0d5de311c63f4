"""The operator numbers a job's launcher attempts ("attempt n of N" in the task log, the trigger's max_attempts) as
the job's kind counts them (jobspec/kinds/), from the manifest it submits: on v2beta1 a launcher Job's
backoffLimit + 1 pods, on v1 the restarts of an OnFailure launcher container (a Never launcher runs once)."""

from __future__ import annotations

import pytest

from airflow_mpi.jobspec.kinds import MPIJOB_V1, MPIJOB_V2BETA1
from airflow_mpi.version_compat import TaskDeferred
from tests.unit.operators.test_mpijob_operator import context, make


def _max_attempts(**kwargs) -> int | None:
    op = make(deferrable=True, **kwargs)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context())
    return deferred.value.trigger.serialize()[1]["options"]["max_attempts"]


@pytest.mark.parametrize("kind", [MPIJOB_V2BETA1, MPIJOB_V1], ids=lambda k: k.api_version)
@pytest.mark.parametrize("retries", [0, 2])
def test_the_retries_mapping_gives_retries_plus_one_attempts_on_each_kind(kind, retries):
    assert _max_attempts(api_version=kind.api_version, retries=retries) == retries + 1


def test_a_v1_launcher_that_is_never_restarted_makes_one_attempt_whatever_the_backoff_limit():
    base = {"spec": {"mpiReplicaSpecs": {"Launcher": {"restartPolicy": "Never"}}}}
    assert (
        _max_attempts(api_version=MPIJOB_V1.api_version, retries=2, base_manifest=base, backoff_limit=4) == 1
    )


def test_a_v2beta1_backoff_limit_given_as_a_parameter_gives_that_many_retries():
    assert _max_attempts(api_version=MPIJOB_V2BETA1.api_version, retries=2, backoff_limit=4) == 5
