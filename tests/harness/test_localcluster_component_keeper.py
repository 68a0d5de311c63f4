"""The component keeper restarts a control-plane component that crashed and leaves one stopped on purpose alone.

No cluster here: the components are ``sleep`` processes under the names of kwokctl's binaries, in a kwok.yaml of
the shape kwokctl writes, which is all ``ControlPlane``'s component table and the keeper see of them.
"""

from __future__ import annotations

import os
import signal

import pytest
import yaml

from localcluster import component_keeper
from localcluster.control_plane import ControlPlane
from localcluster.processes import pid_alive, supervisor_pid
from localcluster.waiting import wait_until

COMPONENTS = ("kube-scheduler", "kube-controller-manager")


@pytest.fixture
def plane(tmp_path, monkeypatch) -> ControlPlane:
    """A control plane whose components are ``sleep`` under their binaries' names, none running."""
    monkeypatch.setenv("AIRFLOW_MPI_CACHE", str(tmp_path / "cache"))
    plane = ControlPlane("keeper", verbose=False)
    bins = tmp_path / "bin"
    bins.mkdir()
    for name in COMPONENTS:
        (bins / name).symlink_to("/bin/sleep")
    for sub in ("pids", "logs"):
        (plane.kwokctl_cluster_dir / sub).mkdir(parents=True)
    plane.logs_dir.mkdir(parents=True)
    table = [{"name": n, "binary": str(bins / n), "args": ["300"]} for n in COMPONENTS]
    (plane.kwokctl_cluster_dir / "kwok.yaml").write_text(
        yaml.safe_dump_all([{"kind": "KwokctlConfiguration", "components": table}])
    )
    yield plane
    component_keeper.stop(plane)
    for name in COMPONENTS:
        plane.stop_component(name, grace=0)


def _crash(plane: ControlPlane, name: str) -> int:
    """SIGKILL the component as a crash would (its pid file stays); returns the dead pid."""
    pid = plane.component_pid(name)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(pid), 10, f"{name} ({pid}) to die")
    return pid


def test_only_a_crashed_component_is_started_again_one_stopped_on_purpose_stays_stopped(plane):
    started = {name: plane.start_component(name) for name in COMPONENTS}
    dead = _crash(plane, "kube-scheduler")
    plane.stop_component("kube-controller-manager", grace=0)

    assert plane.ensure_components(crashed_only=True) == ["kube-scheduler"]
    assert plane.component_pid("kube-scheduler") not in (None, dead)
    assert plane.component_pid("kube-controller-manager") is None  # its pid file went before its process
    assert plane.ensure_components(crashed_only=True) == []
    # what a cluster start or an API server restart asks for: every component, stopped or not
    assert plane.ensure_components() == ["kube-controller-manager"]
    assert plane.component_pid("kube-controller-manager") not in (None, started["kube-controller-manager"])


def test_the_keeper_runs_beside_the_cluster_restarts_a_crashed_component_and_stops_with_its_group(plane):
    for name in COMPONENTS:
        plane.start_component(name)
    loop = component_keeper.start(plane)
    assert component_keeper.start(plane) == loop  # one keeper per cluster

    dead = _crash(plane, "kube-scheduler")
    wait_until(
        lambda: plane.component_pid("kube-scheduler") not in (None, dead),
        30,
        f"the keeper to restart kube-scheduler (log: {plane.logs_dir / 'component-keeper.log'})",
    )
    log = (plane.logs_dir / f"{component_keeper.NAME}.log").read_text()
    assert "restarted kube-scheduler (exited)" in log

    component_keeper.stop(plane)
    assert supervisor_pid(component_keeper.pid_file(plane)) is None
    assert not pid_alive(loop)  # gone, or a zombie of this process


def test_a_keeper_whose_cluster_is_gone_ends_with_its_restart_loop(plane):
    """A cluster's state removed without a stop (a killed test session's cleanup) leaves no keeper looping."""
    loop = component_keeper.start(plane)
    pid_file = component_keeper.pid_file(plane)
    moved = plane.state_dir.with_name("moved-away")
    plane.state_dir.rename(moved)
    wait_until(lambda: not pid_alive(loop), 30, f"the keeper's restart loop ({loop}) to end")
    moved.rename(plane.state_dir)
    assert supervisor_pid(pid_file) is None
