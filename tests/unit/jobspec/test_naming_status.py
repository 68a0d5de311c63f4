from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_mpi.jobspec.naming import (
    TRY_NUMBER_LABEL,
    identity_annotations,
    identity_labels,
    job_name,
    reattach_selector,
    same_task,
    sanitize_label_value,
)
from airflow_mpi.jobspec.status import job_state

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
RAW_RUN_ID = "manual__2026-11-22T10:00:00+00:00"
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@pytest.mark.parametrize("workers", [1, 10, 1000, 100000])
def test_job_name_is_dns1035_and_leaves_room_for_worker_pods(workers):
    name = job_name(
        "A_very.Long/DAG id" * 5, "9task", "manual__2026-11-22T10:00:00+00:00", 3, max_workers=workers
    )
    assert DNS1035.match(name), name
    assert len(f"{name}-worker-{workers - 1}") <= 63
    assert len(f"{name}-launcher") <= 63


def test_job_name_is_deterministic_and_unique_per_task_instance():
    a = job_name("dag", "task", "run1", -1)
    assert a == job_name("dag", "task", "run1", -1)
    assert len({a, job_name("dag", "task", "run2", -1), job_name("dag", "task", "run1", 0)}) == 3


def test_job_name_starting_with_digit_gets_a_letter():
    assert DNS1035.match(job_name("123", "456", "r"))


@pytest.mark.parametrize(
    "value", ["manual__2026-11-22T10:00:00+00:00", "x" * 80, "-lead", "ok.value_1", "::"]
)
def test_label_values_are_safe_and_distinct(value):
    safe = sanitize_label_value(value)
    assert LABEL_VALUE.match(safe) and len(safe) <= 63
    if LABEL_VALUE.match(value) and len(value) <= 63:
        assert safe == value
    else:
        assert safe != value


def test_sanitised_values_keep_distinct_inputs_distinct():
    assert sanitize_label_value("run:1") != sanitize_label_value("run+1")


def _metadata(run_id, try_number=1, dag="d", task="t", map_index=-1):
    return {
        "labels": identity_labels(dag, task, run_id, map_index, try_number),
        "annotations": identity_annotations(dag, task, run_id, map_index, try_number),
    }


def test_identity_labels_and_same_task_ignore_try_number():
    first, second = _metadata(RAW_RUN_ID, 1), _metadata(RAW_RUN_ID, 2)
    assert first["labels"][TRY_NUMBER_LABEL] == "1" and second["labels"][TRY_NUMBER_LABEL] == "2"
    assert same_task(first, second)
    assert not same_task(first, _metadata("other"))
    assert not same_task({}, {})
    assert "try-number" not in reattach_selector(first["labels"])
    assert reattach_selector(first["labels"]) == reattach_selector(second["labels"])
    assert identity_annotations("d", "t", "r:1", 2, 1)["airflow-mpi.io/run-id"] == "r:1"


def test_a_run_id_spelled_like_another_runs_sanitised_label_is_not_that_run():
    """Issue 32 item 2: the default allowed_run_id_pattern accepts a run id equal to the sanitised label of another
    run's id; the labels then match, the raw annotations do not, and the job is not adopted."""
    crafted = sanitize_label_value(RAW_RUN_ID)
    assert crafted != RAW_RUN_ID and identity_labels("d", "t", crafted, -1, 1) == identity_labels(
        "d", "t", RAW_RUN_ID, -1, 1
    )
    assert not same_task(_metadata(RAW_RUN_ID), _metadata(crafted))


def test_a_job_without_the_raw_identity_is_nobodys():
    """A job of an older release, or one made by hand with copied labels, is never the same task."""
    labels_only = {"labels": _metadata(RAW_RUN_ID)["labels"]}
    assert not same_task(labels_only, _metadata(RAW_RUN_ID))
    assert not same_task(_metadata(RAW_RUN_ID), labels_only)


@given(st.text(min_size=1, max_size=80))
def test_same_task_holds_exactly_when_the_raw_run_ids_are_equal(run_id):
    assert same_task(_metadata(RAW_RUN_ID), _metadata(run_id)) == (run_id == RAW_RUN_ID)


def _cond(t, status="True", reason=None, ts="2026-11-22T10:00:00Z"):
    return {"type": t, "status": status, "reason": reason, "lastTransitionTime": ts}


def test_job_state_picks_terminal_condition():
    obj = {
        "metadata": {"name": "j", "namespace": "ns", "resourceVersion": "7"},
        "status": {
            "conditions": [
                _cond("Created", reason="MPIJobCreated"),
                _cond("Running", status="False", ts="2026-11-22T10:00:05Z"),
                _cond("Failed", reason="BackoffLimitExceeded", ts="2026-11-22T10:00:06Z"),
            ],
            "startTime": "2026-11-22T10:00:00Z",
        },
    }
    state = job_state(obj)
    assert (state.condition, state.reason, state.terminal, state.succeeded, state.created) == (
        "Failed",
        "BackoffLimitExceeded",
        True,
        False,
        True,
    )
    assert state.resource_version == "7" and state.start_time == "2026-11-22T10:00:00Z"


def test_job_state_says_when_the_job_was_submitted_and_made_created():
    obj = {
        "metadata": {"name": "j", "creationTimestamp": "2026-11-22T09:59:58Z"},
        "status": {
            "conditions": [
                _cond("Created", ts="2026-11-22T10:00:01Z"),
                _cond("Running", ts="2026-11-22T10:00:09Z"),
            ]
        },
    }
    state = job_state(obj)
    assert (state.creation_time, state.created_time) == ("2026-11-22T09:59:58Z", "2026-11-22T10:00:01Z")
    not_yet = {"metadata": obj["metadata"], "status": {"conditions": [_cond("Created", status="False")]}}
    assert job_state(not_yet).created_time is None


def test_job_state_without_conditions_is_pending():
    state = job_state({"metadata": {"name": "j"}})
    assert state.condition is None and not state.created and not state.terminal
    assert state.creation_time is None and state.created_time is None
    assert state.describe() == "Pending"


def test_job_state_newest_true_condition_wins():
    obj = {"status": {"conditions": [_cond("Created"), _cond("Running", ts="2026-11-22T10:01:00Z")]}}
    assert job_state(obj).condition == "Running"


def test_unmapped_map_index_is_a_valid_label_value():
    labels = identity_labels("d", "t", "r", -1, 1)
    assert labels["airflow-mpi.io/map-index"] == "none"
    assert all(LABEL_VALUE.match(v) for v in labels.values())
