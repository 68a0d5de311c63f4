"""Kubernetes quantity grammar (resource.ParseQuantity) and the resource-amount rules."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import ROUND_UP, Decimal, localcontext
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_mpi.jobspec.quantity import MAX_QUANTITY, QuantityError, parse_quantity, quantity_problem
from localcluster.processes import child_env

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
    ("100u", Fraction(1, 10**4)),  # micro and nano: valid in the API server's grammar
    ("5n", Fraction(5, 10**9)),
    (
        "0.1n",
        Fraction(1, 10**9),
    ),  # a non-zero amount is rounded up to a whole nano unit, as ParseQuantity does
    ("-0.1n", Fraction(-1, 10**9)),  # away from zero
    ("1.0000000001", Fraction(1_000_000_001, 10**9)),
    ("9223372036854775807", MAX_QUANTITY),
    ("7Ei", 7 * 2**60),
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
    "1\n",  # a value rendered from check_output's XCom: the API server's Go pattern refuses it, so must we
    "1Gi\n",
    "500m\r\n",
    "\n1",
    "1u1",
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


TOO_LARGE = f"is larger than the largest Kubernetes quantity (2^63-1 = {MAX_QUANTITY})"
OUT_OF_RANGE = "has an exponent outside the API server's range (-2147483647 to 2147483647)"
# Past the API server's bounds (quantity.go): magnitudes above 2^63-1, exponents outside int32 (more below).
OUT_OF_BOUNDS = [
    ("1e" + "9" * 5000, OUT_OF_RANGE),
    ("8Ei", "is larger than the largest Kubernetes quantity"),
    ("9223372036854775808", "is larger than the largest Kubernetes quantity"),
    ("1" * 100_000, "is larger than the largest Kubernetes quantity"),
    (2**63, "is larger than the largest Kubernetes quantity"),
    (1e300, "is larger than the largest Kubernetes quantity"),
]


@pytest.mark.parametrize("value, reason", OUT_OF_BOUNDS, ids=lambda v: str(v)[:24])
def test_values_past_the_api_servers_bounds_are_refused_with_why(value, reason):
    with pytest.raises(QuantityError) as info:
        parse_quantity(value)
    assert str(info.value).startswith(reason)


# Huge exponents: a templated "1e999999999" once held a worker slot for CPU-hours (Fraction(10) ** 999999999). The
# API server keeps the exponent in an int32 (a larger one is truncated: 1e4294967296 would mean 1; -2^31 wraps when
# negated). A C-level power cannot be interrupted in-process: the parser runs in a child, killed if it hangs.
HUGE_EXPONENTS = {
    "1e999999999": TOO_LARGE,
    "1e2147483647": TOO_LARGE,
    "1e4294967296": OUT_OF_RANGE,
    "1e-2147483648": OUT_OF_RANGE,
    "1e-999999999": "1/1000000000",  # a non-zero amount below one nano unit is rounded up to it
    "1e-2147483647": "1/1000000000",
    "0e999999999": "0",
    "0." + "0" * 9000 + "1": "1/1000000000",
}
_CHILD = """
import json, sys
from airflow_mpi.jobspec.quantity import QuantityError, parse_quantity
out = {}
for value in json.load(sys.stdin):
    try:
        out[value] = str(parse_quantity(value))
    except QuantityError as exc:
        out[value] = str(exc)
print(json.dumps(out))
"""


def test_huge_exponents_are_refused_or_rounded_at_once_not_computed():
    child = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps(list(HUGE_EXPONENTS)),
        text=True,
        capture_output=True,
        check=True,
        timeout=60,
        env=child_env(),
    )
    assert json.loads(child.stdout) == HUGE_EXPONENTS


# The API server's grammar, piece by piece; the exponent's range is kept small so the reference stays cheap.
EXPONENTS = st.builds(
    lambda e, sign, zeros, n: f"{e}{sign}{'0' * zeros}{n}",
    st.sampled_from("eE"),
    st.sampled_from(["", "+", "-"]),
    st.integers(0, 2),
    st.integers(0, 40),
)
SUFFIXES = st.sampled_from(
    ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"]
)
DIGITS = st.text("0123456789", min_size=1, max_size=22)
NUMBERS = DIGITS | st.builds("{}.{}".format, DIGITS, DIGITS | st.just("")) | DIGITS.map(".".__add__)
QUANTITIES = st.tuples(st.sampled_from(["", "+", "-"]), NUMBERS, SUFFIXES | EXPONENTS)
_FACTORS = {
    "": (10, 0),
    "Ki": (2, 10),
    "Mi": (2, 20),
    "Gi": (2, 30),
    "Ti": (2, 40),
    "Pi": (2, 50),
    "Ei": (2, 60),
    "n": (10, -9),
    "u": (10, -6),
    "m": (10, -3),
    "k": (10, 3),
    "M": (10, 6),
    "G": (10, 9),
    "T": (10, 12),
    "P": (10, 15),
    "E": (10, 18),
}


def reference_value(sign: str, number: str, suffix: str) -> Decimal | None:
    """What ParseQuantity makes of the pieces (None: too large), computed another way: Decimal, ample precision."""
    base, power = _FACTORS.get(suffix) or (10, int(suffix[1:]))
    with localcontext() as context:
        context.prec = 200
        value = Decimal(sign + number) * Decimal(base) ** power
        if abs(value) > MAX_QUANTITY:
            return None
        return value.quantize(Decimal("1e-9"), rounding=ROUND_UP)


@given(QUANTITIES)
def test_any_quantity_of_the_grammar_parses_to_its_value_and_round_trips(pieces):
    text, expected = "".join(pieces), reference_value(*pieces)
    if expected is None:
        assert quantity_problem(text) == TOO_LARGE
        return
    value = parse_quantity(text)
    assert value == Fraction(expected)
    assert value * 10**9 == int(value * 10**9)  # whole nano units
    assert parse_quantity(f"{int(value * 10**9)}n") == value  # its canonical nano form reads back the same


@given(QUANTITIES, st.sampled_from(["\n", "\r\n", " ", "\t", "\x00"]))
def test_any_quantity_with_a_trailing_newline_or_blank_is_refused(pieces, tail):
    assert quantity_problem("".join(pieces) + tail).startswith("is not a Kubernetes quantity")
