"""One place for imports that moved between Airflow 2.11 and 3.x.

The provider's operators, sensors and triggers import Airflow only through here, following the official providers:
``airflow.providers.common.compat.sdk`` resolves Airflow 3 (``airflow.sdk``) paths first and falls back to Airflow 2's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from airflow import __version__ as AIRFLOW_VERSION
from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    BaseOperator,
    BaseSensorOperator,
    Stats,
    TaskDeferred,
    Variable,
    conf,
)
from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_0_PLUS
from airflow.triggers.base import BaseTrigger, TriggerEvent

try:
    from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_3_PLUS
except ImportError:  # older common-compat
    AIRFLOW_V_3_3_PLUS = False


@contextmanager
def non_scoped_session() -> Iterator[Any]:
    """A metadata-database session of its own, never a thread's scoped one (which the scheduler's loop may be
    holding in a locked transaction: a plugin committing it breaks HA locks)."""
    from airflow import settings

    # Airflow 3 / 2.11 (whose Session is set once Airflow is configured)
    factory = getattr(settings, "NonScopedSession", None) or cast(Any, settings.Session).session_factory
    session = factory()
    try:
        yield session
    finally:
        session.close()
