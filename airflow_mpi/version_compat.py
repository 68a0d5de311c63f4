"""One place for imports that moved between Airflow 2.11 and 3.x.

The provider's operators, sensors and triggers import Airflow only through here, following the
official providers: ``airflow.providers.common.compat.sdk`` resolves Airflow 3 (``airflow.sdk``)
paths first and falls back to the Airflow 2 ones.
"""

from __future__ import annotations

from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowSkipException,
    BaseOperator,
    BaseSensorOperator,
    TaskDeferred,
    conf,
)
from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_0_PLUS
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow import __version__ as AIRFLOW_VERSION

try:
    from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_3_PLUS
except ImportError:  # older common-compat
    AIRFLOW_V_3_3_PLUS = False

__all__ = [
    "AIRFLOW_VERSION",
    "AIRFLOW_V_3_0_PLUS",
    "AIRFLOW_V_3_3_PLUS",
    "AirflowException",
    "AirflowFailException",
    "AirflowSkipException",
    "BaseOperator",
    "BaseSensorOperator",
    "BaseTrigger",
    "TaskDeferred",
    "TriggerEvent",
    "conf",
]
