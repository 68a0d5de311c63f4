"""The control plane's component table (kwokctl's kwok.yaml): read by the restart loops of ``localcluster serve``
every second, parsed again only when the file changed."""

from __future__ import annotations

import os

import pytest
import yaml

from localcluster import control_plane
from localcluster.control_plane import ControlPlane


def _write(plane: ControlPlane, *components: str) -> None:
    path = plane.kwokctl_cluster_dir / "kwok.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    docs = [
        {"kind": "KwokConfiguration", "options": {}},
        {
            "kind": "KwokctlConfiguration",
            "components": [{"name": n, "binary": f"/bin/{n}"} for n in components],
        },
    ]
    path.write_text(yaml.safe_dump_all(docs))


@pytest.fixture
def plane(tmp_path, monkeypatch) -> ControlPlane:
    monkeypatch.setenv("AIRFLOW_MPI_CACHE", str(tmp_path))
    return ControlPlane("components", verbose=False)


@pytest.fixture
def parses(monkeypatch) -> list[int]:
    counted: list[int] = []
    real = yaml.load_all

    def counting(stream, Loader):
        counted.append(1)
        return real(stream, Loader=Loader)

    monkeypatch.setattr(control_plane.yaml, "load_all", counting)
    return counted


def test_the_table_is_parsed_once_while_the_file_is_unchanged(plane, parses):
    _write(plane, "etcd", "kube-apiserver", "kube-scheduler")
    for _ in range(5):  # five turns of a restart loop: the names, then each component's pid file
        for name in plane.component_names():
            assert plane.component_pid(name) is None  # no pid file: not running
    assert plane.component_names() == ["etcd", "kube-apiserver", "kube-scheduler"]
    assert len(parses) == 1


def test_a_changed_file_is_read_again(plane, parses):
    _write(plane, "etcd")
    assert plane.component_names() == ["etcd"]
    path = plane.kwokctl_cluster_dir / "kwok.yaml"
    before = path.stat().st_mtime_ns
    _write(plane, "etcd", "kube-controller-manager")
    os.utime(path, ns=(before + 1_000_000, before + 1_000_000))  # a later write, even within the clock's tick
    assert plane.component_names() == ["etcd", "kube-controller-manager"]
    assert len(parses) == 2


def test_a_missing_file_means_no_component_running(plane):
    with pytest.raises(FileNotFoundError):
        plane.component_names()
    assert plane.component_pid("etcd") is None
