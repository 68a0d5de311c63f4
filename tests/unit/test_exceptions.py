"""airflow_mpi/exceptions.py: a finished wait that did not succeed raises its cause's class, the job as data."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from airflow_mpi import exceptions as ex
from airflow_mpi.operators.outcome import finish
from airflow_mpi.version_compat import AIRFLOW_V_3_3_PLUS, AirflowException, AirflowFailException
from airflow_mpi.wait.contract import Cause, Outcome, WaitResult


def _task() -> NS:
    return NS(log=logging.getLogger("test"), hook=NS(delete_mpijob=lambda *a, **k: None))


def _raised(result: WaitResult, *, fail_permanently: bool = True) -> AirflowException:
    with pytest.raises(AirflowException) as err:
        finish(
            _task(),
            result,
            api_version="kubeflow.org/v2beta1",
            on_finish_action="keep",
            fail_permanently=fail_permanently,
        )
    return err.value


def _failed(kind: str | None, outcome: Outcome = Outcome.FAILED) -> WaitResult:
    failure = {"causes": ["worker pod job-worker-0 (container worker): it failed"], "tails": [], "kind": kind}
    return WaitResult(
        outcome,
        "job",
        "ns",
        "the launcher's backoff limit was exceeded",
        uid="u1",
        reason="BackoffLimitExceeded",
        job_message="the launcher failed",
        launcher_attempts=2,
        launcher_exit_codes=[1, 137],
        failure=failure,
    )


@pytest.mark.parametrize(
    ("kind", "cls"),
    [
        ("program", ex.MPIJobProgramError),
        ("oom", ex.MPIJobOutOfMemoryError),
        ("disrupted", ex.MPIJobDisruptedError),
        (None, ex.MPIJobProgramError),  # an earlier release's report names no kind
    ],
)
def test_a_failed_job_raises_its_kinds_class_with_the_job_as_data(kind, cls):
    err = _raised(_failed(kind))
    assert isinstance(err, cls) and isinstance(err, ex.MPIJobFailedError)
    assert (err.namespace, err.name, err.uid, err.outcome) == ("ns", "job", "u1", "failed")
    assert err.cause == (kind or "program") and err.reason == "BackoffLimitExceeded"
    assert (err.launcher_attempts, err.exit_codes) == (2, [1, 137])
    assert err.causes == ["worker pod job-worker-0 (container worker): it failed"]
    assert err.job_message == "the launcher failed"
    # the message is the one a failed try always had
    assert str(err).splitlines()[:2] == [
        "MPIJob ns/job failed: the launcher's backoff limit was exceeded; launcher exit codes: 1, 137",
        "cause: worker pod job-worker-0 (container worker): it failed",
    ]


@pytest.mark.parametrize("kind", ["program", "oom", "disrupted"])
def test_a_failed_job_is_final_exactly_when_its_retries_were_the_mpijobs(kind):
    final, retryable = _raised(_failed(kind)), _raised(_failed(kind), fail_permanently=False)
    assert isinstance(final, AirflowFailException) and not final.retryable
    assert not isinstance(retryable, AirflowFailException) and retryable.retryable
    assert type(final) is not type(retryable) and isinstance(final, type(retryable))
    # the task log shows the class: a public, documented name that says so
    assert type(final).__name__ == f"{type(retryable).__name__}NoRetry" and type(final).__name__ in ex.__all__


def test_a_worker_that_failed_before_the_launcher_stays_retryable_whatever_the_mapping():
    err = _raised(_failed("oom", Outcome.WORKER_FAILED))
    assert isinstance(err, ex.MPIJobOutOfMemoryError) and err.retryable and err.outcome == "worker_failed"


@pytest.mark.parametrize(
    ("outcome", "cls", "retryable"),
    [
        (Outcome.INVALID, ex.MPIJobInvalidSpecError, False),
        (Outcome.UNSCHEDULABLE, ex.MPIJobUnschedulableError, True),
        (Outcome.STARTUP_TIMEOUT, ex.MPIJobStartupTimeoutError, True),
        (Outcome.QUEUE_TIMEOUT, ex.MPIJobQueueTimeoutError, True),
        (Outcome.TIMEOUT, ex.MPIJobTimeoutError, True),
        (Outcome.DELETED, ex.MPIJobDeletedError, True),
        (Outcome.ERROR, ex.MPIJobInfrastructureError, True),
    ],
)
def test_every_other_outcome_raises_its_class(outcome, cls, retryable):
    for fail_permanently in (True, False):  # the retry mapping concerns failed jobs only
        err = _raised(WaitResult(outcome, "job", "ns", "why"), fail_permanently=fail_permanently)
        assert type(err) is cls and err.retryable is retryable
        assert isinstance(err, AirflowFailException) is not retryable
        assert (err.cause, err.outcome, str(err)) == (
            outcome.value,
            outcome.value,
            f"MPIJob ns/job {outcome}: why",
        )
    assert not isinstance(err, ex.MPIJobFailedError)


def test_infrastructure_covers_the_outage_and_the_disrupted_pods_alone():
    infrastructure = [c for c, cls in ex.CLASSES.items() if issubclass(cls, ex.MPIJobInfrastructureError)]
    assert infrastructure == [Cause.DISRUPTED, Cause.ERROR]
    assert set(ex.CLASSES) == set(Cause), "every cause has its class"


def test_the_exceptions_pickle_and_reword_with_their_data():
    err = _raised(_failed("oom"))
    for copy in (pickle.loads(pickle.dumps(err)), err.reworded("another message")):
        assert type(copy) is type(err) and isinstance(copy, AirflowFailException)
        assert (copy.name, copy.uid, copy.exit_codes, copy.causes) == (
            err.name,
            err.uid,
            [1, 137],
            err.causes,
        )
    assert str(err.reworded("another message")) == "another message"
    assert str(pickle.loads(pickle.dumps(err))) == str(err)


def test_the_public_names_are_the_documented_ones():
    documented = (Path(__file__).resolve().parents[2] / "docs" / "exceptions.md").read_text()
    assert all(f"`{name}`" in documented for name in ex.__all__)
    assert all(f"`{cause.value}`" in documented for cause in Cause)
    assert sorted(ex.__all__) == sorted(
        name
        for name, value in vars(ex).items()
        if isinstance(value, type) and value.__module__ == ex.__name__ and not name.startswith("_")
    )


@pytest.mark.skipif(not AIRFLOW_V_3_3_PLUS, reason="retry_policy is Airflow 3.3+'s")
def test_the_documented_retry_policy_tells_the_causes_apart():
    from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryRule

    # docs/exceptions.md's policy
    policy = ExceptionRetryPolicy(
        rules=[
            RetryRule(exception="airflow_mpi.exceptions.MPIJobOutOfMemoryError", action=RetryAction.FAIL),
            RetryRule(exception="airflow_mpi.exceptions.MPIJobQueueTimeoutError", action=RetryAction.RETRY),
            RetryRule(exception="airflow_mpi.exceptions.MPIJobInfrastructureError", action=RetryAction.RETRY),
        ]
    )
    actions = {
        kind: policy.evaluate(_raised(_failed(kind), fail_permanently=False), 1, 3).action
        for kind in ("oom", "disrupted", "program")
    }
    assert actions == {
        "oom": RetryAction.FAIL,
        "disrupted": RetryAction.RETRY,
        "program": RetryAction.DEFAULT,
    }
    outage = _raised(WaitResult(Outcome.ERROR, "job", "ns", "the API server is unreachable"))
    assert policy.evaluate(outage, 1, 3).action == RetryAction.RETRY
