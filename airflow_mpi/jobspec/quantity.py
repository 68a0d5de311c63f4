"""Kubernetes resource quantities (k8s.io/apimachinery/pkg/api/resource), parsed exactly.

The API server rejects a pod whose quantities do not parse, but the mpi-operator creates the pods long after the
MPIJob was accepted, so a typo like "2 GB" would only surface as a controller event. Parsing here catches it before
submission; exact Fractions let us compare requests with limits the way Kubernetes does (no float rounding).

Grammar (as resource.ParseQuantity)::

    quantity ::= sign? number suffix?
    number   ::= digits | digits "." digits? | "." digits
    suffix   ::= Ki | Mi | Gi | Ti | Pi | Ei          (binary)
               | m | k | M | G | T | P | E            (decimal SI)
               | ("e" | "E") sign? digits             (decimal exponent)
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_QUANTITY = re.compile(
    r"^(?P<sign>[+-])?(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>[KMGTPE]i|[mkMGTPE]|[eE][+-]?[0-9]+)?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


class QuantityError(ValueError):
    """The value is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Fraction:
    """The exact value of a quantity given as a string or a JSON number; raises QuantityError."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"must be a quantity string or number, not {type(value).__name__}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError("must be a finite number")
        value = repr(value)  # what json.dumps sends, e.g. "0.5" or "1e-05"
    match = _QUANTITY.match(value)
    if not match:
        raise QuantityError(
            "is not a Kubernetes quantity (e.g. 500m, 1.5, 2Gi, 1e3: number, then an optional suffix, no spaces)"
        )
    number = Fraction(match["number"] if not match["number"].endswith(".") else match["number"][:-1])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        number *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        number *= _DECIMAL[suffix]
    elif suffix:
        number *= Fraction(10) ** int(suffix[1:])
    return -number if match["sign"] == "-" else number


def quantity_problem(value: object, *, integer: bool = False) -> str | None:
    """Why ``value`` is not acceptable as a container resource amount in an MPIJob, or None if it is. The MPIJob CRD
    types quantities as int-or-string: the API server refuses a JSON number with a fraction (or written as a float)
    there, although a Pod would take it."""
    if isinstance(value, float):
        return "must be a string or an integer: the MPIJob CRD refuses floats here (quote it: '0.5' or '500m')"
    try:
        amount = parse_quantity(value)  # type: ignore[arg-type]
    except QuantityError as exc:
        return str(exc)
    if amount < 0:
        return "must be greater than or equal to 0"
    if integer and amount.denominator != 1:
        return "must be an integer"
    return None
