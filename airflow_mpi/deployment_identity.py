"""This Airflow deployment's identity on Kubernetes: the label value that makes an MPIJob *ours*.

Several deployments (prod, staging, one per team) often share a cluster and a namespace, with the same DAGs and
the same run ids. Every MPIJob carries its deployment's identity (jobspec/naming.py); a deployment reattaches to,
and its orphan sweep deletes, only jobs that carry its own. Where it comes from, first match wins:

1. ``[airflow_mpi] deployment_id`` (``AIRFLOW__AIRFLOW_MPI__DEPLOYMENT_ID``): pinned, e.g. for a deployment
   rebuilt on a new metadata database that must keep owning its running jobs;
2. the Variable ``airflow_mpi_deployment_id``: a random id made once per metadata database by the scheduler
   when it starts (plugins/orphan_listener.py), so every component of a deployment reads the same value and two
   deployments with their own databases differ without configuration. It moves with the database.

It must be a label value (1-63 characters of ``[A-Za-z0-9_.-]``, alphanumeric at both ends), so that the label
equals it exactly.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from typing import Any

from airflow_mpi.version_compat import AirflowException, conf

CONFIG_SECTION = "airflow_mpi"
CONFIG_KEY = "deployment_id"
VARIABLE_KEY = "airflow_mpi_deployment_id"
VARIABLE_DESCRIPTION = (
    "airflow-mpi: this deployment's identity on Kubernetes (label airflow-mpi.io/deployment). Its MPIJobs carry it; "
    "they are the only ones it reattaches to or deletes. Change it only to adopt another deployment's jobs."
)
_VALID = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")  # \Z: "$" lets a trailing newline through


def new_identity() -> str:
    """A fresh random identity (16 hex digits: two deployments never draw the same)."""
    return secrets.token_hex(8)


def checked(value: object, source: str) -> str:
    """``value`` when it is a valid identity; a clear error naming where it came from otherwise."""
    text = str(value).strip()
    if not _VALID.match(text):
        raise AirflowException(f"{source}={value!r}: the airflow-mpi deployment id must be a Kubernetes label value "
                               "(1-63 characters of letters, digits, '-', '_', '.', starting and ending with a letter "
                               "or digit)")
    return text


def pinned() -> str | None:
    """The identity set in Airflow's configuration, if any."""
    value = conf.get(CONFIG_SECTION, CONFIG_KEY, fallback=None)
    if value is None or not str(value).strip():
        return None
    return checked(value, f"[{CONFIG_SECTION}] {CONFIG_KEY}")


def for_task() -> str:
    """The identity, read where a task runs (through the Task SDK on Airflow 3, the database on 2.11).

    The scheduler made the Variable when it started; should it be missing (a scheduler without this provider),
    the task makes it, and reads it back so that concurrent first tasks agree on the value that was kept.
    """
    from airflow_mpi.version_compat import Variable

    return _identity(Variable, lambda: Variable.set(VARIABLE_KEY, new_identity(), VARIABLE_DESCRIPTION))


def in_database() -> str:
    """The identity, read (and made once) where the metadata database is at hand: scheduler, API server. The
    Variable's unique key decides a race between two components making it at once: the loser reads the winner's value.
    """
    from airflow.models.variable import Variable
    from sqlalchemy.exc import IntegrityError

    from airflow_mpi.version_compat import non_scoped_session

    def make() -> None:
        with non_scoped_session() as session:
            try:
                session.add(Variable(key=VARIABLE_KEY, val=new_identity(), description=VARIABLE_DESCRIPTION))
                session.commit()
            except IntegrityError:
                session.rollback()

    return _identity(Variable, make)


def _identity(variable: Any, make: Callable[[], None]) -> str:
    """The pinned identity, else the Variable's (made first where missing, then read back: a race's winner)."""
    if (value := pinned()) is not None:
        return value
    stored = variable.get(VARIABLE_KEY, None)
    if stored is None:
        make()
        stored = variable.get(VARIABLE_KEY)
    return checked(stored, f"Variable {VARIABLE_KEY}")
