"""Kubernetes resource quantities (k8s.io/apimachinery/pkg/api/resource), parsed exactly and within the API's bounds.

The API server rejects a pod whose quantities do not parse, but the mpi-operator creates the pods long after the
MPIJob was accepted, so a typo like "2 GB" would only surface as a controller event. Parsing here catches it before
submission; exact Fractions let us compare requests with limits the way Kubernetes does (no float rounding).

Grammar (as resource.ParseQuantity and the CRDs' quantity pattern; the whole value must match)::

    quantity ::= sign? number suffix?
    number   ::= digits | digits "." digits? | "." digits
    suffix   ::= Ki | Mi | Gi | Ti | Pi | Ei          (binary)
               | n | u | m | k | M | G | T | P | E    (decimal SI)
               | ("e" | "E") sign? digits             (decimal exponent)

Bounds, as quantity.go keeps them: the exponent is held in an int32 (the API server reads a larger one as int64 and
truncates it, so ``1e4294967296`` would mean 1, and it negates it, so ``e-2147483648`` wraps: both refused here); no
quantity is larger than 2^63-1 in magnitude (larger binary ones are capped, larger decimal ones overflow where they are
used: refused here); a non-zero amount is rounded up (away from zero) to a whole nano unit, as ParseQuantity does
(``0.1n`` is 1n). The arithmetic is decimal with the exponent kept apart, so ``1e999999999`` is refused at once
instead of computing a billion-digit power.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_UP, Decimal, localcontext
from fractions import Fraction

_QUANTITY = re.compile(
    r"(?P<sign>[+-])?(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>[KMGTPE]i)|(?P<si>[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}  # powers of 2
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}  # powers of 10
EXPONENT_MIN, EXPONENT_MAX = -(2**31) + 1, 2**31 - 1  # an int32; quantity.go negates it, so -2^31 would wrap
MAX_QUANTITY = 2**63 - 1  # "no quantity may represent a number greater than 2^63-1 in magnitude"
_NANO = Decimal("1e-9")


class QuantityError(ValueError):
    """The value is not a Kubernetes quantity."""


def _exponent(text: str) -> int:
    """The decimal exponent after ``e``/``E``, refused outside int32 before any power is computed."""
    digits = text.lstrip("+-").lstrip("0")
    exponent = int(digits or "0") if len(digits) <= 10 else EXPONENT_MAX + 1  # 10 digits hold any int32
    exponent = -exponent if text.startswith("-") else exponent
    if not EXPONENT_MIN <= exponent <= EXPONENT_MAX:
        raise QuantityError(
            f"has an exponent outside the API server's range ({EXPONENT_MIN} to {EXPONENT_MAX})"
        )
    return exponent


def _too_large() -> QuantityError:
    return QuantityError(f"is larger than the largest Kubernetes quantity (2^63-1 = {MAX_QUANTITY})")


def parse_quantity(value: str | int | float) -> Fraction:
    """The exact value of a quantity given as a string or a JSON number, rounded up to a nano unit as the API server
    does; raises QuantityError."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"must be a quantity string or number, not {type(value).__name__}")
    if isinstance(value, int):
        if abs(value) > MAX_QUANTITY:
            raise _too_large()
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError("must be a finite number")
        value = repr(value)  # what json.dumps sends, e.g. "0.5" or "1e-05"
    match = _QUANTITY.fullmatch(value)
    if not match:
        raise QuantityError(
            "is not a Kubernetes quantity (e.g. 500m, 1.5, 2Gi, 100u, 1e3: number, then an optional "
            "suffix, nothing else)"
        )
    power_of_2 = _BINARY[match["binary"]] if match["binary"] else 0
    power_of_10 = _exponent(match["exponent"]) if match["exponent"] else _DECIMAL.get(match["si"] or "", 0)
    amount = Decimal(f"{match['sign'] or ''}{match['number']}e{power_of_10}")  # exact: no context applies
    if amount.is_zero():
        return Fraction(0)
    # 2^60 < 10^19: above 10^40 it is too large whatever the suffix, below 10^-40 it rounds up to one nano unit
    if amount.adjusted() > 40:
        raise _too_large()
    if amount.adjusted() < -40:
        return Fraction(_NANO.copy_sign(amount))
    with localcontext() as context:
        context.prec = len(amount.as_tuple().digits) + 30  # the product is exact (2^60 has 19 digits)
        amount *= 2**power_of_2
        if abs(amount) > MAX_QUANTITY:
            raise _too_large()
        return Fraction(amount.quantize(_NANO, rounding=ROUND_UP))  # at most 19 + 9 digits


def quantity_problem(value: object, *, integer: bool = False) -> str | None:
    """Why ``value`` is not acceptable as a container resource amount in an MPIJob, or None if it is. The MPIJob CRD
    types quantities as int-or-string: the API server refuses a JSON number with a fraction (or written as a float)
    there, although a Pod would take it."""
    if isinstance(value, float):
        return (
            "must be a string or an integer: the MPIJob CRD refuses floats here (quote it: '0.5' or '500m')"
        )
    try:
        amount = parse_quantity(value)  # type: ignore[arg-type]
    except QuantityError as exc:
        return str(exc)
    if amount < 0:
        return "must be greater than or equal to 0"
    if integer and amount.denominator != 1:
        return "must be an integer"
    return None
