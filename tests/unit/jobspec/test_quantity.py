"""Kubernetes quantity grammar (resource.ParseQuantity) and the resource-amount rules."""

from __future__ import annotations

from fractions import Fraction

import pytest

from airflow_mpi.jobspec.quantity import QuantityError, parse_quantity, quantity_problem

VALID = [
    ("500m", Fraction(1, 2)),
    ("1.5", Fraction(3, 2)),
    ("2Gi", 2 * 2**30),
    ("1Ki", 1024),
    ("3Mi", 3 * 2**20),
    ("1Ti", 2**40),
    ("1Pi", 2**50),
    ("1Ei", 2**60),
    ("1k", 1000),
    ("1M", 10**6),
    ("1G", 10**9),
    ("1T", 10**12),
    ("1P", 10**15),
    ("1E", 10**18),
    ("1e3", 1000),
    ("1E3", 1000),
    ("1e+3", 1000),
    ("25e-2", Fraction(1, 4)),
    ("+1", 1),
    ("-1", -1),
    (".5", Fraction(1, 2)),
    ("5.", 5),
    ("0", 0),
    ("0.1m", Fraction(1, 10000)),
    ("1.5Gi", 3 * 2**29),
    ("100", 100),
    (4, 4),
    (0.25, Fraction(1, 4)),
    (1e-05, Fraction(1, 100000)),
]

INVALID = [
    "2 GB",
    "abc",
    "",
    " 1",
    "1 ",
    "1GB",
    "1gi",
    "1K",  # decimal kilo is lowercase k
    "1Ki1",
    "1mi",
    "1e",
    "1e3.5",
    "1.5.5",
    ".",
    "+",
    "--1",
    "1_000",
    "0x10",
    "1,5",
    True,
    None,
    [1],
    float("inf"),
    float("nan"),
]


@pytest.mark.parametrize("text, expected", VALID)
def test_parse_valid_quantities(text, expected):
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", INVALID)
def test_parse_rejects_invalid_quantities(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_binary_and_decimal_suffixes_compare_exactly():
    assert parse_quantity("1Gi") > parse_quantity("1G")
    assert parse_quantity("1000Mi") < parse_quantity("1Gi")
    assert parse_quantity("1500m") == parse_quantity("1.5")


@pytest.mark.parametrize(
    "value, integer, problem",
    [
        ("500m", False, None),
        ("-1", False, "must be greater than or equal to 0"),
        ("-0.5Gi", False, "must be greater than or equal to 0"),
        ("0.5", True, "must be an integer"),
        ("1500m", True, "must be an integer"),
        ("2000m", True, None),
        ("2", True, None),
        (2, True, None),
        ("2 GB", False, "is not a Kubernetes quantity"),
        (0.5, False, "must be a string or an integer"),  # the CRD's int-or-string refuses JSON floats
        (2.0, False, "must be a string or an integer"),
    ],
)
def test_quantity_problem(value, integer, problem):
    result = quantity_problem(value, integer=integer)
    if problem is None:
        assert result is None
    else:
        assert result is not None and result.startswith(problem)
