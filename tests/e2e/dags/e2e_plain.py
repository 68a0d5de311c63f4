"""e2e only: plain PythonOperator tasks (no MPIJob) that fail, for the scheduler's health with the plugin installed.

* ``e2e_plain_fail``: raises on every try; its second try is its last (``retries=1``), so it fails for good through
  the task's own report, the way most task failures end;
* ``e2e_plain_hold``: sleeps until killed, no retry; the test kills its worker (supervisor and task process), so
  nothing reports its end and the *scheduler* fails it once its heartbeats stop (``TaskInstance.handle_failure``
  in the scheduler's loop, which calls the task instance listeners there).
"""

from __future__ import annotations

import time
from datetime import timedelta

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG


def _fail() -> None:
    raise RuntimeError("e2e_plain_fail fails on purpose")


def _hold() -> None:
    time.sleep(3600)


with DAG(
    dag_id="e2e_plain_fail",
    schedule=None,
    catchup=False,
    tags=["e2e"],
    doc_md="e2e: a plain Python task failing on its last try.",
):
    PythonOperator(task_id="fail", python_callable=_fail, retries=1, retry_delay=timedelta(seconds=1))

with DAG(
    dag_id="e2e_plain_hold",
    schedule=None,
    catchup=False,
    tags=["e2e"],
    doc_md="e2e: a plain Python task that runs until its worker is killed.",
):
    PythonOperator(task_id="hold", python_callable=_hold, retries=0)
