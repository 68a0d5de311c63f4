"""scripts/python.sh's ``project_python``: the interpreter scripts/bootstrap makes the virtualenvs from and
scripts/docker-setup names in the runtime wrapper; never a version manager's shim found on PATH."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from localcluster.processes import child_env

REPO = Path(__file__).resolve().parents[2]


def project_python(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", ". scripts/python.sh && project_python"], cwd=REPO, capture_output=True,
                          text=True, env=env)  # fmt: skip


def supported(python: str) -> bool:
    """Asked of the interpreter itself, not through the script."""
    code = "import sys; print((3, 10) <= sys.version_info[:2] <= (3, 13))"
    return (
        subprocess.run([python, "-c", code], capture_output=True, text=True, env=child_env()).stdout.strip()
        == "True"
    )


def test_the_one_asked_for_is_taken():
    res = project_python(child_env(AIRFLOW_MPI_PYTHON=sys.executable))
    assert (res.returncode, res.stdout.strip()) == (0, sys.executable)


def test_an_unsupported_one_is_refused_naming_it_and_the_setting():
    res = project_python(child_env(AIRFLOW_MPI_PYTHON="/bin/false"))
    assert res.returncode == 1 and res.stdout == ""
    assert "/bin/false is not Python 3.10-3.13" in res.stderr and "AIRFLOW_MPI_PYTHON" in res.stderr


def test_by_default_the_distributions_python_else_a_real_executable_never_a_shim():
    env = child_env()
    env.pop("AIRFLOW_MPI_PYTHON", None)
    res = project_python(env)
    chosen = res.stdout.strip()
    assert res.returncode == 0, res.stderr
    if Path("/usr/bin/python3").is_file() and supported("/usr/bin/python3"):
        assert chosen == "/usr/bin/python3"
    assert Path(chosen).is_file() and "shims" not in Path(chosen).parts, chosen
    assert supported(chosen)
