"""operators/metrics.py: a try's metrics through Airflow's Stats, once per try, also across a deferral."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest

from airflow_mpi.operators import metrics
from airflow_mpi.version_compat import AirflowException
from airflow_mpi.wait.contract import Outcome, WaitResult
from tests.unit.operators.test_deferral_resume import deferred, drains, resume  # noqa: F401 (a fixture)
from tests.unit.operators.test_mpijob_operator import context, make, result

TAGS = {"dag_id": "dag", "task_id": "mpi", "namespace": "ns", "api_version": "kubeflow.org/v2beta1"}
TIMES = {
    "creation_time": "2026-11-28T10:00:00Z",
    "created_time": "2026-11-28T10:00:02Z",
    "start_time": "2026-11-28T10:00:15Z",
    "completion_time": "2026-11-28T10:03:15Z",
}


@pytest.fixture
def stats(monkeypatch) -> mock.MagicMock:
    fake = mock.MagicMock()
    monkeypatch.setattr(metrics, "Stats", fake)
    return fake


def test_a_kueue_job_that_succeeded_reports_its_waits_run_time_and_attempts(stats):
    done = WaitResult(Outcome.SUCCESS, "job", "ns", launcher_attempts=2, queued_seconds=12.5, **TIMES)
    metrics.emit_try_metrics(done, TAGS)
    assert stats.mock_calls == [
        mock.call.timing("airflow_mpi.job.queued", timedelta(seconds=12.5), tags=TAGS),
        mock.call.timing("airflow_mpi.job.time_to_created", timedelta(seconds=2), tags=TAGS),
        mock.call.timing("airflow_mpi.job.run_time", timedelta(minutes=3), tags=TAGS),
        mock.call.incr("airflow_mpi.job.launcher_attempts", 2, tags=TAGS),
        mock.call.incr("airflow_mpi.job.finished", tags={**TAGS, "outcome": "success"}),
    ]


def test_a_failure_is_counted_by_its_cause_and_only_the_times_the_job_has_are_sent(stats):
    oom = {"causes": ["worker pod job-worker-0: OOMKilled"], "tails": [], "kind": "oom"}
    failed = WaitResult(
        Outcome.FAILED,
        "job",
        "ns",
        launcher_attempts=1,
        failure=oom,
        creation_time=TIMES["creation_time"],
        start_time=TIMES["start_time"],  # no Created transition seen, no completion: no time to send
    )
    metrics.emit_try_metrics(failed, TAGS)
    assert stats.mock_calls == [
        mock.call.incr("airflow_mpi.job.launcher_attempts", 1, tags=TAGS),
        mock.call.incr("airflow_mpi.job.finished", tags={**TAGS, "outcome": "failed"}),
        mock.call.incr("airflow_mpi.job.failures", tags={**TAGS, "cause": "oom"}),
        mock.call.incr("airflow_mpi.job.failures.oom", tags=TAGS),
    ]
    stats.reset_mock()
    metrics.emit_try_metrics(WaitResult(Outcome.QUEUE_TIMEOUT, "job", "ns", queued_seconds=600.0), TAGS)
    assert mock.call.timing("airflow_mpi.job.queued", timedelta(minutes=10), tags=TAGS) in stats.mock_calls
    assert mock.call.incr("airflow_mpi.job.failures.queue_timeout", tags=TAGS) in stats.mock_calls


def test_a_sync_try_emits_once_with_the_tasks_tags(stats, monkeypatch):
    op = make()

    async def wait(name, namespace, submitted_at, deadline, uid=None):
        return WaitResult.from_event(result(name=name, launcher_attempts=3, **TIMES))

    monkeypatch.setattr(op, "_wait", wait)
    op.execute(context())
    tags = {**TAGS, "dag_id": op.dag_id}  # the task's own (made outside a DAG here)
    timers = [c for c in stats.mock_calls if c[0] == "timing"]
    assert [c.args[0] for c in timers] == ["airflow_mpi.job.time_to_created", "airflow_mpi.job.run_time"]
    assert all(c.kwargs["tags"] == tags for c in timers)
    finished = [c for c in stats.mock_calls if c.args[0] == "airflow_mpi.job.finished"]
    assert finished == [mock.call.incr("airflow_mpi.job.finished", tags={**tags, "outcome": "success"})]


def test_a_deferred_try_emits_nothing_when_it_defers_and_once_from_the_triggers_event(stats, drains):
    deferral = deferred(make(deferrable=True, retries=1), context())
    assert stats.mock_calls == []
    resumed = make(deferrable=True, retries=1)
    tags = {**TAGS, "dag_id": resumed.dag_id}
    event = result(
        "failed", message="BackoffLimitExceeded", launcher_attempts=2, queued_seconds=30.0, **TIMES
    )
    event["failure"] = {"causes": [], "tails": [], "kind": "disrupted"}
    with pytest.raises(AirflowException):
        resume(resumed, deferral, event, context())
    assert mock.call.timing("airflow_mpi.job.queued", timedelta(seconds=30), tags=tags) in stats.mock_calls
    assert mock.call.incr("airflow_mpi.job.launcher_attempts", 2, tags=tags) in stats.mock_calls
    failures = [c for c in stats.mock_calls if c.args[0].startswith("airflow_mpi.job.failures")]
    assert failures == [
        mock.call.incr("airflow_mpi.job.failures", tags={**tags, "cause": "disrupted"}),
        mock.call.incr("airflow_mpi.job.failures.disrupted", tags=tags),
    ]
    assert len([c for c in stats.mock_calls if c.args[0] == "airflow_mpi.job.finished"]) == 1


def test_a_metrics_backend_that_fails_never_changes_the_tries_outcome(stats, monkeypatch, caplog):
    stats.timing.side_effect = OSError("statsd unreachable")
    op = make()

    async def wait(name, namespace, submitted_at, deadline, uid=None):
        return WaitResult.from_event(result(name=name, **TIMES))

    monkeypatch.setattr(op, "_wait", wait)
    assert op.execute(context())["condition"] == "Succeeded"
    assert "could not send the metrics of MPIJob ns/" in caplog.text


def test_every_metric_is_documented():
    documented = (Path(__file__).resolve().parents[3] / "docs" / "metrics.md").read_text()
    names = [value for name, value in vars(metrics).items() if name.isupper() and name != "PREFIX"]
    assert len(names) == 6 and all(f"`{name}`" in documented for name in names)
