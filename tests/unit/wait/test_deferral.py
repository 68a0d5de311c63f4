from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_mpi.wait.deferral import (
    RESUME_RACE_WINDOW,
    event_not_before,
    hold_seconds,
    resume_race_affected,
    version_tuple,
)

T0 = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("3.3.2", (3, 3, 2)),
        ("3.4.0rc1", (3, 4, 0)),
        ("3.3", (3, 3, 0)),
        ("3.3.2.dev0", (3, 3, 2)),
        ("2.11.2", (2, 11, 2)),
    ],
)
def test_version_tuple(text, expected):
    assert version_tuple(text) == expected


@pytest.mark.parametrize(
    "version, fixed_in, affected",
    [
        ("2.11.2", None, False),
        ("3.0.0", None, True),
        ("3.3.2", None, True),
        ("3.3.2", (3, 3, 4), True),
        ("3.3.4", (3, 3, 4), False),
        ("3.4.0", (3, 3, 4), False),
    ],
)
def test_only_airflow_3_until_the_fixed_release_is_affected(version, fixed_in, affected):
    assert resume_race_affected(version, fixed_in) is affected


def test_not_before_is_absolute_and_version_gated():
    assert event_not_before(T0, "3.3.2") == T0 + RESUME_RACE_WINDOW
    assert event_not_before(T0, "2.11.2") is None


def test_hold_counts_down_from_the_absolute_time():
    not_before = T0 + timedelta(seconds=12)
    assert hold_seconds(not_before, T0) == 12
    assert hold_seconds(not_before, T0 + timedelta(seconds=10)) == 2  # e.g. a restarted triggerer
    assert hold_seconds(not_before, T0 + timedelta(seconds=20)) == 0
    assert hold_seconds(None, T0) == 0
