"""Hypothesis profiles for the unit suite.

``unit`` (the default): few enough examples that the suite stays fast on a shared 2-core machine,
new random examples on every run (a failure prints the seed and a @reproduce_failure blob to
replay it), no example database written into the work tree. ``thorough`` explores longer; pick it
with HYPOTHESIS_PROFILE=thorough.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir

_HOME = tempfile.mkdtemp(prefix="airflow-mpi-hypothesis-")  # failure patches go here, not into the work tree
atexit.register(shutil.rmtree, _HOME, True)
set_hypothesis_home_dir(_HOME)

settings.register_profile(
    "unit",
    max_examples=60,
    deadline=None,  # building an operator takes milliseconds, with outliers under load: no flaky deadline
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("thorough", parent=settings.get_profile("unit"), max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "unit"))


@pytest.fixture(autouse=True)
def _no_recent_api_failure(monkeypatch):
    """Each test starts as a process that saw no API failure (hooks/retries.py remembers the last one, process-wide:
    a 403 soon after it is retried, which would make a test's outcome depend on the tests before it)."""
    from airflow_mpi.hooks import retries

    monkeypatch.setattr(retries._Recent, "last", None)
