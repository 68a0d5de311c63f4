"""The wait's contract (wait/contract.py): its outcomes, its options and its result, as they travel."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from airflow_mpi.wait.contract import EVENT_KEYS, Cause, Outcome, WaitOptions, WaitResult

DEADLINE = datetime(2026, 11, 24, 11, 0, tzinfo=UTC)


def test_the_outcomes_are_the_statuses_a_wait_has_always_reported():
    assert {o.value for o in Outcome} == {
        "success",
        "target",
        "failed",
        "worker_failed",
        "invalid",
        "unschedulable",
        "startup_timeout",
        "queue_timeout",
        "timeout",
        "deleted",
        "error",
    }
    assert {o for o in Outcome if o.succeeded} == {Outcome.SUCCESS, Outcome.TARGET}


def test_an_outcome_reads_as_its_value_in_comparisons_messages_and_json():
    assert Outcome.FAILED == "failed" and Outcome("failed") is Outcome.FAILED
    queue_timeout = Outcome.QUEUE_TIMEOUT
    assert f"{queue_timeout}" == str(queue_timeout) == "queue_timeout"
    assert "%s" % queue_timeout == "queue_timeout"  # noqa: UP031 - %-formatting (logging's) is what this checks
    assert "deleted" in f"MPIJob ns/x {Outcome.DELETED}: gone" and Outcome.DELETED in "it was deleted"
    assert json.dumps({"status": Outcome.TARGET}) == '{"status": "target"}'


def test_wait_options_travel_as_plain_json_and_come_back_equal():
    options = WaitOptions(
        poll_interval=2.5,
        startup_timeout=None,
        schedule_timeout=60.0,
        queue_timeout=900.0,
        get_logs=False,
        max_attempts=4,
        tail_lines=0,
        deadline=DEADLINE,
        target_condition="Running",
        owns_job=False,
    )
    data = options.to_dict()
    assert data["deadline"] == "2026-11-24T11:00:00+00:00"
    assert WaitOptions.from_dict(json.loads(json.dumps(data))) == options


def test_wait_options_missing_from_the_dict_take_their_defaults_and_unknown_ones_are_ignored():
    assert WaitOptions.from_dict(None) == WaitOptions() == WaitOptions.from_dict({"a_later_option": 1})
    assert WaitOptions.from_dict({"max_attempts": 3}) == WaitOptions(max_attempts=3)
    assert WaitOptions().to_dict() == {
        "poll_interval": 10.0,
        "startup_timeout": 120.0,
        "schedule_timeout": 300.0,
        "queue_timeout": None,
        "get_logs": True,
        "max_attempts": None,
        "tail_lines": 20,
        "deadline": None,
        "target_condition": None,
        "owns_job": True,
    }


def _full() -> WaitResult:
    return WaitResult(
        Outcome.FAILED,
        "job",
        "ns",
        "Failed (BackoffLimitExceeded)",
        ["job-worker-0: BackOff: crash"],
        uid="u1",
        condition="Failed",
        reason="BackoffLimitExceeded",
        start_time="2026-11-24T10:00:00Z",
        completion_time="2026-11-24T10:05:00Z",
        job_message="failed",
        launcher_pods=["job-launcher-a"],
        launcher_attempts=2,
        launcher_exit_codes=[1, 137],
        failure={"causes": ["x"], "tails": []},
        evictions=1,
        log_state={"cursor": {}, "streams": [], "done": []},
        creation_time="2026-11-24T09:59:00Z",
        created_time="2026-11-24T09:59:01Z",
        queued_seconds=12.5,
    )


def test_the_result_is_the_events_twenty_keys_and_comes_back_equal():
    result = _full()
    event = result.to_event()
    assert list(event) == list(EVENT_KEYS) and len(EVENT_KEYS) == 20
    assert event["status"] == "failed" and type(event["status"]) is str  # plain JSON for TriggerEvent
    assert WaitResult.from_event(json.loads(json.dumps(event))) == result
    value = {"started": True, "has_value": True, "value": 1, "error": None}
    with_value = WaitResult(Outcome.SUCCESS, "job", "ns", result=value)
    assert with_value.to_event()["result"]["value"] == 1 and "result" not in result.to_event()
    assert WaitResult.from_event(with_value.to_event()) == with_value


def test_an_event_of_an_earlier_release_reads_with_defaults_and_says_it_has_no_failure_report():
    """A trigger from before the failure reports: no "failure" key (operators/outcome.py reads tails then)."""
    old = {
        "status": "failed",
        "name": "job",
        "namespace": "ns",
        "message": "m",
        "warnings": [],
        "launcher_pods": ["p"],
        "launcher_attempts": 1,
    }
    result = WaitResult.from_event(old)
    assert result.outcome is Outcome.FAILED and result.failure_gathered is False and result.failure is None
    assert (result.launcher_exit_codes, result.evictions, result.condition) == ([], 0, None)
    assert "failure" not in result.to_event() and WaitResult.from_event(result.to_event()) == result
    assert WaitResult.from_event({"name": "job", "namespace": "ns"}).outcome is Outcome.ERROR


def test_an_error_result_names_the_job_and_keeps_the_log_position():
    position = {"cursor": {"s": [1]}}
    result = WaitResult.of_error("job", "ns", "RuntimeError: boom", uid="u1", log_state=position)
    event = result.to_event()
    assert (event["status"], event["message"], event["uid"], event["log_state"]) == (
        "error",
        "RuntimeError: boom",
        "u1",
        position,
    )


@pytest.mark.parametrize(
    ("outcome", "failure", "cause"),
    [
        (Outcome.SUCCESS, None, None),
        (Outcome.TARGET, None, None),
        (Outcome.FAILED, {"causes": [], "tails": [], "kind": "oom"}, Cause.OOM),
        (Outcome.WORKER_FAILED, {"causes": [], "tails": [], "kind": "disrupted"}, Cause.DISRUPTED),
        (Outcome.FAILED, {"causes": [], "tails": []}, Cause.PROGRAM),  # an earlier release's report: no kind
        (Outcome.FAILED, {"kind": "a later release's kind"}, Cause.PROGRAM),
        (Outcome.FAILED, None, Cause.PROGRAM),
        (Outcome.QUEUE_TIMEOUT, None, Cause.QUEUE_TIMEOUT),
        (Outcome.INVALID, {"kind": "oom"}, Cause.INVALID),  # only a failed job's report names its kind
        (Outcome.ERROR, None, Cause.ERROR),
    ],
)
def test_the_cause_is_a_failed_jobs_kind_else_the_outcome(outcome, failure, cause):
    assert WaitResult(outcome, "job", "ns", failure=failure).cause == cause
