"""A try's attempts (operators/attempts.py) from its resolved manifest, and as a deferral carries them to the resumed
try, which has no manifest: the kind counts the attempts either way, and says "unknown" where the launcher's restart
policy decides them and is not known."""

from __future__ import annotations

import pytest

from airflow_mpi.jobspec.kinds import MPIJOB_V1, MPIJOB_V2BETA1
from airflow_mpi.operators.attempts import Attempts
from tests.unit.operators.test_mpijob_operator import context, make

ON_FAILURE = {"spec": {"mpiReplicaSpecs": {"Launcher": {"restartPolicy": "OnFailure"}}}}


def resolved_attempts(**kwargs) -> Attempts:
    op = make(**kwargs)
    op.build_manifest(context())
    assert op._resolved is not None
    return Attempts.of(op._resolved, op.api_version, op.retries)


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"retries": 3}, Attempts(3, True, 4)),  # the retries became the backoff limit
        ({"retries": 3, "backoff_limit": 1}, Attempts(1, False, 2)),  # the parameter's
        (
            {"retries": 3, "base_manifest": {"spec": {"runPolicy": {"backoffLimit": 5}}}},
            Attempts(5, False, 6),
        ),
    ],
    ids=["retries", "parameter", "base-manifest"],
)
def test_v2beta1_counts_the_launcher_jobs_backoff_limit_plus_one(kwargs, expected):
    assert resolved_attempts(api_version=MPIJOB_V2BETA1.api_version, **kwargs) == expected


def test_v1_counts_one_attempt_for_a_launcher_never_restarted_and_more_for_on_failure():
    assert resolved_attempts(api_version=MPIJOB_V1.api_version, retries=2).allowed == 1
    on_failure = resolved_attempts(
        api_version=MPIJOB_V1.api_version, backoff_limit=2, base_manifest=ON_FAILURE
    )
    assert on_failure == Attempts(2, False, 3)


def test_carried_attempts_keep_the_limit_and_its_source_and_count_only_where_the_policy_does_not_matter():
    assert Attempts.carried(3, True, MPIJOB_V2BETA1.api_version) == Attempts(3, True, 4)
    assert Attempts.carried(2, False, MPIJOB_V1.api_version) == Attempts(
        2, False, None
    )  # v1: the policy decides
