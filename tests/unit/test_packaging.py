"""The release artefacts: the sdist and the wheel built from the checkout, as a user's ``pip install`` gets them.

Built with ``python -m build --no-isolation`` (offline: the venv's setuptools and wheel, which scripts/bootstrap
installs) from a copy of the files git knows (tracked, and untracked ones it does not ignore), so that the build's
own ``build/`` and ``*.egg-info`` never land in the checkout; about 2 s.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from configparser import ConfigParser
from email import message_from_string
from pathlib import Path

import pytest
import setuptools

import airflow_mpi
from localcluster.processes import child_env

ROOT = Path(__file__).resolve().parents[2]
# what may stand at the top of the sdist: the package, its metadata and the files MANIFEST.in names
SDIST_TOP = {
    "airflow_mpi",
    "airflow_mpi.egg-info",
    "CHANGELOG.md",
    "LICENSE",
    "MANIFEST.in",
    "PKG-INFO",
    "README.md",
    "pyproject.toml",
    "setup.cfg",
}


def _checkout_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout: the files to build from are the ones git knows")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        env=child_env(),
    ).stdout.decode()
    return [path for path in listed.split("\0") if path and (ROOT / path).is_file()]


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("dist")
    for path in _checkout_files():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, source / path)
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--skip-dependency-check", "--outdir", str(out)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (sdist,), (wheel,) = list(out.glob("*.tar.gz")), list(out.glob("*.whl"))
    return {"sdist": sdist, "wheel": wheel}


def _wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def _wheel_text(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(name).decode()


def _dist_info(wheel: Path) -> str:
    return wheel.name.split("-py3")[0] + ".dist-info"


def test_the_artefacts_carry_the_one_version(artefacts: dict[str, Path]) -> None:
    version = airflow_mpi.__version__
    assert artefacts["wheel"].name == f"airflow_mpi-{version}-py3-none-any.whl"
    # setuptools >= 69.3 names the sdist as the wheel (PEP 625), older ones after the project's name
    assert artefacts["sdist"].name.replace("-", "_") == f"airflow_mpi_{version}.tar.gz"
    changelog = (ROOT / "CHANGELOG.md").read_text()
    # an "Unreleased" section above it collects what the next version will change
    newest = next(
        line for line in changelog.splitlines() if line.startswith("## ") and line != "## Unreleased"
    )
    assert newest == f"## {version}", "CHANGELOG.md's newest released section is the package's version"


def test_the_metadata_renders_on_the_package_index(artefacts: dict[str, Path]) -> None:
    from readme_renderer.markdown import render

    wheel = artefacts["wheel"]
    metadata = message_from_string(_wheel_text(wheel, f"{_dist_info(wheel)}/METADATA"))
    assert metadata["Name"] == "airflow-mpi" and metadata["Version"] == airflow_mpi.__version__
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert metadata.get_all("License-File") == ["LICENSE"]
    # PEP 639: the license is setup.cfg's SPDX expression, no classifier (setuptools >= 77 deprecates them); older
    # setuptools (a venv's own, as --no-isolation uses here) leave the expression out
    assert not [c for c in metadata.get_all("Classifier") if c.startswith("License ::")]
    if int(setuptools.__version__.split(".")[0]) >= 77:
        assert metadata["License-Expression"] == "Apache-2.0"
    html = render(metadata.get_payload(), variant="GFM")
    assert html is not None and "<h1" in html, "the long description renders as the package index renders it"


def test_the_wheel_holds_the_typed_package_and_its_entry_points(artefacts: dict[str, Path]) -> None:
    wheel = artefacts["wheel"]
    names = _wheel_names(wheel)
    assert "airflow_mpi/py.typed" in names
    entry_points = ConfigParser()
    entry_points.read_string(_wheel_text(wheel, f"{_dist_info(wheel)}/entry_points.txt"))
    assert entry_points["apache_airflow_provider"]["provider_info"] == (
        "airflow_mpi.get_provider_info:get_provider_info"
    )
    assert entry_points["airflow.plugins"]["airflow_mpi_orphans"] == (
        "airflow_mpi.plugins.orphan_listener:MPIJobOrphanPlugin"
    )
    shipped = {n for n in names if n.startswith("airflow_mpi/")}
    package = {p for p in _checkout_files() if p.startswith("airflow_mpi/") and p.endswith((".py", ".pyi"))}
    assert package <= shipped, f"modules left out of the wheel: {sorted(package - shipped)}"


def test_nothing_of_the_development_harness_is_shipped(artefacts: dict[str, Path]) -> None:
    wheel_top = {name.split("/")[0] for name in _wheel_names(artefacts["wheel"])}
    assert wheel_top == {"airflow_mpi", _dist_info(artefacts["wheel"])}
    with tarfile.open(artefacts["sdist"]) as sdist:
        members = [m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name]
    assert {name.split("/")[0] for name in members} == SDIST_TOP
    harness = [n for n in members if "__pycache__" in n or n.endswith(".pyc")]
    assert not harness, harness
