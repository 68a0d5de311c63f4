"""How a rendered template's text becomes a parameter's type (a field-table row's ``coerce``): integers, argv,
booleans and numbers, each error naming the parameter; None stays None."""

from __future__ import annotations

import re
import shlex
from typing import Any

from airflow_mpi.jobspec.errors import ErrorList

_INTEGER = re.compile(r"\s*[+-]?\d+\s*")
_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def as_int(errors: ErrorList, name: str, value: Any) -> int | None:
    """``value`` as an int: an int, or a string of digits as a template renders it (None stays None)."""
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    errors.add(
        name, value, f"must be an integer, not {type(value).__name__} (no fraction or rounding is applied)"
    )
    return None


def as_argv(errors: ErrorList, name: str, value: Any) -> Any:
    """A shell string split with shlex (lists and anything else are left for validation)."""
    if not isinstance(value, str):
        return value
    try:
        return shlex.split(value)
    except ValueError as exc:
        errors.add(name, value, f"is not a valid shell string: {exc}")
        return None


def as_bool(errors: ErrorList, name: str, value: Any) -> Any:
    """ "True"/"false" (any case), as a template renders a boolean, as a bool; anything else is left for the rule."""
    text = value.strip().lower() if isinstance(value, str) else None
    return text == "true" if text in ("true", "false") else value


def as_number(errors: ErrorList, name: str, value: Any) -> Any:
    """A rendered number as an int or a float; anything else is left for the rule."""
    if isinstance(value, str) and _NUMBER.fullmatch(value):
        return int(value) if _INTEGER.fullmatch(value) else float(value)
    return value
