from __future__ import annotations

import pytest

from airflow_mpi.jobspec.naming import DEPLOYMENT_LABEL, identity_annotations, identity_labels
from airflow_mpi.jobspec.orphans import TaskKey, deployment_selector, is_orphan, orphans, task_key_of

RUN = "manual__2026-11-23T10:00:00+00:00"
KEY = TaskKey("dag", "train", RUN, -1)
OURS, THEIRS = "prod-a1", "staging-b2"


def mpijob(*conditions, key=KEY, deleting=False, managed=True, deployment: str | None = OURS):
    labels = identity_labels(*key, 1, deployment) if managed else {"team": "x"}
    metadata = {"name": "j", "namespace": "ns", "labels": labels, "annotations": identity_annotations(*key, 1)}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-23T10:00:00Z"
    return {"metadata": metadata, "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}


def test_task_key_comes_from_the_raw_identity_annotations_of_this_deployments_jobs_only():
    assert task_key_of(mpijob("Created"), OURS) == KEY
    assert task_key_of(mpijob("Created", managed=False), OURS) is None
    assert task_key_of(mpijob("Created", deployment=THEIRS), OURS) is None
    assert task_key_of(mpijob("Created", deployment=None), OURS) is None  # a rendered manifest, an older release
    mapped = TaskKey("dag", "train", RUN, 3)
    assert task_key_of(mpijob(key=mapped), OURS) == mapped


@pytest.mark.parametrize("state", ["failed", "success", "skipped", "upstream_failed", "removed"])
def test_live_job_of_a_finished_task_instance_is_an_orphan(state):
    assert is_orphan(mpijob("Created", "Running"), OURS, True, state)
    assert is_orphan(mpijob(), OURS, True, state)  # not even Created yet


@pytest.mark.parametrize("state", ["running", "deferred", "queued", "scheduled", "up_for_retry", "up_for_reschedule",
                                   "restarting", None])
def test_job_of_a_task_instance_that_may_still_run_is_kept(state):
    assert not is_orphan(mpijob("Created", "Running"), OURS, True, state)


def test_live_job_of_a_deleted_task_instance_is_an_orphan():
    assert is_orphan(mpijob("Created"), OURS, False, None)


@pytest.mark.parametrize("job", [mpijob("Created", "Succeeded"), mpijob("Created", "Failed"),
                                 mpijob("Created", deleting=True), mpijob("Created", managed=False),
                                 mpijob("Created", "Running", deployment=THEIRS),
                                 mpijob("Created", "Running", deployment=None)])
def test_finished_deleting_or_foreign_jobs_are_never_orphans(job):
    """Another deployment's live job is never ours, whatever our database says of a task of the same name."""
    assert not is_orphan(job, OURS, False, None) and not is_orphan(job, OURS, True, "failed")


def test_orphans_picks_by_each_jobs_own_task_instance_and_deployment():
    other = TaskKey("dag", "eval", RUN, -1)
    jobs = [mpijob("Created", key=KEY), mpijob("Created", key=other), mpijob("Created", key=KEY, deployment=THEIRS)]
    assert orphans(jobs, OURS, {KEY: "failed", other: "running"}) == [jobs[0]]


def test_the_sweeps_selector_names_the_deployment():
    assert deployment_selector(OURS) == f"app.kubernetes.io/managed-by=airflow-mpi,{DEPLOYMENT_LABEL}={OURS}"
