"""The component keeper restarts a control-plane component that crashed and leaves one stopped on purpose alone.

No cluster here: the components are ``sleep`` processes under the names of kwokctl's binaries, in a kwok.yaml of
the shape kwokctl writes, which is all ``ControlPlane``'s component table and the keeper see of them.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

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


SLOW_STOP = """trap 'touch "$0.termed"; while [ ! -e "$0.release" ]; do sleep 0.05; done; exit 0' TERM
touch "$0.up"
while :; do sleep 0.05; done
"""


def _slow_to_stop(binary: Path) -> tuple[str, str, str]:
    """Make ``binary`` a component that says when it handles SIGTERM (``<binary>.up``), then when it got one
    (``<binary>.termed``), and ends only when released (``<binary>.release``): a component still shutting down, as
    kube-controller-manager takes a moment to."""
    binary.unlink()
    with open(binary, "w") as script:
        script.write("#!/bin/sh\n" + SLOW_STOP)
    os.chmod(binary, 0o755)
    return f"{binary}.up", f"{binary}.termed", f"{binary}.release"


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
    try:
        wait_until(lambda: not pid_alive(loop), 30, f"the keeper's restart loop ({loop}) to end")
    finally:  # back, so that the fixture's stop finds (and ends) a keeper that is still there
        moved.rename(plane.state_dir)
    assert supervisor_pid(pid_file) is None


@pytest.mark.parametrize("act", ["stop", "restart"])
def test_a_look_while_a_component_is_being_stopped_on_purpose_starts_no_second_one(plane, act, tmp_path):
    """A keeper's look (and a real node's serve loop's) in the middle of a stop or restart on purpose: the pid file is
    gone, the process still ending. Starting every component without a pid file there started a second
    kube-controller-manager while ``switch-api`` restarted the first, which then failed: "already running"."""
    up, termed, release = _slow_to_stop(tmp_path / "bin" / "kube-controller-manager")
    first = plane.start_component("kube-controller-manager")
    wait_until(lambda: os.path.exists(up), 10, "kube-controller-manager to handle SIGTERM")
    errors: list[BaseException] = []

    def on_purpose() -> None:
        try:
            getattr(plane, f"{act}_component")(
                "kube-controller-manager", **({"grace": 30} if act == "stop" else {})
            )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    worker = threading.Thread(target=on_purpose)
    worker.start()
    wait_until(lambda: os.path.exists(termed), 10, "kube-controller-manager to get its SIGTERM")
    looks: list[list[str]] = []
    # a restart holds the keeper's lock from its stop to its start: a look then waits for it (in a thread)
    looker = threading.Thread(target=lambda: looks.append(component_keeper.look(plane)))
    looker.start()
    if act == "stop":
        looker.join(30)  # no lock held: the look is over while the component still ends
        assert looks and pid_alive(first)
    open(release, "w").close()
    worker.join(30)
    looker.join(30)
    assert not errors and looks == [[]], (errors, looks)
    running = plane.component_pid("kube-controller-manager")
    assert (running is None) if act == "stop" else (running not in (None, first))
