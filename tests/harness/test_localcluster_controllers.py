"""localcluster's controllers: chosen by name, run under the one restart loop, started and stopped alike.

No cluster here: the processes are shell commands standing in for a controller, which is all the restart loop
and the Controller base class see of one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from localcluster import controllers
from localcluster.cluster import LocalCluster
from localcluster.processes import (
    Launch,
    child_env,
    pid_alive,
    start_supervised,
    stop_supervised,
    supervisor_pid,
)
from localcluster.waiting import ClusterError, wait_until


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("AIRFLOW_MPI_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _group_runs(pgid: int) -> bool:
    """A member of the group runs, by ps. Unlike ``_group_alive`` a zombie does not count: a member the loop left
    orphaned (its command forked just as the SIGTERM came) ends, then waits for PID 1 to reap it (run T: the group
    still answered killpg right after the stop)."""
    listed = subprocess.run(
        ["ps", "-e", "-o", "pgid=,stat="], capture_output=True, text=True, check=True, env=child_env()
    ).stdout
    return any(
        int(g) == pgid and not st.startswith("Z") for g, st in (line.split() for line in listed.splitlines())
    )


def test_the_restart_loop_runs_its_prelude_once_restarts_the_command_and_stop_ends_its_group(tmp_path):
    runs, log, pid_file = tmp_path / "runs", tmp_path / "ctl.log", tmp_path / "ctl.pid"
    launch = Launch(
        ["/bin/sh", "-c", 'echo run >> "$0"; exit 3', str(runs)],
        dict(os.environ),
        prelude='echo "prelude $1" >> "$2"; shift 2',
        prelude_args=["once", str(runs)],
    )
    pid = start_supervised("stand-in", launch, log, pid_file)
    try:
        assert supervisor_pid(pid_file) == pid
        wait_until(lambda: runs.read_text().count("run\n") >= 2, 20, "a second run of the command")
        assert runs.read_text().splitlines()[:3] == ["prelude once", "run", "run"]
        assert "[localcluster] stand-in exited with 3, restarting" in log.read_text()
    finally:
        stop_supervised(pid_file)
    assert not pid_alive(pid) and not _group_runs(pid)
    assert not pid_file.exists() and supervisor_pid(pid_file) is None


def test_stop_returns_once_the_group_is_gone_though_a_parent_elsewhere_has_not_reaped_its_leader(tmp_path):
    """The restart loops of a node's cluster are children of its ``serve``; ``switch-api`` stops them from another
    process, where the stopped loop stays a zombie until ``serve`` reaps it: the stop must not wait out its grace."""
    pid_file, started = tmp_path / "ctl.pid", tmp_path / "started"
    command = ["/bin/sh", "-c", 'touch "$0"; exec sleep 300', str(started)]
    holder_code = (
        "import os, sys; from pathlib import Path; from localcluster.processes import Launch, start_supervised; "
        f"start_supervised('held', Launch({command!r}, dict(os.environ)), Path({str(tmp_path / 'ctl.log')!r}), "
        f"Path({str(pid_file)!r})); sys.stdin.read()"
    )
    repo = Path(__file__).resolve().parents[2]
    holder = subprocess.Popen(
        [sys.executable, "-c", holder_code], stdin=subprocess.PIPE, cwd=repo, text=True, env=child_env()
    )
    try:
        wait_until(started.exists, 20, "the held restart loop to run its command")
        # the loop runs its command before the holder, once Popen has returned, records the pid: await the record
        # (read right after `started`, it was still missing in a run at a load of 21)
        pid = wait_until(lambda: supervisor_pid(pid_file), 20, "the holder to record the loop's pid")
        t0 = time.monotonic()
        stop_supervised(pid_file, grace=60)
        assert time.monotonic() - t0 < 10, "the stop waited for the unreaped leader"
        assert not pid_alive(pid) and _group_alive(pid)  # gone, though its zombie still answers killpg
    finally:
        holder.stdin.close()
        holder.wait(30)


STOPPABLE = """
import sys
from localcluster.processes import StopSignal
stop = StopSignal()
print("ready", flush=True)
while not stop.wait(60):
    pass
print("stopped", flush=True)
sys.stdin.read()  # ends when the test says so: a signal still coming finds the handler, not the exit's default
"""


def test_a_stop_signal_wakes_its_wait_at_once_and_takes_a_second_signal_in_stride():
    """What the component keeper waits on between two looks: a SIGTERM ends the wait at once (the wait is 60 s
    here), and a second one coming right after (a process group's, then its restart loop's) changes nothing."""
    proc = subprocess.Popen(
        [sys.executable, "-c", STOPPABLE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(PYTHONPATH=str(Path(__file__).parents[2])),
    )
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)
    # both are pending or handled by now; the process stays up until told to end (its stdin closed). Run R7: sent
    # while it was ending, when Python had put SIGTERM's default back, the second one killed it after its "stopped"
    out, _ = proc.communicate(timeout=30)  # well before the wait's 60 s
    assert (proc.returncode, out) == (0, "stopped\n")


def test_controllers_are_chosen_by_name_checked_and_started_in_registry_order():
    assert tuple(controllers.REGISTRY)[:2] == ("mpi-operator", "kueue")
    assert LocalCluster("a").controllers == ("mpi-operator",)
    assert LocalCluster("a", "v1").controllers == ()
    assert LocalCluster("a", kueue=True).controllers == ("mpi-operator", "kueue")
    assert LocalCluster("a", controllers=["kueue", "mpi-operator", "kueue"]).controllers == (
        "mpi-operator",
        "kueue",
    )
    cluster = LocalCluster("a", run_operator=False, controllers=["kueue"])
    assert (cluster.run_operator, cluster.kueue, cluster.controllers) == (False, True, ("kueue",))
    with pytest.raises(ValueError, match="kueue needs api_version v2beta1"):
        LocalCluster("a", "v1", kueue=True)
    with pytest.raises(ValueError, match=r"unknown controller\(s\) \['nope'\]"):
        LocalCluster("a", controllers=["nope"])
    with pytest.raises(ClusterError, match="no controller named 'nope'"):
        LocalCluster("a").controller("nope")


def test_existing_reads_the_controllers_of_a_state_file_of_either_shape(cache):
    for name, state, expected in (
        ("new", {"api_version": "v2beta1", "controllers": ["kueue"]}, ("kueue",)),
        ("old", {"api_version": "v2beta1", "run_operator": True, "kueue": True}, ("mpi-operator", "kueue")),
        ("old-v1", {"api_version": "v1", "run_operator": False, "kueue": False}, ()),
    ):
        (cache / "clusters" / name).mkdir(parents=True)
        (cache / "clusters" / name / "state.json").write_text(json.dumps(state))
        assert LocalCluster.existing(name, verbose=False).controllers == expected
    with pytest.raises(ClusterError, match="no local cluster named 'absent'"):
        LocalCluster.existing("absent")


class StandIn(controllers.Controller):
    """A controller of one class: what it runs and when it is ready; the rest is the base class's."""

    name = "stand-in"

    def launch(self, timeout: float) -> Launch:
        # its directory before its process: made by the first readiness probe instead, it raced the command's touch
        # (a loaded machine ran the probe after the touch had failed: never ready, the start timed out)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        # the shell makes the file itself (a builtin redirection, no `touch`): a child of the command, killed by the
        # stop, is orphaned to PID 1 and answers killpg as a zombie until PID 1 reaps it (CI saw one: a loaded
        # `touch` had made the file, the readiness probe passed, and it had not exited when the stop came)
        ready = self.work_dir / "ready"
        return Launch(["/bin/sh", "-c", ': > "$0" && exec sleep 300', str(ready)], self.environment())

    def ready(self) -> bool:
        return (self.work_dir / "ready").exists()


def test_a_new_controller_is_one_class_that_the_cluster_starts_awaits_reports_and_stops(cache, monkeypatch):
    monkeypatch.setitem(controllers.REGISTRY, StandIn.name, StandIn)
    cluster = LocalCluster("one-class", controllers=[StandIn.name], verbose=False)
    assert cluster.controllers == ("mpi-operator", StandIn.name)
    cluster.state_dir.mkdir(parents=True)
    ctl = cluster.controller(StandIn.name)
    pid = ctl.start(timeout=20)
    assert ctl.start(timeout=20) == pid  # a second start finds it running
    assert ctl.pid() == pid and ctl.ready()
    assert ctl.status()["pid"] == pid and ctl.logs() == cluster.logs_dir / "stand-in.log"
    assert (cluster.state_dir / "stand-in.pid").read_text() == str(pid)
    cluster.stop()  # stops every registered controller
    assert ctl.pid() is None and not _group_alive(pid)


def test_a_running_cluster_adds_a_controller_with_what_it_requires_once(cache, monkeypatch):
    class Needed(StandIn):
        name = "needed"

    class Needing(StandIn):
        name = "needing"
        requires = ("needed",)

    for cls in (Needed, Needing):
        monkeypatch.setitem(controllers.REGISTRY, cls.name, cls)
    cluster = LocalCluster("adding", verbose=False)
    cluster.state_dir.mkdir(parents=True)
    cluster.write_state(controllers=list(cluster.controllers))
    try:
        assert cluster.add_controllers(["needing"], timeout=20) == ("needed", "needing")
        assert cluster.controllers == ("mpi-operator", "needed", "needing")
        # recorded: a later switch_api (another process) stops them too
        assert LocalCluster.existing("adding", verbose=False).controllers == cluster.controllers
        assert cluster.controller("needed").ready() and cluster.controller("needing").ready()
        assert cluster.add_controllers(["needing"], timeout=20) == ()  # running already
    finally:
        cluster.stop()


def test_a_controller_that_never_gets_ready_times_out_naming_its_log_and_stops(cache, monkeypatch):
    class NeverReady(StandIn):
        name = "never-ready"

        def ready(self) -> bool:
            return False

    monkeypatch.setitem(controllers.REGISTRY, NeverReady.name, NeverReady)
    cluster = LocalCluster("never-ready", verbose=False)
    cluster.state_dir.mkdir(parents=True)
    ctl = cluster.controller(NeverReady.name)
    with pytest.raises(ClusterError, match=r"never-ready: it to be ready \(log: .*never-ready\.log\)"):
        ctl.start(timeout=1)
    supervisor = ctl.pid()
    assert supervisor is not None
    ctl.stop()
    assert not pid_alive(supervisor) and not _group_alive(supervisor)
