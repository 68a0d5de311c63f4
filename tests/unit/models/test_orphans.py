from __future__ import annotations

import pytest

from airflow_mpi.models.naming import identity_annotations, identity_labels
from airflow_mpi.models.orphans import TaskKey, is_orphan, orphans, task_key_of

RUN = "manual__2026-11-23T10:00:00+00:00"
KEY = TaskKey("dag", "train", RUN, -1)


def mpijob(*conditions, key=KEY, deleting=False, managed=True):
    labels = identity_labels(*key, 1) if managed else {"team": "x"}
    metadata = {"name": "j", "namespace": "ns", "labels": labels, "annotations": identity_annotations(*key, 1)}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-23T10:00:00Z"
    return {"metadata": metadata, "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}


def test_task_key_comes_from_the_raw_identity_annotations():
    assert task_key_of(mpijob("Created")) == KEY
    assert task_key_of(mpijob("Created", managed=False)) is None
    mapped = TaskKey("dag", "train", RUN, 3)
    assert task_key_of(mpijob(key=mapped)) == mapped


@pytest.mark.parametrize("state", ["failed", "success", "skipped", "upstream_failed", "removed"])
def test_live_job_of_a_finished_task_instance_is_an_orphan(state):
    assert is_orphan(mpijob("Created", "Running"), True, state)
    assert is_orphan(mpijob(), True, state)  # not even Created yet


@pytest.mark.parametrize("state", ["running", "deferred", "queued", "scheduled", "up_for_retry", "up_for_reschedule",
                                   "restarting", None])
def test_job_of_a_task_instance_that_may_still_run_is_kept(state):
    assert not is_orphan(mpijob("Created", "Running"), True, state)


def test_live_job_of_a_deleted_task_instance_is_an_orphan():
    assert is_orphan(mpijob("Created"), False, None)


@pytest.mark.parametrize("job", [mpijob("Created", "Succeeded"), mpijob("Created", "Failed"),
                                 mpijob("Created", deleting=True), mpijob("Created", managed=False)])
def test_finished_deleting_or_foreign_jobs_are_never_orphans(job):
    assert not is_orphan(job, False, None) and not is_orphan(job, True, "failed")


def test_orphans_picks_by_each_jobs_own_task_instance():
    other = TaskKey("dag", "eval", RUN, -1)
    jobs = [mpijob("Created", key=KEY), mpijob("Created", key=other)]
    assert orphans(jobs, {KEY: "failed", other: "running"}) == [jobs[0]]
