"""The deployment identity: pinned by configuration, else one random value per metadata database."""

from __future__ import annotations

import pytest

from airflow_mpi import deployment_identity as di
from airflow_mpi.jobspec.claims import INSTALLATION_VARIABLE, installation_of_url
from airflow_mpi.jobspec.naming import DEPLOYMENT_LABEL, job_name, sanitize_label_value
from airflow_mpi.version_compat import AIRFLOW_V_3_0_PLUS, AirflowException


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
    assert di.for_task() == di.in_database().deployment == "prod-eu.1"
    monkeypatch.setenv("AIRFLOW__AIRFLOW_MPI__DEPLOYMENT_ID", "prod eu/1")
    with pytest.raises(AirflowException, match=r"\[airflow_mpi\] deployment_id='prod eu/1': .* label value"):
        di.for_task()


def test_unpinned_a_task_reads_the_variable_the_scheduler_made(unpinned):
    unpinned.values[di.VARIABLE_KEY] = "0123abcd"
    assert di.for_task() == "0123abcd"


ON_AIRFLOW_3 = pytest.mark.skipif(
    not AIRFLOW_V_3_0_PLUS, reason="Airflow 3: a task reaches Variables through the SDK"
)
ON_AIRFLOW_2 = pytest.mark.skipif(AIRFLOW_V_3_0_PLUS, reason="Airflow 2.11: a task has the metadata database")


@ON_AIRFLOW_3
def test_two_first_tasks_never_make_the_identity(unpinned):
    """On Airflow 3 the Task SDK's Variable.set is an upsert: two tasks that both saw no Variable would each keep
    their own id (and the overwritten one's job is never swept or reattached). A task fails clearly instead."""
    unpinned.race = "made-by-a-concurrent-task"
    for _ in range(2):
        with pytest.raises(
            AirflowException,
            match=r"Variable airflow_mpi_deployment_id .* does not exist\. The "
            r"scheduler makes it when it starts",
        ):
            di.for_task()
    assert unpinned.values == {}


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


# ------------------------------------------------------------------ the installation, and the scheduler's start
def test_the_installation_is_where_the_database_is_never_its_password_or_driver():
    base = installation_of_url("postgresql+psycopg2://airflow:secret@db.prod:5432/airflow")
    assert base == installation_of_url("postgresql://airflow:other@DB.prod/airflow?sslmode=require")
    for elsewhere in (
        "postgresql://airflow:secret@db.staging:5432/airflow",
        "postgresql://airflow:secret@db.prod:5433/airflow",
        "postgresql://airflow:secret@db.prod:5432/airflow_copy",
        "postgresql://reader:secret@db.prod:5432/airflow",
        "mysql://airflow:secret@db.prod/airflow",
    ):
        assert installation_of_url(elsewhere) != base, elsewhere
    assert "secret" not in base and sanitize_label_value(base) == base


class FakeDatabase:
    """The metadata database's Variables, as establish() reads and writes them: create-if-absent keeps the first
    value (the unique key), ``before_create`` stands for another component writing first."""

    def __init__(self, **values: str):
        self.values = dict(values)
        self.before_create: dict[str, str] = {}
        self.overwritten: list[tuple[str, str]] = []

    def get(self, key, default=None, **kwargs):
        return self.values.get(key, default)

    def create_if_absent(self, key, value, description):
        self.values.setdefault(key, self.before_create.get(key, value))

    def overwrite(self, key, value):
        self.overwritten.append((key, value))
        self.values[key] = value


@pytest.fixture
def database(monkeypatch):
    """An unpinned server component of the database ``PROD_URL``, its Variables faked."""
    from airflow.models.variable import Variable

    monkeypatch.delenv("AIRFLOW__AIRFLOW_MPI__DEPLOYMENT_ID", raising=False)
    monkeypatch.delenv("AIRFLOW__AIRFLOW_MPI__INSTALLATION", raising=False)
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", PROD_URL)
    db = FakeDatabase()
    monkeypatch.setattr(Variable, "get", db.get)
    monkeypatch.setattr(di, "_create_if_absent", db.create_if_absent)
    monkeypatch.setattr(di, "_overwrite", db.overwrite)
    return db


PROD_URL = "postgresql+psycopg2://airflow:pw@db.prod:5432/airflow"
STAGING_URL = "postgresql+psycopg2://airflow:pw@db.staging:5432/airflow"
PROD, STAGING = installation_of_url(PROD_URL), installation_of_url(STAGING_URL)


def nothing_live(installation):
    return {}


def test_a_fresh_database_gets_an_id_and_records_its_installation(database):
    identity = di.establish(nothing_live)
    assert database.values == {di.VARIABLE_KEY: identity.deployment, INSTALLATION_VARIABLE: PROD}
    assert identity == di.Identity(identity.deployment, PROD, PROD) and identity.conflict is None


def test_two_starting_components_keep_the_id_the_database_kept(database):
    database.before_create[di.VARIABLE_KEY] = "made-by-the-other-scheduler"
    assert di.establish(nothing_live).deployment == "made-by-the-other-scheduler"


def test_an_upgraded_deployment_records_its_installation_without_error(database, caplog):
    database.values[di.VARIABLE_KEY] = "prod-id"
    assert di.establish(nothing_live) == di.Identity("prod-id", PROD, PROD)
    assert database.values[INSTALLATION_VARIABLE] == PROD and "copy" not in caplog.text


def test_a_copied_database_records_its_own_installation_and_says_how_to_resolve_it(
    database, monkeypatch, caplog
):
    """Staging restored from prod's backup: prod's id and prod's installation. Staging's components record their
    own (the tasks and the sweeper then find prod's claims foreign) and the log says what to do."""
    database.values.update({di.VARIABLE_KEY: "prod-id", INSTALLATION_VARIABLE: PROD})
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", STAGING_URL)
    with caplog.at_level("ERROR"):
        identity = di.establish(nothing_live)
    assert identity == di.Identity("prod-id", STAGING, STAGING)
    assert database.overwritten == [(INSTALLATION_VARIABLE, STAGING)]
    held = f"held by installation {PROD!r}, and this installation is {STAGING!r}: this database is a copy"
    assert held in caplog.text
    assert "[airflow_mpi] deployment_id" in caplog.text and "[airflow_mpi] installation" in caplog.text
    # the sweeper of a component that has not recorded it yet (started before the scheduler) refuses
    database.values[INSTALLATION_VARIABLE] = PROD
    assert di.in_database().conflict is not None


def test_a_deleted_variable_is_not_made_again_while_jobs_of_the_old_id_run(database):
    """The scheduler about to make a new id looks for claims of its installation whose jobs still run."""
    database.values[INSTALLATION_VARIABLE] = PROD
    asked = []

    def live(installation):
        asked.append(installation)
        return {"team-a": {"old-id": ["pi-1a2b3c4d"]}}

    with pytest.raises(
        AirflowException,
        match=r"'team-a' .*id 'old-id': pi-1a2b3c4d.*Variable "
        r"airflow_mpi_deployment_id is missing",
    ):
        di.establish(live)
    assert asked == [PROD] and di.VARIABLE_KEY not in database.values


def test_a_copy_whose_variable_was_deleted_gets_a_new_id_of_its_own(database, monkeypatch, caplog):
    """The resolution the error gives: staging deletes the copied id; its installation holds no claims, so it gets
    a new id, and records its installation without another error."""
    database.values[INSTALLATION_VARIABLE] = PROD
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", STAGING_URL)
    with caplog.at_level("ERROR"):
        identity = di.establish(nothing_live)
    assert identity.deployment != "prod-id"
    assert identity.installation == STAGING == database.values[INSTALLATION_VARIABLE]
    assert "copy" not in caplog.text


@ON_AIRFLOW_3
def test_a_task_reads_the_recorded_installation_and_never_makes_it(unpinned, monkeypatch):
    monkeypatch.delenv("AIRFLOW__AIRFLOW_MPI__INSTALLATION", raising=False)
    with pytest.raises(AirflowException, match=r"Variable airflow_mpi_installation .* does not exist"):
        di.installation_for_task()
    unpinned.values[INSTALLATION_VARIABLE] = PROD
    assert di.installation_for_task() == PROD and list(unpinned.values) == [INSTALLATION_VARIABLE]


def test_the_ids_variables_are_stored_unencrypted_so_every_component_reads_them(monkeypatch):
    """Components of one deployment whose [core] fernet_key differ (none set: each generates its own, as the compose
    stack did) could not read each other's encrypted Variable: the scheduler made the id, the API server (and the
    tasks through it) read "does not exist". An id is no secret (it is on every job's labels): stored in clear."""
    from airflow.models import crypto
    from airflow.models.variable import Variable
    from cryptography.fernet import Fernet

    def forget_the_key() -> None:  # Airflow 3 caches get_fernet; 2.11 keeps it in crypto._fernet
        if hasattr(crypto.get_fernet, "cache_clear"):
            crypto.get_fernet.cache_clear()
        else:
            monkeypatch.setattr(crypto, "_fernet", None)

    def with_key(key: str) -> None:
        monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", key)
        forget_the_key()

    try:
        with_key(Fernet.generate_key().decode())
        made = di._plain(Variable(key=di.VARIABLE_KEY, val="0123abcd", description="d"), "0123abcd")
        with_key(Fernet.generate_key().decode())  # another component's key
        assert (made.is_encrypted, made.val) == (False, "0123abcd")
    finally:
        monkeypatch.undo()
        forget_the_key()


@ON_AIRFLOW_2
def test_on_airflow_2_two_first_tasks_make_the_identity_where_the_database_is_and_agree(database):
    """`airflow dags test` on 2.11 starts no scheduler: the task makes what is missing create-if-absent in the
    database (the unique key keeps the first value: a concurrent task's), never an upsert."""
    database.before_create = {di.VARIABLE_KEY: "made-by-a-concurrent-task"}
    assert [di.for_task() for _ in range(2)] == ["made-by-a-concurrent-task"] * 2
    assert di.installation_for_task() == PROD
    assert database.values == {di.VARIABLE_KEY: "made-by-a-concurrent-task", INSTALLATION_VARIABLE: PROD}
