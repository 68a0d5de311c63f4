"""scripts/runc-capfix as scripts/docker-setup installs it: dockerd runs it for every runtime call (each container
start and stop, each `docker exec`, the compose stack's health checks included), so its interpreter is named, not
looked up on PATH, and it works started the way it is installed (``-I -S``: no site, no environment)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from localcluster.processes import child_env

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "scripts" / "runc-capfix"
INSTALLED = Path("/usr/local/lib/airflow-mpi/runc-capfix")


# a few capabilities and their bits (linux/capability.h), CAP_SYS_RESOURCE among them (what these kernels withhold)
CAP_BITS = {"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_NET_ADMIN": 12, "CAP_SYS_ADMIN": 21, "CAP_SYS_RESOURCE": 24,
            "CAP_MKNOD": 27, "CAP_BPF": 39}  # fmt: skip


def _bounding_set() -> set[str]:
    """This process's capability bounding set among CAP_BITS, read independently of the wrapper."""
    status = Path("/proc/self/status").read_text().splitlines()
    mask = int(next(ln.split()[1] for ln in status if ln.startswith("CapBnd:")), 16)
    return {name for name, bit in CAP_BITS.items() if mask >> bit & 1}


def test_the_installed_wrapper_names_its_interpreter_and_is_the_scripts_body():
    if not INSTALLED.exists():
        pytest.skip(
            "scripts/docker-setup installed no wrapper on this machine (its Docker or kernel needs none)"
        )
    first, *body = INSTALLED.read_text().splitlines(keepends=True)
    interpreter, *flags = first[2:].split()
    assert first.startswith("#!/") and Path(interpreter).name.startswith("python"), first
    assert Path(interpreter).is_file(), first
    assert "shims" not in interpreter and Path(interpreter).name != "env", (
        first
    )  # never looked up through PATH
    assert flags == ["-IS"], first
    assert body == SOURCE.read_text().splitlines(keepends=True)[1:]


def test_started_as_installed_it_drops_the_capabilities_the_kernel_withholds_then_runs_runc(tmp_path):
    caps = list(CAP_BITS)
    config = {"process": {"capabilities": {"bounding": caps, "effective": caps}}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    env = child_env(AIRFLOW_MPI_RUNC="/bin/echo", PYTHONPATH="/nonexistent")  # -I: PYTHON* ignored
    out = subprocess.run([sys.executable, "-IS", str(SOURCE), "create", "--bundle", str(tmp_path), "job-1"],
                         env=env, capture_output=True, text=True, check=True, cwd=tmp_path)  # fmt: skip
    assert out.stdout.split() == ["create", "--bundle", str(tmp_path), "job-1"]  # runc got the same arguments
    kept = json.loads((tmp_path / "config.json").read_text())["process"]["capabilities"]
    allowed = _bounding_set()
    assert kept == {
        "bounding": [c for c in caps if c in allowed],
        "effective": [c for c in caps if c in allowed],
    }
