"""This Airflow deployment's identity on Kubernetes: the label value that makes an MPIJob *ours*.

Several deployments (prod, staging, one per team) often share a cluster and a namespace, with the same DAGs and
the same run ids. Every MPIJob carries its deployment's identity (jobspec/naming.py); a deployment reattaches to,
and its orphan sweep deletes, only jobs that carry its own. Where it comes from, first match wins:

1. ``[airflow_mpi] deployment_id`` (``AIRFLOW__AIRFLOW_MPI__DEPLOYMENT_ID``): pinned, e.g. for a deployment
   rebuilt on a new metadata database that must keep owning its running jobs;
2. the Variable ``airflow_mpi_deployment_id``: a random id made once per metadata database by a server component
   when it starts (plugins/orphan_listener.py :func:`establish`), so every component of a deployment reads the same
   value and two deployments with their own databases differ without configuration. Tasks never make it (on
   Airflow 3 the Task SDK's ``Variable.set`` is an upsert: two first tasks would keep two ids).

It moves with the database, so a copy of the database (staging restored from a prod backup) holds the same id: the
*installation* (jobspec/claims.py), kept outside the database, tells the copy apart. The Variable
``airflow_mpi_installation`` records the installation that holds the id; a component that finds another one there
records its own and logs how to resolve it, and the claims in each namespace (hooks/identity_claims.py) keep the copy
from creating, reattaching to or deleting the original's jobs.

It must be a label value (1-63 characters of ``[A-Za-z0-9_.-]``, alphanumeric at both ends), so that the label
equals it exactly.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_mpi.jobspec.claims import (
    INSTALLATION_KEY,
    INSTALLATION_VARIABLE,
    copied_database,
    installation_of_url,
    live_jobs_of_another_id,
)
from airflow_mpi.version_compat import AIRFLOW_V_3_0_PLUS, AirflowException, conf

log = logging.getLogger(__name__)

CONFIG_SECTION = "airflow_mpi"
CONFIG_KEY = "deployment_id"
VARIABLE_KEY = "airflow_mpi_deployment_id"
VARIABLE_DESCRIPTION = (
    "airflow-mpi: this deployment's identity on Kubernetes (label airflow-mpi.io/deployment). Its MPIJobs carry it; "
    "they are the only ones it reattaches to or deletes. Change it only to adopt another deployment's jobs."
)
INSTALLATION_DESCRIPTION = (
    "airflow-mpi: the installation holding this deployment's identity (a hash of where this metadata database is, "
    "or [airflow_mpi] installation). A copy of this database restored elsewhere records its own and then touches "
    "none of the original's MPIJobs."
)
_VALID = re.compile(
    r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z"
)  # \Z: "$" lets a trailing newline through


def new_identity() -> str:
    """A fresh random identity (16 hex digits: two deployments never draw the same)."""
    return secrets.token_hex(8)


def checked(value: object, source: str) -> str:
    """``value`` when it is a valid identity; a clear error naming where it came from otherwise."""
    text = str(value).strip()
    if not _VALID.match(text):
        raise AirflowException(
            f"{source}={value!r}: the airflow-mpi deployment id must be a Kubernetes label value "
            "(1-63 characters of letters, digits, '-', '_', '.', starting and ending with a letter "
            "or digit)"
        )
    return text


@dataclass(frozen=True)
class Identity:
    """This deployment's id, this component's installation, and the installation its database records (None: not
    recorded yet, a release before installations)."""

    deployment: str
    installation: str
    recorded: str | None = None

    @property
    def conflict(self) -> str | None:
        """The error when the database records another installation (a copy of the database, or a move)."""
        if self.recorded is None or self.recorded == self.installation:
            return None
        return copied_database(self.deployment, self.recorded, self.installation)


def _configured(key: str) -> str | None:
    value = conf.get(CONFIG_SECTION, key, fallback=None)
    if value is None or not str(value).strip():
        return None
    return checked(value, f"[{CONFIG_SECTION}] {key}")


def pinned() -> str | None:
    """The identity set in Airflow's configuration, if any."""
    return _configured(CONFIG_KEY)


def pinned_installation() -> str | None:
    """``[airflow_mpi] installation``, if set (a label value, like the id)."""
    return _configured(INSTALLATION_KEY)


def own_installation() -> str:
    """This component's installation: pinned, else where its metadata database is (jobspec/claims.py)."""
    return pinned_installation() or installation_of_url(conf.get("database", "sql_alchemy_conn"))


def _stored(variable: Any, key: str, what: str) -> str:
    value = variable.get(key, None)
    if value is None:
        raise AirflowException(
            f"the Variable {key} (this deployment's airflow-mpi {what}) does not exist. The scheduler makes it when "
            "it starts with airflow-mpi installed (restart it and read its log: it refuses where jobs of an earlier "
            "id still run); a task never makes it. Where no such scheduler ever ran on this database (`airflow dags "
            f"test`), pin [{CONFIG_SECTION}] {CONFIG_KEY} and [{CONFIG_SECTION}] {INSTALLATION_KEY}."
        )
    return checked(value, f"Variable {key}")


def for_task() -> str:
    """The identity, read where a task runs (through the Task SDK on Airflow 3, the database on 2.11); never made
    here (see the module docstring): a missing Variable is an error."""
    from airflow_mpi.version_compat import Variable

    if (value := pinned()) is not None:
        return value
    _made_where_the_database_is(Variable, VARIABLE_KEY)
    return _stored(Variable, VARIABLE_KEY, "deployment id")


def installation_for_task() -> str:
    """The installation the task's deployment holds its identity under: pinned, else the recorded one."""
    from airflow_mpi.version_compat import Variable

    if (value := pinned_installation()) is not None:
        return value
    _made_where_the_database_is(Variable, INSTALLATION_VARIABLE)
    return _stored(Variable, INSTALLATION_VARIABLE, "installation")


def _made_where_the_database_is(variable: Any, key: str) -> None:
    """On Airflow 2.11 a task has the metadata database at hand (and `airflow dags test` starts no scheduler): what
    is missing is made there as a server component makes it, create-if-absent (no upsert: concurrent first tasks
    agree). The task's claim check (hooks/identity_claims.py) still refuses, before anything is created, where jobs
    of an earlier id of this installation run. On Airflow 3 a task reaches Variables through the Task SDK only."""
    if not AIRFLOW_V_3_0_PLUS and variable.get(key, None) is None:
        establish(lambda installation: {})


def in_database() -> Identity:
    """The identity where the metadata database is at hand (the orphan sweep: scheduler, API server); read only.
    A pinned installation is not compared with the recorded one: whoever pins it says which installation this is."""
    from airflow.models.variable import Variable

    recorded = None if pinned_installation() else Variable.get(INSTALLATION_VARIABLE, None)
    return Identity(
        pinned() or _stored(Variable, VARIABLE_KEY, "deployment id"), own_installation(), recorded
    )


#: ``installation -> {namespace: {other id: [its live MPIJobs]}}``: this installation's claims of ids with live jobs
LiveClaims = Callable[[str], dict[str, dict[str, list[str]]]]


def establish(live_claims: LiveClaims) -> Identity:
    """Make what is missing when a server component starts, each create-if-absent (the Variable's unique key decides
    a race: the loser reads the winner's value), and record this installation where the database records another.

    A new id is made only where ``live_claims`` (cluster I/O, plugins/orphan_listener.py) finds no claim of this
    installation for an id whose jobs still run (the Variable was deleted while they ran): else this raises.
    """
    from airflow.models.variable import Variable

    own = own_installation()
    deployment = pinned() or Variable.get(VARIABLE_KEY, None)
    made = deployment is None
    if made:
        try:
            live = live_claims(own)
        except Exception as err:  # the tasks check the same before they create anything
            log.warning("airflow-mpi: could not look for jobs of an earlier id (%s); making a new id", err)
            live = {}
        if live:
            raise AirflowException(
                " ".join(live_jobs_of_another_id(ns, None, ids) for ns, ids in sorted(live.items()))
            )
        _create_if_absent(VARIABLE_KEY, new_identity(), VARIABLE_DESCRIPTION)
        deployment = Variable.get(VARIABLE_KEY)
    deployment = checked(deployment, f"Variable {VARIABLE_KEY}")
    recorded = Variable.get(INSTALLATION_VARIABLE, None)
    if recorded is None:
        _create_if_absent(INSTALLATION_VARIABLE, own, INSTALLATION_DESCRIPTION)
        recorded = Variable.get(INSTALLATION_VARIABLE)
    identity = Identity(deployment, own, recorded)
    if identity.conflict:
        if (
            not made
        ):  # a new id is this installation's anyway (the copy's Variable deleted, as the error says)
            log.error("%s", identity.conflict)
        _overwrite(INSTALLATION_VARIABLE, own)
    return Identity(deployment, own, own)


def _create_if_absent(key: str, value: str, description: str) -> None:
    from airflow.models.variable import Variable
    from sqlalchemy.exc import IntegrityError

    from airflow_mpi.version_compat import non_scoped_session

    with non_scoped_session() as session:
        try:
            session.add(_plain(Variable(key=key, val=value, description=description), value))
            session.commit()
        except IntegrityError:
            session.rollback()


def _plain(variable: Any, value: str) -> Any:
    """``variable`` holding ``value`` unencrypted: an id, not a secret (it is on every job's labels), readable by
    every component whatever its ``[core] fernet_key`` (components of one deployment with different keys, e.g. none
    set: each generates its own, could not read each other's encrypted value)."""
    variable._val, variable.is_encrypted = value, False
    return variable


def _overwrite(key: str, value: str) -> None:
    from airflow.models.variable import Variable
    from sqlalchemy import select

    from airflow_mpi.version_compat import non_scoped_session

    with non_scoped_session() as session:
        _plain(session.scalars(select(Variable).where(Variable.key == key)).one(), value)
        session.commit()
