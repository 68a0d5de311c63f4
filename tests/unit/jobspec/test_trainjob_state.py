"""A TrainJob's state as its kind reads it (jobspec/status.py, JobKind.state): Complete and Failed are terminal,
Created is the Trainer's acknowledgement (status.jobsStatus, or any condition), Running comes from the launcher pod,
and the JobSet's clean-up is cleanPodPolicy Running; the MPIJob kinds read theirs as before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_mpi.hooks.requests import pod_selectors
from airflow_mpi.jobspec.kinds import DEFAULT_KIND, MPIJOB_V1, kind_for
from airflow_mpi.jobspec.kinds.trainjob import API_TRAINJOB, TRAINJOB
from airflow_mpi.jobspec.status import clean_pod_policy, job_state, running, true_condition_types
from airflow_mpi.wait.progress import PodSummary, Timeouts, assess, derived_state
from airflow_mpi.wait.watch_hub import watch_selector
from tests.unit.trainjob_objects import COMPLETE, FAILED, SUSPENDED, condition, jobs_status, trainjob

NOW = datetime(2026, 11, 22, 10, 5, tzinfo=UTC)


def test_the_trainjob_kind_is_registered():
    assert kind_for(API_TRAINJOB) is TRAINJOB


def test_a_trainjob_the_trainer_has_not_seen_is_not_created():
    state = job_state(trainjob())
    assert (state.created, state.terminal, state.condition) == (False, False, None)
    assert state.describe() == "Pending"


def test_its_jobsets_jobs_in_status_mean_created():
    state = job_state(trainjob(jobs=jobs_status()))
    assert (state.created, state.terminal, state.condition) == (True, False, None)


def test_complete_is_its_success():
    state = job_state(trainjob(COMPLETE, jobs=jobs_status(succeeded=1)))
    assert (state.created, state.terminal, state.succeeded) == (True, True, True)
    assert state.describe() == "Complete (AllJobsCompleted: jobset completed successfully)"
    assert true_condition_types(trainjob(COMPLETE)) == {"Complete"}


def test_failed_is_its_failure_with_reason_and_message():
    state = job_state(trainjob(FAILED, jobs=jobs_status(failed=1)))
    assert (state.terminal, state.succeeded, state.reason) == (True, False, "FailedJobs")
    assert state.message == "jobset failed due to one or more job failures"


def test_a_runtime_the_trainer_does_not_support_fails_it_without_a_jobset():
    """Any condition is the Trainer's acknowledgement: the startup timeout does not fire on it."""
    state = job_state(trainjob(condition("Failed", "TrainJobRuntimeNotSupported", "unsupported runtime: x")))
    assert (state.created, state.terminal, state.succeeded) == (True, True, False)


def test_suspended_is_shown_as_such():
    state = job_state(trainjob(SUSPENDED))
    assert (state.condition, state.created, state.terminal) == ("Suspended", True, False)
    resumed = job_state(trainjob(condition("Suspended", "Resumed", "resumed", status="False"), jobs=[]))
    assert (resumed.condition, resumed.created) == (None, True)


def test_an_mpijob_condition_name_means_nothing_on_a_trainjob():
    """Succeeded and Created are the MPIJob's conditions, not the TrainJob's."""
    obj = trainjob(condition("Succeeded", "x", "y"), condition("Created", "x", "y"))
    state = job_state(obj)
    assert (state.terminal, state.condition) == (False, None)


def test_the_mpijob_kinds_read_their_conditions_as_before():
    obj = {
        "apiVersion": DEFAULT_KIND.api_version,
        "metadata": {"name": "job"},
        "status": {
            "conditions": [
                {"type": "Created", "status": "True", "lastTransitionTime": "2026-11-22T10:00:00Z"},
                {"type": "Complete", "status": "True"},
            ]
        },
    }
    state = job_state(obj)
    assert (state.created, state.created_time, state.terminal) == (True, "2026-11-22T10:00:00Z", False)
    assert job_state({**obj, "status": {"jobsStatus": [{}]}}).created is False
    assert (
        running(state, DEFAULT_KIND, launcher_running=True) is state
    )  # Running is the controller's condition


def test_running_comes_from_its_launcher_pod():
    created = job_state(trainjob(jobs=jobs_status(active=1)))
    assert running(created, TRAINJOB, launcher_running=False) is created
    assert running(created, TRAINJOB, launcher_running=True).condition == "Running"
    done = job_state(trainjob(COMPLETE, jobs=jobs_status(succeeded=1)))
    assert running(done, TRAINJOB, launcher_running=True) is done


def _pod(name: str, role: str, phase: str) -> PodSummary:
    return PodSummary(name=name, role=role, created=NOW, phase=phase, scheduled=True)


def test_the_waits_state_is_running_once_the_launcher_pod_runs():
    created = job_state(trainjob(jobs=jobs_status(active=1)))
    nodes = [_pod("pi-node-0-0-abcde", "worker", "Running")]
    assert derived_state(created, TRAINJOB, nodes).condition is None
    launcher = _pod("pi-launcher-0-0-x7k2q", "launcher", "Running")
    assert derived_state(created, TRAINJOB, [*nodes, launcher]).condition == "Running"


def test_the_jobsets_clean_up_is_clean_pod_policy_running():
    """Once finished, the JobSet deletes its active Jobs (the running node pods), as cleanPodPolicy Running."""
    assert clean_pod_policy(trainjob(FAILED)) == "Running"
    assert clean_pod_policy({"apiVersion": DEFAULT_KIND.api_version, "spec": {}}) == "None"
    assert clean_pod_policy({"spec": {"runPolicy": {"cleanPodPolicy": "All"}}}) == "All"


def test_the_startup_timeout_names_the_trainjob_and_the_trainer():
    verdict = assess(
        job_state(trainjob()),
        [],
        [],
        now=NOW,
        submitted_at=NOW - timedelta(seconds=121),
        timeouts=Timeouts(startup_timeout=120),
        kind=TRAINJOB,
    )
    assert verdict.outcome == "startup_timeout"
    assert verdict.message == (
        "TrainJob pi got no status from the Kubeflow Trainer (no JobSet) within 120s: is the Kubeflow Trainer "
        "running and watching this namespace?"
    )
    mpijob = assess(
        job_state({"metadata": {"name": "job"}}),
        [],
        [],
        now=NOW,
        submitted_at=NOW - timedelta(seconds=121),
        timeouts=Timeouts(startup_timeout=120),
    )
    assert mpijob.message.startswith("MPIJob job got no Created condition within 120s: is the mpi-operator")


def test_a_failed_node_before_the_launcher_is_left_to_the_jobset():
    """Its node Job's failure fails the JobSet, hence the TrainJob, with the JobSet's reason: no early verdict."""
    failed = PodSummary(
        name="pi-node-0-1-abcde", role="worker", created=NOW, phase="Failed", scheduled=True, exit_code=1
    )
    state = job_state(trainjob(jobs=jobs_status()))
    kw = dict(now=NOW, submitted_at=NOW, timeouts=Timeouts())
    assert assess(state, [failed], [], kind=TRAINJOB, **kw).outcome is None
    mpijob = job_state(
        {"metadata": {"name": "job"}, "status": {"conditions": [{"type": "Created", "status": "True"}]}}
    )
    assert assess(mpijob, [failed], [], **kw).outcome == "worker_failed"


@pytest.mark.parametrize(
    ("role", "selector"),
    [
        ("launcher", "jobset.sigs.k8s.io/jobset-name=pi,jobset.sigs.k8s.io/replicatedjob-name=launcher"),
        ("worker", "jobset.sigs.k8s.io/jobset-name=pi,jobset.sigs.k8s.io/replicatedjob-name=node"),
    ],
)
def test_its_pods_are_selected_by_the_jobsets_labels(role, selector):
    assert pod_selectors(API_TRAINJOB, "pi", role) == [selector]


def test_the_mpijob_kinds_selectors_are_unchanged():
    assert pod_selectors(MPIJOB_V1.api_version, "j", "launcher")[0] == (
        "training.kubeflow.org/job-name=j,training.kubeflow.org/replica-type=launcher"
    )
    assert pod_selectors(DEFAULT_KIND.api_version, "j", "worker") == [
        "training.kubeflow.org/job-name=j,training.kubeflow.org/job-role=worker"
    ]


def test_the_hub_watches_its_events_and_its_jobsets_pods():
    assert watch_selector("events", TRAINJOB) == {"field_selector": "involvedObject.kind=TrainJob"}
    assert watch_selector("pods", TRAINJOB) == {"label_selector": "jobset.sigs.k8s.io/jobset-name"}
    assert watch_selector("events", DEFAULT_KIND) == {
        "field_selector": "involvedObject.kind=MPIJob,reason=ValidationError"
    }


def test_its_attempts_allowed_are_unknown():
    """The launcher Job's backoffLimit is the runtime's, which the TrainJob does not carry."""
    assert TRAINJOB.attempts_allowed(0, "Never") is None


def test_its_start_and_completion_come_from_its_conditions_the_mpijobs_from_their_status():
    """A TrainJob's status has no startTime or completionTime (Trainer v2.3.0's TrainJobStatus): it started when
    acknowledged (its creation) or, queued by Kueue, when resumed, and completed at its terminal condition."""
    resumed = {
        **condition("Suspended", "Resumed", "resumed", status="False"),
        "lastTransitionTime": "2026-11-22T10:00:30Z",
    }
    done = {**COMPLETE, "lastTransitionTime": "2026-11-22T10:02:00Z"}
    times = lambda obj: (job_state(obj).start_time, job_state(obj).completion_time)  # noqa: E731
    assert times(trainjob()) == (None, None)  # not acknowledged yet
    assert times(trainjob(jobs=jobs_status(active=1))) == ("2026-11-22T10:00:00Z", None)
    assert times(trainjob(done, jobs=jobs_status(succeeded=1))) == (
        "2026-11-22T10:00:00Z",
        "2026-11-22T10:02:00Z",
    )
    assert times(trainjob(SUSPENDED, jobs=[])) == (None, None)  # queued
    assert times(trainjob(resumed, done, jobs=jobs_status(succeeded=1))) == (
        "2026-11-22T10:00:30Z",
        "2026-11-22T10:02:00Z",
    )
    mpijob = {
        "apiVersion": DEFAULT_KIND.api_version,
        "metadata": {"name": "job", "creationTimestamp": "2026-11-22T09:59:00Z"},
        "status": {"conditions": [{**done, "type": "Succeeded"}], "startTime": "2026-11-22T10:00:05Z"},
    }
    assert times(mpijob) == ("2026-11-22T10:00:05Z", None)  # the controller's own fields, nothing derived
