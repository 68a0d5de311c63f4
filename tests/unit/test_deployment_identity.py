"""The deployment identity: pinned by configuration, else one random value per metadata database."""

from __future__ import annotations

import pytest

from airflow_mpi import deployment_identity as di
from airflow_mpi.jobspec.naming import DEPLOYMENT_LABEL, job_name, sanitize_label_value
from airflow_mpi.version_compat import AirflowException


class FakeVariables:
    """Airflow's Variable API over a dict; ``race`` stands for another component writing first."""

    def __init__(self, race: str | None = None):
        self.values: dict[str, str] = {}
        self.race = race

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value, description=None):
        self.values[key] = self.race or value


@pytest.fixture
def unpinned(monkeypatch):
    monkeypatch.delenv("AIRFLOW__AIRFLOW_MPI__DEPLOYMENT_ID", raising=False)
    variables = FakeVariables()
    import airflow_mpi.version_compat as compat

    monkeypatch.setattr(compat, "Variable", variables)
    return variables


def test_a_pinned_identity_wins_and_must_be_a_label_value(monkeypatch):
    monkeypatch.setenv("AIRFLOW__AIRFLOW_MPI__DEPLOYMENT_ID", "prod-eu.1")
    assert di.for_task() == di.in_database() == "prod-eu.1"
    monkeypatch.setenv("AIRFLOW__AIRFLOW_MPI__DEPLOYMENT_ID", "prod eu/1")
    with pytest.raises(AirflowException, match=r"\[airflow_mpi\] deployment_id='prod eu/1': .* label value"):
        di.for_task()


def test_unpinned_a_task_reads_the_variable_the_scheduler_made(unpinned):
    unpinned.values[di.VARIABLE_KEY] = "0123abcd"
    assert di.for_task() == "0123abcd"


def test_unpinned_without_a_variable_the_task_makes_it_and_keeps_what_was_stored(unpinned):
    unpinned.race = "made-by-a-concurrent-task"
    assert di.for_task() == "made-by-a-concurrent-task"


def test_fresh_identities_differ_and_are_label_values():
    drawn = {di.new_identity() for _ in range(100)}
    assert len(drawn) == 100
    assert all(sanitize_label_value(v) == v == di.checked(v, "x") for v in drawn)


def test_the_deployment_is_part_of_the_name_and_a_label():
    from airflow_mpi.jobspec.naming import TaskIdentity

    a, b = (TaskIdentity("d", "t", "scheduled__2026-11-24", deployment=d) for d in ("aaaa", "bbbb"))
    assert a.job_name() != b.job_name()
    assert a.labels()[DEPLOYMENT_LABEL] == "aaaa"
    offline = TaskIdentity("d", "t", "offline")
    assert DEPLOYMENT_LABEL not in offline.labels()
    assert offline.job_name() == job_name("d", "t", "offline")  # rendered names as before
