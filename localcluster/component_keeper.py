"""The component keeper: what a kubelet does for a control plane's static pods, for a cluster on this host.

kwokctl starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the kwok controller once; nothing
restarted one that exited, unless a test restarted the API server at that moment. But they do exit on their own:
kube-scheduler ends itself (``klog.FlushAndExit``) when its cache finds a pod on a node other than the one it
assumed, which an API server killed in the middle of a binding leaves behind (run O4, 2026-12-07: the e2e API-down
test's kill, the scheduler gone 7 s after the API server came back, and the next test's pods never scheduled).

``python -m localcluster keep --name NAME`` runs under the controllers' restart loop beside the cluster (started
and stopped with it) and, every second, starts again any component whose pid file names a process that is gone.
A component stopped on purpose (``ControlPlane.stop_component``: its pid file removed first) stays stopped.
A real node's container needs no keeper process: ``localcluster serve``'s own loop makes the same ``look`` (it once
started every component without a pid file, and so a second kube-controller-manager while ``switch-api`` was
restarting the first: "already running", CI 2026-12-07).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .processes import Launch, StopSignal, child_env, start_supervised, stop_supervised, supervisor_pid

if TYPE_CHECKING:
    from .control_plane import ControlPlane

NAME = "component-keeper"
INTERVAL = 1.0  # seconds between two looks: a kubelet's restart is about as quick


def pid_file(plane: ControlPlane) -> Path:
    return plane.state_dir / f"{NAME}.pid"


def start(plane: ControlPlane) -> int:
    """Run the keeper of ``plane`` (no-op when it runs); returns its restart loop's pid."""
    running = supervisor_pid(pid_file(plane))
    if running is not None:
        return running
    repo = str(Path(__file__).parents[1])  # localcluster/ is a dev-only folder, not installed
    env = child_env(PYTHONPATH=os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])))
    argv = [sys.executable, "-m", "localcluster", "keep", "--name", plane.name]
    return start_supervised(NAME, Launch(argv, env), plane.logs_dir / f"{NAME}.log", pid_file(plane))


def stop(plane: ControlPlane) -> None:
    """Stop the keeper (before its components stop: it would start them again)."""
    stop_supervised(pid_file(plane))


def look(plane: ControlPlane) -> list[str]:
    """Start again each component that crashed (its pid file names a process that is gone); returns their names."""
    try:
        return plane.ensure_components(crashed_only=True)
    except FileNotFoundError:  # the cluster is being deleted: its stop stops the keeper first
        return []


def keep(plane: ControlPlane, interval: float = INTERVAL) -> None:
    """Start again, every ``interval`` seconds, each component that crashed; returns on SIGTERM, between two
    looks (never in the middle of a start, which would leave a component without its pid file)."""
    stopping = StopSignal()
    while not stopping:
        if not plane.state_dir.exists():  # its cluster is gone without a stop: end the restart loop too
            os.killpg(os.getpgrp(), signal.SIGTERM)
            return
        restarted = look(plane)
        if restarted:
            print(
                f"[localcluster] {NAME}: restarted {', '.join(restarted)} (exited)",
                file=sys.stderr,
                flush=True,
            )
        stopping.wait(interval)
