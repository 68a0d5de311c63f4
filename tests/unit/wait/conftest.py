"""The wait layer's fixtures: a task log folder, and the check that every watch hub a test starts has stopped its
watches by the test's end.

A hub whose tasks outlive their event loop is a wait that never left it: its tasks are destroyed pending
whenever the garbage collector gets to them, which, during another test or after the session, logs "Task was
destroyed but it is pending!" far from its cause. Checked here, at the test that leaves them.
"""

from __future__ import annotations

import pytest

from airflow_mpi.wait import watch_hub


@pytest.fixture(autouse=True)
def no_hub_left_watching(monkeypatch):
    started: list[watch_hub.WatchHub] = []
    start = watch_hub.WatchHub.start

    async def recorded_start(hub: watch_hub.WatchHub) -> None:
        started.append(hub)
        await start(hub)

    monkeypatch.setattr(watch_hub.WatchHub, "start", recorded_start)
    yield
    running = [task.get_name() for hub in started for task in hub._tasks if not task.done()]
    assert not running, f"watch hub tasks still running after the test: {running}"


@pytest.fixture
def log_folder(tmp_path, monkeypatch):
    """Airflow's base log folder pointed at a temporary directory: the folder of task t of run r of DAG d in it."""
    from airflow.configuration import conf

    monkeypatch.setattr(
        conf,
        "get",
        lambda section, key, *a, **kw: (
            str(tmp_path)
            if (section, key) == ("logging", "base_log_folder")
            else type(conf).get(conf, section, key, *a, **kw)
        ),
    )
    folder = tmp_path / "dag_id=d" / "run_id=r" / "task_id=t"
    folder.mkdir(parents=True)
    return folder
