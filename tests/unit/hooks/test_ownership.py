"""Whose pods are whose (hooks/ownership.py): the controller reference chain to the MPIJob's uid, as mpi-operator
v0.8.2 and the training-operator make it, never the labels; and the hooks' pod listings through it (a resumed
``@task.mpi`` reads rank 0's value from ``launcher_log``: a newer pod with the launcher's labels must not be it)."""

from __future__ import annotations

import logging
from unittest import mock

import pytest
from k8s_fakes import FakeResponse, api_error, controlled_by, mpijob, pod, pod_list
from kubernetes.client.exceptions import ApiException
from test_mpijob_hook import make_hook

from airflow_mpi.hooks.ownership import Owner
from airflow_mpi.jobspec.vocabulary import WORKER

LAUNCHER_JOB = controlled_by("Job", "job-launcher", "uid-job-launcher")
OWNER = Owner("job", "uid-job", verified=frozenset({"uid-job-launcher"}))


def launcher_job(controller_uid: str | None = "uid-job", uid: str = "uid-job-launcher") -> dict:
    refs = (
        [
            {
                "apiVersion": "kubeflow.org/v2beta1",
                "kind": "MPIJob",
                "name": "job",
                "uid": controller_uid,
                "controller": True,
            }
        ]
        if controller_uid
        else []
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "job-launcher", "uid": uid, "ownerReferences": refs},
    }


@pytest.mark.parametrize(
    ("ref", "owned"),
    [
        (controlled_by(), True),  # a worker (v2beta1), either role (v1)
        (LAUNCHER_JOB, True),  # a launcher (v2beta1)
        (None, False),  # labels only
        (controlled_by(uid="uid-earlier"), False),  # an earlier incarnation of the name
        (controlled_by("Job", "other-launcher", "uid-job-launcher"), False),  # not the launcher Job's name
        (controlled_by("ReplicaSet", "job", "uid-job"), False),
        (controlled_by("Job", "job-launcher", "uid-unchecked"), None),  # one GET of the launcher Job tells
    ],
    ids=["mpijob", "launcher-job", "none", "earlier", "other-job", "other-kind", "unchecked"],
)
def test_a_pod_is_the_jobs_by_its_controller_reference_chain_only(ref, owned):
    assert OWNER.owns(pod("p", "2026-11-22T10:00:00", owner=ref)) is owned


def test_an_owner_reference_that_is_not_the_controller_does_not_count():
    ref = controlled_by()
    ref.controller = False
    assert OWNER.owns(pod("p", "2026-11-22T10:00:00", owner=ref)) is False


def test_a_get_of_the_launcher_job_settles_the_uids_it_was_asked_about():
    unknown = Owner("job", "uid-job")
    pods = [
        pod("l", "2026-11-22T10:00:00", owner=LAUNCHER_JOB),
        pod("f", "2026-11-22T10:00:00", owner=controlled_by("Job", "job-launcher", "forged")),
    ]
    assert unknown.unchecked(pods) == {"uid-job-launcher", "forged"}
    known = unknown.learn(launcher_job(), unknown.unchecked(pods))
    assert [known.owns(p) for p in pods] == [True, False] and known.unchecked(pods) == set()
    # the Job of that name is someone else's (not controlled by the MPIJob), or absent: none of them is the job's
    for job in (launcher_job(controller_uid="uid-other"), launcher_job(controller_uid=None), None):
        assert [unknown.learn(job, unknown.unchecked(pods)).owns(p) for p in pods] == [False, False]
    assert Owner("job", None).owns(pods[0]) is None  # the MPIJob's uid is not known yet: nothing is decided


def test_launcher_log_reads_the_launcher_the_job_made_not_a_newer_pod_with_its_labels(hook, monkeypatch):
    task_log = mock.Mock()
    monkeypatch.setattr(type(hook), "log", task_log)  # the task log, in a worker
    hook.core_v1_client.list_namespaced_pod.return_value = pod_list(
        pod("job-launcher-a", "2026-11-22T10:00:00", owner=LAUNCHER_JOB),
        pod("job-launcher-forged", "2026-11-22T10:05:00", owner=None),
    )
    hook.custom_object_client.get_namespaced_custom_object.side_effect = lambda **kw: (
        launcher_job()
        if kw["plural"] == "jobs"
        else mpijob() | {"metadata": {"name": "job", "uid": "uid-job"}}
    )
    hook.api_client.call_api.return_value = FakeResponse([b"2026-11-22T10:00:00Z real\n"])
    assert list(hook.launcher_log("job", "ns")) == ["real"]
    assert list(hook.launcher_log("job", "ns")) == ["real"]  # named once per task
    assert hook.api_client.call_api.call_args.kwargs["path_params"]["name"] == "job-launcher-a"
    gets = [c.kwargs for c in hook.custom_object_client.get_namespaced_custom_object.call_args_list]
    assert [(g["group"], g["plural"], g["name"]) for g in gets][:2] == [
        ("kubeflow.org", "mpijobs", "job"),
        ("batch", "jobs", "job-launcher"),
    ]
    notes = [c.args[0] % c.args[1:] for c in task_log.info.call_args_list if "forged" in str(c.args)]
    assert notes == [
        "Ignoring pod job-launcher-forged: it carries the MPIJob's labels, but the MPIJob's controllers "
        "did not make it (someone else's pod: not read, not counted)"
    ]


def test_worker_tails_skip_a_pod_with_a_workers_labels_and_a_role_that_may_not_read_jobs_follows_no_launcher(
    hook, caplog
):
    hook.core_v1_client.list_namespaced_pod.return_value = pod_list(
        pod("job-worker-0", "2026-11-22T10:00:00"), pod("job-worker-9", "2026-11-22T10:00:00", owner=None)
    )
    hook.api_client.call_api.return_value = FakeResponse([b"2026-11-22T10:00:00Z bye\n"])
    assert hook.worker_log_tails("job", "ns", 5) == {"job-worker-0": ["bye"]}
    assert [p.metadata.name for p in hook._role_pods("job", "ns", WORKER)] == ["job-worker-0"]

    _launcher_job_refused(hook)
    with caplog.at_level(logging.WARNING):
        assert list(hook.launcher_log("job", "ns")) == []
    assert any("grant get on jobs.batch" in r.getMessage() for r in caplog.records)


def test_a_403_of_the_launcher_job_just_after_an_outage_is_no_verdict(hook, caplog):
    """A restarted API server refuses a least-privilege identity until its RBAC caches synced (run M: the launcher
    Job's GET got 403 5 s after the outage, its pods were refuted and the launcher's log never reached the task). In
    the outage's window the 403 is raised, for the caller's outage handling to ask again, and nothing is refuted."""
    from airflow_mpi.hooks import retries

    assert retries.worth_retrying(api_error(503), in_outage=False)  # the process saw the API fail just now
    _launcher_job_refused(hook)
    with caplog.at_level(logging.WARNING), pytest.raises(ApiException) as refused:
        list(hook.launcher_log("job", "ns"))
    assert refused.value.status == 403
    assert not any("grant get on" in r.getMessage() for r in caplog.records)


def _launcher_job_refused(hook) -> None:
    """A launcher pod controlled by the job's launcher Job, whose GET the API server answers 403."""
    hook.core_v1_client.list_namespaced_pod.return_value = pod_list(
        pod("job-launcher-a", "2026-11-22T10:00:00", owner=LAUNCHER_JOB)
    )
    hook.custom_object_client.get_namespaced_custom_object.side_effect = lambda **kw: (
        _raise(api_error(403, reason="Forbidden"))
        if kw["plural"] == "jobs"
        else mpijob() | {"metadata": {"name": "job", "uid": "uid-job"}}
    )


def _raise(exc: BaseException):
    raise exc


@pytest.fixture
def hook():
    return make_hook()
