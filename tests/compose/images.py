"""The compose stack's own images (docker-compose.yaml's Airflow and PostgreSQL services), built by compose.

``python -m tests.compose.images`` builds them under a throwaway tag and removes the tag: scripts/test runs it in the
background at its start, so that Docker's build cache holds every layer when tests/compose builds its stack.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # localcluster/ is a dev-only folder, not installed
    sys.path.insert(0, str(REPO))

from localcluster import build_ledger  # noqa: E402
from localcluster.processes import child_env  # noqa: E402

OWN = (
    "postgres",
    "airflow-init",
)  # the services whose images carry AIRFLOW_MPI_TAG (airflow-* share one image)


def compose_build(services: list[str], project: str, what: str, env: dict[str, str] | None = None) -> None:
    """``docker compose build``, noted in the test run's build ledger: built now when any RUN, COPY or ADD step ran
    (build_ledger.steps_ran)."""
    t0 = time.monotonic()
    res = subprocess.run(
        ["docker", "compose", "-f", str(REPO / "docker-compose.yaml"), "-p", project, "build", *services],
        capture_output=True,
        text=True,
        env=child_env(**{**(env or {}), "BUILDKIT_PROGRESS": "plain"}),
    )
    if res.returncode:
        raise RuntimeError(f"docker compose build failed ({res.returncode}):\n{res.stderr[-4000:]}")
    ran = build_ledger.steps_ran(res.stdout + res.stderr)
    # the steps that copy and install this checkout's provider (images/airflow/Dockerfile: /src) follow every change
    # of the code, as the checkout's virtualenvs do: they alone do not make a run cold
    if ran and all("/src" in step for step in ran):
        what = f"{what}: this checkout's provider layer {build_ledger.CHECKOUT_OWN}"
    build_ledger.note(what, bool(ran), time.monotonic() - t0)


def prebuild() -> None:
    tag = f"prebuild-{os.getpid()}"
    try:
        compose_build(
            list(OWN),
            f"airflow-mpi-prebuild-{os.getpid()}",
            "compose images (Airflow, PostgreSQL), in the background",
            {"AIRFLOW_MPI_TAG": tag},
        )
    finally:
        subprocess.run(
            ["docker", "image", "rm", f"airflow-mpi/airflow:{tag}", f"airflow-mpi/postgres:{tag}"],
            capture_output=True,
            env=child_env(),
        )


if __name__ == "__main__":
    prebuild()
