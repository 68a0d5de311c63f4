"""Every test session gets its own AIRFLOW_HOME (set before Airflow is first imported).

The Airflow 3 and 2.11 environments must not share ``~/airflow/airflow.cfg``: each writes defaults
the other cannot load (e.g. Airflow 3's XCom backend path).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

if "AIRFLOW_MPI_KEEP_AIRFLOW_HOME" not in os.environ:
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="airflow-mpi-tests-home-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], True)
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
# Operators run in-process here, outside any deployment's task runner: they get a pinned deployment identity
# (the e2e and compose stacks run real deployments with an environment of their own, without this variable).
os.environ.setdefault("AIRFLOW__AIRFLOW_MPI__DEPLOYMENT_ID", "tests-in-process")
