"""``airflow triggerer`` whose supervisor falls behind its runner's log socket, as on a loaded machine: every record it
reads costs ``AIRFLOW_MPI_TEST_LOG_LAG`` seconds (default 0.05) before it is written. Airflow's code otherwise.

Run as ``python lagging_triggerer.py triggerer``. Airflow 3's supervisor closes a trigger's log file when it handles
the trigger's end (a message on another socket) and sends records it reads after that to its own output: a trigger
that yields right after a burst of records loses the burst's tail from the task log unless it waits for it
(airflow_mpi/wait/trigger_log_flush.py; tests/e2e/test_log_failover.py).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Generator

from airflow.jobs.triggerer_job_runner import TriggerRunnerSupervisor

LAG = float(os.environ.get("AIRFLOW_MPI_TEST_LOG_LAG", "0.05"))
_read_records = TriggerRunnerSupervisor._process_log_messages_from_subprocess


def _lagging_records(self: TriggerRunnerSupervisor) -> Generator[None, bytes | bytearray, None]:
    records = _read_records(self)
    next(records)
    while True:
        line = yield
        time.sleep(LAG)  # the supervisor's select loop, busy elsewhere (this blocks it, as load does)
        records.send(line)


TriggerRunnerSupervisor._process_log_messages_from_subprocess = _lagging_records  # type: ignore[method-assign]

if __name__ == "__main__":
    from airflow.__main__ import main

    sys.argv = ["airflow", *sys.argv[1:]]
    sys.exit(main())
